"""RATTLE: the symplectic, constraint-preserving integrator for holonomic constraints g(q) = 0
(Hairer, Lubich & Wanner, Geometric Numerical Integration, VII.1.22), for a general H(q, p).

With G = ∂g/∂q (m × n), one step from (q_n, p_n) on the manifold solves

    p_{n+½} = p_n − h/2 (∇_q H(q_n, p_{n+½}) + G(q_n)ᵀ λ)
    q_{n+1} = q_n + h/2 (∇_p H(q_n, p_{n+½}) + ∇_p H(q_{n+1}, p_{n+½}))
    0       = g(q_{n+1})
    p_{n+1} = p_{n+½} − h/2 (∇_q H(q_{n+1}, p_{n+½}) + G(q_{n+1})ᵀ μ)
    0       = G(q_{n+1}) ∇_p H(q_{n+1}, p_{n+1})

in two Newton solves: u = (p_{n+½}, q_{n+1}, Λ) from the first three lines, then v = (p_{n+1}, M)
from the last two, with the multipliers scaled to impulses Λ = h/2 λ, M = h/2 μ (so every unknown
is a position or a momentum and one max-norm tolerance fits all). Order 2, symmetric, symplectic
on the cotangent bundle of the manifold; q_{n+1} and p_{n+1} satisfy both constraints to the
solver tolerance at every step, so there is no drift off the manifold.

H is any object with H(z) -> (B,) for z = [q, p] (B, 2n) and ``position_constraints(q)``,
(..., n) -> (..., m); ∇H comes from H's ``energy_gradient`` if it has one, else from autograd (never
from H's ``vector_field``: RATTLE needs the unconstrained gradient). Jacobians are taken by
autograd, batched: the rows of a (B, k) -> (B, k) residual's Jacobian come from one backward pass
over k stacked copies of the batch (``_jacobian``).

The multiplier form (``formulation="multipliers"``; ``"auto"``, the default, takes it for an H
with a ``mass_matrix()``, which declares H = ½pᵀM⁻¹p + V(q) with a constant M, as CHNN, CLNN and
the constrained systems do; checked at the initial states): the first lines are then explicit
given the impulse Λ,

    p_{n+½} = pt − G(q_n)ᵀΛ,   q_{n+1} = qt − h M⁻¹G(q_n)ᵀΛ,
    pt = p_n − h/2 ∇V(q_n),     qt = q_n + h M⁻¹ pt,

so Newton solves g(q_{n+1}(Λ)) = 0 for the m unknowns Λ alone (Jacobian −h G(q_{n+1}) M⁻¹ G(q_n)ᵀ,
m × m; no evaluation of V inside the iteration), and the velocity step is linear in M:
(G₁M⁻¹G₁ᵀ) M = G₁M⁻¹(p_{n+½} − h/2 ∇V(q_{n+1})), G₁ = G(q_{n+1}). One ∇V per step (a forward
without a graph reuses ∇V(q_{n+1}) for the next step), no Jacobian of H. The same solution as the
general form (to rounding, tested). Its adjoint is the implicit function theorem on the reduced
system: with y_{n+1} = Y(Λ; y_n, θ) and R(Λ; y_n, θ) = g(q_{n+1}) = 0, a = (∂Y/∂(Λ, y_n, θ))ᵀ λ
by one backward pass, w = −(∂R/∂Λ)⁻ᵀ a_Λ (m × m), and dL/d(y_n, θ) = a + (∂R/∂(y_n, θ))ᵀ w.
G comes from H's ``position_constraints_jacobian(q)`` when it has one (closed form), else from
autograd as above.

Friction (an H declaring ``Capability.FRICTION``: ``friction_matrix(q)`` = R_pp(q), positive
semi-definite with G(q) M⁻¹ R_pp = 0, and its ``mass_matrix()``; the damped field
ṗ = −∇_q H − R_pp M⁻¹p − Gᵀλ of a constrained model with friction in the tangent space): each
step (each substep of a composition) is the Strang splitting Φ_{h/2} ∘ RATTLE_h ∘ Φ_{h/2} with the
exact friction flow at fixed q, Φ_t(q, p) = (q, exp(−t R_pp(q) M⁻¹) p) (``_friction``). Φ_t keeps
q, keeps G M⁻¹ p = 0 (G M⁻¹ R_pp = 0) and does not increase ½pᵀM⁻¹p, so the steps stay on the
manifold; the split is symmetric, of order 2 (4 with a composition). Its gradient is autograd's
through Φ (explicit) and the exact adjoint of the RATTLE step between.

Newton is simplified: the Jacobian of the first iterate is reused while each update shrinks by
at least a factor 100 (``REFRESH``), and taken afresh otherwise. It stops when the estimated
distance to the solution, min(|Δ|, θ/(1−θ)|Δ|) with θ the ratio of successive max-norm updates
(Hairer & Wanner IV.8), is ≤ ``tol`` (None: 1e-12 in float64, 1e-6 in float32). A step that has
not converged after ``max_iter`` iterations raises ``ConvergenceError`` (``on_fail="warn"|"ignore"`` to relax, as for the stage solver).

Gradients (``implicit_gradient=True``, the default): each step is a ``torch.autograd.Function``
whose backward solves the transposed linearised step equations at the converged solution,
Jᵀ w = −∂L/∂X with J = ∂F/∂X of all five blocks F(X; y_n, θ) = 0, X = (u, v), and returns
dL/dy_n = (∂F/∂y_n)ᵀ w and dL/dθ = (∂F/∂θ)ᵀ w (implicit function theorem): exact to the solver
tolerance, and each step keeps only y_n and X (no Newton iterations). ``gradient=backprop`` and
``checkpoint`` differentiate through it; ``symplectic_adjoint`` runs the forward without a graph,
keeps the states, and in backward re-solves step n from y_n (seeded by y_{n+1}; the multiplier
form by the forward's own iteration) and applies the same transposed solve (``step_vjp``). A
``composition`` (COMPOSITIONS: order 4) makes each step a symmetric product of RATTLE substeps of
γ_i h; every substep is the step above, differentiated the same way, and the stepwise backward
recomputes a step's inner states from y_n before running its substeps' adjoints in reverse.
With ``implicit_gradient=False`` autograd records the Newton iterations themselves (memory ∝
steps × iterations; a reference for tests).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from hnnsym.errors import IncompatibleError, UserError
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import hamiltonian_gradient, has_hamiltonian
from hnnsym.ode.integrators.stage_solver import FixedPoint, conclude
from hnnsym.ode.problem import Problem, SolverStats

REFRESH = 0.01  # a fresh Newton Jacobian unless the last update shrank by this factor
# Symmetric compositions of RATTLE (HLW II.4, V.3): one step of size h is RATTLE steps of γ_i h.
# RATTLE being symmetric, each of these is of order 4, and stays symplectic on the manifold and on
# it to the Newton tolerance (every substep is a RATTLE step). "triple_jump": Yoshida / Suzuki /
# Creutz–Gocksch, γ = (c, 1 − 2c, c), c = 1/(2 − 2^{1/3}); "suzuki": Suzuki's fractal of five,
# γ = (c, c, 1 − 4c, c, c), c = 1/(4 − 4^{1/3}), smaller substeps and error constant.
COMPOSITIONS: dict[str, tuple[float, ...]] = {
    "none": (1.0,),
    "triple_jump": (
        1 / (2 - 2 ** (1 / 3)),
        1 - 2 / (2 - 2 ** (1 / 3)),
        1 / (2 - 2 ** (1 / 3)),
    ),
    "suzuki": (
        *(1 / (4 - 4 ** (1 / 3)),) * 2,
        1 - 4 / (4 - 4 ** (1 / 3)),
        *(1 / (4 - 4 ** (1 / 3)),) * 2,
    ),
}
# default |g(q)| and |G ∇_p H| above which ``check`` refuses an initial state
MANIFOLD_TOL = {torch.float64: 1e-7, torch.float32: 1e-3}
FORMULATIONS = ("auto", "multipliers", "general")

Tile = Callable[[Tensor], Tensor]


def _jacobian(
    fn: Callable[[Tensor, Tile], Tensor], x: Tensor, c: int, create_graph: bool = False
) -> tuple[Tensor, Tensor]:
    """fn(x) (B, c) and its Jacobian (B, c, a) for a row-wise fn: (R, a) -> (R, c).

    fn is called once on c stacked copies of x, (c·B, a), with ``tile`` repeating any per-row
    tensor it closes over the same way; row j of the Jacobian is the gradient of output j of copy
    j, so one backward pass gives all c rows. ``create_graph``: both results stay differentiable
    (with respect to x, if it requires grad, and whatever fn closes over)."""
    B, a = x.shape
    with torch.enable_grad():
        base = x if x.requires_grad else x.detach().requires_grad_(True)
        rows = base.unsqueeze(0).expand(c, B, a).reshape(c * B, a)

        def tile(t: Tensor) -> Tensor:
            return t.repeat(c, *([1] * (t.dim() - 1)))

        out = fn(rows, tile).reshape(c, B, c)
        picked = out.diagonal(dim1=0, dim2=2)  # (B, c): output j of copy j
        (jac,) = torch.autograd.grad(picked.sum(), rows, create_graph=create_graph)
    value = out[0] if create_graph else out[0].detach()
    return value, jac.reshape(c, B, a).transpose(0, 1)


def constraint_jacobian(g: Callable[[Tensor], Tensor], q: Tensor, m: int, create_graph: bool):
    """G(q) = ∂g/∂q, q (B, n) -> (B, m, n), for the m constraints g (.., n) -> (.., m)."""
    return _jacobian(lambda rows, tile: g(rows), q, m, create_graph)[1]


def _G(H, q: Tensor, m: int, graph: bool) -> Tensor:
    """G(q) (B, m, n) of H's constraints: H's closed form ``position_constraints_jacobian(q)``
    when it declares one (differentiable by ordinary backward), else autograd."""
    if has(H, Capability.CONSTRAINT_JACOBIAN):
        with torch.set_grad_enabled(graph):
            return H.position_constraints_jacobian(q)
    return constraint_jacobian(H.position_constraints, q, m, graph)


def _grad_H(H, q: Tensor, p: Tensor, create_graph: bool) -> tuple[Tensor, Tensor]:
    """(∇_q H, ∇_p H) at (q, p), each (B, n)."""
    grad = hamiltonian_gradient(H, torch.cat([q, p], -1), create_graph)
    n = q.shape[-1]
    return grad[..., :n], grad[..., n:]


def _first(
    H, g, q0: Tensor, p0: Tensor, G0: Tensor, u: Tensor, h: float, graph: bool = True
) -> Tensor:
    """Residual of the first three RATTLE lines in u = (p½, q1, Λ), Λ = h/2 λ: (B, 2n+m).
    ``graph``: differentiable (False: values only, for a residual check)."""
    n = q0.shape[-1]
    ph, q1, lam = u[:, :n], u[:, n : 2 * n], u[:, 2 * n :]
    B = q0.shape[0]
    Hq, Hp = _grad_H(H, torch.cat([q0, q1]), torch.cat([ph, ph]), graph)
    r_p = ph - p0 + 0.5 * h * Hq[:B] + torch.einsum("bmn,bm->bn", G0, lam)
    r_q = q1 - q0 - 0.5 * h * (Hp[:B] + Hp[B:])
    return torch.cat([r_p, r_q, g(q1)], -1)


def _second(
    H, q1: Tensor, ph: Tensor, Hq1: Tensor, G1: Tensor, v: Tensor, h: float, graph: bool = True
) -> Tensor:
    """Residual of the last two RATTLE lines in v = (p1, M), M = h/2 μ, given q1, p½ and
    Hq1 = ∇_q H(q1, p½): (B, n+m)."""
    n = q1.shape[-1]
    p1, mu = v[:, :n], v[:, n:]
    _, Hp = _grad_H(H, q1, p1, graph)
    r_p = p1 - ph + 0.5 * h * Hq1 + torch.einsum("bmn,bm->bn", G1, mu)
    return torch.cat([r_p, torch.einsum("bmn,bn->bm", G1, Hp)], -1)


def step_residual(H, y: Tensor, X: Tensor, h: float) -> Tensor:
    """All five blocks F(X; y) of one step, X = (p½, q1, Λ, p1, M) (B, 3n+2m): (B, 3n+2m).
    Differentiable in X, y and H's parameters (this is what the adjoint linearises)."""
    g = H.position_constraints
    n = y.shape[-1] // 2
    m = (X.shape[-1] - 3 * n) // 2
    q0, p0 = y[:, :n], y[:, n:]
    ph, q1, v = X[:, :n], X[:, n : 2 * n], X[:, 2 * n + m :]
    G0 = _G(H, q0, m, True)
    G1 = _G(H, q1, m, True)
    Hq1, _ = _grad_H(H, q1, ph, True)
    return torch.cat(
        [_first(H, g, q0, p0, G0, X[:, : 2 * n + m], h), _second(H, q1, ph, Hq1, G1, v, h)], -1
    )


