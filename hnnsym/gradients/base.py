"""What every gradient method shares: the rollout problem and the plain forward loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hnnsym.dynamics import vector_field
from hnnsym.integrators import Integrator, SolverStats


@dataclass
class Rollout:
    """One call of ``integrate``: H, the integrator, step h, number of steps, and the options.

    ``guess`` (steps+1, B, 2d), if given, seeds each step's stage iteration with the observed next
    state (the "observed" predictor of seed 000).
    """

    H: Callable[[Tensor], Tensor]
    integrator: Integrator
    h: float
    steps: int
    guess: Tensor | None = None
    stats: SolverStats | None = None

    @property
    def separable(self) -> bool:
        return bool(getattr(self.H, "separable", False))

    def params(self) -> list[Tensor]:
        """H's trainable parameters (empty for an analytic H)."""
        if isinstance(self.H, nn.Module):
            return [p for p in self.H.parameters() if p.requires_grad]
        return []

    def f(self, y: Tensor, create_graph: bool | None = None) -> Tensor:
        return vector_field(self.H, y, create_graph)

    def step(self, y: Tensor, n: int, h: float | None = None, f=None) -> Tensor:
        """y_{n+1} from y_n (differentiable when grad mode is on)."""
        guess = None
        if self.guess is not None and self.integrator.predictor == "observed":
            guess = self.guess[n + 1]
        return self.integrator.step(
            f or self.f, y, self.h if h is None else h, y.shape[-1] // 2, self.separable, guess,
            self.stats, f"at step {n}",
        )  # fmt: skip

    def forward(self, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d), with a graph if grad mode is on."""
        ys = [y0]
        for n in range(self.steps):
            ys.append(self.step(ys[-1], n))
        return torch.stack(ys)


class GradientMethod:
    """How a rollout is differentiated. Subclasses implement ``integrate``."""

    name = "base"

    def check(self, rollout: Rollout) -> None:
        """Raise ValueError when this method cannot differentiate this rollout."""

    def integrate(self, rollout: Rollout, y0: Tensor) -> Tensor:
        raise NotImplementedError


class StepwiseAdjoint(GradientMethod):
    """Forward without a graph, keeping only the N+1 states; backward one step at a time:
    for n = N-1 ... 0, ``step_vjp`` turns λ = dL/dy_{n+1} into dL/dy_n and step n's dL/dθ, and the
    loss's own jump ∂L/∂y_n is added. Memory: the states plus one step's graph."""

    def integrate(self, rollout: Rollout, y0: Tensor) -> Tensor:
        return _StepwiseFunction.apply(self, rollout, y0, *rollout.params())

    def step_vjp(
        self, rollout: Rollout, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        raise NotImplementedError


class _StepwiseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, method: StepwiseAdjoint, rollout: Rollout, y0: Tensor, *params: Tensor):
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
            lam, step_grads = method.step_vjp(rollout, traj[n], traj[n + 1], lam, params, n)
            lam = lam + grad_traj[n]
            for i, g in enumerate(step_grads):
                if g is not None:
                    grad_params[i] = g if grad_params[i] is None else grad_params[i] + g
        return (None, None, lam, *grad_params)
