"""What every gradient method shares: the capability check and the stepwise backward loop."""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.errors import IncompatibleError
from hnnsym.ode.problem import Problem

# What an integrator capability means, for the message when a gradient method needs it.
CAPABILITIES = {
    "has_stages": "Runge–Kutta stage equations (integrator=tao and reversible_leapfrog have none: "
    "use gradient=backprop, or gradient=reversible with reversible_leapfrog)",
    "reversible": "a bitwise-reversible step: integrator=reversible_leapfrog",
}


class GradientMethod:
    """How a problem is differentiated. Subclasses implement ``integrate`` and list the integrator
    capabilities they need in ``needs``."""

    name = "base"
    needs: tuple[str, ...] = ()

    def check(self, problem: Problem) -> None:
        """Raise IncompatibleError when this method cannot differentiate this problem."""
        for capability in self.needs:
            if not getattr(problem.integrator, capability, False):
                raise IncompatibleError(
                    f"gradient={self.name} needs an integrator with {CAPABILITIES[capability]}; "
                    f"integrator={problem.integrator.name} has none"
                )

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        raise NotImplementedError


class StepwiseAdjoint(GradientMethod):
    """Needs an integrator with stages.
    Forward without a graph, keeping only the N+1 states; backward one step at a time:
    for n = N-1 ... 0, ``step_vjp`` turns λ = dL/dy_{n+1} into dL/dy_n and step n's dL/dθ, and the
    loss's own jump ∂L/∂y_n is added. Memory: the states plus one step's graph."""

    needs = ("has_stages",)

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        return _StepwiseFunction.apply(self, problem, y0, *problem.params())

    def step_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        raise NotImplementedError


class _StepwiseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, method: StepwiseAdjoint, problem: Problem, y0: Tensor, *params: Tensor):
        with torch.no_grad():
            traj = problem.trajectory(y0.detach())
        ctx.method, ctx.problem = method, problem
        ctx.save_for_backward(traj, *params)
        return traj

    @staticmethod
    def backward(ctx, grad_traj: Tensor):
        traj, *params = ctx.saved_tensors
        method, problem = ctx.method, ctx.problem
        grad_params: list[Tensor | None] = [None] * len(params)
        lam = grad_traj[-1]
        for n in reversed(range(problem.steps)):
            lam, step_grads = method.step_vjp(problem, traj[n], traj[n + 1], lam, params, n)
            lam = lam + grad_traj[n]
            for i, g in enumerate(step_grads):
                if g is not None:
                    grad_params[i] = g if grad_params[i] is None else grad_params[i] + g
        return (None, None, lam, *grad_params)
