"""Holonomic constraints in Cartesian coordinates and the dynamics under them (Finzi, Wang &
Wilson 2020): their geometry, the projection of states onto the manifold, ``ConstrainedSystem``.

States z = [x, p]: x ∈ Rⁿ the Cartesian positions of N point masses in ``spatial`` dimensions,
body-major (n = N·spatial: x₁, y₁, x₂, y₂, …), p ∈ Rⁿ their momenta, p = M ẋ with a constant
symmetric positive definite mass matrix M: diagonal (one mass per body, repeated per coordinate;
the functions below then take the diagonal of M⁻¹, (n,)) or full (an extended body such as a rod,
whose kinetic energy is a non-diagonal quadratic form in its end points' velocities; they take
M⁻¹ itself, (n, n): ``inverse_mass_times``). Holonomic constraints
Φ(x) = 0 (m of them) are rigid distances, ``DistanceConstraints``: |x_i − x_j|² − l² for a link
and |x_i − a|² − l² for a tether to the fixed point a.

The constrained dynamics (Finzi et al., Eq. 6) keep both Φ = 0 and its time derivative
Φ̇ = DΦ(x) M⁻¹ p = 0: with Ψ(z) = [Φ(x), Φ̇(x, p)] (2m) and G = ∇Ψ (2n × 2m),

    ż = P(z) J∇H(z),   P = I − J G (Gᵀ J G)⁻¹ Gᵀ,   J w = [w_p, −w_x]

(``project``). P² = P and Gᵀ P = 0, so Ψ is a first integral of this field everywhere, not only
on the manifold; for distance constraints Ψ is quadratic in z, so a Gauss–Legendre method (which
keeps quadratic invariants) keeps Φ and Φ̇ at their initial values to rounding and solver
tolerance. The projection only needs DΦ, which for distances does not depend on the lengths l.

The Lagrange-multiplier form (CLNN's, ``multiplier_acceleration``): M ẍ = f − DΦᵀλ with λ from
Φ̈ = DΦ ẍ + (d/dt DΦ) ẋ = 0; on Φ̇ = 0 it is the same field as the projection's.

Friction in the tangent space (``tangent_projector``, ``DistanceConstraints.angular_velocity_map``):
a force F = −P_Mᵀ K P_M ẋ with K positive semi-definite and P_M = I − M⁻¹DΦᵀ(DΦ M⁻¹DΦᵀ)⁻¹DΦ the
M-orthogonal projector onto the tangent space {DΦ v = 0} has DΦ M⁻¹ F = 0: it changes neither Φ̇
nor the multipliers, so a field or a step that keeps Φ̇ = 0 without it keeps it with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from hnnsym.errors import DataError
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.integrators.rattle import constraint_jacobian
from hnnsym.physics.systems import System

GRAVITY = 9.81
CONSTRAINT_TOL = 1e-8  # |Φ| and |Φ̇| allowed along a stored ground-truth trajectory


class DistanceConstraints:
    """Rigid distances between point masses: links (i, j) and tethers (i, anchor a).

    Constraint k is |r_k|² − l_k² with r_k = Σ_b E_kb x_b − a_k: E the (m, N) incidence matrix
    (+1 at i, −1 at j for a link; +1 at i for a tether) and a_k the anchor (0 for a link).
    ``lengths`` (m,) are needed only for Φ itself; DΦ, Φ̇ and the projection do not use them.
    """

    def __init__(
        self,
        bodies: int,
        spatial: int,
        links: Sequence[tuple[int, int]],
        tethers: Sequence[tuple[int, Sequence[float]]] = (),
        lengths: Sequence[float] | None = None,
    ):
        self.bodies, self.spatial = int(bodies), int(spatial)
        m = len(tethers) + len(links)
        incidence = torch.zeros(m, bodies, dtype=torch.float64)
        anchors = torch.zeros(m, spatial, dtype=torch.float64)
        for k, (i, a) in enumerate(tethers):  # tethers first: the chain's first constraint
            incidence[k, i] = 1.0
            anchors[k] = torch.as_tensor(a, dtype=torch.float64)
        for k, (i, j) in enumerate(links, start=len(tethers)):
            incidence[k, i], incidence[k, j] = 1.0, -1.0
        self.incidence, self.anchors = incidence, anchors
        self.lengths = None if lengths is None else torch.as_tensor(lengths, dtype=torch.float64)
        if self.lengths is not None and self.lengths.shape != (m,):
            raise ValueError(f"need {m} lengths, got {tuple(self.lengths.shape)}")

    @property
    def count(self) -> int:
        """m, the number of constraints."""
        return self.incidence.shape[0]

    @property
    def n(self) -> int:
        """n = N · spatial, the Cartesian position dimension."""
        return self.bodies * self.spatial

    def _bodies(self, x: Tensor) -> Tensor:
        return x.reshape(*x.shape[:-1], self.bodies, self.spatial)

    def relative(self, x: Tensor, anchored: bool = True) -> Tensor:
        """r (..., m, spatial): E x − a (without a: E x, for velocities)."""
        E = self.incidence.to(x)
        r = torch.einsum("kb,...bs->...ks", E, self._bodies(x))
        return r - self.anchors.to(x) if anchored else r

    def phi(self, x: Tensor) -> Tensor:
        """Φ(x) (..., m) = |r_k|² − l_k²."""
        if self.lengths is None:
            raise ValueError("these constraints have no lengths: Φ itself is undefined")
        return (self.relative(x) ** 2).sum(-1) - self.lengths.to(x) ** 2

    def _outer(self, r: Tensor) -> Tensor:
        """2 E_kb r_k as (..., m, n)."""
        E = self.incidence.to(r)
        out = 2 * E[:, :, None] * r[..., :, None, :]  # (..., m, N, spatial)
        return out.reshape(*r.shape[:-2], self.count, self.n)

    def jacobian(self, x: Tensor) -> Tensor:
        """DΦ(x) (..., m, n)."""
        return self._outer(self.relative(x))

    def velocity(self, x: Tensor, v: Tensor) -> Tensor:
        """Φ̇ = DΦ(x) v (..., m)."""
        return 2 * (self.relative(x) * self.relative(v, anchored=False)).sum(-1)

    def velocity_jacobian(self, v: Tensor) -> Tensor:
        """∂Φ̇/∂x at velocity v (..., m, n) (DΦ is linear in x: the Jacobian of E v)."""
        return self._outer(self.relative(v, anchored=False))

    def angular_velocity_map(self, x: Tensor) -> Tensor:
        """W(x) with ω = W ẋ the angular velocities ω_k = r_k × ṙ_k / |r_k|² of the m links and
        tethers (r_k = ``relative``): (..., m, n) in the plane (ω_k a scalar), (..., 3m, n) in
        3-D (ω_k a vector, link by link). For a velocity tangent to the manifold this
        is the link's rotation rate; no direction of space is singled out."""
        r = self.relative(x)  # (..., m, s)
        E = self.incidence.to(x)
        scaled = r / (r * r).sum(-1, keepdim=True)
        if self.spatial == 2:  # ω = r × ṙ / |r|² = (−r_y, r_x) · ṙ / |r|²: rows (..., m, 1, s)
            rows = torch.stack([-scaled[..., 1], scaled[..., 0]], -1)[..., None, :]
        elif self.spatial == 3:  # ω = [r]ₓ ṙ / |r|²
            a, b, c = scaled.unbind(-1)
            zero = torch.zeros_like(a)
            rows = torch.stack([torch.stack([zero, -c, b], -1), torch.stack([c, zero, -a], -1),
                                torch.stack([-b, a, zero], -1)], -2)  # fmt: skip
        else:
            raise ValueError(
                f"angular velocities need 2 or 3 spatial dimensions, not {self.spatial}"
            )
        out = E[:, None, :, None] * rows[..., :, :, None, :]  # (..., m, k, N, s)
        return out.reshape(*x.shape[:-1], self.count * rows.shape[-2], self.n)


