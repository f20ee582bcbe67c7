"""Rollouts of a learned model through an integrator: failures recorded per trajectory (by
bisection over trajectories, then over time) instead of raised, so that one diverging trajectory
does not end the evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hnnsym.data.velocities import VelocityMap
from hnnsym.errors import ConvergenceError
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.integrators import Integrator, get_integrator
from hnnsym.ode.solve import integrate
from hnnsym.physics.capabilities import ModelCapability

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


class InDataCoordinates(nn.Module):
    """A model with momenta of its own (``ModelCapability.OWN_MOMENTA``) seen in a data file's
    (q, p) coordinates through its ``VelocityMap`` v (``hnnsym.data.velocities``): a data state y
    is the model state s(y) = to_state(v.to_velocities(y)); H(y) = H_θ(s(y)) (the same energy,
    the map keeps (q, q̇)); the field ẏ = ∂y/∂s · f_θ(s) (a Jacobian-vector product of the map
    back); the damping matrix the model's (it reads q only)."""

    def __init__(self, model: nn.Module, velocities: VelocityMap):
        super().__init__()
        self.model, self.velocities = model, velocities
        self.capabilities = frozenset(
            {Capability.HAMILTONIAN, Capability.OWN_FIELD}
            | ({ModelCapability.DAMPING} & set(model.capabilities))
        )

    def state(self, y: Tensor) -> Tensor:
        x = self.velocities.to_velocities(y)
        d = x.shape[-1] // 2
        return self.model.to_state(x[..., :d], x[..., d:])

    def observation(self, s: Tensor) -> Tensor:
        return self.velocities.to_momenta(torch.cat(self.model.to_observation(s), -1))

    def forward(self, y: Tensor) -> Tensor:
        return self.model(self.state(y))

    def damping_matrix(self, y: Tensor) -> Tensor:
        return self.model.damping_matrix(y)

    def vector_field(self, y: Tensor) -> Tensor:
        with torch.enable_grad():
            s = self.state(y).detach().requires_grad_(True)
            ds = self.model.vector_field(s).detach()
            _, dy = torch.autograd.functional.jvp(self.observation, s, ds)
        return dy

    def rollout(self, y0: Tensor, dt: float, steps: int, integrator: str | Integrator, *,
                substeps: int = 1, segment: int = 100) -> RolloutResult:  # fmt: skip
        """``rollout`` of the model in its own states from s(y0), mapped back to (q, p)."""
        with torch.no_grad():
            result = rollout(self.model, self.state(y0), dt, steps, integrator,
                             substeps=substeps, segment=segment)  # fmt: skip
            states = torch.full_like(result.states, math.nan)
            ok = torch.isfinite(result.states).all(-1)
            states[ok] = self.observation(result.states[ok])
        result.states = states
        return result


def model_rollout(
    model: nn.Module, y0: Tensor, dt: float, steps: int, integrator: str | Integrator, *,
    velocities: VelocityMap | None = None, substeps: int = 1, segment: int = 100,
) -> RolloutResult:  # fmt: skip
    """``rollout`` of ``model`` from data states y0; a model with momenta of its own goes
    through its own states (``InDataCoordinates.rollout``, ``velocities`` the file's map)."""
    seen = in_data_coordinates(model, velocities)
    if isinstance(seen, InDataCoordinates):
        return seen.rollout(y0, dt, steps, integrator, substeps=substeps, segment=segment)
    return rollout(model, y0, dt, steps, integrator, substeps=substeps, segment=segment)


def in_data_coordinates(model: nn.Module, velocities: VelocityMap | None) -> nn.Module:
    """The model as a function of the data's states (``InDataCoordinates`` where it has momenta
    of its own), for energies and fields on data states."""
    if velocities is not None and has(model, ModelCapability.OWN_MOMENTA):
        return InDataCoordinates(model, velocities)
    return model