# ---- the multiplier form: H = ½pᵀM⁻¹p + V(q) with a constant M ----------------------------------
def _inverse_mass(H, like: Tensor) -> Tensor:
    """M⁻¹ (n, n) of H's constant ``mass_matrix()``, in ``like``'s dtype (differentiable in H's
    parameters when grad mode is on)."""
    return torch.linalg.inv(H.mass_matrix().to(like))


def _force(H, q: Tensor, graph: bool) -> Tensor:
    """∇V(q) = ∇_q H(q, p) (B, n) of a separable H (taken at p = 0)."""
    return _grad_H(H, q, torch.zeros_like(q), graph)[0]


def _along(lam: Tensor, rows: Tensor) -> Tensor:
    """Σ_k λ_k rows_k: λ (B, m), rows (B, m, n) -> (B, n) (e.g. Gᵀλ)."""
    return torch.einsum("bm,bmn->bn", lam, rows)


def _kick(
    H, y: Tensor, f0: Tensor, Minv: Tensor, h: float, m: int, graph: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """What step n knows before its multipliers: the unconstrained half kick and drift
    pt = p_n − h/2 ∇V(q_n), qt = q_n + h M⁻¹pt, G0 = G(q_n) and D0 = h G0 M⁻¹ (B, m, n), so that
    p½ = pt − G0ᵀΛ and q_{n+1} = qt − D0ᵀΛ for the impulse Λ = h/2 λ."""
    d = y.shape[-1] // 2
    q0, p0 = y[:, :d], y[:, d:]
    G0 = _G(H, q0, m, graph)
    pt = p0 - 0.5 * h * f0
    qt = q0 + h * pt @ Minv.T
    return pt, qt, G0, h * G0 @ Minv.T


def _finish(
    H, kick: tuple[Tensor, Tensor, Tensor, Tensor], lam: Tensor, Minv: Tensor, h: float,
    graph: bool,
) -> tuple[Tensor, Tensor]:  # fmt: skip
    """X = (p½, q1, Λ, p1, M) (B, 3n+2m) and ∇V(q1) from the impulse Λ (``_position``, then
    ``_velocity``)."""
    ph, q1 = _position(kick, lam)
    p1, mu, f1 = _velocity(H, q1, ph, Minv, h, lam.shape[-1], graph)
    return torch.cat([ph, q1, lam, p1, mu], -1), f1


def _position(kick: tuple[Tensor, Tensor, Tensor, Tensor], lam: Tensor) -> tuple[Tensor, Tensor]:
    """(p½, q1) = (pt − G0ᵀΛ, qt − D0ᵀΛ) (``_kick``)."""
    pt, qt, G0, D0 = kick
    return pt - _along(lam, G0), qt - _along(lam, D0)


def _velocity(
    H, q1: Tensor, ph: Tensor, Minv: Tensor, h: float, m: int, graph: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """The velocity step (p1, M, ∇V(q1)): p1 = p½ − h/2 ∇V(q1) − G1ᵀM with G1 M⁻¹ p1 = 0, linear
    in M: (G1 M⁻¹ G1ᵀ) M = G1 M⁻¹ (p½ − h/2 ∇V(q1)), G1 = G(q1)."""
    f1 = _force(H, q1, graph)
    G1 = _G(H, q1, m, graph)
    r = ph - 0.5 * h * f1
    GM = G1 @ Minv  # (B, m, n)
    mu = torch.linalg.solve(GM @ G1.transpose(-1, -2), (GM @ r.unsqueeze(-1))).squeeze(-1)
    return r - _along(mu, G1), mu, f1


@dataclass
class Rattle:
    """RATTLE for H with ``position_constraints`` (see module doc). Options: Newton ``tol``
    (None: by dtype), ``max_iter``, ``on_fail``; ``manifold_tol`` (None: 1e-7 in float64, 1e-3
    in float32), above which ``check`` refuses initial states off the manifold;
    ``implicit_gradient`` (exact adjoint of each step; False: autograd through Newton);
    ``composition``, a key of COMPOSITIONS: each step made of RATTLE substeps (order 4)."""

    tol: float | None = None
    max_iter: int = 20
    on_fail: str = "raise"
    manifold_tol: float | None = None
    implicit_gradient: bool = True
    formulation: str = "auto"
    composition: str = "none"

    name = "rattle"
    symplectic = True  # on the cotangent bundle of the constraint manifold
    has_stages = False  # no Runge–Kutta stages: symplectic_adjoint uses step_vjp instead
    reversible = False

    def __post_init__(self):
        self.solver = FixedPoint(self.tol, self.max_iter, self.on_fail)  # validates the options
        if self.manifold_tol is not None and not self.manifold_tol > 0:
            raise ValueError(f"manifold_tol must be > 0, got {self.manifold_tol}")
        if not isinstance(self.implicit_gradient, bool):
            raise ValueError(
                f"implicit_gradient must be true or false, got {self.implicit_gradient!r}"
            )
        if self.formulation not in FORMULATIONS:
            raise ValueError(f"formulation must be one of {FORMULATIONS}, got {self.formulation!r}")
        if self.composition not in COMPOSITIONS:
            raise ValueError(
                f"composition must be one of {tuple(COMPOSITIONS)}, got {self.composition!r}"
            )

    @staticmethod
    def damped(H) -> bool:
        """Whether H has friction to split off (``Capability.FRICTION``; module doc)."""
        return has(H, Capability.FRICTION)

    @property
    def order(self) -> int:
        return 2 if self.composition == "none" else 4

    def substeps(self, problem: Problem) -> list[Problem]:
        """The problems of one step's RATTLE substeps, of step γ_i h (``composition``); they
        share ``problem``'s statistics. [problem] itself without a composition."""
        if self.composition == "none":
            return [problem]
        return [replace(problem, h=gamma * problem.h) for gamma in COMPOSITIONS[self.composition]]

    def multipliers(self, H) -> bool:
        """Whether steps solve for the multipliers alone (H = ½pᵀM⁻¹p + V(q), constant M, which
        an H with ``mass_matrix()`` declares), or for all unknowns (``formulation``)."""
        if self.formulation == "auto":
            return has(H, Capability.MASS_MATRIX)
        return self.formulation == "multipliers"

    def strict(self) -> Rattle:
        """The same integrator, raising ConvergenceError whatever its ``on_fail``."""
        return replace(self, on_fail="raise")

    # ---- the integrator protocol -----------------------------------------------------------
    def check(self, problem: Problem, y0: Tensor) -> None:
        """An H with a Hamiltonian and ``position_constraints``, and y0 on the manifold."""
        H = problem.H
        who = getattr(H, "name", type(H).__name__)
        if not has_hamiltonian(H):
            raise IncompatibleError(
                f"integrator=rattle needs a Hamiltonian H(q, p), but {who} defines only a vector "
                f"field; use another integrator (e.g. rk4)"
            )
        if not has(H, Capability.CONSTRAINTS):
            raise IncompatibleError(
                f"integrator=rattle needs a constrained H with position_constraints(q) (the "
                f"holonomic g(q) = 0), but {who} has none; use a Cartesian constrained model "
                f"(model=chnn) or another integrator"
            )
        n = y0.shape[-1] // 2
        with torch.no_grad():
            q = y0[:, :n].detach()
            gq = H.position_constraints(q)
        if gq.dim() != 2 or gq.shape[0] != y0.shape[0] or not 0 < gq.shape[1] < n:
            raise IncompatibleError(
                f"integrator=rattle: position_constraints(q) of q {tuple(q.shape)} must return "
                f"(B, m) with 0 < m < {n}, got {tuple(gq.shape)}"
            )
        Hq, Hp = _grad_H(H, q, y0[:, n:].detach(), False)
        G = _G(H, q, gq.shape[1], False)
        velocity = torch.einsum("bmn,bn->bm", G, Hp)
        tol = self.manifold_tol or MANIFOLD_TOL.get(y0.dtype, 1e-2)
        worst = max(float(gq.abs().max()), float(velocity.abs().max()))
        if not worst <= tol:  # NaN too
            raise UserError(
                f"integrator=rattle: initial states are off the constraint manifold (max |g(q)| = "
                f"{float(gq.abs().max()):.3g}, max |G ∇_p H| = {float(velocity.abs().max()):.3g} "
                f"> manifold_tol {tol:.3g}); project them onto g = 0 and G ∇_p H = 0 first, or "
                f"raise integrator.manifold_tol"
            )
        if self.multipliers(H):
            self._check_separable(H, q, y0[:, n:].detach(), Hq, Hp, who)
        if self.damped(H) and not has(H, Capability.MASS_MATRIX):
            raise IncompatibleError(
                f"integrator=rattle: {who} has friction but no constant mass_matrix() to split it "
                f"off with"
            )

    def _check_separable(self, H, q: Tensor, p: Tensor, Hq: Tensor, Hp: Tensor, who: str) -> None:
        """The multiplier form needs ∇_p H = M⁻¹p and ∇_q H independent of p: checked at the
        initial states (q, p), where ∇H = (Hq, Hp)."""
        if not has(H, Capability.MASS_MATRIX):
            raise IncompatibleError(
                f"integrator.formulation=multipliers needs an H with a constant mass_matrix() "
                f"(H = ½pᵀM⁻¹p + V(q)), but {who} has none; use formulation=general or auto"
            )
        with torch.no_grad():
            off = max(
                float((Hp - p @ _inverse_mass(H, p).T).abs().max()),
                float((Hq - _force(H, q, False)).abs().max()),
            )
            scale = float(torch.cat([Hq, Hp], -1).abs().max())
        if not off <= 1e3 * torch.finfo(q.dtype).eps * (1 + scale):
            raise IncompatibleError(
                f"integrator=rattle: {who} has a mass_matrix() but is not H = ½pᵀM⁻¹p + V(q) with "
                f"that M (|∇H − [∇V, M⁻¹p]| = {off:.3g} at the initial states); set "
                f"integrator.formulation=general"
            )

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2n), with a graph if grad mode is on."""
        return torch.stack([y0, *self.steps(problem, y0, 0, problem.steps)[0]])

    def steps(
        self, problem: Problem, y: Tensor, start: int, end: int, previous: Sequence[Tensor] = ()
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        """[y_{start+1}, …, y_end] from y = y_start, and what the next step reuses: without a
        graph, in the multiplier form, ∇V(q_{n+1}) of step n is ∇V(q_n) of step n+1, carried in
        ``previous`` (so a run continued from it repeats the bits of one call)."""
        if torch.is_grad_enabled() or not self.multipliers(problem.H):
            return problem.step_by_step(y, start, end), ()
        out: list[Tensor] = []
        force = previous[0] if previous else None
        subs = self.substeps(problem)
        damped = self.damped(problem.H)
        for n in range(start, end):
            x = out[-1] if out else y
            for sub in subs:  # the friction flow keeps q, so ∇V(q) carries over it
                x = _friction(sub, x) if damped else x
                X, force = self.solve_multipliers(sub, x, n, force=force)
                x = _output(X, y.shape[-1] // 2)
                x = _friction(sub, x) if damped else x
            out.append(x)
        return out, (() if force is None else (force,))

    def step_of(self, problem: Problem, y: Tensor, n: int) -> Tensor:
        """y_{n+1} from y_n (B, 2n), differentiable when grad mode is on (substep by substep)."""
        damped = self.damped(problem.H)
        for sub in self.substeps(problem):
            y = _friction(sub, y) if damped else y
            if self.implicit_gradient:
                y = _RattleStep.apply(self, sub, n, y, *problem.params())
            else:
                y = _output(
                    self.solve_step(sub, y, n, graph=torch.is_grad_enabled()), y.shape[-1] // 2
                )
            y = _friction(sub, y) if damped else y
        return y

    # ---- solving -----------------------------------------------------------------------------
    def solve_step(
        self, problem: Problem, y: Tensor, n: int, guess: Tensor | None = None, graph: bool = False
    ) -> Tensor:
        """X = (p½, q1, Λ, p1, M) (B, 3n+2m) of step n from y (B, 2n). ``guess``: y_{n+1}, to
        seed Newton (the backward re-solve); else an explicit predictor. ``graph``: keep
        autograd's record of the iterations (``implicit_gradient=False``)."""
        if self.multipliers(problem.H):  # from its own predictor: see _adjoint_multipliers
            return self.solve_multipliers(problem, y, n, graph)[0]
        H, h, d = problem.H, problem.h, y.shape[-1] // 2
        g = H.position_constraints
        if not graph:
            y = y.detach()
        q0, p0 = y[:, :d], y[:, d:]
        m = g(q0).shape[-1]
        G0 = _G(H, q0, m, graph)
        zeros = torch.zeros_like(q0[:, :m])
        # predictor: an explicit half kick and drift with Λ = 0, or (p_n + p_{n+1})/2 and
        # q_{n+1} when re-solving a known step
        if guess is None:
            Hq0, Hp0 = _grad_H(H, q0, p0, graph)
            u = torch.cat([p0 - 0.5 * h * Hq0, q0 + h * Hp0, zeros], -1)
        else:
            u = torch.cat([0.5 * (p0 + guess[:, d:]), guess[:, :d], zeros], -1)

        def first(rows: Tensor, tile: Tile) -> Tensor:
            return _first(H, g, tile(q0), tile(p0), tile(G0), rows, h)

        u = self._newton(
            lambda x: _jacobian(first, x, 2 * d + m, graph),
            lambda x: _first(H, g, q0, p0, G0, x, h, graph),
            u, problem.stats, f"at step {n}",
        )  # fmt: skip
        ph, q1 = u[:, :d], u[:, d : 2 * d]
        G1 = _G(H, q1, m, graph)
        Hq1, _ = _grad_H(H, q1, ph, graph)
        v = torch.cat([ph if guess is None else guess[:, d:], zeros], -1)

        def second(rows: Tensor, tile: Tile) -> Tensor:
            return _second(H, tile(q1), tile(ph), tile(Hq1), tile(G1), rows, h)

        v = self._newton(
            lambda x: _jacobian(second, x, d + m, graph),
            lambda x: _second(H, q1, ph, Hq1, G1, x, h, graph),
            v, problem.stats, f"at step {n} (momentum)",
        )  # fmt: skip
        return torch.cat([u, v], -1)

    def solve_multipliers(
        self, problem: Problem, y: Tensor, n: int, graph: bool = False, force: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """The multiplier form of ``solve_step`` for H = ½pᵀM⁻¹p + V(q) (module doc): Newton on
        g(qt − D0ᵀΛ) = 0 for the m impulses Λ alone (Jacobian −G(q1) D0ᵀ, m × m; no evaluation
        of V), from the unconstrained kick and drift (Λ = 0), then the velocity step's linear
        m × m solve. Returns X and ∇V(q_{n+1}). ``force``: ∇V(q_n) if known."""
        H, h, d = problem.H, problem.h, y.shape[-1] // 2
        with torch.set_grad_enabled(graph and torch.is_grad_enabled()):
            if not graph:
                y = y.detach()
            g = H.position_constraints
            m = g(y[:1, :d]).shape[-1]
            Minv = _inverse_mass(H, y)
            f0 = _force(H, y[:, :d], graph) if force is None else force
            kick = _kick(H, y, f0, Minv, h, m, graph)
            lam = self._impulse(H, kick, graph, problem.stats, f"at step {n}")
            return _finish(H, kick, lam, Minv, h, graph)

    def _impulse(
        self, H, kick: tuple[Tensor, Tensor, Tensor, Tensor], graph: bool,
        stats: SolverStats | None, where: str,
    ) -> Tensor:  # fmt: skip
        """Λ (B, m) with g(qt − D0ᵀΛ) = 0 by ``_newton`` from Λ = 0."""
        g, (_, qt, G0, D0) = H.position_constraints, kick
        m = G0.shape[-2]

        def jacobian(x: Tensor) -> tuple[Tensor, Tensor]:
            q1 = qt - _along(x, D0)
            return g(q1), -_G(H, q1, m, graph) @ D0.transpose(-1, -2)

        lam = torch.zeros_like(qt[:, :m])
        return self._newton(jacobian, lambda x: g(qt - _along(x, D0)), lam, stats, where)

    def _newton(
        self,
        jacobian: Callable[[Tensor], tuple[Tensor, Tensor]],
        residual: Callable[[Tensor], Tensor],
        x: Tensor,
        stats: SolverStats | None,
        where: str,
    ) -> Tensor:
        """Simplified Newton, batched: x ← x − J⁻¹ R(x) with J = ∂R/∂x taken at the first iterate
        and again whenever an update shrinks by less than a factor 1/``REFRESH`` on the one before
        (``jacobian`` gives R and J, ``residual`` R alone); stops when the estimated error is ≤ tol (see module doc)."""
        tol = self.solver.tolerance(x.dtype)
        residual_norm, previous, it = float("inf"), None, 0
        R, J = jacobian(x)
        lu = torch.linalg.lu_factor(J)
        while it < self.max_iter:
            it += 1
            dx = torch.linalg.lu_solve(*lu, -R.unsqueeze(-1)).squeeze(-1)
            x = x + dx
            change = float(dx.detach().abs().max())
            residual_norm, slow = change, False
            if previous is not None:
                slow = not change < REFRESH * previous
                if 0 < change < previous:
                    theta = change / previous
                    residual_norm = min(change, theta / (1 - theta) * change)
            previous = change
            if not residual_norm > tol or it == self.max_iter:  # also stops on NaN
                break
            if slow:  # a Jacobian far from the iterate: take a fresh one
                R, J = jacobian(x)
                lu = torch.linalg.lu_factor(J)
            else:
                R = residual(x)
        conclude("RATTLE's Newton iteration", it, residual_norm, tol, where, self.on_fail, stats)
        return x

    # ---- gradients -------------------------------------------------------------------------
    def adjoint(
        self, problem: Problem, y: Tensor, X: Tensor, lam: Tensor, params: list[Tensor]
    ) -> tuple[Tensor, list[Tensor | None]]:
        """(dL/dy_n, dL/dθ of the step) from λ = dL/dy_{n+1} at the converged X of y_n -> y_{n+1}:
        Jᵀ w = −∂L/∂X, then (∂F/∂y_n)ᵀ w and (∂F/∂θ)ᵀ w (implicit function theorem)."""
        if self.multipliers(problem.H):
            return self._adjoint_multipliers(problem, y, X[:, 2 * (y.shape[-1] // 2) :], lam,
                                             params)  # fmt: skip
        H, h, d = problem.H, problem.h, y.shape[-1] // 2
        K = X.shape[-1]
        m = (K - 3 * d) // 2
        X = X.detach()
        with torch.enable_grad():
            y_ = y.detach().requires_grad_(True)
            _, J = _jacobian(lambda rows, tile: step_residual(H, tile(y_), rows, h), X, K)
            rhs = torch.zeros_like(X)
            rhs[:, d : 2 * d] = -lam[:, :d]
            rhs[:, 2 * d + m : 3 * d + m] = -lam[:, d:]
            w = torch.linalg.solve(J.transpose(1, 2), rhs.unsqueeze(-1)).squeeze(-1)
            F = step_residual(H, y_, X, h)
            grads = torch.autograd.grad(F, [y_, *params], w, allow_unused=True)
        return grads[0], list(grads[1:])

    def step_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        """The stepwise adjoint of step n from its states alone: re-solve X from y_n, seeded by
        y_{n+1}, then ``adjoint``. A composition re-solves its substeps from y_n (as the forward
        did) and runs their adjoints in reverse, the inner ones at those solutions (``adjoint``),
        the last re-solved from its start as a single step is."""
        subs = self.substeps(problem)
        if self.damped(problem.H):
            return self._damped_step_vjp(subs, y, lam, params, n)
        states, solved = [y], []  # the inner substeps' starts and solutions X
        with torch.no_grad():
            for sub in subs[:-1]:
                solved.append(self.solve_step(sub, states[-1], n))
                states.append(_output(solved[-1], y.shape[-1] // 2))
        lam, total = self._substep_vjp(subs[-1], states[-1], y_next, lam, params, n)
        for sub, start, X in zip(reversed(subs[:-1]), reversed(states[:-1]), reversed(solved)):
            lam, grads = self.adjoint(sub, start, X, lam, params)
            total = _sum_grads(total, grads)
        return lam, total

    def _damped_step_vjp(
        self, subs: list[Problem], y: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        """``step_vjp`` of a step with friction: its substeps Φ ∘ RATTLE ∘ Φ re-solved from y_n,
        then, in reverse, autograd's vjp through each Φ and ``adjoint`` at each RATTLE solution."""
        d = y.shape[-1] // 2
        solved = []  # (start of Φ, start of RATTLE, its X)
        with torch.no_grad():
            x = y
            for sub in subs:
                a = _friction(sub, x)
                X = self.solve_step(sub, a, n)
                solved.append((x, a, X))
                x = _friction(sub, _output(X, d))
        total: list[Tensor | None] = [None] * len(params)
        for sub, (x, a, X) in zip(reversed(subs), reversed(solved)):
            lam, grads = _friction_vjp(sub, _output(X, d), lam, params)
            total = _sum_grads(total, grads)
            lam, grads = self.adjoint(sub, a, X, lam, params)
            total = _sum_grads(total, grads)
            lam, grads = _friction_vjp(sub, x, lam, params)
            total = _sum_grads(total, grads)
        return lam, total

    def _substep_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        """``step_vjp`` of one RATTLE step of ``problem.h``."""
        if self.multipliers(problem.H):
            return self._adjoint_multipliers(problem, y, None, lam, params, n)
        with torch.no_grad():
            X = self.solve_step(problem, y, n, guess=y_next)
        return self.adjoint(problem, y, X, lam, params)

    def _adjoint_multipliers(
        self, problem: Problem, y: Tensor, lam_X: Tensor | None, lam: Tensor,
        params: list[Tensor], n: int = 0,
    ) -> tuple[Tensor, list[Tensor | None]]:  # fmt: skip
        """``adjoint`` of the multiplier form. The step is explicit given the impulse Λ,
        y_{n+1} = Y(Λ; y_n, θ), and Λ is implicit in R(Λ; y_n, θ) = g(qt − D0ᵀΛ) = 0, so with
        a = (∂Y/∂(Λ, y_n, θ))ᵀ λ and A = ∂R/∂Λ = −G(q1) D0ᵀ (m × m):
        w = −A⁻ᵀ a_Λ, dL/dy_n = a_y + (∂R/∂y_n)ᵀ w, dL/dθ = a_θ + (∂R/∂θ)ᵀ w.
        ``lam_X``: X[:, 2n:] of the converged step (its first m entries are Λ); None: re-solve
        Λ from y_n (the stepwise adjoint) by the forward's own iteration, from Λ = 0, so that it
        ends where the forward did (seeded by y_{n+1} instead, Newton can start at a distance
        below float32 rounding of g and never see the contraction it stops on). The m × m
        Newton costs no evaluation of V, so the seed would save little."""
        H, h, d = problem.H, problem.h, y.shape[-1] // 2
        g = H.position_constraints
        with torch.enable_grad():
            y_ = y.detach().requires_grad_(True)
            m = g(y_[:1, :d]).shape[-1]
            Minv = _inverse_mass(H, y_)
            kick = _kick(H, y_, _force(H, y_[:, :d], True), Minv, h, m, True)
            if lam_X is None:
                with torch.no_grad():
                    impulse = self._impulse(
                        H, tuple(k.detach() for k in kick), False, problem.stats,
                        f"at step {n} (recomputed in backward)",
                    )  # fmt: skip
            else:
                impulse = lam_X[:, :m]
            impulse = impulse.detach().requires_grad_(True)
            # two graphs: (y_n, θ, Λ) -> (p½, q1) through ∇V(q_n), and (p½, q1, θ) -> y_{n+1}
            # through ∇V(q1), so that each is traversed backwards once
            ph, q1 = _position(kick, impulse)
            ph_, q1_ = ph.detach().requires_grad_(True), q1.detach().requires_grad_(True)
            p1, _, _ = _velocity(H, q1_, ph_, Minv, h, m, True)
            late = torch.autograd.grad(  # retained: M⁻¹'s graph serves both
                torch.cat([q1_, p1], -1), [ph_, q1_, *params], lam, retain_graph=True,
                allow_unused=True,
            )  # fmt: skip
            a_ph, a_q1 = late[0], late[1]
            (a_lam,) = torch.autograd.grad([ph, q1], impulse, [a_ph, a_q1], retain_graph=True)
            with torch.no_grad():
                A = -_G(H, q1_.detach(), m, False) @ kick[3].detach().transpose(-1, -2)
                w = -torch.linalg.solve(A.transpose(-1, -2), a_lam.unsqueeze(-1)).squeeze(-1)
            early = torch.autograd.grad(
                [ph, q1, g(q1)], [y_, *params], [a_ph, a_q1, w], allow_unused=True
            )
        return early[0], _sum_grads(list(early[1:]), list(late[2:]))


def _friction(problem: Problem, y: Tensor) -> Tensor:
    """Φ_{h/2}(y) (B, 2n): the exact friction flow for half of ``problem.h`` at fixed q,
    p ← exp(−h/2 R_pp(q) M⁻¹) p (module doc); differentiable when grad mode is on."""
    H, d = problem.H, y.shape[-1] // 2
    q, p = y[:, :d], y[:, d:]
    decay = torch.linalg.matrix_exp(-0.5 * problem.h * H.friction_matrix(q) @ _inverse_mass(H, y))
    return torch.cat([q, (decay @ p.unsqueeze(-1)).squeeze(-1)], -1)


def _friction_vjp(
    problem: Problem, y: Tensor, lam: Tensor, params: list[Tensor]
) -> tuple[Tensor, list[Tensor | None]]:
    """(dL/dy, dL/dθ) through ``_friction`` at y from λ = dL/dΦ(y)."""
    with torch.enable_grad():
        y_ = y.detach().requires_grad_(True)
        grads = torch.autograd.grad(_friction(problem, y_), [y_, *params], lam, allow_unused=True)
    return grads[0], list(grads[1:])


def _sum_grads(a: list[Tensor | None], b: list[Tensor | None]) -> list[Tensor | None]:
    """a + b per parameter, None counting as zero (autograd's unused parameter)."""
    return [x if z is None else z if x is None else x + z for x, z in zip(a, b)]


def _output(X: Tensor, d: int) -> Tensor:
    """y_{n+1} = (q1, p1) from X = (p½, q1, Λ, p1, M)."""
    m = (X.shape[-1] - 3 * d) // 2
    return torch.cat([X[:, d : 2 * d], X[:, 2 * d + m : 3 * d + m]], -1)


class _RattleStep(torch.autograd.Function):
    """One RATTLE step y_n -> y_{n+1}; backward by the implicit function theorem."""

    @staticmethod
    def forward(ctx, integ: Rattle, problem: Problem, n: int, y: Tensor, *params: Tensor):
        X = integ.solve_step(problem, y, n)
        ctx.integ, ctx.problem = integ, problem
        ctx.save_for_backward(y, X, *params)
        return _output(X, y.shape[-1] // 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, lam: Tensor):
        y, X, *params = ctx.saved_tensors
        grad_y, grad_params = ctx.integ.adjoint(ctx.problem, y, X, lam, params)
        return (None, None, None, grad_y, *grad_params)
