"""Rollouts of a learned model through an integrator: failures recorded per trajectory (by
bisection over trajectories, then over time) instead of raised, so that one diverging trajectory
does not end the evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from hnnsym.errors import ConvergenceError
from hnnsym.ode.integrators import Integrator, get_integrator
from hnnsym.ode.solve import integrate

Hamiltonian = Callable[[Tensor], Tensor]


@dataclass
class RolloutResult:
    """A rollout of ``steps`` observation intervals of ``dt`` (integrated with ``dt / substeps``).

    states: (steps+1, B, 2d), NaN from a trajectory's failure on; fail_step: (B,) the index of the
    first state that could not be computed (-1: none); fail_reason: per trajectory, "" when fine.
    """

    states: Tensor
    fail_step: Tensor
    fail_reason: list[str]
    dt: float
    substeps: int

    @property
    def failed(self) -> Tensor:
        return self.fail_step >= 0

    def valid(self) -> Tensor:
        """(steps+1, B) mask of the states computed before each trajectory's failure."""
        steps = torch.arange(self.states.shape[0], device=self.states.device)[:, None]
        fail = self.fail_step.to(self.states.device)
        return (fail[None, :] < 0) | (steps < fail[None, :])


def rollout(
    H: Hamiltonian,
    y0: Tensor,
    dt: float,
    steps: int,
    integrator: str | Integrator = "implicit_midpoint",
    *,
    substeps: int = 1,
    segment: int = 100,
) -> RolloutResult:
    """Integrate y' = J^-1 ∇H from y0 (B, 2d) for ``steps`` intervals of ``dt``, keeping every state
    at the observation times; each interval is ``substeps`` integrator steps of dt / substeps.

    Never raises on a failing trajectory: a non-converging fixed-point iteration (always treated as
    a failure here, whatever ``on_fail`` the integrator was configured with) or a NaN/Inf state
    ends that trajectory alone; the batch is integrated ``segment`` intervals at a time and a
    failing segment is bisected (over trajectories, then over time) to find who failed and when.
    """
    if int(substeps) != substeps or substeps < 1:
        raise ValueError(f"substeps must be a whole number >= 1, got {substeps}")
    if int(segment) != segment or segment < 1:
        raise ValueError(f"segment must be a whole number >= 1, got {segment}")
    integ = get_integrator(integrator).strict()
    B = y0.shape[0]
    states = torch.full((steps + 1, *y0.shape), math.nan, dtype=y0.dtype, device=y0.device)
    states[0] = y0
    fail_step = torch.full((B,), -1, dtype=torch.long)
    reasons = [""] * B
    alive = torch.isfinite(y0).all(-1).cpu()
    for b in torch.nonzero(~alive).flatten().tolist():
        fail_step[b], reasons[b] = 0, "non-finite initial condition"
    start = 0
    with torch.no_grad():
        while start < steps and bool(alive.any()):
            n = min(segment, steps - start)
            idx = torch.nonzero(alive).flatten()
            part, why = _segment(H, states[start, idx.to(y0.device)], dt, n, substeps, integ)
            bad = (~torch.isfinite(part).all(-1)).cpu()  # (n+1, b)
            first_bad = bad.long().argmax(0)
            for j in torch.nonzero(bad.any(0)).flatten().tolist():
                b, k = int(idx[j]), int(first_bad[j])
                part[k:, j] = math.nan
                fail_step[b] = start + k
                reasons[b] = why.get(j, "NaN/Inf state")
                alive[b] = False
            states[start + 1 : start + n + 1, idx.to(y0.device)] = part[1:]
            start += n
    return RolloutResult(states, fail_step, reasons, float(dt), int(substeps))


def _segment(
    H: Hamiltonian, y: Tensor, dt: float, n: int, substeps: int, integ: Integrator
) -> tuple[Tensor, dict[int, str]]:
    """(n+1, b, 2d) states from y (b, 2d), NaN where a trajectory could not be continued, and the
    reason for the trajectories (by column) whose fixed-point iteration failed."""
    try:
        ys = integrate(H, y, dt / substeps, n * substeps, integ, "backprop")
        return ys[::substeps], {}
    except ConvergenceError:
        reason = "fixed-point iteration did not converge"
        if y.shape[0] > 1:  # bisect over trajectories
            half = y.shape[0] // 2
            (a, why_a), (b, why_b) = (_segment(H, part, dt, n, substeps, integ)
                                      for part in (y[:half], y[half:]))  # fmt: skip
            return torch.cat([a, b], 1), why_a | {half + k: v for k, v in why_b.items()}
        if n > 1:  # one trajectory: bisect over time
            first, why = _segment(H, y, dt, n // 2, substeps, integ)
            if not torch.isfinite(first[-1]).all():
                rest = torch.full((n - n // 2, *y.shape), math.nan, dtype=y.dtype, device=y.device)
                return torch.cat([first, rest]), why
            second, why = _segment(H, first[-1], dt, n - n // 2, substeps, integ)
            return torch.cat([first, second[1:]]), why
        failed = torch.full((1, *y.shape), math.nan, dtype=y.dtype, device=y.device)
        return torch.cat([y[None], failed]), {0: reason}
