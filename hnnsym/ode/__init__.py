"""The ODE layer: ``integrate``/``solve`` over interchangeable integrators and gradient methods;
``odeint``, torchdiffeq's fixed-grid call, on them."""

from hnnsym.ode.fixed_grid import odeint
from hnnsym.ode.running import RunningLoss, StepLoss
from hnnsym.ode.solve import LossSolution, Solution, integrate, solve, solve_loss

__all__ = [
    "LossSolution",
    "RunningLoss",
    "Solution",
    "StepLoss",
    "integrate",
    "odeint",
    "solve",
    "solve_loss",
]
