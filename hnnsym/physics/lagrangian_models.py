"""A Lagrangian model in generalised coordinates (DeLaN, Lutter et al.), stepped as a Hamiltonian.

    L(q, q̇) = ½ q̇ᵀ M_θ(q) q̇ − V_θ(q),      Rayleigh dissipation F(q, q̇) = ½ q̇ᵀ R_θ(q) q̇

Two mass matrices (``mass``):

- ``network``: M_θ(q) = L_θ(q) L_θ(q)ᵀ with L_θ lower triangular from an MLP, its diagonal
  softplus(·) + ``mass_eps`` > 0, so M_θ is symmetric positive definite for every q.
- ``chain``: q = (θ₁, …, θ_n) are the angles of the n links of a planar chain from a fixed
  pivot, embedded as the unit-link points x_k(θ) = Σ_{j≤k} (cos θ_j, sin θ_j) (k = 1..n), and
  M_θ(θ) = J(θ)ᵀ A J(θ), J = ∂x/∂θ (2n × n), A = C Cᵀ a learned constant SPD 2n × 2n matrix (C
  lower triangular, diagonal softplus(·) + ``mass_eps``). The kinetic energy of rigid bodies
  moving in a plane with the links is a constant quadratic form in the velocities of the link
  end points, so this M is exact for compound pendulums (rods with any mass, length, centre
  and moment of inertia): the lengths are absorbed into A. J has full column rank (column j
  is (−sin θ_j, cos θ_j) in the rows of the points k ≥ j), so M_θ is SPD. The potential gains
  a linear form in (cos θ, sin θ): uniform gravity's, −g · Σ m_k x_k, in any direction.

Either way R_θ(q) = D_θ(q) D_θ(q)ᵀ (D lower triangular, free) is positive semi-definite. Angle
coordinates (``periodic``) enter the networks as (cos q_i, sin q_i)
(``hnnsym.physics.models.PeriodicInputs``).

The project's integrators step states y = (q, p) (B, 2d): the Legendre transform p = M_θ(q) q̇
(``to_state``; back: ``velocities``) gives

    H(q, p) = ½ pᵀ M_θ(q)⁻¹ p + V_θ(q)                         (``forward``)
    q̇ = ∂H/∂p,   ṗ = −∂H/∂q − R_θ(q) q̇                        (``vector_field``)

the second being Lagrange's equations with the generalised friction force −∂F/∂q̇. It is the
dissipative field (J⁻¹ − R)∇H of ``hnnsym.ode.dynamics.dissipative_field`` with
R = diag(0, R_θ(q)) (``damping_matrix``), so dH/dt = −q̇ᵀ R_θ q̇ ≤ 0, as for
``hnnsym.physics.dissipative.DissipativeHNN`` with ``damping_on=p``. Like that model it has an
energy but no Hamiltonian flow: integrators that split the flow refuse it; the Gauss–Legendre
ones (implicit midpoint) step it. ``damping=none`` gives the conservative model (R = 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.nn.functional import softplus

from hnnsym.ode.capabilities import Capability
from hnnsym.ode.dynamics import dissipative_field, hamiltonian_gradient
from hnnsym.ode.solve import integrate
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.models import PeriodicInputs, mlp, periodic_indices

DAMPING_KINDS = ("none", "constant", "state")
MASS_KINDS = ("network", "chain")


def chain_jacobian(theta: Tensor) -> Tensor:
    """J(θ) = ∂x/∂θ (..., 2n, n) of the unit-link chain x_k = Σ_{j≤k} (cos θ_j, sin θ_j): rows
    (2k, 2k+1) are point k's (x, y), column j is (−sin θ_j, cos θ_j) for k ≥ j, else 0."""
    n = theta.shape[-1]
    tangent = torch.stack([-torch.sin(theta), torch.cos(theta)], -2)  # (..., 2, n): column j
    below = torch.ones(n, n, dtype=theta.dtype, device=theta.device).tril()  # [k, j]: k ≥ j
    J = below[:, None, :] * tangent.unsqueeze(-3)  # (..., n, 2, n)
    return J.reshape(*theta.shape[:-1], 2 * n, n)


