"""Analytic Hamiltonian systems: H(y) with y = [q, p], their sampling domains and evaluation grids.

Every system has ``dim`` = d degrees of freedom, so states are (B, 2d) tensors ordered
[q_1..q_d, p_1..p_d]. ``domain`` is a box (low, high) per coordinate; initial conditions are drawn
uniformly from it (rejecting states above ``energy_max`` where set) and the evaluation grid covers the
same box (with the same energy filter), as in Choudhary et al.. A system with ``radius`` = (r_min, r_max)
(d = 1) draws its initial conditions on that annulus of the (q, p) plane instead, radius and angle
uniform (the samplers of DGNet's mass–spring and pendulum, Aoshima et al.); its box is then
[−r_max, r_max]². For learning from positions, ``mass`` is the system's mass matrix (a multiple
of I: T = |p|²/(2·mass)) and ``potential(q)`` = H(q, 0), for separable systems.

Damping (``damping`` = γ ≥ 0 of pendulum, mass_spring, double_well): ż = (J⁻¹ − R)∇H with
R = γ·diag(0_d, I_d), i.e. q̇ = ∂H/∂p, ṗ = −∂H/∂q − γ ∂H/∂p (for the pendulum with m l² = 1,
q̈ = −(g/l) sin q − γ q̇), so dH/dt = −γ|∂H/∂p|² ≤ 0. Such a system carries that field as
``vector_field`` (``hnnsym.ode.dynamics.vector_field`` uses it); γ = 0 leaves it None and the system
exactly as before (params without ``damping``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from hnnsym.errors import UserError
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.dynamics import dissipative_field, hamiltonian_gradient
from hnnsym.ode.integrators.reversible import kinetic_part, potential_part

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class System:
    """A system with a known Hamiltonian: conservative, or damped when ``vector_field`` is set."""

    name: str
    dim: int
    hamiltonian: Callable[[Tensor], Tensor]
    domain: tuple[tuple[float, float], ...]
    params: dict = field(default_factory=dict)
    energy_max: float | None = None
    description: str = ""
    separable: bool = False  # H = T(p) + V(q): leapfrog / symplectic Euler run explicitly
    mass: float | None = None  # T = |p|^2 / (2 mass): the Lagrangian's mass matrix is mass * I
    radius: tuple[float, float] | None = None  # sample on this annulus of (q, p) (d = 1)
    sampler: Callable[[int, torch.Generator, torch.dtype], Tensor] | None = None  # own draws
    known: bool = True  # False: measured data, no true H (``measured``)
    vector_field: Callable[[Tensor], Tensor] | None = None  # (J⁻¹ − R)∇H when damped, else None

    def __call__(self, y: Tensor) -> Tensor:
        """H(y): (B, 2d) -> (B,)."""
        return self.hamiltonian(y)

    @property
    def capabilities(self) -> frozenset[str]:
        """An energy; ``SEPARABLE`` when ``separable``, ``OWN_FIELD`` when damped (or projected)."""
        return frozenset(
            {Capability.HAMILTONIAN}
            | ({Capability.SEPARABLE} if self.separable else set())
            | ({Capability.OWN_FIELD} if self.vector_field is not None else set())
        )

    def _bounds(self, like: Tensor | None = None, dtype=torch.float64) -> tuple[Tensor, Tensor]:
        low = torch.tensor([lo for lo, _ in self.domain], dtype=dtype)
        high = torch.tensor([hi for _, hi in self.domain], dtype=dtype)
        return low, high

    def in_domain(self, y: Tensor) -> Tensor:
        """Boolean mask (B,) of states inside the box and below ``energy_max``."""
        low, high = self._bounds(dtype=y.dtype)
        inside = ((y >= low.to(y.device)) & (y <= high.to(y.device))).all(-1)
        if self.energy_max is not None:
            inside &= self.hamiltonian(y) < self.energy_max
        return inside

    def potential(self, q: Tensor) -> Tensor:
        """V(q) = H(q, 0) for positions (..., d) -> (...) (separable systems with T(0) = 0)."""
        if not self.separable:
            raise ValueError(f"{self.name} is not separable: it has no potential V(q) alone")
        return potential_part(self.hamiltonian, q)

    def kinetic(self, p: Tensor) -> Tensor:
        """T(p) = H(0, p) for momenta (..., d) -> (...) (separable systems)."""
        if not self.separable:
            raise ValueError(f"{self.name} is not separable: it has no kinetic energy T(p) alone")
        return kinetic_part(self.hamiltonian, p)

    def sample(self, n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        """n initial conditions, uniform over the domain (rejection on ``energy_max``), or on the
        annulus ``radius`` (radius and angle uniform), or by the system's own ``sampler``: (n, 2d)."""
        if self.sampler is not None:
            return self.sampler(n, generator, dtype)
        if self.radius is not None:
            r_min, r_max = self.radius
            u = torch.rand((n, 2), generator=generator, dtype=dtype)
            r = r_min + (r_max - r_min) * u[:, 0]
            angle = 2 * math.pi * u[:, 1]
            return torch.stack([r * torch.cos(angle), r * torch.sin(angle)], -1)
        low, high = self._bounds(dtype=dtype)
        out: list[Tensor] = []
        have = 0
        while have < n:
            u = torch.rand(
                (max(2 * (n - have), 64), 2 * self.dim), generator=generator, dtype=dtype
            )
            y = low + (high - low) * u
            y = y[self.in_domain(y)]
            out.append(y)
            have += y.shape[0]
        return torch.cat(out)[:n]

    def grid(self, points_per_axis: int, dtype=torch.float64) -> Tensor:
        """Uniform grid over the domain, energy-filtered like ``sample``: (G, 2d)."""
        axes = [torch.linspace(lo, hi, points_per_axis, dtype=dtype) for lo, hi in self.domain]
        y = torch.cartesian_prod(*axes).reshape(-1, 2 * self.dim)
        return y[self.in_domain(y)]

    def slice_grid(
        self, points_per_axis: int, axes: tuple[int, int], dtype=torch.float64
    ) -> Tensor:
        """A 2-D grid over coordinates ``axes`` with the others fixed at 0: (n, n, 2d).

        For d = 1 this is the whole phase plane; for d = 2 it is the paper's Fig. 4 slice.
        """
        (lo0, hi0), (lo1, hi1) = self.domain[axes[0]], self.domain[axes[1]]
        a = torch.linspace(lo0, hi0, points_per_axis, dtype=dtype)
        b = torch.linspace(lo1, hi1, points_per_axis, dtype=dtype)
        A, B = torch.meshgrid(a, b, indexing="xy")
        y = torch.zeros(*A.shape, 2 * self.dim, dtype=dtype)
        y[..., axes[0]] = A
        y[..., axes[1]] = B
        return y


