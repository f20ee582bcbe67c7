"""Constrained mechanics in Cartesian coordinates (Finzi, Wang & Wilson 2020).

States z = [x, p]: x ∈ Rⁿ the Cartesian positions of N point masses in ``spatial`` dimensions,
body-major (n = N·spatial: x₁, y₁, x₂, y₂, …), p ∈ Rⁿ their momenta, p = M ẋ with a constant
diagonal mass matrix M (one mass per body, repeated per coordinate). Holonomic constraints
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

``chain_pendulum(links)``: N bodies in the plane, body 1 tethered to the origin, body i linked to
body i−1, gravity g along −y: H = Σ |p_i|²/(2 m_i) + g Σ m_i y_i. Masses and lengths are the
reference code's: ``numpy.random.RandomState(seed)`` draws N masses then N lengths from
U(0.6, 1.4), assigned from the last draw backwards (body 1 gets the last mass, the tether the last
length). Initial conditions as the reference's: angles and angular velocities from N(0, 1) mapped
to Cartesian, positions + 0.2·N(0, 1), velocities 3(0.5 v + 0.4·N(0, 1)), then Newton's method
(minimum-norm steps) back onto Φ = 0, Φ̇ = 0.

``chain_pendulum_angles(links)``: the same bodies in angle coordinates: θ_i the angle of link i
from the downward vertical (x_i = x_{i−1} + l_i (sin θ_i, −cos θ_i)), p_θ = M(θ) θ̇ with
M(θ)_ij = c_ij l_i l_j cos(θ_i − θ_j), c_ij = Σ_{k ≥ max(i,j)} m_k; H = ½ p_θᵀ M(θ)⁻¹ p_θ
− g Σ_i c_ii l_i cos θ_i. Its sampler is the Cartesian one mapped to angles (``to_angles``), so a
file of either system of one seed holds the same motion.

``coupled_pendulum(bobs)``: the reference's 3-D CoupledPendulum (``spatial`` = 3): N spherical
pendulums, bob i tethered to the anchor (i, 0, 0) by a rod of length 1, gravity along −z,
neighbours coupled by springs k (rest length 1): H = Σ |p_i|²/(2 m_i) + g Σ m_i z_i
+ Σ ½k(|x_{i+1} − x_i| − 1)²; initial states from spherical angles (``coupled_initial_states``).
No angle-coordinate version is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from hnnsym.errors import ConvergenceError, DataError
from hnnsym.ode.integrators.rattle import constraint_jacobian
from hnnsym.physics.systems import SYSTEMS, System, get_system

GRAVITY = 9.81
CONSTRAINT_TOL = 1e-8  # |Φ| and |Φ̇| allowed along a stored ground-truth trajectory


# ---- constraints and the projection ----------------------------------------------------------


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


def constraint_gradient(
    constraints: DistanceConstraints, x: Tensor, p: Tensor, inverse_mass: Tensor
) -> Tensor:
    """G = ∇_z Ψ (..., 2n, 2m) for Ψ = [Φ(x), Φ̇(x, M⁻¹p)], ``inverse_mass`` the diagonal of M⁻¹
    (n,): columns [DΦᵀ; 0] and [(∂Φ̇/∂x)ᵀ; M⁻¹DΦᵀ]."""
    D = constraints.jacobian(x)  # (..., m, n)
    Dv = constraints.velocity_jacobian(p * inverse_mass)
    top = torch.cat([D, Dv], -2)  # (..., 2m, n): ∂Ψ/∂x
    bottom = torch.cat([torch.zeros_like(D), D * inverse_mass], -2)  # ∂Ψ/∂p
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

    ``inverse_mass`` the diagonal of a constant M⁻¹ (n,), ``force`` f (..., n), positions x and
    velocities v (..., n). The (n+m) saddle system is solved by its Schur complement
    S = DΦ M⁻¹ DΦᵀ (m × m, positive definite for independent constraints):
    S λ = DΦ M⁻¹ f + (d/dt DΦ) v, ẍ = M⁻¹(f − DΦᵀλ); d/dt DΦ = DΦ(v) without anchors
    (``velocity_jacobian``), as DΦ is linear in x. Returns ẍ (..., n), λ (..., m)."""
    D = constraints.jacobian(x)  # (..., m, n)
    MinvDt = (D * inverse_mass).transpose(-1, -2)  # (..., n, m)
    free = force * inverse_mass
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
    phidot = constraints.velocity(x, p * inverse_mass.to(states)).abs().max()
    return float(phi), float(phidot)


