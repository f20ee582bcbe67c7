"""Integrators: tableaux (data) over one stage solver."""

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
    "get_integrator",
    "integrator_from_config",
]
