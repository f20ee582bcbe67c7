"""The constrained benchmark systems in Cartesian coordinates (``hnnsym.physics.constraints``),
with their parameters and initial-condition samplers; they register in
``hnnsym.physics.systems.SYSTEMS`` here, with the Cartesian ones' angle-coordinate counterparts.

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
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from hnnsym.errors import ConvergenceError
from hnnsym.physics.constraints import (
    GRAVITY,
    ConstrainedSystem,
    DistanceConstraints,
    ProjectedField,
    project_onto_manifold,
)
from hnnsym.physics.systems import SYSTEMS, System, get_system


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
