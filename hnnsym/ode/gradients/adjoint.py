"""The continuous adjoint of Choudhary et al. (approximate).

Backward from t_N to t_0 with step -h and the forward integrator, on the augmented system

    y' = f(y),    λ' = -(∂f/∂y)ᵀ λ,

starting from y_N (the state is re-integrated backward, nothing is stored per step). At every
observation time the loss's jump is added, λ(t_n) += ∂L/∂y_n (Choudhary et al.'s code seeds λ only at the
final time), and dL/dθ = ∫ λᵀ ∂f/∂θ dt is accumulated on the fly by the trapezoidal rule.

This is the gradient of the continuous problem, discretized. Its dL/dθ differs from the exact
gradient of the discrete solution by O(h²) whatever the integrator (the trapezoidal quadrature;
tests/ode/test_gradient_methods.py measures 2.0 for midpoint, GL4 and RK4). Its dL/dy0 is exact for
Gauss–Legendre (a symplectic RK method on the augmented system is its own discrete adjoint, and a
symmetric method stepped back retraces the states) and O(h^p) or better otherwise (RK4: measured
5). Only plain (non-partitioned) RK tableaux.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.errors import IncompatibleError
from hnnsym.ode.gradients.base import GradientMethod
from hnnsym.ode.problem import Problem


class Adjoint(GradientMethod):
    name = "adjoint"
    needs = ("has_stages",)

    def check(self, problem: Problem) -> None:
        super().check(problem)
        if problem.integrator.partitioned:
            raise IncompatibleError(
                f"gradient=adjoint needs a plain Runge–Kutta integrator, not the partitioned "
                f"{problem.integrator.name}; use gradient=symplectic_adjoint (exact) instead"
            )

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        return _AdjointFunction.apply(problem, y0, *problem.params())


def _param_vjp(problem: Problem, y: Tensor, lam: Tensor, params: list[Tensor]) -> list[Tensor]:
    """(∂f/∂θ (y))ᵀ λ for each parameter (zeros where unused)."""
    if not params:
        return []
    with torch.enable_grad():
        fy = problem.f(y.detach().requires_grad_(True), create_graph=True)
        grads = torch.autograd.grad(fy, params, lam, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


class _AdjointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, problem: Problem, y0: Tensor, *params: Tensor):
        with torch.no_grad():
            traj = problem.trajectory(y0.detach())
        ctx.problem = problem
        ctx.save_for_backward(traj[-1], *params)  # only the final state is kept
        return traj

    @staticmethod
    def backward(ctx, grad_traj: Tensor):
        y, *params = ctx.saved_tensors
        problem = ctx.problem
        n = y.shape[-1]

        def augmented(z: Tensor) -> Tensor:
            with torch.enable_grad():
                yz = z[..., :n].detach().requires_grad_(True)
                fy = problem.f(yz, create_graph=True)
                (vjp,) = torch.autograd.grad(fy, yz, z[..., n:])
            return torch.cat([fy.detach(), -vjp], -1)

        lam = grad_traj[-1]
        a_next = _param_vjp(problem, y, lam, params)
        grad_params = [torch.zeros_like(p) for p in params]
        for k in reversed(range(problem.steps)):
            with torch.no_grad():
                z = problem.integrator.step(
                    augmented, torch.cat([y, lam], -1), -problem.h, 2 * n, stats=problem.stats,
                    where=f"at step {k} of the backward adjoint",
                )  # fmt: skip
            y, lam = z[..., :n], z[..., n:]
            a_here = _param_vjp(problem, y, lam, params)
            for i in range(len(params)):
                grad_params[i] += 0.5 * problem.h * (a_here[i] + a_next[i])
            lam = lam + grad_traj[k]
            a_next = [a + g for a, g in zip(a_here, _param_vjp(problem, y, grad_traj[k], params))]
        return (None, lam, *grad_params)