def inverse_mass_times(inverse_mass: Tensor, w: Tensor) -> Tensor:
    """M⁻¹ applied along the last axis of w (..., n) (rows of a (..., m, n) matrix: D M⁻¹), for
    ``inverse_mass`` the diagonal of a diagonal M⁻¹ (n,) or a full symmetric M⁻¹ (n, n)."""
    return w * inverse_mass if inverse_mass.dim() == 1 else w @ inverse_mass


def tangent_projector(D: Tensor, inverse_mass: Tensor) -> Tensor:
    """P_M = I − M⁻¹DΦᵀ(DΦ M⁻¹DΦᵀ)⁻¹DΦ (..., n, n) for DΦ = ``D`` (..., m, n): the projector onto
    the tangent space {DΦ v = 0} orthogonal in the M inner product (P_Mᵀ M = M P_M), so
    DΦ M⁻¹ P_Mᵀ = 0. ``inverse_mass`` as in ``inverse_mass_times``."""
    DMinv = inverse_mass_times(inverse_mass, D)  # (..., m, n)
    eye = torch.eye(D.shape[-1], dtype=D.dtype, device=D.device)
    return eye - DMinv.mT @ torch.linalg.solve(DMinv @ D.mT, D)


def constraint_gradient(
    constraints: DistanceConstraints, x: Tensor, p: Tensor, inverse_mass: Tensor
) -> Tensor:
    """G = ∇_z Ψ (..., 2n, 2m) for Ψ = [Φ(x), Φ̇(x, M⁻¹p)], ``inverse_mass`` the diagonal of M⁻¹
    (n,) or M⁻¹ (n, n): columns [DΦᵀ; 0] and [(∂Φ̇/∂x)ᵀ; M⁻¹DΦᵀ]."""
    D = constraints.jacobian(x)  # (..., m, n)
    Dv = constraints.velocity_jacobian(inverse_mass_times(inverse_mass, p))
    top = torch.cat([D, Dv], -2)  # (..., 2m, n): ∂Ψ/∂x
    bottom = torch.cat([torch.zeros_like(D), inverse_mass_times(inverse_mass, D)], -2)  # ∂Ψ/∂p
    return torch.cat([top, bottom], -1).transpose(-1, -2)


