"""Tao's explicit symplectic integrator for non-separable H (Tao 2016), the integrator of NSSNN.

Two copies (q, p) and (x, y) of phase space, bound together with strength ω, carry the augmented

    H̄(q, p, x, y) = H(q, y) + H(x, p) + ω (|q − x|² + |p − y|²) / 2,

whose three pieces have exact flows, explicit for any H (f = J⁻¹∇H = [∂H/∂p, −∂H/∂q]):

    φ_A^δ  (H(q, y)):   p ← p + δ f_p(q, y),   x ← x + δ f_q(q, y)        (q, y unchanged)
    φ_B^δ  (H(x, p)):   q ← q + δ f_q(x, p),   y ← y + δ f_p(x, p)        (x, p unchanged)
    φ_C^δ  (binding):   u = q − x, v = p − y turn by 2ωδ,
                        (u, v) ← (u cos 2ωδ + v sin 2ωδ, −u sin 2ωδ + v cos 2ωδ),
                        q + x and p + y unchanged.

One step is the symmetric (Strang) composition φ_A^{δ/2} φ_B^{δ/2} φ_C^δ φ_B^{δ/2} φ_A^{δ/2}:
order 2, symplectic on the augmented space, with an error bound O(T δ² ω) for integrable systems
(Tao 2016) — ω must be large enough to keep the copies together and small enough for that bound.
A call of ``integrate`` starts both copies at y0 (x = q, y = p), carries all four through its
steps and returns the (q, p) copy, (steps+1, B, 2d). The last φ_A of a step and the first of the
next act on the same (q, y), so each step costs three evaluations of ∇H.

Gradients: ``gradient=backprop`` only (autograd through the explicit steps); the adjoint methods
work on Runge–Kutta stage equations, which this splitting does not have (``has_stages = False``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from hnnsym.errors import IncompatibleError
from hnnsym.ode.dynamics import hamiltonian_flow, has_hamiltonian
from hnnsym.ode.problem import Problem


@dataclass
class TaoSplitting:
    """Tao's order-2 explicit symplectic integrator with binding ``omega`` (see module doc)."""

    omega: float = 10.0

    name = "tao"
    order = 2
    symplectic = True  # on the augmented phase space (q, p, x, y)
    has_stages = False  # an explicit splitting: only gradient=backprop differentiates it
    reversible = False

    def __post_init__(self):
        if isinstance(self.omega, bool) or not isinstance(self.omega, (int, float)):
            raise ValueError(f"omega must be a number > 0, got {self.omega!r}")
        if not (math.isfinite(self.omega) and self.omega > 0):
            raise ValueError(f"omega must be a finite number > 0, got {self.omega!r}")
        self.omega = float(self.omega)

    def bind(self, z: Tensor, delta: float, d: int) -> Tensor:
        """φ_C^δ on an augmented state z = [q, p, x, y] (B, 4d): the exact flow of the binding."""
        q, p, x, y = z.split(d, dim=-1)
        c, s = math.cos(2 * self.omega * delta), math.sin(2 * self.omega * delta)
        u, v = q - x, p - y
        u, v = c * u + s * v, -s * u + c * v
        sq, sp = q + x, p + y
        return torch.cat([(sq + u) / 2, (sp + v) / 2, (sq - u) / 2, (sp - v) / 2], dim=-1)

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All (q, p) states (steps+1, B, 2d); differentiable when grad mode is on."""
        f, h, d = problem.f, problem.h, y0.shape[-1] // 2
        q, p = y0[..., :d], y0[..., d:]
        x, y = q, p
        fa = f(torch.cat([q, y], -1))  # φ_A's field at (q, y)
        out = [y0]
        for _ in range(problem.steps):
            p, x = p + 0.5 * h * fa[..., d:], x + 0.5 * h * fa[..., :d]
            fb = f(torch.cat([x, p], -1))
            q, y = q + 0.5 * h * fb[..., :d], y + 0.5 * h * fb[..., d:]
            q, p, x, y = self.bind(torch.cat([q, p, x, y], -1), h, d).split(d, dim=-1)
            fb = f(torch.cat([x, p], -1))
            q, y = q + 0.5 * h * fb[..., :d], y + 0.5 * h * fb[..., d:]
            fa = f(torch.cat([q, y], -1))
            p, x = p + 0.5 * h * fa[..., d:], x + 0.5 * h * fa[..., :d]
            out.append(torch.cat([q, p], -1))
        return torch.stack(out)

    def strict(self) -> TaoSplitting:
        return self  # explicit: nothing to converge

    def check(self, problem: Problem, y0: Tensor) -> None:
        if not has_hamiltonian(problem.H):
            raise IncompatibleError(
                f"integrator=tao splits a Hamiltonian into H(q, y) + H(x, p), but "
                f"{type(problem.H).__name__} defines a vector field without one; use another "
                f"integrator (e.g. rk4)"
            )
        if not hamiltonian_flow(problem.H):
            name = getattr(problem.H, "name", type(problem.H).__name__)
            raise IncompatibleError(
                f"integrator=tao splits the Hamiltonian flow of H(q, y) + H(x, p), but {name} is "
                f"dissipative (f = (J⁻¹ − R)∇H); use implicit_midpoint, gauss_legendre4 or rk4"
            )
