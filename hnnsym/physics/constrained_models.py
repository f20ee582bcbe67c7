"""Learned constrained Hamiltonians in Cartesian coordinates (seed 004): CHNN.

``CHNN``: H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x) for states z = [x, p] of N point masses (x ∈ R^{N·s},
body-major), M_θ = diag(exp(log_mass_i)) per body (positive definite by construction), V_θ an MLP
(the reference's: 3 × 256, tanh, orthogonal initial weights). Its ``vector_field`` is the projected
field ż = P(z) J∇H_θ of ``hnnsym.physics.constrained`` with the known constraint graph (a chain:
body 1 tethered to the origin, body i linked to body i−1), Φ̇ = DΦ M_θ⁻¹ p with the learned mass.
∇H_θ is closed form (``mlp_gradient``), so the field is one differentiable expression: every
integrator and gradient method of ``hnnsym.ode`` runs it unchanged.

The projection needs only DΦ, not the link lengths; ``position_constraints`` (Φ itself, for the
RATTLE integrator) uses the lengths drawn from ``parameter_seed`` as the data's system does
(the model config takes it from ``system.params``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from hnnsym.physics.constrained import chain_constraints, chain_parameters, constrained_vector_field
from hnnsym.physics.models import mlp, mlp_gradient

CARTESIAN_SYSTEMS = ("chain_pendulum",)


class CHNN(nn.Module):
    """Constrained HNN on a chain of point masses (module doc). ``dim`` = N · ``spatial``."""

    separable = False  # the projected field couples x and p
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
        if system not in CARTESIAN_SYSTEMS:
            raise ValueError(
                f"CHNN learns in Cartesian coordinates with constraints; system {system!r} is not "
                f"one of {CARTESIAN_SYSTEMS} (for angle data use model=hnn)"
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

    def forward(self, y: Tensor) -> Tensor:
        x, p = y[..., : self.dim], y[..., self.dim :]
        return 0.5 * (p * p * self.inverse_mass()).sum(-1) + self.potential(x)

    def energy_gradient(self, y: Tensor) -> Tensor:
        """∇H_θ = [∇V_θ(x), M_θ⁻¹p] in closed form."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        return torch.cat([mlp_gradient(self.potential_net, x), p * self.inverse_mass()], -1)

    def vector_field(self, y: Tensor) -> Tensor:
        """ż = P(z) J∇H_θ (..., 2n)."""
        return constrained_vector_field(
            self.constraints, self.inverse_mass(), self.energy_gradient(y), y
        )

    def position_constraints(self, x: Tensor) -> Tensor:
        """Φ(x) (..., m): the chain's |r_k|² − l_k²."""
        return self.constraints.phi(x)
