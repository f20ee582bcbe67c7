"""Hamiltonian vector field f(y) = J^-1 ∇H(y) = [∂H/∂p, -∂H/∂q]: the one place it is computed.

A model without a Hamiltonian (``hnnsym.physics.models.NODE``) defines ``vector_field(y)`` itself and sets
``has_hamiltonian = False``; ``vector_field`` below then calls it, so every integrator and
gradient method runs it unchanged. A model with ``energy_gradient(y)`` (∇H in closed form, or None)
is asked for ∇H instead of autograd.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Hamiltonian = Callable[[Tensor], Tensor]


def symplectic_gradient(grad: Tensor) -> Tensor:
    """J^-1 g for g = ∇H laid out [∂q, ∂p]: returns [∂p, -∂q]."""
    d = grad.shape[-1] // 2
    return torch.cat([grad[..., d:], -grad[..., :d]], dim=-1)


def has_hamiltonian(model: object) -> bool:
    """Whether ``model`` is an energy H(y) (False for a model that only defines a vector field)."""
    return bool(getattr(model, "has_hamiltonian", True))


def vector_field(H: Hamiltonian, y: Tensor, create_graph: bool | None = None) -> Tensor:
    """f(y) = J^-1 ∇H(y), y: (..., 2d) -> (..., 2d); H's own ``H.vector_field(y)`` if it has one.

    With ``create_graph`` (default: whether grad mode is on) the result is differentiable with
    respect to y and H's parameters (double backward); without it, it is a plain value. Works
    under ``torch.no_grad()`` as well: ∇H is always taken.
    """
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    own = getattr(H, "vector_field", None)
    if callable(own):
        with torch.set_grad_enabled(create_graph):
            return own(y)
    return symplectic_gradient(hamiltonian_gradient(H, y, create_graph))


def hamiltonian_gradient(H: Hamiltonian, y: Tensor, create_graph: bool | None = None) -> Tensor:
    """∇H(y) = [∂H/∂q, ∂H/∂p], y: (..., 2d) -> (..., 2d): H's closed-form ``energy_gradient`` if
    it has one (and it returns a tensor), else autograd of H. Never H's own ``vector_field`` (a
    constrained integrator needs the unconstrained gradient). ``create_graph`` as in
    ``vector_field``; y may be a non-leaf tensor, the result is then differentiable through it."""
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    closed = getattr(H, "energy_gradient", None)
    if callable(closed):  # ∇H in closed form (hnnsym.physics.models): no autograd.grad call
        with torch.set_grad_enabled(create_graph):
            grad = closed(y)
        if grad is not None:
            return grad
    with torch.enable_grad():
        if not y.requires_grad:
            y = y.detach().requires_grad_(True)
        energy = H(y).sum()
        (grad,) = torch.autograd.grad(energy, y, create_graph=create_graph)
    return grad
