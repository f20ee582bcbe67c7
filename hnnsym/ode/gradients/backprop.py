"""Backprop: autograd through every step and every fixed-point iteration (memory ∝ steps × iters)."""

from torch import Tensor

from hnnsym.ode.gradients.base import GradientMethod
from hnnsym.ode.problem import Problem


class Backprop(GradientMethod):
    name = "backprop"

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        return problem.trajectory(y0)
