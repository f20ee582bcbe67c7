"""Position-only schemes for M q̈ = −∇V(q) (Aoshima et al.): discrete-time Lagrangian mechanics.

Positions q (B, d) at times nΔt, a potential V: (B, d) -> (B,) and a symmetric positive definite
mass matrix M (d, d). Every scheme maps the last two positions (q⁻, q) to the next one q⁺.

``eq12`` (Aoshima et al., "proposed"): the discrete Euler–Lagrange equation with a discrete gradient ∇̄V
(``hnnsym.ode.discrete_gradient_formulas``), implicit in q⁺,

    G(q⁺) = M (q⁺ − 2q + q⁻)/Δt² + ½ [∇̄V(q⁺, q) + ∇̄V(q, q⁻)] = 0,                        (Eq. 12)

  solved by Newton's method with the Jacobian ∂G/∂q⁺ from autograd (``solve_eq12``). With the
  discrete momentum (Eq. 11)

    p_n = M (q_n − q_{n−1})/Δt − (Δt/2) ∇̄V(q_n, q_{n−1}),

  the energy E_n = ½ p_nᵀ M⁻¹ p_n + V(q_n) is conserved exactly (to rounding and the Newton
  tolerance) for n ≥ 1, for any V, because ∇̄V obeys the discrete chain rule.
Baselines (Aoshima et al., App. A), explicit, rewritten for positions with finite-difference velocities:
  ``leapfrog``          q⁺ = 2q − q⁻ − Δt² M⁻¹ ∇V(q)           (Eq. 15; Störmer–Verlet, Eq. 13)
  ``symplectic_euler``  q⁺ = 2q − q⁻ − Δt² M⁻¹ ∇V(q)           (Eq. 17: the same positions)
  ``euler``             q⁺ = 2q − q⁻ − Δt² M⁻¹ ∇V(q⁻)          (Eq. 19)
  They differ in the velocity each assigns to step n (``velocities``): leapfrog the average of the
  half-step velocities, (q_{n+1} − q_{n−1})/2Δt; symplectic Euler and Euler the forward
  difference (q_{n+1} − q_n)/Δt (their state (q_n, q̇_n) steps to q_{n+1} = q_n + Δt q̇_n).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from hnnsym.errors import ConvergenceError
from hnnsym.ode.discrete_gradient_formulas import discrete_gradient, gradient

Potential = Callable[[Tensor], Tensor]  # V: (B, d) -> (B,)

SCHEMES = ("eq12", "leapfrog", "symplectic_euler", "euler")
EXPLICIT = ("leapfrog", "symplectic_euler", "euler")


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"unknown position scheme {scheme!r}; choose one of {SCHEMES}")
    return scheme


@dataclass(frozen=True)
class DiscreteGradient:
    """Which discrete gradient Eq. 12 uses: ``kind`` gonzalez | avf, ``nodes`` for avf."""

    kind: str = "gonzalez"
    nodes: int = 4

    def __call__(self, V: Potential, u: Tensor, v: Tensor, create_graph=None) -> Tensor:
        return discrete_gradient(V, u, v, self.kind, self.nodes, create_graph)


def _times_mass(x: Tensor, mass: Tensor) -> Tensor:
    """M x for rows x (..., d)."""
    return x @ mass.T


def _solve_mass(x: Tensor, mass: Tensor) -> Tensor:
    """M⁻¹ x for rows x (..., d) (M symmetric positive definite: Cholesky)."""
    factor = torch.linalg.cholesky(mass)
    flat = x.reshape(-1, x.shape[-1]).T
    return torch.cholesky_solve(flat, factor).T.reshape(x.shape)


def eq12_residual(
    V: Potential,
    mass: Tensor,
    q_prev: Tensor,
    q: Tensor,
    q_next: Tensor,
    dt: float,
    dg: DiscreteGradient = DiscreteGradient(),
    create_graph: bool | None = None,
) -> Tensor:
    """G (B, d) of Eq. 12 at the positions (q⁻, q, q⁺), each (B, d)."""
    accel = _times_mass(q_next - 2 * q + q_prev, mass) / dt**2
    return accel + 0.5 * (dg(V, q_next, q, create_graph) + dg(V, q, q_prev, create_graph))


def explicit_step(
    scheme: str, V: Potential, mass: Tensor, q_prev: Tensor, q: Tensor, dt: float,
    create_graph: bool | None = None,
) -> Tensor:  # fmt: skip
    """q⁺ of an explicit position recurrence (``EXPLICIT``) from (q⁻, q), each (B, d)."""
    if scheme not in EXPLICIT:
        raise ValueError(f"{scheme!r} is not an explicit position scheme; choose one of {EXPLICIT}")
    at = q_prev if scheme == "euler" else q
    force = _solve_mass(gradient(V, at, create_graph), mass)
    return 2 * q - q_prev - dt**2 * force


@dataclass
class NewtonResult:
    """q⁺ (B, d); per trajectory: converged (B,) bool, Newton updates taken (B,) int and the
    estimated error of the returned q⁺ (B,) (inf where it failed)."""

    q_next: Tensor
    converged: Tensor
    iterations: Tensor
    error: Tensor


def solve_eq12(
    V: Potential,
    mass: Tensor,
    q_prev: Tensor,
    q: Tensor,
    dt: float,
    dg: DiscreteGradient = DiscreteGradient(),
    tol: float | None = None,
    max_iter: int = 30,
    on_fail: str = "raise",
) -> NewtonResult:
    """Solve Eq. 12 for q⁺ (B, d) by Newton's method.

    With K = ∇̄V(q, q⁻), evaluated once, G(x) = M x/Δt² + ½∇̄V(x, q) + ½K − M(2q − q⁻)/Δt². The
    predictor is the leapfrog step x₀ = 2q − q⁻ − Δt² M⁻¹∇V(q) (Eq. 15, O(Δt⁴) from the
    solution). Each iteration takes x ← x − s, s = J⁻¹G(x), with J_b = ∂G_b/∂x_b (d × d per
    trajectory, from d vector–Jacobian products of autograd), batched over the trajectories. The
    error of the new x is estimated as |s_k| for the first step and, Newton's convergence being
    quadratic, as |s_k|³/|s_{k−1}|² after (|s_k| ≈ C|s_{k−1}|²); a trajectory has converged when
    that is ≤ tol·(1 + |x|_∞) (tol default: 1e-15 in float64, 1e-6 in float32) and is not moved
    again. A step usually takes two updates (measured on the pendulum at Δt = 0.2: 2.1).
    ``on_fail="raise"``: ConvergenceError (one line: how many trajectories, the estimated error,
    what to change) when any has not converged after ``max_iter`` updates or became non-finite;
    ``"record"``: only report it in ``converged``. No graph is kept (prediction).
    """
    if on_fail not in ("raise", "record"):
        raise ValueError(f"on_fail must be 'raise' or 'record', got {on_fail!r}")
    if tol is None:
        tol = 1e-15 if q.dtype == torch.float64 else 1e-6
    B, d = q.shape
    with torch.no_grad():
        known = dg(V, q, q_prev, create_graph=False)
        rest = 0.5 * known - _times_mass(2 * q - q_prev, mass) / dt**2
        # the leapfrog step (Eq. 15) differs from Eq. 12's solution by O(Δt⁴): about two updates
        x = 2 * q - q_prev - dt**2 * _solve_mass(gradient(V, q, create_graph=False), mass)
    done = torch.zeros(B, dtype=torch.bool, device=q.device)
    bad = torch.zeros(B, dtype=torch.bool, device=q.device)
    iterations = torch.zeros(B, dtype=torch.long, device=q.device)
    error = torch.full((B,), math.inf, dtype=q.dtype, device=q.device)
    previous = torch.full((B,), math.inf, dtype=q.dtype, device=q.device)
    tiny = torch.finfo(q.dtype).tiny
    for _ in range(int(max_iter)):
        # every trajectory is stepped (batched); the converged and failed ones are not updated
        xa = x.detach().requires_grad_(True)
        with torch.enable_grad():
            G = _times_mass(xa, mass) / dt**2 + 0.5 * dg(V, xa, q, True) + rest
            rows = [torch.autograd.grad(G[:, j].sum(), xa, retain_graph=j < d - 1)[0]
                    for j in range(d)]  # fmt: skip
        with torch.no_grad():
            if d == 1:
                step = G / rows[0]
            else:
                J = torch.stack(rows, dim=1)  # J[b, j, :] = ∂G_bj/∂x_b
                usable = torch.isfinite(J).all((-2, -1))
                eye = torch.eye(d, dtype=J.dtype, device=J.device)
                J = torch.where(usable[:, None, None], J, eye)
                step, info = torch.linalg.solve_ex(J, G.unsqueeze(-1))
                usable &= info == 0  # a singular J fails this trajectory, not the solve
                step = torch.where(usable[:, None], step.squeeze(-1), math.nan)
            new = x - step
            size = step.abs().amax(-1)
            # Newton converges quadratically: the error of the new x is about |s|³/|s_prev|²
            cubic = size**3 / previous.clamp_min(tiny) ** 2
            estimate = torch.where(torch.isfinite(previous), torch.minimum(size, cubic), size)
            active = ~(done | bad)
            finite = torch.isfinite(new).all(-1)
            bad |= active & ~finite
            move = active & finite
            x = torch.where(move[:, None], new, x)
            iterations += move.long()
            previous = torch.where(move, size, previous)
            error = torch.where(move, estimate, error)
            done |= move & (estimate <= tol * (1 + new.abs().amax(-1)))
            if bool((done | bad).all()):
                break
    error = torch.where(bad, math.inf, error)
    converged = done & ~bad
    if on_fail == "raise" and not bool(converged.all()):
        failed = int((~converged).sum())
        worst = float(error[~converged].max())
        raise ConvergenceError(
            f"Newton's method for Eq. 12 did not converge for {failed} of {B} trajectories in "
            f"{max_iter} iterations (estimated error {worst:.3g}, tol {tol:g}); try a smaller time "
            "step or a larger max_iter"
        )
    return NewtonResult(x, converged, iterations, error)


def eq11_momentum(
    V: Potential,
    mass: Tensor,
    q_prev: Tensor,
    q: Tensor,
    dt: float,
    dg: DiscreteGradient = DiscreteGradient(),
    create_graph: bool | None = None,
) -> Tensor:
    """p_n = M (q_n − q_{n−1})/Δt − (Δt/2) ∇̄V(q_n, q_{n−1}) (Eq. 11), (B, d)."""
    return _times_mass(q - q_prev, mass) / dt - 0.5 * dt * dg(V, q, q_prev, create_graph)


def velocities(
    scheme: str,
    qs: Tensor,
    dt: float,
    V: Potential | None = None,
    mass: Tensor | None = None,
    dg: DiscreteGradient = DiscreteGradient(),
) -> Tensor:
    """The velocity each scheme assigns to every time of a position trajectory qs (T+1, B, d):
    (T+1, B, d), NaN where the scheme leaves it undefined (eq12: n = 0, from Eq. 11 as M⁻¹p_n,
    which needs V and M; leapfrog: n = 0 and T; Euler and symplectic Euler: n = T). No graph."""
    check_scheme(scheme)
    out = torch.full_like(qs, math.nan)
    with torch.no_grad():
        if scheme == "eq12":
            if V is None or mass is None:
                raise ValueError("the eq12 velocity (Eq. 11) needs V and the mass matrix")
            T1, B, d = qs.shape
            if T1 > 1:
                prev, cur = qs[:-1].reshape(-1, d), qs[1:].reshape(-1, d)
                p = eq11_momentum(V, mass, prev, cur, dt, dg, create_graph=False)
                out[1:] = _solve_mass(p, mass).reshape(T1 - 1, B, d)
        elif scheme == "leapfrog":
            out[1:-1] = (qs[2:] - qs[:-2]) / (2 * dt)
        else:
            out[:-1] = (qs[1:] - qs[:-1]) / dt
    return out


def eq12_harmonic_stiffness(omega: float, dt: float) -> float:
    """The stiffness k* whose Eq. 12 (Gonzalez ∇̄V) with V = ½ k*|q|² and M = I reproduces the
    harmonic oscillator q̈ = −ω²q exactly at step Δt: for a quadratic V, ∇̄V(u, v) = k(u + v)/2,
    and Eq. 12's characteristic roots e^{±iφ} satisfy tan²(φ/2) = kΔt²/4, so φ = ωΔt needs
    k* = (2/Δt)² tan²(ωΔt/2) = ω²(1 + (ωΔt)²/6 + …). The best any learned V can do on such data."""
    if not (omega > 0 and dt > 0 and omega * dt < math.pi):
        raise ValueError(f"need omega > 0, dt > 0 and omega*dt < pi, got {omega}, {dt}")
    return (2.0 / dt) ** 2 * math.tan(0.5 * omega * dt) ** 2


def kinetic_energy(v: Tensor, mass: Tensor) -> Tensor:
    """½ vᵀ M v for velocities (..., d) -> (...)."""
    return 0.5 * (v * _times_mass(v, mass)).sum(-1)


def model_energy(V: Potential, mass: Tensor, qs: Tensor, vs: Tensor) -> Tensor:
    """E = ½ vᵀ M v + V(q) along (T+1, B, d) positions and velocities -> (T+1, B), no graph
    (NaN where the velocity is)."""
    with torch.no_grad():
        pot = V(qs.reshape(-1, qs.shape[-1])).reshape(qs.shape[:-1])
        return kinetic_energy(vs, mass) + pot


__all__ = [
    "EXPLICIT",
    "SCHEMES",
    "DiscreteGradient",
    "NewtonResult",
    "check_scheme",
    "eq11_momentum",
    "eq12_harmonic_stiffness",
    "eq12_residual",
    "explicit_step",
    "kinetic_energy",
    "model_energy",
    "solve_eq12",
    "velocities",
]
