"""Hamiltonian vector field f(y) = J^-1 ∇H(y) = [∂H/∂p, -∂H/∂q]: the one place it is computed.

A model without a Hamiltonian (``hnnsym.physics.models.NODE``) declares ``OWN_FIELD`` and not
``HAMILTONIAN`` (``hnnsym.ode.capabilities``) and defines ``vector_field(y)``; ``vector_field``
below then calls it, so every integrator and gradient method runs it unchanged. A model declaring
``ENERGY_GRADIENT`` (``energy_gradient(y)``: ∇H in closed form, or None) is asked for ∇H instead of
autograd.

A dissipative system or model (a damped ``hnnsym.physics.systems.System``,
``hnnsym.physics.dissipative.DissipativeHNN``) has an energy H and its own field
f = (J⁻¹ − R)∇H with R positive semi-definite (``dissipative_field``), so dH/dt = −∇Hᵀ R ∇H ≤ 0.
Its flow is not Hamiltonian (``hamiltonian_flow`` is False): integrators that step the split
Hamiltonian flow itself (tao, reversible_leapfrog) refuse it, and nothing takes the explicit
separable path for it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.workspace import hold

Hamiltonian = Callable[[Tensor], Tensor]


MATMUL_MAX = 16  # J⁻¹ g as one product with a constant matrix up to this 2d (else slices + cat)


def symplectic_gradient(grad: Tensor, dim: int = -1) -> Tensor:
    """J^-1 g for g = ∇H laid out [∂q, ∂p] along ``dim``: returns [∂p, -∂q]. With ``dim=-2`` and
    g = ∇²H (..., 2d, 2d) that is J⁻¹∇²H, the Jacobian of f = J⁻¹∇H.

    Along the last axis, for small 2d, one matmul with the signed permutation
    (``_inverse_structure``): exact, as every output is one ±1 product plus zeros, and one op
    forward and backward in place of four (slices, neg, cat), which measured 2x faster at 2d = 2,
    B = 512 on CPU. In a compiled program the slices and the sign fuse into the kernels around
    them: there it is the four ops. Along another axis it is the slices too (for 2 × 2 rows at
    4096 states, 2.7x faster on CPU than the batched product)."""
    n = grad.shape[dim]
    if dim in (-1, grad.dim() - 1) and n <= MATMUL_MAX and not torch.compiler.is_compiling():
        return grad @ _inverse_structure(n, grad.dtype, grad.device)
    d = n // 2
    return torch.cat([grad.narrow(dim, d, n - d), -grad.narrow(dim, 0, d)], dim=dim)


@lru_cache(maxsize=64)
def _inverse_structure(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Jᵀ for the row-vector product g @ Jᵀ = [g_p, −g_q], (n, n)."""
    d = n // 2
    eye = torch.eye(d, dtype=dtype)
    out = torch.zeros(n, n, dtype=dtype)
    out[d:, :d] = eye  # ∂p lands in the first half
    out[:d, d:] = -eye
    return out.to(device)


def has_hamiltonian(model: object) -> bool:
    """Whether ``model`` declares an energy H(y) (False for a model that only defines a field)."""
    return has(model, Capability.HAMILTONIAN)


def hamiltonian_flow(model: object) -> bool:
    """Whether ``model``'s dynamics are f = J⁻¹∇H: it has an energy and no field of its own
    (False for NODE and for a dissipative system or model)."""
    return has_hamiltonian(model) and not has(model, Capability.OWN_FIELD)


def dissipative_field(grad: Tensor, R: Tensor) -> Tensor:
    """(J⁻¹ − R) g for g = ∇H (..., 2d) and a damping matrix R, symmetric positive semi-definite:
    [∂H/∂p, −∂H/∂q] − R ∇H. R is (2d, 2d), per state (..., 2d, 2d), or its diagonal (2d,)."""
    if R.dim() == 1:
        return symplectic_gradient(grad) - R * grad
    return symplectic_gradient(grad) - (R @ grad.unsqueeze(-1)).squeeze(-1)


