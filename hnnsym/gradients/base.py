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
