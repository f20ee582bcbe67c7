"""Checkpointing: keep only the step states; in backward, recompute each step with its graph (the
fixed-point iterations included, as backprop differentiates them) and backpropagate through it.

``torch.utils.checkpoint`` is not used: its non-reentrant mode unpacks (recomputes) during the
forward whenever the step calls ``torch.autograd.grad`` for ∇H, which made it ~5x slower than
backprop; the stepwise function below does the same job with one step's graph at a time.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.ode.gradients.base import StepwiseAdjoint
from hnnsym.ode.integrators import Previous
from hnnsym.ode.problem import Problem


class Checkpoint(StepwiseAdjoint):
    name = "checkpoint"
    needs = ("step_of",)  # any integrator with a one-step map (RATTLE's step is an exact adjoint)

    def advance(
        self, problem: Problem, y: Tensor, start: int, end: int, previous: Previous = ()
    ) -> tuple[list[Tensor], Previous]:
        """Each step from its state alone (``step_of``, no predictor history): the backward
        recomputes each step that way, with its graph, and must repeat the forward's bits."""
        return problem.step_by_step(y, start, end), ()

    def step_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        with torch.enable_grad():
            y_ = y.detach().requires_grad_(True)
            grads = torch.autograd.grad(
                problem.integrator.step_of(problem, y_, n), [y_, *params], lam, allow_unused=True
            )
        return grads[0], list(grads[1:])
