"""Learned constrained mechanics in Cartesian coordinates (Finzi et al.): CHNN and CLNN.

Both learn, for states z = [x, p] of N point masses (x ∈ R^{N·s}, body-major, p = M ẋ as the data
store it), a constant mass matrix M_θ and a potential V_θ(x), an MLP (the reference's: 3 × 256,
tanh, orthogonal initial weights), with the known constraints of the data's system
(``constrained_system_of``: its tethers to fixed anchors, links between bodies, lengths and
spatial dimension s; the planar chain, s = 2, or the 3-D coupled pendulum, s = 3). They differ in
how the constraints enter (``_CartesianBodies`` holds what they share).

``mass``: ``body`` (the default), M_θ = diag(exp(log_mass_i)) with one mass per body, point
masses; ``full``, M_θ = C Cᵀ over all n Cartesian coordinates, C lower triangular with diagonal
softplus(·) + ``mass_eps``, symmetric positive definite by construction. The full form is exact
for rigid extended bodies moving under the constraints: a uniform rod of mass m between points a
and b has T = m/6 (|ȧ|² + ȧ·ḃ + |ḃ|²), a constant quadratic form that is not diagonal, and a
compound pendulum's T is a sum of such forms (tests/physics/test_constrained_full_mass.py checks
a double pendulum of two rods against its angle-coordinate solution). It declares no per-body
masses (``ModelCapability.MASSES``); ``mass_matrix()`` gives M_θ in either form.

``friction``: ``none`` (the default, conservative) or ``joint``, the Rayleigh dissipation
½ ωᵀ C_f ω of the angular velocities ω = W(x) ẋ of the links and tethers
(``DistanceConstraints.angular_velocity_map``), C_f = L Lᵀ (m × m, L lower triangular, starting
at ``friction_init`` · I) positive semi-definite: viscous friction at the joints of a chain
(c₁ω₁² + c₂(ω₂ − ω₁)² is such a form) and between any links. The force acts through the
M_θ-orthogonal projector P onto the tangent space (``tangent_projector``),
F = −Pᵀ Wᵀ C_f W P ẋ, so that DΦ M_θ⁻¹ F = 0: it changes neither Φ̇ nor the multipliers, and the
damped fields keep the manifold as the conservative ones do. It is the port-Hamiltonian form
(J⁻¹ − R)∇H with R = diag(0, R_pp(x)), R_pp = Pᵀ Wᵀ C_f W P (``damping_matrix``), so
dH_θ/dt = −ẋᵀ R_pp ẋ ≤ 0 (``ModelCapability.DAMPING``). ``integrator=rattle`` steps it by a
Strang splitting with the exact friction flow at fixed x (``hnnsym.ode.integrators.rattle``).

``own_momenta``: the model observes (x, ẋ) and maps them to its own momenta, p = M_θ ẋ
(``to_state``; back: ``to_observation``; ``ModelCapability.OWN_MOMENTA``). A recording of
tracked points gives velocities, not momenta, so ``hnnsym.compatibility.recording_model_config``
sets it there, with the recorded chain's constraints.

No direction of space is assumed: V_θ is an MLP of all coordinates and the friction reads only
relative positions, so data whose "down" is not −y (a film's pixel axes) need no rotation.

What differs between the two:

``CHNN``: H_θ(x, p) = ½ pᵀM_θ⁻¹p + V_θ(x); ``vector_field`` is the projected field
ż = P(z) J∇H_θ of ``hnnsym.physics.constraints`` (Ψ = [Φ, Φ̇], Φ̇ = DΦ M_θ⁻¹ p with the learned
mass), plus [0, F] with joint friction (unchanged by that projection).

``CLNN``: L_θ(x, ẋ) = ½ ẋᵀM_θẋ − V_θ(x) with Lagrange multipliers: M_θ ẍ = −∇V_θ + F − DΦᵀλ, λ from
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

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn
from torch.nn.functional import softplus

from hnnsym.ode.capabilities import Capability
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.constraints import (
    constrained_vector_field,
    inverse_mass_times,
    multiplier_acceleration,
    tangent_projector,
)
from hnnsym.physics.models import mlp, mlp_gradient
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS, constrained_system_of

MASS_KINDS = ("body", "full")
FRICTION_KINDS = ("none", "joint")


class _CartesianBodies(nn.Module):
    """Point masses (or rigid bodies through their points) with learned M_θ (``mass``) and V_θ
    under the constraints of the system ``system`` with ``system_params``
    (``constrained_system_of``), and optional joint friction (``friction``); the energy
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
        mass: str = "body",
        mass_eps: float = 1e-3,
        friction: str = "none",
        friction_init: float = 0.01,
        own_momenta: bool = False,
    ):
        super().__init__()
        who = type(self).__name__
        if system not in CARTESIAN_SYSTEMS:
            raise ValueError(
                f"{who} learns in Cartesian coordinates with constraints; system {system!r} is not "
                f"one of {sorted(CARTESIAN_SYSTEMS)} (for angle data use model=hnn; a recording "
                "of tracked points takes its constraints from its chain: ingest it with "
                "ingest.points and ingest.chain)"
            )
        if graph not in (None, "chain") or (graph == "chain" and system != "chain_pendulum"):
            raise ValueError(
                f"graph must be 'chain' (system=chain_pendulum) or null, got {graph!r}"
            )
        if mass not in MASS_KINDS:
            raise ValueError(f"{who}: mass must be one of {MASS_KINDS}, got {mass!r}")
        if friction not in FRICTION_KINDS:
            raise ValueError(f"{who}: friction must be one of {FRICTION_KINDS}, got {friction!r}")
        if not (math.isfinite(mass_eps) and mass_eps > 0):
            raise ValueError(f"{who}: mass_eps must be finite and > 0, got {mass_eps}")
        if not (math.isfinite(friction_init) and friction_init > 0):
            raise ValueError(f"{who}: friction_init must be finite and > 0, got {friction_init}")
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
        self.mass_kind, self.mass_eps, self.friction_kind = mass, float(mass_eps), friction
        self.potential_net = mlp(dim, hidden, activation)
        for layer in self.potential_net.modules():
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight)
        caps = set(type(self).capabilities)
        if mass == "body":
            self.log_mass = nn.Parameter(torch.zeros(self.bodies))
        else:  # C starts at I (M_θ = I, as log_mass = 0 does)
            self.mass_factor = nn.Parameter(torch.eye(dim) * _softplus_inverse(1.0 - self.mass_eps))
            caps.discard(ModelCapability.MASSES)
        if friction == "joint":
            m = self.constraints.count
            self.friction_factor = nn.Parameter(math.sqrt(friction_init) * torch.eye(m))
            caps |= {ModelCapability.DAMPING, Capability.FRICTION}
        if own_momenta:  # observes (x, ẋ): p = M_θ ẋ is the model's own
            caps.add(ModelCapability.OWN_MOMENTA)
        self.capabilities = frozenset(caps)

    def mass_cholesky(self) -> Tensor:
        """C (n, n) with M_θ = C Cᵀ (``mass=full``): lower triangular, diagonal
        softplus(·) + mass_eps."""
        raw = torch.tril(self.mass_factor, -1)
        return raw + torch.diag(softplus(torch.diagonal(self.mass_factor)) + self.mass_eps)

    def inverse_mass(self) -> Tensor:
        """M_θ⁻¹: its diagonal (n,) for ``mass=body``, the matrix (n, n) for ``full`` (the forms
        ``hnnsym.physics.constraints.inverse_mass_times`` takes)."""
        if self.mass_kind == "body":
            return torch.exp(-self.log_mass).repeat_interleave(self.spatial)
        return torch.cholesky_inverse(self.mass_cholesky())

    def mass_matrix(self) -> Tensor:
        """M_θ (n, n): diagonal with one learned mass per body, or C Cᵀ."""
        if self.mass_kind == "body":
            return torch.diag(torch.exp(self.log_mass).repeat_interleave(self.spatial))
        C = self.mass_cholesky()
        return C @ C.T

    def masses(self) -> Tensor:
        """The learned body masses (N,) (``mass=body``)."""
        if self.mass_kind != "body":
            raise ValueError("mass=full learns a mass matrix, not one mass per body")
        return torch.exp(self.log_mass)

    def to_state(self, x: Tensor, v: Tensor) -> Tensor:
        """The state (x, p = M_θ ẋ) (..., 2n) of an observation (x, ẋ) (``own_momenta``)."""
        return torch.cat([x, v @ self.mass_matrix().to(v)], -1)  # M_θ symmetric

    def to_observation(self, y: Tensor) -> tuple[Tensor, Tensor]:
        """(x, ẋ = M_θ⁻¹ p) of states y (``own_momenta``): the inverse of ``to_state``."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        return x, inverse_mass_times(self.inverse_mass().to(p), p)

    def potential(self, x: Tensor) -> Tensor:
        return self.potential_net(x).squeeze(-1)

    def potential_gradient(self, x: Tensor) -> Tensor:
        """∇V_θ(x) (..., n) in closed form."""
        return mlp_gradient(self.potential_net, x)

    def forward(self, y: Tensor) -> Tensor:
        """The energy H_θ(x, p) (...,)."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        inverse_mass = self.inverse_mass()
        if self.mass_kind == "body":
            kinetic = 0.5 * (p * p * inverse_mass).sum(-1)
        else:
            kinetic = 0.5 * (p * (p @ inverse_mass)).sum(-1)
        return kinetic + self.potential(x)

    def energy_gradient(self, y: Tensor) -> Tensor:
        """∇H_θ = [∇V_θ(x), M_θ⁻¹p] in closed form."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        v = inverse_mass_times(self.inverse_mass(), p)
        return torch.cat([self.potential_gradient(x), v], -1)

    def joint_friction(self) -> Tensor:
        """C_f = L Lᵀ (m, m), positive semi-definite: the Rayleigh form of the links' angular
        velocities (``friction=joint``)."""
        L = torch.tril(self.friction_factor)
        return L @ L.T

    def friction_matrix(self, x: Tensor) -> Tensor:
        """R_pp(x) = Pᵀ Wᵀ C_f W P (..., n, n), the friction force being −R_pp ẋ (module doc);
        zeros for ``friction=none``."""
        if self.friction_kind == "none":
            return x.new_zeros(*x.shape[:-1], self.dim, self.dim)
        P = tangent_projector(self.constraints.jacobian(x), self.inverse_mass())
        W = self.constraints.angular_velocity_map(x)
        if self.spatial == 3:  # C_f ⊗ I₃ on the vectors ω_k (link by link)
            C = torch.kron(self.joint_friction(), torch.eye(3, dtype=x.dtype, device=x.device))
        else:
            C = self.joint_friction()
        WP = W @ P
        return WP.mT @ C @ WP

    def damping_matrix(self, y: Tensor) -> Tensor:
        """R = diag(0, R_pp(x)) (..., 2n, 2n): the damped field is (J⁻¹ − R)∇H_θ, projected."""
        R_pp = self.friction_matrix(y[..., : self.dim])
        R = R_pp.new_zeros(*R_pp.shape[:-2], 2 * self.dim, 2 * self.dim)
        R[..., self.dim :, self.dim :] = R_pp
        return R

    def friction_force(self, x: Tensor, v: Tensor) -> Tensor:
        """F = −R_pp(x) v (..., n) at velocities v."""
        return -(self.friction_matrix(x) @ v[..., None])[..., 0]

    def vector_field(self, y: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def position_constraints(self, x: Tensor) -> Tensor:
        """Φ(x) (..., m): the system's |r_k|² − l_k² (links and tethers)."""
        return self.constraints.phi(x)

    def position_constraints_jacobian(self, x: Tensor) -> Tensor:
        """DΦ(x) (..., m, n) in closed form (RATTLE uses it instead of autograd)."""
        return self.constraints.jacobian(x)


