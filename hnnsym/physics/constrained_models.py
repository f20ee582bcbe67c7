"""Learned constrained mechanics in Cartesian coordinates (seed 004): CHNN and CLNN.

Both learn, for states z = [x, p] of N point masses (x ∈ R^{N·s}, body-major, p = M ẋ as the data
store it), a constant mass matrix M_θ = diag(exp(log_mass_i)) per body (positive definite by
construction) and a potential V_θ(x), an MLP (the reference's: 3 × 256, tanh, orthogonal initial
weights), with the known constraint graph (a chain: body 1 tethered to the origin, body i linked
to body i−1). They differ in how the constraints enter (``_CartesianChain`` holds what they share):

``CHNN``: H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x); ``vector_field`` is the projected field
ż = P(z) J∇H_θ of ``hnnsym.physics.constrained`` (Ψ = [Φ, Φ̇], Φ̇ = DΦ M_θ⁻¹ p with the learned
mass).

``CLNN``: L_θ(x, ẋ) = ½ ẋᵀM_θẋ − V_θ(x) with Lagrange multipliers: M_θ ẍ = −∇V_θ − DΦᵀλ, λ from
the acceleration-level constraint DΦ ẍ + (d/dt DΦ) ẋ = 0 (``multiplier_acceleration``). On the
data's state [x, p] it is the field ẋ = M_θ⁻¹p, ṗ = M_θ ẍ. (The Euler–Lagrange equations of L_θ in
full, d/dt ∂L/∂ẋ − ∂L/∂x = −DΦᵀλ, reduce to this because ∂²L/∂ẋ² = M_θ is constant and
∂²L/∂ẋ∂x = 0; tests/test_clnn.py checks it against the saddle system built by autograd of L_θ.)

How they differ. With the same parameters the two fields are equal, in exact arithmetic, on the
learned velocity manifold Φ̇_θ = DΦ M_θ⁻¹ p = 0: there CHNN's projection leaves ẋ = M_θ⁻¹p and its
multiplier for Φ is −λ. Off it (and the data are off it whenever M_θ is not a multiple of the true
M, since the data's p = M ẋ with the true M) they differ: CHNN projects ẋ onto the tangent space
and keeps both Φ and Φ̇ as first integrals everywhere; CLNN moves with ẋ = M_θ⁻¹p, keeps only Φ̇
(Φ̈ = 0 everywhere), and Φ changes at the rate Φ̇. So, as seed 004 says, they are the same model
class but not the same training problem.

Both fields are single differentiable expressions (∇V_θ closed form, ``mlp_gradient``): every
integrator and gradient method of ``hnnsym.ode`` runs them unchanged. Both have the energy
H_θ (for CLNN the Legendre transform of L_θ), so ``integrator=rattle`` steps either.
``position_constraints`` (Φ itself, for RATTLE) uses the lengths drawn from ``parameter_seed`` as
the data's system does (the model config takes it from ``system.params``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from hnnsym.physics.constrained import (
    CARTESIAN_SYSTEMS,
    chain_constraints,
    chain_parameters,
    constrained_vector_field,
    multiplier_acceleration,
)
from hnnsym.physics.models import mlp, mlp_gradient


class _CartesianChain(nn.Module):
    """A chain of point masses with learned M_θ (one log-mass per body) and V_θ; the energy
    H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x). Subclasses define ``vector_field``. ``dim`` = N · ``spatial``."""

    separable = False  # the constrained field couples x and p
    constrained = True

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (256, 256, 256),
        activation: str = "tanh",
        spatial: int = 2,
        graph: str = "chain",
        parameter_seed: int = 0,
        system: str = "chain_pendulum",
    ):
        super().__init__()
        who = type(self).__name__
        if system not in CARTESIAN_SYSTEMS:
            raise ValueError(
                f"{who} learns in Cartesian coordinates with constraints; system {system!r} is not "
                f"one of {sorted(CARTESIAN_SYSTEMS)} (for angle data use model=hnn)"
            )
        if graph != "chain":
            raise ValueError(f"graph must be 'chain', got {graph!r}")
        if spatial != 2 or dim % spatial:
            raise ValueError(f"need planar bodies (spatial=2) and dim a multiple of 2, got {dim}")
        self.dim, self.spatial, self.bodies = dim, spatial, dim // spatial
        _, lengths = chain_parameters(self.bodies, int(parameter_seed))
        self.constraints = chain_constraints(self.bodies, lengths)
        self.potential_net = mlp(dim, hidden, activation)
        for layer in self.potential_net.modules():
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight)
        self.log_mass = nn.Parameter(torch.zeros(self.bodies))

    def inverse_mass(self) -> Tensor:
        """diag(M_θ⁻¹) (n,)."""
        return torch.exp(-self.log_mass).repeat_interleave(self.spatial)

    def mass_matrix(self) -> Tensor:
        """M_θ (n, n), diagonal, one learned mass per body."""
        return torch.diag(torch.exp(self.log_mass).repeat_interleave(self.spatial))

    def masses(self) -> Tensor:
        """The learned body masses (N,)."""
        return torch.exp(self.log_mass)

    def potential(self, x: Tensor) -> Tensor:
        return self.potential_net(x).squeeze(-1)

    def potential_gradient(self, x: Tensor) -> Tensor:
        """∇V_θ(x) (..., n) in closed form."""
        return mlp_gradient(self.potential_net, x)

    def forward(self, y: Tensor) -> Tensor:
        """The energy H_θ(x, p) (...,)."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        return 0.5 * (p * p * self.inverse_mass()).sum(-1) + self.potential(x)

    def energy_gradient(self, y: Tensor) -> Tensor:
        """∇H_θ = [∇V_θ(x), M_θ⁻¹p] in closed form."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        return torch.cat([self.potential_gradient(x), p * self.inverse_mass()], -1)

    def vector_field(self, y: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def position_constraints(self, x: Tensor) -> Tensor:
        """Φ(x) (..., m): the chain's |r_k|² − l_k²."""
        return self.constraints.phi(x)

    def position_constraints_jacobian(self, x: Tensor) -> Tensor:
        """DΦ(x) (..., m, n) in closed form (RATTLE uses it instead of autograd)."""
        return self.constraints.jacobian(x)


class CHNN(_CartesianChain):
    """Constrained HNN on a chain of point masses (module doc)."""

    def vector_field(self, y: Tensor) -> Tensor:
        """ż = P(z) J∇H_θ (..., 2n)."""
        return constrained_vector_field(
            self.constraints, self.inverse_mass(), self.energy_gradient(y), y
        )


class CLNN(_CartesianChain):
    """Constrained LNN on a chain of point masses (module doc): L_θ = ½ẋᵀM_θẋ − V_θ(x)."""

    def lagrangian(self, x: Tensor, v: Tensor) -> Tensor:
        """L_θ(x, ẋ) (...,)."""
        return 0.5 * (v * v / self.inverse_mass()).sum(-1) - self.potential(x)

    def acceleration(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """(ẍ, λ) of M_θ ẍ = −∇V_θ − DΦᵀλ, Φ̈ = 0, at positions x and velocities v (..., n)."""
        return multiplier_acceleration(
            self.constraints, self.inverse_mass(), -self.potential_gradient(x), x, v
        )

    def vector_field(self, y: Tensor) -> Tensor:
        """[ẋ, ṗ] = [M_θ⁻¹p, M_θ ẍ] (..., 2n)."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        inverse_mass = self.inverse_mass()
        v = p * inverse_mass
        a, _ = self.acceleration(x, v)
        return torch.cat([v, a / inverse_mass], -1)
