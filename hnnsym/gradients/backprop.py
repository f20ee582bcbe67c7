"""Backprop: autograd through every step and every fixed-point iteration (memory ∝ steps × iters)."""

from torch import Tensor

from hnnsym.gradients.base import GradientMethod, Rollout


class Backprop(GradientMethod):
    name = "backprop"

    def integrate(self, rollout: Rollout, y0: Tensor) -> Tensor:
        return rollout.forward(y0)