class LagrangianModel(nn.Module):
    """M_θ(q) (Cholesky network, or J(θ)ᵀ A J(θ) of a planar chain), V_θ(q) and R_θ(q) over d
    generalised coordinates; a model of states (q, p), p = M_θ(q) q̇."""

    capabilities = frozenset(
        {
            Capability.HAMILTONIAN,
            Capability.OWN_FIELD,
            ModelCapability.DAMPING,
            ModelCapability.OWN_MOMENTA,
        }
    )

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (32, 32),
        activation: str = "tanh",
        damping: str = "constant",
        damping_hidden: Sequence[int] = (16,),
        damping_init: float = 0.01,
        mass_eps: float = 1e-3,
        periodic: Sequence[int] | None = (),
        mass: str = "network",
    ):
        super().__init__()
        if damping not in DAMPING_KINDS:
            raise ValueError(f"damping must be one of {DAMPING_KINDS}, got {damping!r}")
        if mass not in MASS_KINDS:
            raise ValueError(f"mass must be one of {MASS_KINDS}, got {mass!r}")
        if not (math.isfinite(damping_init) and damping_init > 0):
            raise ValueError(f"damping_init must be finite and > 0, got {damping_init}")
        if not (math.isfinite(mass_eps) and mass_eps > 0):
            raise ValueError(f"mass_eps must be finite and > 0, got {mass_eps}")
        self.dim, self.mass_eps, self.damping_kind = dim, float(mass_eps), damping
        self.mass_kind = mass
        self.periodic = periodic_indices(periodic, dim)
        if mass == "chain" and len(self.periodic) != dim:
            raise ValueError(f"mass=chain needs every coordinate to be a link angle; periodic "
                             f"{list(self.periodic)} of {dim} coordinates")  # fmt: skip
        self.inputs = PeriodicInputs(dim, self.periodic)
        rows, cols = torch.tril_indices(dim, dim)
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        n_in = self.inputs.n_out
        if mass == "network":
            self.mass_net = mlp(n_in, hidden, activation, n_out=len(rows))
        else:  # C starts at I: A = I, M = JᵀJ (unit point masses at the link ends)
            n = 2 * dim
            start = math.log(math.expm1(max(1.0 - self.mass_eps, 1e-6)))  # softplus⁻¹
            self.chain_factor = nn.Parameter(start * torch.eye(n, dtype=torch.get_default_dtype()))
            # uniform gravity's potential −g · Σ m_k x_k is linear in the points, i.e. in
            # (cos θ, sin θ): a linear term (any direction) beside the MLP, starting at 0
            self.potential_linear = nn.Linear(n_in, 1, bias=False)
            nn.init.zeros_(self.potential_linear.weight)
        self.potential_net = mlp(n_in, hidden, activation, n_out=1)
        scale = math.sqrt(damping_init)
        if damping == "constant":
            self.damping_factor = nn.Parameter(scale * torch.eye(dim))
        elif damping == "state":
            self.damping_net = mlp(n_in, damping_hidden, activation, n_out=len(rows))
            last = self.damping_net[-1]
            with torch.no_grad():  # R starts at damping_init · I
                last.weight.zero_()
                last.bias.copy_(scale * (rows == cols).to(last.bias.dtype))

    def _lower(self, entries: Tensor) -> Tensor:
        """(..., d(d+1)/2) entries filled row by row into (..., d, d) lower triangles."""
        out = entries.new_zeros(*entries.shape[:-1], self.dim, self.dim)
        out[..., self._rows, self._cols] = entries
        return out

    def chain_cholesky(self) -> Tensor:
        """C (2d, 2d) of mass=chain: lower triangular, diagonal softplus(·) + mass_eps."""
        raw = torch.tril(self.chain_factor, -1)
        return raw + torch.diag(softplus(torch.diagonal(self.chain_factor)) + self.mass_eps)

    def chain_mass(self) -> Tensor:
        """A = C Cᵀ (2d, 2d) of mass=chain: the constant kinetic form of the unit-link points'
        velocities (x₁, y₁, x₂, y₂, ...)."""
        C = self.chain_cholesky()
        return C @ C.mT

    def mass_cholesky(self, q: Tensor) -> Tensor:
        """The lower-triangular Cholesky factor of M_θ(q) (..., d, d): the network's (diagonal
        softplus(·) + mass_eps), or for mass=chain that of J(θ)ᵀ A J(θ)."""
        if self.mass_kind == "chain":
            return torch.linalg.cholesky(self.mass_matrix(q))
        entries = self.mass_net(self.inputs(q))
        diagonal = (self._rows == self._cols).to(entries.dtype)
        entries = diagonal * (softplus(entries) + self.mass_eps) + (1 - diagonal) * entries
        return self._lower(entries)

    def mass_matrix(self, q: Tensor) -> Tensor:
        """M_θ(q) (..., d, d), symmetric positive definite: L Lᵀ, or (Cᵀ J)ᵀ (Cᵀ J)."""
        if self.mass_kind == "chain":
            G = self.chain_cholesky().mT.to(q) @ chain_jacobian(q)  # (..., 2d, d)
            return G.mT @ G
        L = self.mass_cholesky(q)
        return L @ L.mT

    def potential(self, q: Tensor) -> Tensor:
        """V_θ(q) (...,): the MLP's, plus for mass=chain a linear form in (cos θ, sin θ)."""
        e = self.inputs(q)
        v = self.potential_net(e)
        if self.mass_kind == "chain":
            v = v + self.potential_linear(e)
        return v.squeeze(-1)

    def rayleigh_matrix(self, q: Tensor) -> Tensor:
        """R_θ(q) (..., d, d) of the dissipation ½ q̇ᵀ R q̇: positive semi-definite."""
        if self.damping_kind == "none":
            return q.new_zeros(*q.shape[:-1], self.dim, self.dim)
        if self.damping_kind == "constant":
            D = torch.tril(self.damping_factor).expand(*q.shape[:-1], self.dim, self.dim)
        else:
            D = self._lower(self.damping_net(self.inputs(q)))
        return D @ D.mT

    def velocities(self, y: Tensor) -> Tensor:
        """q̇ = M_θ(q)⁻¹ p (..., d) of states y = (q, p) (..., 2d)."""
        q, p = y[..., : self.dim], y[..., self.dim :]
        return torch.cholesky_solve(p.unsqueeze(-1), self.mass_cholesky(q)).squeeze(-1)

    def to_state(self, q: Tensor, qdot: Tensor) -> Tensor:
        """The state (q, p = M_θ(q) q̇) (..., 2d) of an observation (q, q̇) (..., d) each."""
        p = (self.mass_matrix(q) @ qdot.unsqueeze(-1)).squeeze(-1)
        return torch.cat([q, p], -1)

    def to_observation(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """(q, q̇) of states y = (q, p): the inverse of ``to_state``."""
        return y[..., : self.dim], self.velocities(y)

    def forward(self, y: Tensor) -> Tensor:
        """H(q, p) = ½ pᵀ M_θ(q)⁻¹ p + V_θ(q) (...,)."""
        q, p = y[..., : self.dim], y[..., self.dim :]
        return 0.5 * (p * self.velocities(y)).sum(-1) + self.potential(q)

    def damping_matrix(self, y: Tensor) -> Tensor:
        """R = diag(0, R_θ(q)) (..., 2d, 2d) in the state coordinates (q, p)."""
        d = self.dim
        block = self.rayleigh_matrix(y[..., :d])
        R = block.new_zeros(*block.shape[:-2], 2 * d, 2 * d)
        R[..., d:, d:] = block
        return R

    def vector_field(self, y: Tensor) -> Tensor:
        """ẏ = (q̇, ṗ) = (∂H/∂p, −∂H/∂q − R_θ(q) ∂H/∂p) (..., 2d)."""
        return dissipative_field(hamiltonian_gradient(self, y), self.damping_matrix(y))


def observed_rollout(
    model: LagrangianModel,
    q0: Tensor,
    qdot0: Tensor,
    h: float,
    steps: int,
    integrator: str = "implicit_midpoint",
    gradient: str = "symplectic_adjoint",
) -> tuple[Tensor, Tensor]:
    """Positions and velocities (steps+1, B, d) each from observations (q₀, q̇₀) (B, d): the start
    mapped to (q, p) by ``to_state``, integrated (``hnnsym.ode.solve.integrate``), mapped back by
    ``to_observation``. Differentiable in the model's parameters through all three (the
    integration by ``gradient``), so a loss over (q, q̇) windows of a recording trains it."""
    ys = integrate(model, model.to_state(q0, qdot0), h, steps, integrator, gradient)
    return model.to_observation(ys)
