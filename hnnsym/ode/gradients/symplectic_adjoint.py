"""Exact, memory-efficient gradients: the symplectic adjoint method (seed 001).

Forward runs without a graph and keeps only the N+1 states. Backward, for n = N-1 ... 0, with
λ = dL/dy_{n+1} (the loss's own jump ∂L/∂y_{n+1} added):

  1. recompute the stages K of step n from y_n, seeded by y_{n+1} (a one-stage method with b = 1,
     i.e. implicit midpoint or symplectic Euler, needs no solve: K = (y_{n+1} - y_n) / h);
  2. build the graph of f alone at the stage states Y_i = y_n + h Σ_j a_ij K_j, F_i = f(Y_i);
  3. solve the adjoint stage equations  μ = h (b ⊗ λ) + (∂F/∂K)ᵀ μ,  with
     (∂F/∂K)ᵀ μ = h Aᵀ v and v = Df(Y)ᵀ μ one vector–Jacobian product, by fixed-point iteration
     (stopped on the contraction estimate θ/(1-θ)|Δμ|, Hairer & Wanner IV.8);
  4. λ_n = λ + Σ_i v_i,   dL/dθ += (∂F/∂θ)ᵀ μ.

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

from hnnsym.ode.gradients.base import StepwiseAdjoint
from hnnsym.ode.integrators.stage_solver import FixedPoint
from hnnsym.ode.problem import Problem


class SymplecticAdjoint(StepwiseAdjoint):
    name = "symplectic_adjoint"

    def __init__(self, adjoint_solver: FixedPoint | None = None):
        self.adjoint_solver = adjoint_solver

    def step_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        """(dL/dy_n, dL/dθ contribution of step n) given λ = dL/dy_{n+1}."""
        integ, h, n_q = problem.integrator, problem.h, y.shape[-1] // 2
        tab = integ.tableau
        with torch.no_grad():
            if tab.stages == 1 and tab.b_q == tab.b_p == (1.0,):
                K = ((y_next - y) / h).unsqueeze(0)  # y_{n+1} = y_n + h K: midpoint, sympl. Euler
            else:
                K = integ.solve_stages(
                    problem.f, y, h, n_q, problem.separable, guess=y_next, stats=problem.stats,
                    where=f"at step {n} (recomputed in backward)",
                )  # fmt: skip
            Y = integ.stage_states(y, K, h, n_q)
        s, B, dim = Y.shape
        a_q, _, a_p, _ = tab.coefficients(y.dtype, y.device)
        g = h * integ.weights(y, n_q) * lam.unsqueeze(0)
        solver = self.adjoint_solver or integ.solver
        with torch.enable_grad():
            # F_i = f(Y_i) with Y_i = y + h Σ_j a_ij K_j: the graph is f's alone, at the stages.
            Y_ = Y.reshape(s * B, dim).detach().requires_grad_(True)
            F = problem.f(Y_, create_graph=True)

            def adjoint_map(mu: Tensor) -> Tensor:
                """g + (∂F/∂K)ᵀ μ = g + h Aᵀ (Df(Y)ᵀ μ), with a_q on q and a_p on p."""
                (v,) = torch.autograd.grad(F, Y_, mu.reshape(s * B, dim), retain_graph=True)
                v = v.reshape(s, B, dim)
                return g + h * torch.cat(
                    [
                        torch.einsum("ij,ibn->jbn", a_q, v[..., :n_q]),
                        torch.einsum("ij,ibn->jbn", a_p, v[..., n_q:]),
                    ],
                    dim=-1,
                )

            mu = solver.iterate(
                adjoint_map, g, 1.0, problem.stats, f"in the adjoint of step {n}", relative=True,
                x_from_zero=True,
            )  # fmt: skip
            grads = torch.autograd.grad(F, [Y_, *params], mu.reshape(s * B, dim), allow_unused=True)
        # (∂F/∂y)ᵀ μ = Σ_i Df(Y_i)ᵀ μ_i
        return lam + grads[0].reshape(s, B, dim).sum(0), list(grads[1:])
