"""The ODE layer: ``integrate``/``solve`` over interchangeable integrators and gradient methods."""

from hnnsym.ode.solve import Solution, integrate, solve

__all__ = ["Solution", "integrate", "solve"]
