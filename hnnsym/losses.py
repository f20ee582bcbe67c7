"""Training losses over windows (τ+1, B, 2d) of observations y_0..y_τ, one per method of Table 1.

Every loss is a callable ``loss(model, windows, stats=None) -> scalar``, summed over the window's
time points and coordinates and averaged over the batch; the model config names it
(``model.loss``, default ``rollout``) and ``build_loss`` makes it. The trainer, the windows, the
optimizer, the schedule and early stopping are the same for all.

``rollout`` (seed 000, eq. 16; also NSSNN and NODE, through their integrators):
    L = Σ_{t=1..τ} ||ŷ_t − y_t||²,   ŷ = integrate(H_θ, ŷ_0, h, τ·substeps)[::substeps]
  with ŷ_0 = y_0 (``init="observed"``) or, ``init="smoothed"``, ŷ_0 = z: the window's initial state
  fitted to all τ+1 observations under the model's own flow, by Gauss–Newton on
  Σ_{t=0..τ} ||Φ_t(z) − y_t||² with ∂Φ_t/∂z ≈ I (the window spans only τh): from z = y_0,
  z ← z + mean_{t=0..τ} (y_t − Φ_t(z)), ``init_iterations`` times (each one rollout without a graph;
  repeated, it converges to the z whose predicted window matches the observations on average,
  which differs from the least-squares z by O(τh)). z is detached: at the minimizer the gradient
  of the profiled loss min_z L(θ, z) is ∂L/∂θ at z (envelope theorem). The noise of z is about
  σ/√(τ+1) instead of σ, and so is the errors-in-variables bias that the noise of y_0 puts on the
  learned field.
``finite_difference_midpoint`` / ``finite_difference_euler`` (SHNN, David & Méhats 2023):
    L = Σ_{t=0..τ−1} ||(y_{t+1} − y_t)/h − f_θ(m_t)||²,  m_t = (y_t + y_{t+1})/2, or (q_{t+1}, p_t)
  no solver in the loop: H_θ is fitted so that the implicit midpoint (symplectic Euler) step of
  H_θ maps y_t to y_{t+1}.
``derivative`` (HNN, Greydanus et al. 2019): central differences,
    L = Σ_{t=1..τ−1} ||(y_{t+1} − y_{t−1})/(2h) − f_θ(y_t)||².
Here f_θ = J⁻¹∇H_θ (``hnnsym.dynamics.vector_field``) and h the observation interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Protocol

import torch
from torch import Tensor, nn

from hnnsym.dynamics import vector_field
from hnnsym.gradients import GradientMethod
from hnnsym.integrators import Integrator, SolverStats
from hnnsym.solve import integrate

INITS = ("observed", "smoothed")


class Loss(Protocol):
    def __call__(
        self, model: nn.Module, windows: Tensor, stats: SolverStats | None = None
    ) -> Tensor: ...


@dataclass
class LossContext:
    """What a loss may be built from: the integrator and gradient method of the run, the
    observation interval ``obs_dt`` and the train options (substeps, segments, init)."""

    integrator: Integrator
    gradient: GradientMethod | str
    obs_dt: float
    substeps: int = 1
    segments: int = 1
    init: str = "observed"
    init_iterations: int = 1


@dataclass
class WindowLoss(LossContext):
    """``rollout``: the training loss of seed 000 over windows (τ+1, B, 2d) of observations, made
    from the run's LossContext; it integrates with step h = obs_dt / substeps.

    With ``segments`` = S > 1 the window is cut into S pieces of τ/S steps, each started from its
    own observed (or smoothed) state (multiple shooting). ``init``: see the module doc.
    """

    @property
    def h(self) -> float:
        return self.obs_dt / self.substeps

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if int(self.init_iterations) != self.init_iterations or self.init_iterations < 1:
            raise ValueError(
                f"init_iterations must be a whole number >= 1, got {self.init_iterations}"
            )

    def rollout(
        self, model: nn.Module, y0: Tensor, windows: Tensor, gradient, stats: SolverStats | None
    ) -> Tensor:
        """The predicted states at the observation times, (τ+1, B, 2d), from y0 (B, 2d)."""
        tau = windows.shape[0] - 1
        guess = None
        if getattr(self.integrator, "predictor", None) == "observed" and self.substeps == 1:
            guess = windows
        traj = integrate(
            model, y0, self.h, tau * self.substeps, self.integrator, gradient,
            guess=guess, stats=stats,
        )  # fmt: skip
        return traj[:: self.substeps]

    def smoothed_start(self, model: nn.Module, windows: Tensor) -> Tensor:
        """z (B, 2d): Gauss–Newton steps (∂Φ_t/∂z ≈ I) fitting the start to the whole window."""
        z = windows[0]
        with torch.no_grad():
            for _ in range(int(self.init_iterations)):
                pred = self.rollout(model, z, windows, "backprop", None)
                z = z + (windows - pred).mean(0)
        return z.detach()

    def __call__(
        self, model: nn.Module, windows: Tensor, stats: SolverStats | None = None
    ) -> Tensor:
        tau = windows.shape[0] - 1
        if self.segments > 1:
            length = tau // self.segments
            windows = torch.cat(
                [windows[k * length : (k + 1) * length + 1] for k in range(self.segments)], dim=1
            )
        y0 = self.smoothed_start(model, windows) if self.init == "smoothed" else windows[0]
        pred = self.rollout(model, y0, windows, self.gradient, stats)
        return ((pred[1:] - windows[1:]) ** 2).sum(dim=(0, 2)).mean()


@dataclass
class FiniteDifferenceLoss:
    """SHNN: forward differences of consecutive observations against f_θ at the scheme's point
    (``point`` "midpoint": (y_t + y_{t+1})/2; "euler": (q_{t+1}, p_t), symplectic Euler)."""

    h: float
    point: str = "midpoint"

    def __post_init__(self):
        if self.point not in ("midpoint", "euler"):
            raise ValueError(f"point must be 'midpoint' or 'euler', got {self.point!r}")

    def __call__(
        self, model: nn.Module, windows: Tensor, stats: SolverStats | None = None
    ) -> Tensor:
        y0, y1 = windows[:-1], windows[1:]
        if self.point == "midpoint":
            at = 0.5 * (y0 + y1)
        else:
            d = windows.shape[-1] // 2
            at = torch.cat([y1[..., :d], y0[..., d:]], dim=-1)
        f = vector_field(model, at.reshape(-1, at.shape[-1])).reshape(at.shape)
        return (((y1 - y0) / self.h - f) ** 2).sum(dim=(0, 2)).mean()


@dataclass
class DerivativeLoss:
    """HNN (Greydanus et al.): central differences (y_{t+1} − y_{t−1})/2h against f_θ(y_t) at the
    window's interior points t = 1..τ−1 (needs τ >= 2)."""

    h: float
    min_window = 2

    def __call__(
        self, model: nn.Module, windows: Tensor, stats: SolverStats | None = None
    ) -> Tensor:
        if windows.shape[0] < 3:
            raise ValueError(
                "the derivative loss needs windows of at least 2 steps (train.window>=2)"
            )
        mid = windows[1:-1]
        target = (windows[2:] - windows[:-2]) / (2 * self.h)
        f = vector_field(model, mid.reshape(-1, mid.shape[-1])).reshape(mid.shape)
        return ((target - f) ** 2).sum(dim=(0, 2)).mean()


LOSSES: dict[str, Callable[[LossContext], Loss]] = {
    "rollout": lambda c: WindowLoss(**{f.name: getattr(c, f.name) for f in fields(c)}),
    "finite_difference_midpoint": lambda c: FiniteDifferenceLoss(c.obs_dt, "midpoint"),
    "finite_difference_euler": lambda c: FiniteDifferenceLoss(c.obs_dt, "euler"),
    "derivative": lambda c: DerivativeLoss(c.obs_dt),
}
# The train options only the rollout loss uses (others must leave them at these values).
ROLLOUT_ONLY = {"substeps": 1, "segments": 1, "init": "observed"}


def build_loss(name: str, context: LossContext) -> Loss:
    """The loss ``name`` (a key of LOSSES) for this run; ValueError for an unknown name or a
    rollout-only option set on another loss."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    if name != "rollout":
        used = [f"train.{k}={getattr(context, k)}" for k, v in ROLLOUT_ONLY.items()
                if getattr(context, k) != v]  # fmt: skip
        if used:
            raise ValueError(
                f"{', '.join(used)} applies to the rollout loss only, not to loss {name}"
            )
    return LOSSES[name](context)