def _damped(H: Callable[[Tensor], Tensor], damping: float) -> Callable[[Tensor], Tensor] | None:
    """ż = (J⁻¹ − R)∇H with R = damping·diag(0_d, I_d) (ṗ gains −damping·∂H/∂p); None for 0."""
    if not (math.isfinite(damping) and damping >= 0):
        raise ValueError(f"damping must be finite and >= 0, got {damping}")
    if damping == 0:
        return None

    def field(y: Tensor) -> Tensor:
        d = y.shape[-1] // 2
        R = torch.tensor([0.0] * d + [damping] * d, dtype=y.dtype, device=y.device)  # diagonal
        return dissipative_field(hamiltonian_gradient(H, y), R)

    return field


def _with_damping(params: dict, damping: float) -> dict:
    return {**params, "damping": float(damping)} if damping else params


def _split(y: Tensor) -> tuple[Tensor, Tensor]:
    d = y.shape[-1] // 2
    return y[..., :d], y[..., d:]


def double_well(damping: float = 0.0) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (0.5 * p**2 + 0.25 * q**4 - 0.5 * q**2).sum(-1)

    return System(
        "double_well", 1, H, ((-2.0, 2.0), (-2.0, 2.0)), _with_damping({}, damping),
        separable=True, mass=1.0, vector_field=_damped(H, damping),
        description="H = p^2/2 + q^4/4 - q^2/2; (q, p) in [-2, 2]^2",
    )  # fmt: skip