# ---- the chain pendulum ---------------------------------------------------------------------


def chain_parameters(links: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """(masses, lengths) of body / link 1..N as the reference code draws them: N masses then N
    lengths from U(0.6, 1.4) by ``numpy.random.RandomState(seed)``, popped from the end."""
    rng = np.random.RandomState(seed)
    ms = [0.6 + 0.8 * rng.rand() for _ in range(links)]
    ls = [0.6 + 0.8 * rng.rand() for _ in range(links)]
    return ms[::-1], ls[::-1]


def chain_constraints(links: int, lengths: Sequence[float] | None = None) -> DistanceConstraints:
    """Body 0 tethered to the origin, body i linked to body i−1 (planar)."""
    return DistanceConstraints(
        links, 2, [(i, i - 1) for i in range(1, links)], [(0, (0.0, 0.0))], lengths
    )


def angle_mass_matrix(theta: Tensor, masses: Tensor, lengths: Tensor) -> Tensor:
    """M(θ) (..., N, N) = c_ij l_i l_j cos(θ_i − θ_j), c_ij = Σ_{k ≥ max(i, j)} m_k."""
    tail = masses.flip(0).cumsum(0).flip(0)  # Σ_{k>=i} m_k
    idx = torch.arange(len(masses), device=theta.device)
    c = tail[torch.maximum(idx[:, None], idx[None, :])]
    return (
        c
        * lengths[:, None]
        * lengths[None, :]
        * torch.cos(theta[..., :, None] - theta[..., None, :])
    )


def to_angles(states: Tensor, masses: Tensor, lengths: Tensor) -> Tensor:
    """Cartesian chain states [x, p] (..., 4N) on the manifold -> [θ, p_θ] (..., 2N)
    (θ in (−π, π]; unwrap along time where needed)."""
    N = len(masses)
    x = states[..., : 2 * N].reshape(*states.shape[:-1], N, 2)
    v = states[..., 2 * N :].reshape(*states.shape[:-1], N, 2) / masses[:, None]
    r = torch.cat([x[..., :1, :], x[..., 1:, :] - x[..., :-1, :]], -2)
    u = torch.cat([v[..., :1, :], v[..., 1:, :] - v[..., :-1, :]], -2)
    theta = torch.atan2(r[..., 0], -r[..., 1])
    omega = (r[..., 0] * u[..., 1] - r[..., 1] * u[..., 0]) / (r**2).sum(-1)
    p_theta = (angle_mass_matrix(theta, masses, lengths) @ omega[..., None])[..., 0]
    return torch.cat([theta, p_theta], -1)


def from_angles(angles: Tensor, masses: Tensor, lengths: Tensor) -> Tensor:
    """[θ, p_θ] (..., 2N) -> Cartesian [x, p] (..., 4N)."""
    N = len(masses)
    theta, p_theta = angles[..., :N], angles[..., N:]
    omega = torch.linalg.solve(angle_mass_matrix(theta, masses, lengths), p_theta[..., None])[
        ..., 0
    ]
    s, c = torch.sin(theta), torch.cos(theta)
    x = torch.stack([lengths * s, -lengths * c], -1).cumsum(-2)
    v = torch.stack([lengths * omega * c, lengths * omega * s], -1).cumsum(-2)
    p = v * masses[:, None]
    return torch.cat([x.flatten(-2), p.flatten(-2)], -1)


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
    ``position_constraints(x) -> (..., m)`` and ``mass_matrix() -> (n, n)`` (the interface of
    ``ConstrainedSystem``, CHNN and the RATTLE integrator)."""
    return callable(getattr(H, "position_constraints", None)) and callable(
        getattr(H, "mass_matrix", None)
    )


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


def chain_initial_states(
    n: int,
    generator: torch.Generator,
    masses: Tensor,
    lengths: Tensor,
    constraints: DistanceConstraints,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """n Cartesian states (n, 4N) on the manifold by the reference recipe (module doc); a draw
    whose Newton projection fails is replaced by the next draw of ``generator``."""
    N = len(masses)
    out: list[Tensor] = []
    have = 0
    for _ in range(100):
        k = n - have
        angles = torch.randn((k, 2, N), generator=generator, dtype=torch.float64)
        cart = _angles_velocities_to_cartesian(angles[:, 0], angles[:, 1], lengths)
        x = cart[0] + 0.2 * torch.randn((k, 2 * N), generator=generator, dtype=torch.float64)
        v = 3 * (0.5 * cart[1] + 0.4 * torch.randn((k, 2 * N), generator=generator,
                                                      dtype=torch.float64))  # fmt: skip
        x, v, ok = project_onto_manifold(constraints, x, v)
        p = v * masses.repeat_interleave(2)
        out.append(torch.cat([x, p], -1)[ok])
        have += int(ok.sum())
        if have >= n:
            return torch.cat(out)[:n].to(dtype)
    raise ConvergenceError("the Newton projection of the initial conditions keeps failing")


def _angles_velocities_to_cartesian(
    theta: Tensor, omega: Tensor, lengths: Tensor
) -> tuple[Tensor, Tensor]:
    """(x, v) (B, 2N) of angles θ and angular velocities ω (B, N)."""
    s, c = torch.sin(theta), torch.cos(theta)
    x = torch.stack([lengths * s, -lengths * c], -1).cumsum(-2)
    v = torch.stack([lengths * omega * c, lengths * omega * s], -1).cumsum(-2)
    return x.flatten(-2), v.flatten(-2)


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

    def constraint_violation(self, states: Tensor) -> tuple[float, float]:
        """(max |Φ|, max |Φ̇|) over states (..., 2n)."""
        return constraint_violation(self.constraints, self.inverse_mass, states)


def _count(value: float, name: str) -> int:
    """A whole number >= 1 (a config's float too); ValueError naming ``name`` otherwise."""
    try:
        ok = not isinstance(value, bool) and math.isfinite(value) and value >= 1
    except TypeError:
        ok = False
    if not ok or int(value) != value:
        raise ValueError(f"{name} must be a whole number >= 1, got {value}")
    return int(value)


def _parameter_seed(value: float) -> int:
    """A whole number >= 0 (numpy RandomState's seed of the drawn masses and lengths)."""
    if int(value) != value or value < 0:
        raise ValueError(f"parameter_seed must be a whole number >= 0, got {value}")
    return int(value)


def _links(links: float) -> int:
    return _count(links, "links")


def _per_body(
    name: str, given: Sequence[float] | None, default: list[float], N: int
) -> list[float]:
    """``given`` (N positive finite numbers) or ``default``; ValueError otherwise."""
    values = default if given is None else [float(v) for v in given]
    if len(values) != N or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name} must be {N} positive numbers, got {given}")
    return values


def _chain(links: float, parameter_seed: float, masses: Sequence[float] | None,
           lengths: Sequence[float] | None) -> tuple[int, list[float], list[float]]:  # fmt: skip
    """(N, masses, lengths): drawn from ``parameter_seed``, or as given (each N positive)."""
    N = _links(links)
    drawn = chain_parameters(N, _parameter_seed(parameter_seed))
    return N, _per_body("masses", masses, drawn[0], N), _per_body("lengths", lengths, drawn[1], N)


def chain_pendulum(
    links: int = 3,
    parameter_seed: int = 0,
    g: float = GRAVITY,
    masses: Sequence[float] | None = None,
    lengths: Sequence[float] | None = None,
) -> ConstrainedSystem:
    """The N-link chain pendulum in Cartesian coordinates (module doc); d = 2N. ``masses`` and
    ``lengths`` (body / link 1..N) default to the reference's draws from ``parameter_seed``."""
    N, masses, lengths = _chain(links, parameter_seed, masses, lengths)
    m = torch.tensor(masses, dtype=torch.float64)
    l_ = torch.tensor(lengths, dtype=torch.float64)
    constraints = chain_constraints(N, lengths)
    inverse_mass = (1 / m).repeat_interleave(2)
    gravity_grad = torch.stack([torch.zeros_like(m), g * m], -1).flatten()  # ∇V, constant

    def H(y: Tensor) -> Tensor:
        x, p = y[..., : 2 * N], y[..., 2 * N :]
        return 0.5 * (p**2 * inverse_mass.to(y)).sum(-1) + (x * gravity_grad.to(y)).sum(-1)

    def gradient(y: Tensor) -> Tensor:
        p = y[..., 2 * N :]
        return torch.cat([gravity_grad.to(y).expand_as(p), p * inverse_mass.to(y)], -1)

    def sampler(n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        return chain_initial_states(n, generator, m, l_, constraints, dtype)

    reach = float(sum(lengths))
    speed = (10.0 + 4.0 * N) * float(max(masses))  # a box for grids: wider than any draw seen
    box = ((-reach, reach),) * (2 * N) + ((-speed, speed),) * (2 * N)
    return ConstrainedSystem(
        "chain_pendulum", 2 * N, H, box,
        {"links": N, "parameter_seed": int(parameter_seed), "g": float(g),
         "masses": list(masses), "lengths": list(lengths)},
        description=f"{N}-link chain pendulum in Cartesian coordinates, g = {g} along -y",
        sampler=sampler,
        vector_field=ProjectedField(constraints, inverse_mass, gradient),
        constraints=constraints, masses=tuple(masses),
    )  # fmt: skip


def chain_pendulum_angles(
    links: int = 3,
    parameter_seed: int = 0,
    g: float = GRAVITY,
    masses: Sequence[float] | None = None,
    lengths: Sequence[float] | None = None,
) -> System:
    """The same chain in angle coordinates (θ, p_θ), d = N (module doc)."""
    N, masses, lengths = _chain(links, parameter_seed, masses, lengths)
    m = torch.tensor(masses, dtype=torch.float64)
    l_ = torch.tensor(lengths, dtype=torch.float64)
    cart = chain_constraints(N, lengths)
    tail = m.flip(0).cumsum(0).flip(0)

    def H(y: Tensor) -> Tensor:
        theta, p = y[..., :N], y[..., N:]
        M = angle_mass_matrix(theta, m.to(y), l_.to(y))
        v = torch.linalg.solve(M, p[..., None])[..., 0]
        return 0.5 * (p * v).sum(-1) - g * (tail.to(y) * l_.to(y) * torch.cos(theta)).sum(-1)

    def sampler(n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        states = chain_initial_states(n, generator, m, l_, cart, torch.float64)
        return to_angles(states, m, l_).to(dtype)

    box = ((-math.pi, math.pi),) * N + ((-20.0 * N * N, 20.0 * N * N),) * N
    return System(
        "chain_pendulum_angles", N, H, box,
        {"links": N, "parameter_seed": int(parameter_seed), "g": float(g),
         "masses": list(masses), "lengths": list(lengths)},
        description=f"{N}-link chain pendulum in angle coordinates (theta, p_theta)",
        sampler=sampler,
    )  # fmt: skip


# ---- the coupled pendulum (3-D) ------------------------------------------------------------


def spherical_to_cartesian(angles: Tensor, rates: Tensor) -> tuple[Tensor, Tensor]:
    """Unit vectors u (..., N, 3) and their rates u̇ of spherical angles (φ, θ) per bob, given
    interleaved as angles (..., 2N) = [φ_1, θ_1, φ_2, ...] with rates likewise: the reference's
    ``MagnetPendulum.body2globalCoords`` (ZXZ Euler angles (φ + π/2, θ, 0), the frame's ẑ rotated
    by −90° about y): u = (−cos θ, sin θ sin φ, sin θ cos φ), u̇ = u_φ φ̇ + u_θ θ̇. θ = π/2,
    φ = π is straight down (−z); the angles are singular where sin θ = 0 (u = ∓x̂)."""
    phi, theta = angles[..., 0::2], angles[..., 1::2]
    dphi, dtheta = rates[..., 0::2], rates[..., 1::2]
    sp, cp, st, ct = torch.sin(phi), torch.cos(phi), torch.sin(theta), torch.cos(theta)
    u = torch.stack([-ct, st * sp, st * cp], -1)
    u_phi = torch.stack([torch.zeros_like(st), st * cp, -st * sp], -1)
    u_theta = torch.stack([st, ct * sp, ct * cp], -1)
    return u, u_phi * dphi[..., None] + u_theta * dtheta[..., None]


def coupled_initial_states(
    n: int,
    generator: torch.Generator,
    masses: Tensor,
    length: float,
    anchors: Tensor,
    constraints: DistanceConstraints,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """n states (n, 6N) by the reference's ``CoupledPendulum.sample_initial_conditions``: per
    draw 0.3·N(0, 1) of shape (2, 2N) (angles, then angular rates, each [φ_1, θ_1, ...]), φ + π and
    θ + π/2 (hanging near −z), mapped by ``spherical_to_cartesian`` (x = a_i + l u, v = l u̇),
    then Newton onto Φ = 0, Φ̇ = 0 (``project_onto_manifold``; on it already, to rounding) and
    p = m v. A draw that does not project is replaced by the next draw of ``generator``."""
    N = len(masses)
    out: list[Tensor] = []
    have = 0
    for _ in range(100):
        k = n - have
        draw = 0.3 * torch.randn((k, 2, 2 * N), generator=generator, dtype=torch.float64)
        draw[:, 0, 0::2] += math.pi
        draw[:, 0, 1::2] += math.pi / 2
        u, du = spherical_to_cartesian(draw[:, 0], draw[:, 1])
        x = (anchors + length * u).flatten(-2)
        v = (length * du).flatten(-2)
        x, v, ok = project_onto_manifold(constraints, x, v)
        out.append(torch.cat([x, v * masses.repeat_interleave(3)], -1)[ok])
        have += int(ok.sum())
        if have >= n:
            return torch.cat(out)[:n].to(dtype)
    raise ConvergenceError("the Newton projection of the initial conditions keeps failing")


def coupled_pendulum(
    bobs: int = 2,
    g: float = GRAVITY,
    k: float = 10.0,
    length: float = 1.0,
    masses: Sequence[float] | None = None,
    parameter_seed: int | None = None,
) -> ConstrainedSystem:
    """The reference's ``CoupledPendulum``: N = ``bobs`` spherical pendulums in 3-D, bob i
    tethered to the fixed anchor a_i = (i, 0, 0) by a rod of ``length`` l, gravity g along −z,
    adjacent bobs coupled by springs of stiffness k and rest length |a_{i+1} − a_i| = 1:

        H = Σ |p_i|²/(2 m_i) + g Σ m_i z_i + Σ_i ½ k (|x_{i+1} − x_i| − 1)²,   d = 3N.

    Masses: ``masses`` if given, else drawn from U(0.6, 1.4) by numpy RandomState
    (``parameter_seed``) as ``chain_parameters`` (the reference's m=None: seed 0, popped from the
    end), else 1 (the reference's default m=1). Initial states: ``coupled_initial_states``."""
    N = _count(bobs, "bobs")
    for name, value in (("g", g), ("k", k), ("length", length)):
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number, got {value}")
    if length <= 0 or k < 0:
        raise ValueError(f"need length > 0 and k >= 0, got length={length}, k={k}")
    params: dict = {"bobs": N, "g": float(g), "k": float(k), "length": float(length)}
    default = [1.0] * N
    if parameter_seed is not None:
        params["parameter_seed"] = _parameter_seed(parameter_seed)
        default = chain_parameters(N, params["parameter_seed"])[0]
    masses = _per_body("masses", masses, default, N)
    params["masses"] = list(masses)
    m = torch.tensor(masses, dtype=torch.float64)
    anchors = torch.zeros(N, 3, dtype=torch.float64)
    anchors[:, 0] = torch.arange(N, dtype=torch.float64)
    rest = (anchors[1:] - anchors[:-1]).norm(dim=-1)  # (N−1,): the anchors' distances
    constraints = DistanceConstraints(N, 3, [], [(i, anchors[i].tolist()) for i in range(N)],
                                      [float(length)] * N)  # fmt: skip
    inverse_mass = (1 / m).repeat_interleave(3)
    gravity_grad = torch.stack([torch.zeros_like(m), torch.zeros_like(m), g * m], -1).flatten()
    stiffness = float(k)

    def springs(x: Tensor) -> tuple[Tensor, Tensor]:
        """(d, |d|) of the N−1 springs, d_i = x_{i+1} − x_i (..., N−1, 3)."""
        bodies = x.reshape(*x.shape[:-1], N, 3)
        d = bodies[..., 1:, :] - bodies[..., :-1, :]
        return d, d.norm(dim=-1)

    def H(y: Tensor) -> Tensor:
        x, p = y[..., : 3 * N], y[..., 3 * N :]
        _, dist = springs(x)
        spring = 0.5 * stiffness * ((dist - rest.to(y)) ** 2).sum(-1)
        return (0.5 * (p**2 * inverse_mass.to(y)).sum(-1) + (x * gravity_grad.to(y)).sum(-1)
                + spring)  # fmt: skip

    def gradient(y: Tensor) -> Tensor:
        """∇H = [g m ẑ + spring forces, M⁻¹p] in closed form."""
        x, p = y[..., : 3 * N], y[..., 3 * N :]
        d, dist = springs(x)
        f = stiffness * ((dist - rest.to(y)) / dist)[..., None] * d  # ∂V_s/∂x_{i+1}, (.., N−1, 3)
        zero = f.new_zeros(*f.shape[:-2], 1, 3)
        grad_x = torch.cat([zero, f], -2) - torch.cat([f, zero], -2)  # f_{i−1} − f_i per bob
        return torch.cat([grad_x.flatten(-2) + gravity_grad.to(y), p * inverse_mass.to(y)], -1)

    def sampler(n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        return coupled_initial_states(n, generator, m, float(length), anchors, constraints, dtype)

    reach = float(length)
    speed = 10.0 * float(max(masses))  # a box for grids (the evaluation of this system has none)
    box = [b for a in anchors[:, 0].tolist() for b in ((a - reach, a + reach), (-reach, reach),
                                                        (-reach, reach))]  # fmt: skip
    box += [(-speed, speed)] * (3 * N)
    return ConstrainedSystem(
        "coupled_pendulum", 3 * N, H, tuple(box), params,
        description=f"{N} spherical pendulums in 3-D coupled by springs (k = {k}), g = {g} "
                    f"along -z, Cartesian coordinates",
        sampler=sampler,
        vector_field=ProjectedField(constraints, inverse_mass, gradient),
        constraints=constraints, masses=tuple(masses), spatial=3,
    )  # fmt: skip


SYSTEMS.update(
    chain_pendulum=chain_pendulum,
    chain_pendulum_angles=chain_pendulum_angles,
    coupled_pendulum=coupled_pendulum,
)

# Systems in Cartesian coordinates with holonomic constraints -> the same motion in angle
# coordinates, where one is built (None: not built).
CARTESIAN_SYSTEMS: dict[str, str | None] = {
    "chain_pendulum": "chain_pendulum_angles",
    "coupled_pendulum": None,
}
# Every constrained system, in Cartesian coordinates or (where built) in angles.
CONSTRAINED_SYSTEMS = frozenset({*CARTESIAN_SYSTEMS, *CARTESIAN_SYSTEMS.values()} - {None})


def constrained_system_of(
    name: str, dim: int, params: Mapping | None = None, parameter_seed: int | None = None
) -> ConstrainedSystem:
    """The registered Cartesian constrained system ``name`` (``CARTESIAN_SYSTEMS``) whose states
    have ``dim`` degrees of freedom, for a model that takes its constraints (tethers, links,
    lengths, spatial dimension) from it: built from ``params`` (a config's ``system.params``);
    without them (a model config or checkpoint of the planar chain from before ``system_params``
    was passed) the chain of dim/2 links drawn from ``parameter_seed`` (default 0).
    ValueError (one line) for another system or a dim the system does not have."""
    if name not in CARTESIAN_SYSTEMS:
        raise ValueError(f"system {name!r} is not one of {sorted(CARTESIAN_SYSTEMS)}")
    if params is None:
        if name != "chain_pendulum" or dim % 2:
            raise ValueError(
                f"without system_params only the planar chain_pendulum (dim a multiple of 2) is "
                f"known, got system {name!r} and dim {dim}"
            )
        params = {
            "links": dim // 2,
            "parameter_seed": 0 if parameter_seed is None else parameter_seed,
        }
    system = get_system(name, **dict(params))
    if system.dim != dim:
        raise ValueError(
            f"system {name} with {dict(params)} has states of dim {system.dim} in Cartesian "
            f"coordinates, not {dim}"
        )
    return system
