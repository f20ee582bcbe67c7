"""Integrators: tableaux (data) over one stage solver."""

from hnnsym.integrators.stage_solver import (
    ConvergenceError,
    FixedPoint,
    Integrator,
    SolverStats,
    get_integrator,
)
from hnnsym.integrators.tableaux import TABLEAUX, Tableau

__all__ = [
    "TABLEAUX",
    "ConvergenceError",
    "FixedPoint",
    "Integrator",
    "SolverStats",
    "Tableau",
    "get_integrator",
]
