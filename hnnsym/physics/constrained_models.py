"""Learned constrained mechanics in Cartesian coordinates (Finzi et al.): CHNN and CLNN.

Both learn, for states z = [x, p] of N point masses (x ∈ R^{N·s}, body-major, p = M ẋ as the data
store it), a constant mass matrix M_θ = diag(exp(log_mass_i)) per body (positive definite by
construction) and a potential V_θ(x), an MLP (the reference's: 3 × 256, tanh, orthogonal initial
weights), with the known constraints of the data's system (``constrained_system_of``: its tethers
to fixed anchors, links between bodies, lengths and spatial dimension s; the planar chain, s = 2,
or the 3-D coupled pendulum, s = 3). They differ in how the constraints enter
(``_CartesianBodies`` holds what they share):

``CHNN``: H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x); ``vector_field`` is the projected field
ż = P(z) J∇H_θ of ``hnnsym.physics.constraints`` (Ψ = [Φ, Φ̇], Φ̇ = DΦ M_θ⁻¹ p with the learned
mass).

``CLNN``: L_θ(x, ẋ) = ½ ẋᵀM_θẋ − V_θ(x) with Lagrange multipliers: M_θ ẍ = −∇V_θ − DΦᵀλ, λ from
the acceleration-level constraint DΦ ẍ + (d/dt DΦ) ẋ = 0 (``multiplier_acceleration``). On the
data's state [x, p] it is the field ẋ = M_θ⁻¹p, ṗ = M_θ ẍ. (The Euler–Lagrange equations of L_θ in
full, d/dt ∂L/∂ẋ − ∂L/∂x = −DΦᵀλ, reduce to this because ∂²L/∂ẋ² = M_θ is constant and
∂²L/∂ẋ∂x = 0; tests/physics/test_constrained_lagrangian.py checks it against the saddle system built by autograd of L_θ.)

How they differ. With the same parameters the two fields are equal, in exact arithmetic, on the
learned velocity manifold Φ̇_θ = DΦ M_θ⁻¹ p = 0: there CHNN's projection leaves ẋ = M_θ⁻¹p and its
multiplier for Φ is −λ. Off it (and the data are off it whenever M_θ is not a multiple of the true
M, since the data's p = M ẋ with the true M) they differ: CHNN projects ẋ onto the tangent space
and keeps both Φ and Φ̇ as first integrals everywhere; CLNN moves with ẋ = M_θ⁻¹p, keeps only Φ̇
(Φ̈ = 0 everywhere), and Φ changes at the rate Φ̇. So, as Finzi et al. says, they are the same model
class but not the same training problem.

Both fields are single differentiable expressions (∇V_θ closed form, ``mlp_gradient``): every
integrator and gradient method of ``hnnsym.ode`` runs them unchanged. Both have the energy
H_θ (for CLNN the Legendre transform of L_θ), so ``integrator=rattle`` steps either.
``position_constraints`` (Φ itself, for RATTLE) uses the lengths of the data's system (the model
config passes ``system.name`` and ``system.params``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from hnnsym.ode.capabilities import Capability
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.constraints import constrained_vector_field, multiplier_acceleration
from hnnsym.physics.models import mlp, mlp_gradient
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS, constrained_system_of


class _CartesianBodies(nn.Module):
    """Point masses with learned M_θ (one log-mass per body) and V_θ under the constraints of the
    system ``system`` with ``system_params`` (``constrained_system_of``); the energy
    H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x). Subclasses define ``vector_field``. ``dim`` = N · spatial.
    ``spatial``, ``graph`` and ``parameter_seed`` are keys of the chain's earlier configs (and
    checkpoints): without ``system_params``, the chain of dim/2 links drawn from
    ``parameter_seed``; ``spatial`` and ``graph``, when given, must agree with the system."""

    capabilities = frozenset({
        Capability.HAMILTONIAN, Capability.ENERGY_GRADIENT, Capability.OWN_FIELD,
        Capability.CONSTRAINTS, Capability.CONSTRAINT_JACOBIAN, Capability.MASS_MATRIX,
        ModelCapability.MASSES,
    })  # fmt: skip  # not SEPARABLE: the constrained field couples x and p

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (256, 256, 256),
        activation: str = "tanh",
        system: str = "chain_pendulum",
        system_params: Mapping | None = None,
        spatial: int | None = None,
        graph: str | None = None,
        parameter_seed: int | None = None,
    ):
        super().__init__()
        who = type(self).__name__
        if system not in CARTESIAN_SYSTEMS:
            raise ValueError(
                f"{who} learns in Cartesian coordinates with constraints; system {system!r} is not "
                f"one of {sorted(CARTESIAN_SYSTEMS)} (for angle data use model=hnn)"
            )
        if graph not in (None, "chain") or (graph == "chain" and system != "chain_pendulum"):
            raise ValueError(
                f"graph must be 'chain' (system=chain_pendulum) or null, got {graph!r}"
            )
        try:
            cart = constrained_system_of(system, dim, system_params, parameter_seed)
        except ValueError as err:
            raise ValueError(f"{who} learns in Cartesian coordinates: {err}") from err
        if spatial is not None and spatial != cart.spatial:
            raise ValueError(
                f"system {system} has bodies in {cart.spatial} dimensions, not {spatial}"
            )
        self.dim, self.spatial = dim, cart.spatial
        self.bodies = cart.constraints.bodies
        self.constraints = cart.constraints
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
        """Φ(x) (..., m): the system's |r_k|² − l_k² (links and tethers)."""
        return self.constraints.phi(x)

    def position_constraints_jacobian(self, x: Tensor) -> Tensor:
        """DΦ(x) (..., m, n) in closed form (RATTLE uses it instead of autograd)."""
        return self.constraints.jacobian(x)


class CHNN(_CartesianBodies):
    """Constrained HNN on constrained point masses (module doc)."""

    def vector_field(self, y: Tensor) -> Tensor:
        """ż = P(z) J∇H_θ (..., 2n)."""
        return constrained_vector_field(
            self.constraints, self.inverse_mass(), self.energy_gradient(y), y
        )


class CLNN(_CartesianBodies):
    """Constrained LNN on constrained point masses (module doc): L_θ = ½ẋᵀM_θẋ − V_θ(x)."""

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
