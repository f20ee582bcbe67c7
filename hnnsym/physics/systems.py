"""Analytic Hamiltonian systems: H(y) with y = [q, p], their sampling domains and evaluation grids.

Every system has ``dim`` = d degrees of freedom, so states are (B, 2d) tensors ordered
[q_1..q_d, p_1..p_d]. ``domain`` is a box (low, high) per coordinate; initial conditions are drawn
uniformly from it (rejecting states above ``energy_max`` where set) and the evaluation grid covers the
same box (with the same energy filter), as in seed 000.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass(frozen=True)
class System:
    """A conservative system with a known Hamiltonian."""

    name: str
    dim: int
    hamiltonian: Callable[[Tensor], Tensor]
    domain: tuple[tuple[float, float], ...]
    params: dict = field(default_factory=dict)
    energy_max: float | None = None
    description: str = ""
    separable: bool = False  # H = T(p) + V(q): leapfrog / symplectic Euler run explicitly

    def __call__(self, y: Tensor) -> Tensor:
        """H(y): (B, 2d) -> (B,)."""
        return self.hamiltonian(y)

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

    def sample(self, n: int, generator: torch.Generator, dtype=torch.float64) -> Tensor:
        """n initial conditions, uniform over the domain (rejection on ``energy_max``): (n, 2d)."""
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


def _split(y: Tensor) -> tuple[Tensor, Tensor]:
    d = y.shape[-1] // 2
    return y[..., :d], y[..., d:]


def double_well() -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (0.5 * p**2 + 0.25 * q**4 - 0.5 * q**2).sum(-1)

    return System(
        "double_well", 1, H, ((-2.0, 2.0), (-2.0, 2.0)), {},
        separable=True,
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
        separable=True,
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


def pendulum(g: float = 1.0, length: float = 1.0, mass: float = 1.0) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (p**2 / (2 * mass * length**2) + mass * g * length * (1 - torch.cos(q))).sum(-1)

    return System(
        "pendulum", 1, H, ((-math.pi / 2, math.pi / 2), (-1.5, 1.5)),
        {"g": g, "length": length, "mass": mass},
        separable=True,
        description="H = p^2/(2 m l^2) + m g l (1 - cos q); q in [-pi/2, pi/2], p in [-1.5, 1.5]",
    )  # fmt: skip


def mass_spring(mass: float = 1.0, k: float = 1.0) -> System:
    def H(y: Tensor) -> Tensor:
        q, p = _split(y)
        return (p**2 / (2 * mass) + 0.5 * k * q**2).sum(-1)

    return System(
        "mass_spring", 1, H, ((-1.0, 1.0), (-1.0, 1.0)), {"mass": mass, "k": k},
        separable=True,
        description="H = p^2/(2m) + k q^2/2; (q, p) in [-1, 1]^2",
    )  # fmt: skip


SYSTEMS: dict[str, Callable[..., System]] = {
    "double_well": double_well,
    "coupled_oscillator": coupled_oscillator,
    "henon_heiles": henon_heiles,
    "pendulum": pendulum,
    "mass_spring": mass_spring,
}


def get_system(name: str, **params) -> System:
    """Build a system by name with keyword parameters (e.g. ``alpha`` for the coupled oscillator)."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose one of {sorted(SYSTEMS)}")
    return SYSTEMS[name](**params)
