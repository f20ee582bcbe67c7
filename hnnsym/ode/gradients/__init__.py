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


def get_gradient(gradient: "str | GradientMethod", **options) -> GradientMethod:
    """A gradient method by name (with its options, e.g. ``keep_every`` of the stepwise ones), or
    a GradientMethod object as is."""
    if isinstance(gradient, GradientMethod):
        if options:
            raise ValueError(f"options {sorted(options)} given with a built gradient method")
        return gradient
    if gradient not in GRADIENTS:
        raise ValueError(f"unknown gradient method {gradient!r}; choose one of {sorted(GRADIENTS)}")
    try:
        return GRADIENTS[gradient](**options)
    except TypeError as err:
        raise ValueError(f"gradient={gradient} takes no option {sorted(options)} ({err})") from err


__all__ = [
    "GRADIENTS",
    "Adjoint",
    "Backprop",
    "Checkpoint",
    "GradientMethod",
    "Reversible",
    "SymplecticAdjoint",
    "get_gradient",
]
