"""The ODE layer: ``integrate``/``solve`` over interchangeable integrators and gradient methods."""

from hnnsym.ode.running import RunningLoss, StepLoss
from hnnsym.ode.solve import LossSolution, Solution, integrate, solve, solve_loss

__all__ = [
    "LossSolution",
    "RunningLoss",
    "Solution",
    "StepLoss",
    "integrate",
    "solve",
    "solve_loss",
]
