"""Integrators: tableaux (data) over one stage solver; explicit splittings (tao) and the
reversible fixed-point leapfrog as their own classes."""

from hnnsym.integrators.reversible import (
    FixedPointOverflowError,
    IncompatibleError,
    ReversibleLeapfrog,
    Separable,
)
from hnnsym.integrators.stage_solver import (
    ConvergenceError,
    FixedPoint,
    Integrator,
    SolverStats,
    get_integrator,
    integrator_from_config,
)
from hnnsym.integrators.tableaux import TABLEAUX, Tableau
from hnnsym.integrators.tao import TaoSplitting

__all__ = [
    "TABLEAUX",
    "ConvergenceError",
    "FixedPoint",
    "FixedPointOverflowError",
    "IncompatibleError",
    "Integrator",
    "ReversibleLeapfrog",
    "Separable",
    "SolverStats",
    "Tableau",
    "TaoSplitting",
    "get_integrator",
    "integrator_from_config",
]
