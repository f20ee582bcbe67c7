"""Exact, memory-efficient gradients: the symplectic adjoint method (seed 001).

Forward runs without a graph and keeps only the N+1 states. Backward, for n = N-1 ... 0, with
λ = dL/dy_{n+1} (the loss's own jump ∂L/∂y_{n+1} added):

  1. recompute the stages K of step n from y_n (seeded by y_{n+1}, so midpoint needs one pass);
  2. build the graph of one step's stage equations K = F(K, y_n), F_i = f(Y_i);
  3. solve the adjoint stage equations  μ = h (b ⊗ λ) + (∂F/∂K)ᵀ μ  by fixed-point iteration on
     vector–Jacobian products;
  4. λ_n = λ + (∂F/∂y)ᵀ μ,   dL/dθ += (∂F/∂θ)ᵀ μ.

With μ_i = h b_i Λ_i, step 3 reads Λ_i = λ + h Σ_j (b_j a_ji / b_i) Df(Y_j)ᵀ Λ_j: the adjoint
system integrated with the symplectic partner tableau A*_ij = b_j (1 - a_ji / b_i) (Gauss–Legendre
is its own partner). Written in μ it needs no division by b_i and serves partitioned tableaux
(leapfrog, symplectic Euler) and explicit ones (rk4, where ∂F/∂K is nilpotent and the iteration
ends exactly after at most s passes) alike. The result is the exact gradient of the discrete
solution, up to rounding and the solver tolerances. Memory: N states + one step's graph.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.gradients.base import GradientMethod, Rollout
from hnnsym.integrators import FixedPoint


class SymplecticAdjoint(GradientMethod):
    name = "symplectic_adjoint"

    def __init__(self, adjoint_solver: FixedPoint | None = None):
        self.adjoint_solver = adjoint_solver

    def integrate(self, rollout: Rollout, y0: Tensor) -> Tensor:
        params = rollout.params()
        return _SymplecticAdjointFunction.apply(self, rollout, y0, *params)

    def step_vjp(
        self, rollout: Rollout, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        """(dL/dy_n, dL/dθ contribution of step n) given λ = dL/dy_{n+1}."""
        integ, h, n_q = rollout.integrator, rollout.h, y.shape[-1] // 2
        with torch.no_grad():
            K = integ.solve_stages(
                rollout.f, y, h, n_q, rollout.separable, guess=y_next, stats=rollout.stats,
                where=f"at step {n} (recomputed in backward)",
            )  # fmt: skip
        solver = self.adjoint_solver or integ.solver
        with torch.enable_grad():
            y_ = y.detach().requires_grad_(True)
            K_ = K.detach().requires_grad_(True)
            F = integ.stage_equations(lambda Y: rollout.f(Y, create_graph=True), y_, K_, h, n_q)
            g = h * integ.weights(y, n_q) * lam.unsqueeze(0)

            def adjoint_map(mu: Tensor) -> Tensor:
                (vjp,) = torch.autograd.grad(F, K_, mu, retain_graph=True, allow_unused=True)
                return g if vjp is None else g + vjp

            mu = solver.iterate(
                adjoint_map, g, 1.0, rollout.stats, f"in the adjoint of step {n}", relative=True
            )
            grads = torch.autograd.grad(F, [y_, *params], mu, allow_unused=True)
        return lam + grads[0], list(grads[1:])


class _SymplecticAdjointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, method: SymplecticAdjoint, rollout: Rollout, y0: Tensor, *params: Tensor):
        with torch.no_grad():
            traj = rollout.forward(y0.detach())
        ctx.method, ctx.rollout = method, rollout
        ctx.save_for_backward(traj, *params)
        return traj

    @staticmethod
    def backward(ctx, grad_traj: Tensor):
        traj, *params = ctx.saved_tensors
        method, rollout = ctx.method, ctx.rollout
        grad_params: list[Tensor | None] = [None] * len(params)
        lam = grad_traj[-1]
        for n in reversed(range(rollout.steps)):
            lam, gp = method.step_vjp(rollout, traj[n], traj[n + 1], lam, params, n)
            lam = lam + grad_traj[n]
            for i, g in enumerate(gp):
                if g is not None:
                    grad_params[i] = g if grad_params[i] is None else grad_params[i] + g
        return (None, None, lam, *grad_params)