def coupled_oscillator(alpha: float = 0.5) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (0.5 * p**2 + 0.5 * q**2 + alpha * q * p).sum(-1)

    return System(
        "coupled_oscillator", 1, H, ((-2.0, 2.0), (-2.0, 2.0)), {"alpha": alpha},
        description=f"H = p^2/2 + q^2/2 + alpha q p, alpha = {alpha}; (q, p) in [-2, 2]^2",
    )  # fmt: skip


def henon_heiles(energy_max: float = 1.0 / 6.0) -> System:
    """Hénon–Heiles. Below the escape energy 1/6 and inside |q_i| <= 0.5 (within the potential's
    triangle, whose saddles lie at distance 1), orbits stay bounded."""

    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        qx, qy = q[..., 0], q[..., 1]
        return 0.5 * (p**2).sum(-1) + 0.5 * (qx**2 + qy**2) + qx**2 * qy - qy**3 / 3.0

    return System(
        "henon_heiles", 2, H, ((-0.5, 0.5),) * 4, {"energy_max": energy_max}, energy_max,
        separable=True, mass=1.0,
        description="H = |p|^2/2 + (qx^2+qy^2)/2 + qx^2 qy - qy^3/3; box [-0.5, 0.5]^4, H < 1/6",
    )  # fmt: skip


def henon_heiles_shell_states(energies: list[float], generator: torch.Generator) -> Tensor:
    """Hénon–Heiles states (B, 4) with q_x = 0 exactly on the energy shells ``energies``: q_y, p_y
    drawn from ``generator`` (q_y in [-0.15, 0.25], p_y in [-0.1, 0.1]), p_x >= 0 solved from H = E.
    Energies near the escape energy 1/6 give chaotic orbits."""
    n = len(energies)
    qy = -0.15 + 0.4 * torch.rand(n, generator=generator, dtype=torch.float64)
    py = -0.1 + 0.2 * torch.rand(n, generator=generator, dtype=torch.float64)
    E = torch.tensor(energies, dtype=torch.float64)
    px = torch.sqrt(2 * (E - (0.5 * qy**2 - qy**3 / 3) - 0.5 * py**2))
    return torch.stack([torch.zeros(n, dtype=torch.float64), qy, px, py], -1)


def _annulus(
    params: dict, r_min: float | None, r_max: float | None, box: tuple
) -> tuple[dict, tuple[float, float] | None, tuple]:
    """(params with r_min/r_max when given, the sampling annulus, the box): the box becomes
    [-r_max, r_max]^2 on an annulus."""
    if r_min is None and r_max is None:
        return params, None, box
    if r_min is None or r_max is None or not 0 <= r_min < r_max:
        raise ValueError(f"r_min and r_max must both be given with 0 <= r_min < r_max, got "
                         f"{r_min}, {r_max}")  # fmt: skip
    r_min, r_max = float(r_min), float(r_max)
    return {**params, "r_min": r_min, "r_max": r_max}, (r_min, r_max), ((-r_max, r_max),) * 2


def pendulum(
    g: float = 1.0,
    length: float = 1.0,
    mass: float = 1.0,
    r_min: float | None = None,
    r_max: float | None = None,
    damping: float = 0.0,
) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (p**2 / (2 * mass * length**2) + mass * g * length * (1 - torch.cos(q))).sum(-1)

    params, radius, box = _annulus({"g": g, "length": length, "mass": mass}, r_min, r_max,
                                   ((-math.pi / 2, math.pi / 2), (-1.5, 1.5)))  # fmt: skip
    where = (f"{radius[0]} <= |(q, p)| <= {radius[1]}" if radius
             else "q in [-pi/2, pi/2], p in [-1.5, 1.5]")  # fmt: skip
    return System(
        "pendulum", 1, H, box, _with_damping(params, damping),
        separable=True, mass=mass * length**2, radius=radius, vector_field=_damped(H, damping),
        description=f"H = p^2/(2 m l^2) + m g l (1 - cos q); {where}",
    )  # fmt: skip


