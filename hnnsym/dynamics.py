"""Hamiltonian vector field f(y) = J^-1 ∇H(y) = [∂H/∂p, -∂H/∂q]: the one place it is computed."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

Hamiltonian = Callable[[Tensor], Tensor]


def symplectic_gradient(grad: Tensor) -> Tensor:
    """J^-1 g for g = ∇H laid out [∂q, ∂p]: returns [∂p, -∂q]."""
    d = grad.shape[-1] // 2
    return torch.cat([grad[..., d:], -grad[..., :d]], dim=-1)


def vector_field(H: Hamiltonian, y: Tensor, create_graph: bool | None = None) -> Tensor:
    """f(y) = J^-1 ∇H(y), y: (..., 2d) -> (..., 2d).

    With ``create_graph`` (default: whether grad mode is on) the result is differentiable with
    respect to y and H's parameters (double backward); without it, it is a plain value. Works
    under ``torch.no_grad()`` as well: ∇H is always taken.
    """
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        if not y.requires_grad:
            y = y.detach().requires_grad_(True)
        energy = H(y).sum()
        (grad,) = torch.autograd.grad(energy, y, create_graph=create_graph)
    return symplectic_gradient(grad)
