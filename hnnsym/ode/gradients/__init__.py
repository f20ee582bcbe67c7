"""Gradient methods: interchangeable ways to differentiate one rollout of ``integrate``."""

from hnnsym.ode.gradients.adjoint import Adjoint
from hnnsym.ode.gradients.backprop import Backprop
from hnnsym.ode.gradients.base import GradientMethod
from hnnsym.ode.gradients.checkpoint import Checkpoint
from hnnsym.ode.gradients.reversible import Reversible
from hnnsym.ode.gradients.symplectic_adjoint import SymplecticAdjoint

GRADIENTS: dict[str, type[GradientMethod]] = {
    m.name: m for m in (Backprop, Checkpoint, Adjoint, SymplecticAdjoint, Reversible)
}


def get_gradient(gradient: "str | GradientMethod") -> GradientMethod:
    if isinstance(gradient, GradientMethod):
        return gradient
    if gradient not in GRADIENTS:
        raise ValueError(f"unknown gradient method {gradient!r}; choose one of {sorted(GRADIENTS)}")
    return GRADIENTS[gradient]()


__all__ = ["GRADIENTS", "GradientMethod", "get_gradient"]
