"""hnnsym: learning Hamiltonians through fully symplectic, implicit integrators."""

from hnnsym.ode.fixed_grid import odeint
from hnnsym.ode.running import RunningLoss, StepLoss
from hnnsym.ode.solve import LossSolution, Solution, integrate, solve, solve_loss
from hnnsym.version import __version__

__all__ = [
    "LossSolution",
    "Run",
    "RunningLoss",
    "Solution",
    "StepLoss",
    "__version__",
    "integrate",
    "load_run",
    "odeint",
    "solve",
    "solve_loss",
]


def __getattr__(name: str):
    """``load_run`` and ``Run`` (``hnnsym.api``) are imported when first used: they bring the
    evaluation and its figures (matplotlib) along."""
    if name in ("load_run", "Run"):
        from hnnsym import api

        return getattr(api, name)
    raise AttributeError(f"module 'hnnsym' has no attribute {name!r}")