def hamiltonian_gradient(H: Hamiltonian, y: Tensor, create_graph: bool | None = None) -> Tensor:
    """∇H(y) = [∂H/∂q, ∂H/∂p] (..., 2d): H's closed form ``H.energy_gradient(y)`` when it gives
    one, else autograd (differentiable with ``create_graph``, default: whether grad mode is on).
    Never H's own ``vector_field`` (a constrained integrator needs the unconstrained gradient)."""
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    if has(H, Capability.ENERGY_GRADIENT):  # ∇H in closed form: no autograd.grad call
        with torch.set_grad_enabled(create_graph):
            grad = H.energy_gradient(y)
        if grad is not None:
            return grad
    with torch.enable_grad():
        if not y.requires_grad:
            y = y.detach().requires_grad_(True)
        energy = H(y).sum()
        (grad,) = torch.autograd.grad(energy, y, create_graph=create_graph)
    return grad


def vector_field(H: Hamiltonian, y: Tensor, create_graph: bool | None = None) -> Tensor:
    """f(y) = J^-1 ∇H(y), y: (..., 2d) -> (..., 2d); H's own ``H.vector_field(y)`` if it has one.

    With ``create_graph`` (default: whether grad mode is on) the result is differentiable with
    respect to y and H's parameters (double backward); without it, it is a plain value. Works
    under ``torch.no_grad()`` as well: ∇H is always taken.
    """
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    if has(H, Capability.OWN_FIELD):
        with torch.set_grad_enabled(create_graph):
            return H.vector_field(y)
    return symplectic_gradient(hamiltonian_gradient(H, y, create_graph))


class FieldLinearization:
    """f linearised at M states y (M, n): its Jacobian Df (``jacobian``, (M, n, n), [m, k, l] =
    ∂f_k/∂y_l) and, for cotangents μ (M, n), Σ_m μ_mᵀ ∂f(y_m)/∂θ per parameter (``param_vjp``).

    For f = J⁻¹∇H with H's closed form ``H.energy_linearization(y)`` (the MLP Hamiltonians) both
    come without autograd: Df = J⁻¹∇²H, and μ·f = ν·∇H with ν = (−μ_p, μ_q). Otherwise autograd
    gives them: one graph of f, a VJP per unit cotangent for the rows, one VJP for θ."""

    def __init__(self, H: Hamiltonian, y: Tensor, params: list[Tensor]):
        self.params, self._H = params, H
        closed = self.closed_form(H)
        with torch.no_grad():
            self._closed = H.energy_linearization(y) if closed else None
            if self._closed is not None:  # rows of J⁻¹∇²H: [∂²H/∂p∂y, −∂²H/∂q∂y]
                if torch.compiler.is_compiling():  # batch last, as the compiled chunk reads it
                    hessian = self._closed.hessian.permute(1, 2, 0)
                    self.jacobian = symplectic_gradient(hessian, dim=0).permute(2, 0, 1)
                else:
                    self.jacobian = symplectic_gradient(self._closed.hessian, dim=-2)
                self._held = hold([*self._closed.kept(), self.jacobian])
                return
        with torch.enable_grad():
            self._y = y.detach().requires_grad_(True)
            self._f = vector_field(H, self._y, create_graph=True)
            # row k of Df: one VJP with the unit cotangent e_k (a loop of 2d VJPs measured
            # 1.1–1.8x faster on CPU than one batched call, is_grads_batched, at 2d = 2 and 4)
            eye = torch.eye(y.shape[-1], dtype=y.dtype, device=y.device)
            rows = [
                torch.autograd.grad(self._f, self._y, e.expand_as(self._f), retain_graph=True)[0]
                for e in eye
            ]
        self.jacobian = torch.stack(rows, -2)

    @staticmethod
    def closed_form(H: Hamiltonian) -> bool:
        """Whether H declares the closed-form linearisation that this class uses for f = J⁻¹∇H
        (``ENERGY_LINEARIZATION``; H may still return None for an activation without one)."""
        return has(H, Capability.ENERGY_LINEARIZATION) and hamiltonian_flow(H)

    def param_vjp(self, mu: Tensor) -> list[Tensor | None]:
        """Σ_m μ_mᵀ ∂f(y_m)/∂θ for each of ``params`` (None where f does not depend on it)."""
        if self._closed is None:
            return list(torch.autograd.grad(self._f, self.params, mu, allow_unused=True))
        d = mu.shape[-1] // 2
        with torch.no_grad():
            nu = torch.cat([-mu[..., d:], mu[..., :d]], -1)
            grads = self._closed.directional_gradient_vjp(nu)
        # in the order of H.parameters(); ``params`` are the trainable ones, in that order
        return [g for g, p in zip(grads, self._H.parameters()) if p.requires_grad]
