"""Running losses: L = Σ_n ℓ_n(y_n) over the states of one rollout, for ``solve_loss``.

A stepwise gradient method (checkpoint, symplectic_adjoint) folds such a loss into its sweeps: the
forward adds ℓ_n(y_n) as it steps and keeps only its checkpoints, the backward adds the jump
∂ℓ_n/∂y_n to λ when it passes step n (recomputing y_n from the checkpoints), so nothing of size
steps × B × 2d is ever held (the standard adjoint with a running cost). Every other method takes
the plain path: the trajectory, then ``loss.value(ys)``, the same function.

A loss is evaluated on blocks of consecutive states: ``terms(states, start)`` is
Σ_{n=start..start+m−1} ℓ_n(states[n − start]) and ``jumps(states, start)`` its gradient with
respect to ``states`` (m, B, 2d). Targets and weights are data: constants of the gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor


class RunningLoss:
    """L = Σ_{n=0..N} ℓ_n(y_n). Subclasses implement ``terms``; ``jumps`` defaults to autograd on
    ``terms`` (a closed form is faster)."""

    def check(self, steps: int, y0: Tensor) -> None:
        """Raise ValueError when the loss does not fit a rollout of ``steps`` steps from y0."""

    def terms(self, states: Tensor, start: int) -> Tensor:
        """Σ_n ℓ_n(y_n) over n = start..start+m−1, states (m, B, 2d) = y_start..: a scalar."""
        raise NotImplementedError

    def jumps(self, states: Tensor, start: int) -> Tensor:
        """∂ terms(states, start) / ∂states: (m, B, 2d)."""
        with torch.enable_grad():
            x = states.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self.terms(x, start), x)
        return g

    def value(self, ys: Tensor) -> Tensor:
        """L of a whole trajectory ys (N+1, B, 2d), differentiable (the plain path)."""
        return self.terms(ys, 0)


class StepLoss(RunningLoss):
    """Weighted squared error against targets at every ``every``-th state:

        L = scale · Σ_t w_t Σ_{b,i} (y_{t·every} − target_t)_{b,i}²,   t = 0..T−1,

    targets (T, B, 2d) with T = ⌊N/every⌋ + 1 (the states ``ys[::every]``), weights (T,) (default
    ones; 0 drops a time point), ``scale`` a number: 1/(T·B·2d) makes it the mean over the whole
    trajectory, 1/B a sum over time and coordinates averaged over the batch (``WindowLoss``).
    """

    def __init__(
        self, targets: Tensor, weights: Tensor | None = None, every: int = 1, scale: float = 1.0
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a whole number >= 1, got {every!r}")
        if targets.dim() != 3:
            raise ValueError(f"targets must have shape (T, B, 2d), got {tuple(targets.shape)}")
        if targets.requires_grad or (weights is not None and weights.requires_grad):
            raise ValueError("StepLoss targets and weights are data: detach them")
        if weights is not None and weights.shape != targets.shape[:1]:
            raise ValueError(
                f"weights must have shape ({targets.shape[0]},), got {tuple(weights.shape)}"
            )
        self.targets, self.weights, self.every, self.scale = targets, weights, every, float(scale)

    def check(self, steps: int, y0: Tensor) -> None:
        want = (steps // self.every + 1, *y0.shape)
        if tuple(self.targets.shape) != want:
            raise ValueError(
                f"StepLoss targets must have shape {want} for {steps} steps with every="
                f"{self.every}, got {tuple(self.targets.shape)}"
            )

    def _select(self, states: Tensor, start: int) -> tuple[slice, slice]:
        """(rows of ``states``, rows of the targets) of the observed states in the block."""
        first = -start % self.every  # first row whose step is a multiple of every
        t0 = (start + first) // self.every
        count = len(range(first, states.shape[0], self.every))
        return slice(first, None, self.every), slice(t0, t0 + count)

    def _weighted(self, x: Tensor, rows: slice) -> Tensor:
        """scale · w_t · x (x: (T', B, 2d) over the target rows ``rows``)."""
        if self.weights is not None:
            x = self.weights[rows].to(x.dtype)[:, None, None] * x
        return self.scale * x

    def terms(self, states: Tensor, start: int) -> Tensor:
        rows, t = self._select(states, start)
        diff = states[rows] - self.targets[t]
        return self._weighted(diff**2, t).sum()

    def jumps(self, states: Tensor, start: int) -> Tensor:
        rows, t = self._select(states, start)
        out = torch.zeros_like(states)
        out[rows] = self._weighted(2 * (states[rows] - self.targets[t]), t)
        return out
