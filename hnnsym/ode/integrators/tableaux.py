"""Integrators as data: (partitioned) Runge–Kutta tableaux.

A partitioned RK method with s stages takes one step of y = [q, p] as

    Q_i = q + h Σ_j a_q[i][j] k_j,    P_i = p + h Σ_j a_p[i][j] l_j,
    (k_i, l_i) = f(Q_i, P_i) = (∂H/∂p, -∂H/∂q)(Q_i, P_i),
    q' = q + h Σ_i b_q[i] k_i,       p' = p + h Σ_i b_p[i] l_i.

A plain RK method has a_q = a_p and b_q = b_p. Every method below runs on the one stage solver in
``stage_solver.py``; adding an integrator means adding a tableau here.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class Tableau:
    name: str
    a_q: Matrix
    b_q: tuple[float, ...]
    a_p: Matrix
    b_p: tuple[float, ...]
    order: int
    symplectic: bool
    symmetric: bool
    description: str = ""

    @property
    def stages(self) -> int:
        return len(self.b_q)

    @property
    def partitioned(self) -> bool:
        return self.a_q != self.a_p or self.b_q != self.b_p

    def coefficients(self, dtype: torch.dtype, device: torch.device | str | None = None):
        """(a_q, b_q, a_p, b_p) as tensors: (s, s), (s,), (s, s), (s,) (cached: read-only)."""
        return _coefficients(self, dtype, torch.device(device or "cpu"))

    def symplectic_partner(self) -> "Tableau":
        """The partner tableau A*_ij = b_j (1 - a_ji / b_i) (Matsubara et al., eq. 27) of a plain RK method.

        Integrating the adjoint system with it makes the pair (forward, adjoint) a symplectic
        partitioned RK method, so the adjoint gradient equals backprop of the discrete solution.
        Gauss–Legendre methods are their own partner.
        """
        if self.partitioned:
            raise ValueError(f"{self.name} is partitioned; its adjoint pairs the two tableaux")
        a, b, s = self.a_q, self.b_q, self.stages
        if any(bi == 0 for bi in b):
            raise ValueError(f"{self.name} has a zero weight; the partner tableau is undefined")
        partner = tuple(tuple(b[j] * (1 - a[j][i] / b[i]) for j in range(s)) for i in range(s))
        return Tableau(
            f"{self.name}_partner", partner, b, partner, b, self.order, self.symplectic,
            self.symmetric,
        )  # fmt: skip


@functools.lru_cache(maxsize=256)
def _coefficients(tableau: Tableau, dtype: torch.dtype, device: torch.device):
    def t(x):
        return torch.tensor(x, dtype=dtype, device=device)

    return t(tableau.a_q), t(tableau.b_q), t(tableau.a_p), t(tableau.b_p)


def _rk(name, a, b, order, symplectic, symmetric, description) -> Tableau:
    a = tuple(tuple(float(x) for x in row) for row in a)
    b = tuple(float(x) for x in b)
    return Tableau(name, a, b, a, b, order, symplectic, symmetric, description)


_r3, _r15 = math.sqrt(3.0), math.sqrt(15.0)

IMPLICIT_MIDPOINT = _rk(
    "implicit_midpoint", [[0.5]], [1.0], 2, True, True,
    "Gauss–Legendre s=1: y' = y + h f((y + y')/2)",
)  # fmt: skip
GAUSS_LEGENDRE4 = _rk(
    "gauss_legendre4",
    [[1 / 4, 1 / 4 - _r3 / 6], [1 / 4 + _r3 / 6, 1 / 4]],
    [1 / 2, 1 / 2], 4, True, True, "Gauss–Legendre s=2, order 4",
)  # fmt: skip
GAUSS_LEGENDRE6 = _rk(
    "gauss_legendre6",
    [
        [5 / 36, 2 / 9 - _r15 / 15, 5 / 36 - _r15 / 30],
        [5 / 36 + _r15 / 24, 2 / 9, 5 / 36 - _r15 / 24],
        [5 / 36 + _r15 / 30, 2 / 9 + _r15 / 15, 5 / 36],
    ],
    [5 / 18, 4 / 9, 5 / 18], 6, True, True, "Gauss–Legendre s=3, order 6",
)  # fmt: skip
RK4 = _rk(
    "rk4",
    [[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]],
    [1 / 6, 1 / 3, 1 / 3, 1 / 6], 4, False, False, "classical explicit Runge–Kutta (not symplectic)",
)  # fmt: skip
LEAPFROG = Tableau(
    "leapfrog",
    ((0.0, 0.0), (0.5, 0.5)), (0.5, 0.5),   # Lobatto IIIA on q
    ((0.5, 0.0), (0.5, 0.0)), (0.5, 0.5),   # Lobatto IIIB on p
    2, True, True,
    "generalized Störmer–Verlet (Lobatto IIIA–IIIB); explicit kick-drift-kick when H is separable",
)  # fmt: skip
SYMPLECTIC_EULER = Tableau(
    "symplectic_euler",
    ((1.0,),), (1.0,),   # q' = q + h ∂H/∂p(q', p)
    ((0.0,),), (1.0,),   # p' = p - h ∂H/∂q(q', p)
    1, True, False, "symplectic Euler, implicit in q; explicit when H is separable",
)  # fmt: skip

TABLEAUX: dict[str, Tableau] = {
    t.name: t
    for t in (IMPLICIT_MIDPOINT, GAUSS_LEGENDRE4, GAUSS_LEGENDRE6, LEAPFROG, SYMPLECTIC_EULER, RK4)
}
