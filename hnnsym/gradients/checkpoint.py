"""Checkpointing: keep only the step states, recompute each step's graph in backward."""

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from hnnsym.gradients.base import GradientMethod, Rollout


class Checkpoint(GradientMethod):
    name = "checkpoint"

    def integrate(self, rollout: Rollout, y0: Tensor) -> Tensor:
        if not torch.is_grad_enabled():
            return rollout.forward(y0)
        ys = [y0]
        for n in range(rollout.steps):
            ys.append(checkpoint(rollout.step, ys[-1], n, use_reentrant=False))
        return torch.stack(ys)