def _softplus_inverse(y: float) -> float:
    """x with softplus(x) = y > 0."""
    return y + math.log(-math.expm1(-y))


class CHNN(_CartesianBodies):
    """Constrained HNN on constrained point masses (module doc)."""

    def vector_field(self, y: Tensor) -> Tensor:
        """ż = P(z) J∇H_θ (..., 2n), plus [0, F] with friction."""
        inverse_mass = self.inverse_mass()
        grad = self.energy_gradient(y)
        field = constrained_vector_field(self.constraints, inverse_mass, grad, y)
        if self.friction_kind == "none":
            return field
        force = self.friction_force(y[..., : self.dim], grad[..., self.dim :])
        return field + torch.cat([torch.zeros_like(force), force], -1)


class CLNN(_CartesianBodies):
    """Constrained LNN on constrained point masses (module doc): L_θ = ½ẋᵀM_θẋ − V_θ(x)."""

    def lagrangian(self, x: Tensor, v: Tensor) -> Tensor:
        """L_θ(x, ẋ) (...,)."""
        if self.mass_kind == "body":
            kinetic = 0.5 * (v * v / self.inverse_mass()).sum(-1)
        else:
            kinetic = 0.5 * (v * (v @ self.mass_matrix())).sum(-1)
        return kinetic - self.potential(x)

    def acceleration(self, x: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """(ẍ, λ) of M_θ ẍ = −∇V_θ + F − DΦᵀλ, Φ̈ = 0, at positions x and velocities v (..., n)."""
        force = -self.potential_gradient(x)
        if self.friction_kind != "none":
            force = force + self.friction_force(x, v)
        return multiplier_acceleration(self.constraints, self.inverse_mass(), force, x, v)

    def vector_field(self, y: Tensor) -> Tensor:
        """[ẋ, ṗ] = [M_θ⁻¹p, M_θ ẍ] (..., 2n)."""
        x, p = y[..., : self.dim], y[..., self.dim :]
        inverse_mass = self.inverse_mass()
        v = inverse_mass_times(inverse_mass, p)
        a, _ = self.acceleration(x, v)
        if self.mass_kind == "body":
            return torch.cat([v, a / inverse_mass], -1)
        return torch.cat([v, a @ self.mass_matrix()], -1)