def apply_J(w: Tensor, dim: int = -1) -> Tensor:
    """J w = [w_p, −w_x] along ``dim`` (the kernel's J⁻¹∇H layout)."""
    x, p = w.chunk(2, dim=dim)
    return torch.cat([p, -x], dim=dim)


def project(G: Tensor, w: Tensor) -> Tensor:
    """P w = w − J G (Gᵀ J G)⁻¹ Gᵀ w for G (..., 2n, 2m) and w (..., 2n)."""
    JG = apply_J(G, dim=-2)
    S = G.transpose(-1, -2) @ JG  # (..., 2m, 2m), antisymmetric
    X = torch.linalg.solve(S, (G.transpose(-1, -2) @ w[..., None]))
    return w - (JG @ X)[..., 0]


def projection_matrix(G: Tensor) -> Tensor:
    """P (..., 2n, 2n) of ``project``."""
    eye = torch.eye(G.shape[-2], dtype=G.dtype, device=G.device)
    return project(G[..., None, :, :], eye.expand(*G.shape[:-2], -1, -1)).transpose(-1, -2)


def constrained_vector_field(
    constraints: DistanceConstraints, inverse_mass: Tensor, grad: Tensor, y: Tensor
) -> Tensor:
    """ż = P(z) J∇H for ∇H = ``grad`` (..., 2n) at states y (..., 2n)."""
    n = constraints.n
    G = constraint_gradient(constraints, y[..., :n], y[..., n:], inverse_mass)
    return project(G, apply_J(grad))


def multiplier_acceleration(
    constraints: DistanceConstraints, inverse_mass: Tensor, force: Tensor, x: Tensor, v: Tensor
) -> tuple[Tensor, Tensor]:
    """(ẍ, λ) of M ẍ = f − DΦᵀλ with DΦ ẍ + (d/dt DΦ) ẋ = 0 (Lagrange multipliers; Φ̈ = 0).

    ``inverse_mass`` a constant M⁻¹ (``inverse_mass_times``), ``force`` f (..., n), positions x and
    velocities v (..., n). The (n+m) saddle system is solved by its Schur complement
    S = DΦ M⁻¹ DΦᵀ (m × m, positive definite for independent constraints):
    S λ = DΦ M⁻¹ f + (d/dt DΦ) v, ẍ = M⁻¹(f − DΦᵀλ); d/dt DΦ = DΦ(v) without anchors
    (``velocity_jacobian``), as DΦ is linear in x. Returns ẍ (..., n), λ (..., m)."""
    D = constraints.jacobian(x)  # (..., m, n)
    MinvDt = inverse_mass_times(inverse_mass, D).transpose(-1, -2)  # (..., n, m)
    free = inverse_mass_times(inverse_mass, force)
    rhs = D @ free[..., None] + constraints.velocity_jacobian(v) @ v[..., None]
    lam = torch.linalg.solve(D @ MinvDt, rhs)
    return free - (MinvDt @ lam)[..., 0], lam[..., 0]