def mass_spring(
    mass: float = 1.0,
    k: float = 1.0,
    r_min: float | None = None,
    r_max: float | None = None,
    damping: float = 0.0,
) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (p**2 / (2 * mass) + 0.5 * k * q**2).sum(-1)

    params, radius, box = _annulus({"mass": mass, "k": k}, r_min, r_max,
                                   ((-1.0, 1.0), (-1.0, 1.0)))  # fmt: skip
    where = f"{radius[0]} <= |(q, p)| <= {radius[1]}" if radius else "(q, p) in [-1, 1]^2"
    return System(
        "mass_spring", 1, H, box, _with_damping(params, damping),
        separable=True, mass=mass, radius=radius, vector_field=_damped(H, damping),
        description=f"H = p^2/(2m) + k q^2/2; {where}",
    )  # fmt: skip


def two_body(
    gravity: float = 1.0,
    mass: float = 1.0,
    coord_min: float = 0.5,
    coord_max: float = 1.5,
    orbit_noise: float = 0.05,
) -> System:
    """Two bodies of equal ``mass`` in a plane under gravity (DGNet's / HNN's 2-body task), d = 4:
    q = (x₁, y₁, x₂, y₂), H = (|p₁|² + |p₂|²)/(2m) − G m²/|q₁ − q₂|.

    Initial conditions are HNN's ``random_config`` (greydanus/hamiltonian-nn,
    experiment-2body/data.py, which DGNet and Aoshima et al. use): body 1 at (x, y) with x and y each
    uniform in [``coord_min``, ``coord_max``] (HNN's ``min_radius``/``max_radius``; so the distance
    r from the centre of mass lies in [√2·coord_min, √2·coord_max]), body 2 at −(x, y); each body
    gets the circular-orbit velocity (speed √(G m/(4r)), perpendicular, counter-clockwise), then
    both velocities are multiplied by one scalar 1 + ``orbit_noise``·N(0, 1) (HNN: 0.05): the
    eccentricity is |s² − 1| for a speed factor s, unbound for s ≥ √2. Total momentum zero. The
    box (for grids) is [−2 coord_max, 2 coord_max]^8; H is singular where the bodies meet."""
    if not 0 < coord_min < coord_max:
        raise ValueError(f"need 0 < coord_min < coord_max, got {coord_min}, {coord_max}")
    if not 0 <= orbit_noise < 1:
        raise ValueError(f"need 0 <= orbit_noise < 1, got {orbit_noise}")

    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        distance = (q[..., :2] - q[..., 2:]).norm(dim=-1)
        return (p**2).sum(-1) / (2 * mass) - gravity * mass**2 / distance

    def sampler(n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        pos = coord_min + (coord_max - coord_min) * torch.rand(
            (n, 2), generator=generator, dtype=dtype
        )
        r = pos.norm(dim=-1)
        speed = torch.sqrt(gravity * mass / (4 * r))  # circular orbit about the centre of mass
        scale = 1 + orbit_noise * torch.randn(n, generator=generator, dtype=dtype)
        vel = torch.stack([-pos[:, 1], pos[:, 0]], -1) / r[:, None] * (speed * scale)[:, None]
        return torch.cat([pos, -pos, mass * vel, -mass * vel], -1)

    params = {"gravity": gravity, "mass": mass, "coord_min": coord_min, "coord_max": coord_max,
              "orbit_noise": orbit_noise}  # fmt: skip
    return System(
        "two_body", 4, H, ((-2 * coord_max, 2 * coord_max),) * 8, params,
        separable=True, mass=mass, sampler=sampler,
        description="H = (|p1|^2 + |p2|^2)/(2m) - G m^2/|q1 - q2|; HNN's near-circular orbits",
    )  # fmt: skip


def _box(domain: Sequence, n: int) -> tuple[tuple[float, float], ...]:
    """``domain`` as one (low, high) per coordinate: [low, high] (for all n) or n pairs."""

    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    def sequence(x) -> bool:
        return isinstance(x, Sequence) and not isinstance(x, str)

    given = [list(b) if sequence(b) else b for b in domain] if sequence(domain) else domain
    pairs = (
        [given] * n if sequence(given) and len(given) == 2 and all(map(number, given)) else given
    )
    if not sequence(pairs) or not all(
        sequence(b) and len(b) == 2 and all(map(number, b)) for b in pairs
    ):
        raise UserError(f"system.domain must be [low, high] or one [low, high] per coordinate, "
                        f"got {given!r}")  # fmt: skip
    if len(pairs) != n:
        raise UserError(f"system.domain has {len(pairs)} intervals, but there are {n} "
                        "coordinates (system.coordinates); give one [low, high] per coordinate "
                        "or a single [low, high] for all")  # fmt: skip
    box = tuple((float(lo), float(hi)) for lo, hi in pairs)
    if not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in box):
        raise UserError(f"system.domain needs finite low < high in every interval, got {given}")
    return box


