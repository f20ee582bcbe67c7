"""Discrete gradients of a scalar function V (an analytic energy or a network): (B, n) -> (B,).

A discrete gradient ∇̄V(u, v) of V satisfies the discrete chain rule and consistency (Aoshima et al., Eq. 6)

    V(u) − V(v) = ∇̄V(u, v)·(u − v),        ∇̄V(u, u) = ∇V(u),

so a scheme written with it conserves V's energy exactly in discrete time (``hnnsym.ode.lagrangian``).

``gonzalez``: the midpoint discrete gradient (Gonzalez 1996), with m = (u + v)/2, Δ = u − v,

    ∇̄V(u, v) = ∇V(m) + [(V(u) − V(v) − ∇V(m)·Δ) / |Δ|²] Δ.

  Its chain rule holds for *any* V to rounding (Δ·Δ/|Δ|² = 1). The bracket is a quotient of two
  small numbers when u ≈ v: its true value is O(|Δ|) (the midpoint rule's error V'''[Δ,Δ,Δ]/24 over
  |Δ|²), while rounding in V(u) − V(v) contributes about eps·|V|/|Δ|². Below |Δ| = δ =
  eps^(1/3)·(1 + |m|) (6e-6 in float64, 5e-3 in float32) it is dropped, ∇̄V = ∇V(m): the chain
  rule then fails by |V'''|δ³/24 ≈ eps·|V'''|/24, the same size as rounding. No 0/0 is ever formed
  (the denominator is replaced by 1 where the term is dropped, so no NaN enters the graph either).
``avf``: the average vector field ∫₀¹ ∇V(v + s(u − v)) ds by k-point Gauss–Legendre quadrature
  (Celledoni et al. 2012). The integral is a discrete gradient for any V; its quadrature is one
  only up to the quadrature error: exact for polynomial V of degree ≤ 2k, and for a network the
  chain-rule defect shrinks quickly with k (measured in tests/reproduction/test_position_only_learning.py). No singularity at u = v.

Both are symmetric, ∇̄V(u, v) = ∇̄V(v, u), second-order accurate approximations of ∇V(m), and
differentiable with respect to u, v and V's parameters (``create_graph``, default: grad mode on),
as training through them and the Newton Jacobian of ``hnnsym.ode.lagrangian`` need.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from hnnsym.ode.dynamics import hamiltonian_gradient

Scalar = Callable[[Tensor], Tensor]  # (B, n) -> (B,)

DISCRETE_GRADIENTS = ("gonzalez", "avf")


# ∇V(x) (B, n) -> (B, n) of any scalar V: V's closed form when it declares ``ENERGY_GRADIENT`` (and
# it answers), else autograd; a graph through x and V's parameters with ``create_graph``.
gradient = hamiltonian_gradient


def coincidence_threshold(m: Tensor) -> Tensor:
    """δ (B, 1) below which ``gonzalez`` drops its correction: eps^(1/3)·(1 + |m|_∞)."""
    eps = torch.finfo(m.dtype).eps
    return eps ** (1.0 / 3.0) * (1.0 + m.abs().amax(-1, keepdim=True))


def gonzalez(V: Scalar, u: Tensor, v: Tensor, create_graph: bool | None = None) -> Tensor:
    """The midpoint (Gonzalez) discrete gradient ∇̄V(u, v), u, v (B, n) -> (B, n)."""
    if create_graph is None:
        create_graph = torch.is_grad_enabled()
    if u.shape != v.shape or u.dim() != 2:
        raise ValueError(f"u and v must both be (B, n), got {tuple(u.shape)}, {tuple(v.shape)}")
    B = u.shape[0]
    m = 0.5 * (u + v)
    with torch.set_grad_enabled(create_graph):
        values = V(torch.cat([u, v]))  # one batched evaluation
    Vu, Vv = values[:B], values[B:]
    grad_m = gradient(V, m, create_graph)
    delta = u - v
    norm2 = (delta * delta).sum(-1, keepdim=True)
    apart = norm2 > coincidence_threshold(m.detach()) ** 2
    excess = (Vu - Vv)[:, None] - (grad_m * delta).sum(-1, keepdim=True)
    correction = torch.where(apart, excess, 0.0) / torch.where(apart, norm2, 1.0)
    return grad_m + correction * delta


@lru_cache(maxsize=16)
def _gauss_legendre01(nodes: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Gauss–Legendre nodes and weights on [0, 1] (weights sum to 1)."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    return tuple((0.5 * (x + 1.0)).tolist()), tuple((0.5 * w).tolist())


def avf(
    V: Scalar, u: Tensor, v: Tensor, nodes: int = 4, create_graph: bool | None = None
) -> Tensor:
    """The average-vector-field discrete gradient Σ_i w_i ∇V(v + s_i(u − v)), ``nodes``-point
    Gauss–Legendre on [0, 1]; u, v (B, n) -> (B, n)."""
    if int(nodes) != nodes or nodes < 1:
        raise ValueError(f"nodes must be a whole number >= 1, got {nodes}")
    if u.shape != v.shape or u.dim() != 2:
        raise ValueError(f"u and v must both be (B, n), got {tuple(u.shape)}, {tuple(v.shape)}")
    s, w = _gauss_legendre01(int(nodes))
    s_t = torch.tensor(s, dtype=u.dtype, device=u.device)[:, None, None]
    w_t = torch.tensor(w, dtype=u.dtype, device=u.device)[:, None, None]
    points = v[None] + s_t * (u - v)[None]  # (k, B, n)
    grads = gradient(V, points.reshape(-1, u.shape[-1]), create_graph).reshape(points.shape)
    return (w_t * grads).sum(0)


def discrete_gradient(
    V: Scalar,
    u: Tensor,
    v: Tensor,
    kind: str = "gonzalez",
    nodes: int = 4,
    create_graph: bool | None = None,
) -> Tensor:
    """∇̄V(u, v) of the ``kind`` in DISCRETE_GRADIENTS (``nodes``: AVF's quadrature points)."""
    if kind == "gonzalez":
        return gonzalez(V, u, v, create_graph)
    if kind == "avf":
        return avf(V, u, v, nodes, create_graph)
    raise ValueError(f"unknown discrete gradient {kind!r}; choose one of {DISCRETE_GRADIENTS}")


__all__ = [
    "DISCRETE_GRADIENTS",
    "avf",
    "coincidence_threshold",
    "discrete_gradient",
    "gonzalez",
    "gradient",
]