def constraint_violation(
    constraints: DistanceConstraints, inverse_mass: Tensor, states: Tensor
) -> tuple[float, float]:
    """(max |Φ|, max |Φ̇|) over states (..., 2n)."""
    n = constraints.n
    x, p = states[..., :n], states[..., n:]
    phi = constraints.phi(x).abs().max()
    phidot = constraints.velocity(x, inverse_mass_times(inverse_mass.to(states), p)).abs().max()
    return float(phi), float(phidot)


def project_onto_manifold(
    constraints: DistanceConstraints, x: Tensor, v: Tensor, tol: float = 1e-13, max_iter: int = 100
) -> tuple[Tensor, Tensor, Tensor]:
    """Newton's method with minimum-norm steps on Ψ(x, v) = [Φ(x), DΦ(x) v] = 0 (velocities, not
    momenta, as the reference): (x, v, converged (B,)). Steps are clipped to half the RMS state
    size (the reference's safeguard)."""
    z = torch.cat([x, v], -1)
    n = constraints.n
    for _ in range(max_iter):
        xs, vs = z[..., :n], z[..., n:]
        psi = torch.cat([constraints.phi(xs), constraints.velocity(xs, vs)], -1)
        done = psi.abs().amax(-1) <= tol * (1 + z.abs().amax(-1))
        if bool(done.all()):
            break
        D = constraints.jacobian(xs)
        Gt = torch.cat(  # ∂Ψ/∂(x, v): (B, 2m, 2n)
            [torch.cat([D, torch.zeros_like(D)], -1),
             torch.cat([constraints.velocity_jacobian(vs), D], -1)], -2
        )  # fmt: skip
        step = -(
            Gt.transpose(-1, -2) @ torch.linalg.solve(Gt @ Gt.transpose(-1, -2), psi[..., None])
        )[..., 0]
        scale = (z**2).mean(-1, keepdim=True).sqrt() / 2
        step = torch.maximum(torch.minimum(step, scale), -scale)
        z = torch.where(done[..., None], z, z + step)
    xs, vs = z[..., :n], z[..., n:]
    psi = torch.cat([constraints.phi(xs), constraints.velocity(xs, vs)], -1)
    converged = torch.isfinite(psi).all(-1) & (psi.abs().amax(-1) <= tol * (1 + z.abs().amax(-1)))
    return xs, vs, converged


def is_constrained_model(H: object) -> bool:
    """True for a Hamiltonian in Cartesian coordinates with holonomic constraints: callable
    ``position_constraints(x) -> (..., m)`` and ``mass_matrix() -> (n, n)`` declared (the
    interface of ``ConstrainedSystem``, CHNN and the RATTLE integrator)."""
    return has(H, Capability.CONSTRAINTS) and has(H, Capability.MASS_MATRIX)


def project_state(
    H: object, z: Tensor, tol: float | None = None, max_iter: int = 50
) -> tuple[Tensor, Tensor]:
    """Project states z = [x, p] (B, 2n) onto the constraint manifold of a constrained H
    (``is_constrained_model``: Φ = ``position_constraints``, M = ``mass_matrix()``), so that
    Φ(x) = 0 and Φ̇ = DΦ(x) M⁻¹ p = 0 (the manifold RATTLE and the projected field start from):

      positions: Newton with minimum-norm steps x ← x − DΦᵀ(DΦ DΦᵀ)⁻¹Φ(x) (clipped to half the
                 RMS of x, as ``project_onto_manifold``), until |Φ| ≤ tol·(1 + max|x|)
                 (tol None: 64 ε of the dtype);
      momenta:   p ← p − DΦᵀμ, μ = (DΦ M⁻¹ DΦᵀ)⁻¹ DΦ M⁻¹ p at the projected x (RATTLE's
                 velocity-level correction: the M⁻¹-orthogonal projection onto DΦ M⁻¹ p = 0).

    Unlike ``project_onto_manifold`` (the reference's initial conditions: joint Newton in (x, v))
    it takes any Φ (DΦ by autograd) and the H's own mass, e.g. a learned one: the momenta stay
    differentiable with respect to M (the positions, a function of the data, are detached).
    On-manifold states are returned unchanged to rounding. Returns (z*, converged (B,))."""
    n = z.shape[-1] // 2
    g = H.position_constraints
    tol = 64 * torch.finfo(z.dtype).eps if tol is None else tol
    with torch.no_grad():
        x = z[:, :n].detach()
        for _ in range(max_iter):
            phi = g(x)
            done = phi.abs().amax(-1) <= tol * (1 + x.abs().amax(-1))
            if bool(done.all()):
                break
            D = constraint_jacobian(g, x, phi.shape[-1], create_graph=False)
            step = -(
                D.transpose(-1, -2) @ torch.linalg.solve(D @ D.transpose(-1, -2), phi[..., None])
            )
            scale = (x**2).mean(-1, keepdim=True).sqrt() / 2
            step = torch.maximum(torch.minimum(step[..., 0], scale), -scale)
            x = torch.where(done[..., None], x, x + step)
        phi = g(x)
        converged = torch.isfinite(phi).all(-1) & (
            phi.abs().amax(-1) <= tol * (1 + x.abs().amax(-1))
        )
    D = constraint_jacobian(g, x, phi.shape[-1], create_graph=False).to(z.dtype)
    M_inv = torch.linalg.inv(H.mass_matrix().to(z.dtype))
    p = z[:, n:]
    DMinv = D @ M_inv  # (B, m, n)
    mu = torch.linalg.solve(DMinv @ D.transpose(-1, -2), (DMinv @ p[..., None]))
    p = p - (D.transpose(-1, -2) @ mu)[..., 0]
    return torch.cat([x, p], -1), converged