def _box_points(box: tuple[tuple[float, float], ...], budget: int = 5000) -> Tensor:
    """States covering the box, for checks: the grid of the largest odd number (>= 3) of points
    per axis within ``budget`` (centre, faces and corners included); when even 3 per axis exceed
    it, ``budget`` uniform draws (fixed seed) and the centre. (P, 2d), float64."""
    n_axes = len(box)
    per_axis = 3
    while (per_axis + 2) ** n_axes <= budget:
        per_axis += 2
    low = torch.tensor([lo for lo, _ in box], dtype=torch.float64)
    high = torch.tensor([hi for _, hi in box], dtype=torch.float64)
    if per_axis**n_axes <= budget:
        axes = [torch.linspace(lo, hi, per_axis, dtype=torch.float64) for lo, hi in box]
        for axis, (lo, hi) in zip(axes, box):
            axis[per_axis // 2] = (lo + hi) / 2  # exactly (where singularities often sit)
        return torch.cartesian_prod(*axes).reshape(-1, n_axes)
    u = torch.rand(
        (budget, n_axes), generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    return torch.cat([(low + high)[None] / 2, low + (high - low) * u])


def custom(
    hamiltonian: str = "p**2/2 + q**4/4 - q**2/2",
    coordinates: Sequence[str] | None = None,
    params: Mapping[str, float] | None = None,
    domain: Sequence = (-2.0, 2.0),
    energy_max: float | None = None,
) -> System:
    """H given as an expression (``hnnsym.physics.symbolic``; parsed, never evaluated) in the
    ``coordinates`` (default [q, p]; the first half positions, the second momenta) and the constants
    ``params``, on the box ``domain`` ([low, high] for every coordinate, or one per coordinate),
    below ``energy_max`` when set. ``separable`` and ``mass`` come from sympy (H = T(p) + V(q),
    T = |p|²/(2m)). Its ``params`` hold all five arguments, so ``custom(**system.params)`` (what
    ``get_system`` does with a data file's or checkpoint's record) rebuilds the same system.

    UserError (one line) for a bad expression or name, an odd number of coordinates, a domain
    that does not fit them, or an H that is not finite on the box (checked on a grid over it);
    a coordinate H does not depend on is logged as a warning."""
    from hnnsym.physics.symbolic import SymbolicHamiltonian  # sympy takes ~1 s to import

    coordinates = ["q", "p"] if coordinates is None else [str(c) for c in coordinates]
    if not coordinates or len(coordinates) % 2:
        raise UserError(f"system.coordinates {coordinates} must be an even number of names: "
                        "the positions, then their momenta")  # fmt: skip
    constants: dict[str, float] = {}
    for key, value in (params or {}).items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise UserError(f"system.params.{key} must be a finite number, got {value!r}")
        constants[str(key)] = float(value)
    box = _box(domain, len(coordinates))
    if energy_max is not None:
        if isinstance(energy_max, bool) or not isinstance(energy_max, (int, float)):
            raise UserError(f"system.energy_max must be a number or null, got {energy_max!r}")
        energy_max = float(energy_max)
    H = SymbolicHamiltonian(hamiltonian, coordinates, constants)
    if H.unused:
        log.warning("system.hamiltonian %r does not depend on %s", hamiltonian, ", ".join(H.unused))
    points = _box_points(box)
    with torch.no_grad():
        energy = H(points)
    bad = ~torch.isfinite(energy)
    if bad.any():
        at = ", ".join(f"{x:.4g}" for x in points[bad.nonzero()[0, 0]].tolist())
        raise UserError(f"system.hamiltonian {hamiltonian!r} is not finite at "
                        f"({', '.join(coordinates)}) = ({at}), inside system.domain; change the "
                        "domain or H")  # fmt: skip
    if energy_max is not None and not (energy < energy_max).any():
        raise UserError(f"no state of system.domain has H < system.energy_max={energy_max} "
                        f"(H >= {float(energy.min()):.4g} on a grid over it)")  # fmt: skip
    separable, mass = H.separability()
    spec = {"hamiltonian": hamiltonian, "coordinates": coordinates, "params": constants,
            "domain": [list(b) for b in box], "energy_max": energy_max}  # fmt: skip
    bounds = " x ".join(f"[{lo:g}, {hi:g}]" for lo, hi in box)
    below = f", H < {energy_max:g}" if energy_max is not None else ""
    return System(
        "custom", len(coordinates) // 2, H, box, spec, energy_max,
        separable=separable, mass=mass,
        description=f"H = {hamiltonian} in ({', '.join(coordinates)}); {bounds}{below}",
    )  # fmt: skip


SYSTEMS: dict[str, Callable[..., System]] = {
    "double_well": double_well,
    "coupled_oscillator": coupled_oscillator,
    "henon_heiles": henon_heiles,
    "pendulum": pendulum,
    "mass_spring": mass_spring,
    "two_body": two_body,
    "custom": custom,
}


# The system of a file of measurements (``python -m hnnsym.ingest``): no true H is known.
MEASURED = "measured"


def measured(dim: int) -> System:
    """Data with no known Hamiltonian, d = ``dim`` degrees of freedom (taken from the data file).
    ``known`` is False: there is no H to call, no domain, grid or sampler; evaluation measures
    what the data allow (``hnnsym.evaluation.measured``)."""
    if int(dim) != dim or dim < 1:
        raise ValueError(f"system measured: dim must be an integer >= 1, got {dim}")

    def H(y: Tensor) -> Tensor:
        raise ValueError("system measured has no known Hamiltonian")

    dim = int(dim)
    return System(
        MEASURED, dim, H, ((-math.inf, math.inf),) * (2 * dim), {"dim": dim}, known=False,
        description="measurements (python -m hnnsym.ingest): H unknown",
    )  # fmt: skip


def get_system(name: str, **params) -> System:
    """Build a system by name with keyword parameters (e.g. ``alpha`` for the coupled oscillator);
    ``measured`` (``dim=d``) is data of no known H."""
    if name == MEASURED:
        return measured(**params)
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose one of {sorted(SYSTEMS)} or {MEASURED}")
    return SYSTEMS[name](**params)


# The keys of a config's custom system node (hnnsym/conf/system/custom.yaml) beside ``name``.
CUSTOM_KEYS = ("hamiltonian", "coordinates", "params", "domain", "energy_max")


def system_from_config(node: Mapping) -> System:
    """The system of a config's ``system`` node, or of a stored record {"name", "params"} (a data
    file's ``system``/``system_params``, a checkpoint's ``system``): ``get_system(name, **params)``,
    except that a config's custom system holds its spec beside ``name`` (system.hamiltonian, ...,
    system.params being its constants), as in hnnsym/conf/system/custom.yaml."""
    if node["name"] == "custom" and "hamiltonian" in node:
        return custom(**{key: node[key] for key in CUSTOM_KEYS if key in node})
    return get_system(node["name"], **dict(node.get("params") or {}))
