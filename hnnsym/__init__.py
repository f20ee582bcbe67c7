"""hnnsym: learning Hamiltonians through fully symplectic, implicit integrators."""

__version__ = "0.1.0"

from hnnsym.ode.fixed_grid import odeint  # noqa: E402
from hnnsym.ode.running import RunningLoss, StepLoss  # noqa: E402
from hnnsym.ode.solve import LossSolution, Solution, integrate, solve, solve_loss  # noqa: E402

__all__ = [
    "LossSolution",
    "RunningLoss",
    "Solution",
    "StepLoss",
    "__version__",
    "integrate",
    "odeint",
    "solve",
    "solve_loss",
]