def onto_manifold(H: object, z: Tensor) -> Tensor:
    """z (B, 2n) projected by ``project_state`` if H is a constrained model, else z itself: the
    start of every rollout of a model (training windows, evaluation), so that noisy or
    mass-inconsistent observed states lie on the model's manifold (RATTLE refuses others).
    DataError when some state cannot be projected."""
    if not is_constrained_model(H):
        return z
    out, ok = project_state(H, z)
    if not bool(ok.all()):
        bad = int((~ok).sum())
        raise DataError(
            f"{bad} of {z.shape[0]} initial states could not be projected onto the constraint "
            f"manifold Φ(x) = 0 of the model (Newton did not converge: non-finite or far-off "
            f"states)"
        )
    return out


class ProjectedField:
    """The vector field ż = P(z) J∇H of a system with closed-form ∇H (``gradient(y)``)."""

    def __init__(self, constraints: DistanceConstraints, inverse_mass: Tensor,
                 gradient: Callable[[Tensor], Tensor]):  # fmt: skip
        self.constraints, self.inverse_mass, self.gradient = constraints, inverse_mass, gradient

    def __call__(self, y: Tensor) -> Tensor:
        return constrained_vector_field(
            self.constraints, self.inverse_mass.to(y), self.gradient(y), y
        )


@dataclass(frozen=True)
class ConstrainedSystem(System):
    """A System in Cartesian coordinates with holonomic constraints: ``vector_field`` is the
    projected field P(z) J∇H (the kernel steps it in place of J∇H), ``position_constraints``
    Φ(x), ``mass_matrix`` the constant M (n, n) with T = pᵀM⁻¹p / 2."""

    vector_field: Callable[[Tensor], Tensor] | None = None
    constraints: DistanceConstraints | None = None
    masses: tuple[float, ...] = ()  # per body
    spatial: int = 2
    constraint_tol: float = CONSTRAINT_TOL  # generate refuses ground truth violating Φ or Φ̇ more

    @property
    def inverse_mass(self) -> Tensor:
        """diag(M⁻¹) (n,), float64."""
        m = torch.tensor(self.masses, dtype=torch.float64)
        return (1 / m).repeat_interleave(self.spatial)

    def position_constraints(self, x: Tensor) -> Tensor:
        """Φ(x) (..., m) for positions x (..., n)."""
        return self.constraints.phi(x)

    def position_constraints_jacobian(self, x: Tensor) -> Tensor:
        """DΦ(x) (..., m, n) in closed form (RATTLE uses it instead of autograd)."""
        return self.constraints.jacobian(x)

    def mass_matrix(self) -> Tensor:
        """M (n, n), float64: diag(m_1, m_1, m_2, m_2, ...)."""
        return torch.diag(1 / self.inverse_mass)

    @property
    def capabilities(self) -> frozenset[str]:
        return super().capabilities | {
            Capability.CONSTRAINTS,
            Capability.CONSTRAINT_JACOBIAN,
            Capability.MASS_MATRIX,
        }

    def constraint_violation(self, states: Tensor) -> tuple[float, float]:
        """(max |Φ|, max |Φ̇|) over states (..., 2n)."""
        return constraint_violation(self.constraints, self.inverse_mass, states)
