"""Training losses over windows (τ+1, B, 2d) of observations y_0..y_τ, one per method of Table 1.

Every loss is a callable ``loss(model, windows) -> scalar``, summed over the window's time points
and coordinates and averaged over the batch; ``loss.evaluate(model, windows)`` also returns the
solver statistics of the rollout (``LossValue``). The method config names the loss class
(``method.loss._target_``, ``_partial_: true``) and ``build_loss`` completes it with the run's
``LossContext``. The trainer, the windows, the optimizer, the schedule and early stopping are the
same for all.

``WindowLoss`` (Choudhary et al., eq. 16; also NSSNN and NODE, through their integrators):
    L = Σ_{t=1..τ} ||ŷ_t − y_t||²,   ŷ = integrate(H_θ, ŷ_0, h, τ·substeps)[::substeps]
  with ŷ_0 = y_0 (``init="observed"``; for a constrained model, projected onto its manifold) or, ``init="smoothed"``, ŷ_0 = z: the window's initial state
  fitted to all τ+1 observations under the model's own flow, by Gauss–Newton on
  Σ_{t=0..τ} ||Φ_t(z) − y_t||² with ∂Φ_t/∂z ≈ I (the window spans only τh): from z = y_0,
  z ← z + mean_{t=0..τ} (y_t − Φ_t(z)), ``init_iterations`` times (each one rollout without a graph;
  repeated, it converges to the z whose predicted window matches the observations on average,
  which differs from the least-squares z by O(τh)). z is detached: at the minimizer the gradient
  of the profiled loss min_z L(θ, z) is ∂L/∂θ at z (envelope theorem). The noise of z is about
  σ/√(τ+1) instead of σ, and so is the errors-in-variables bias that the noise of y_0 puts on the
  learned field.
  ``init="learned"`` (SRNN, Chen et al. 2020): ŷ_0 = z, a free state per training observation
  (``LearnedStarts``), refined jointly with θ; the loss then also counts t = 0,
  L = Σ_{t=0..τ} ||ŷ_t − y_t||² (the least-squares fit of a trajectory to its observations).
  Validation windows have no learned states and start from y_0.
  Multiple shooting with ``segments`` = S and ``continuity`` = w > 0 (learned starts only): the
  window's S segments of L = τ/S steps, started from z_0..z_{S−1}, are tied into one trajectory by
  the defects d_k = Φ_L(z_k) − z_{k+1} of their junctions; per window
  J = Σ_{k<S} Σ_{t=0..L} ||Φ_t(z_k) − y_{kL+t}||² + w Σ_{k<S−1} ||d_k||²,
  and the loss is the mean over the windows of J/S (w = 0: the mean of the segments' losses, as
  without the penalty). As w → ∞ it becomes single shooting of the whole window from z_0 (with the
  junction observations counted twice), at any w it keeps S starts free to absorb the noise.
``FiniteDifferenceLoss``, point midpoint / euler (SHNN, David & Méhats 2023):
    L = Σ_{t=0..τ−1} ||(y_{t+1} − y_t)/h − f_θ(m_t)||²,  m_t = (y_t + y_{t+1})/2, or (q_{t+1}, p_t)
  no solver in the loop: H_θ is fitted so that the implicit midpoint (symplectic Euler) step of
  H_θ maps y_t to y_{t+1}.
``DerivativeLoss`` (HNN, Greydanus et al. 2019): central differences,
    L = Σ_{t=1..τ−1} ||(y_{t+1} − y_{t−1})/(2h) − f_θ(y_t)||².
Here f_θ = J⁻¹∇H_θ (``hnnsym.ode.dynamics.vector_field``) and h the observation interval.

Learning from positions only (Aoshima et al.; windows (τ+1, B, d) of positions, τ >= 2, a ``Potential``
model V_θ with mass matrix M; ``hnnsym.ode.lagrangian``):
``Eq12Loss`` (DDLM): the mean over the window's position triples and coordinates of the squared
    residual of Eq. 12, M(q_{t+1} − 2q_t + q_{t−1})/Δt² + ½[∇̄V_θ(q_{t+1}, q_t) + ∇̄V_θ(q_t, q_{t−1})]
    (no solve; ∇̄ the model's discrete gradient, evaluated once per consecutive pair).
``PositionStepLoss`` (the baselines): the mean squared error of the explicit recurrence's
    prediction of q_{t+1} from (q_{t−1}, q_t): leapfrog, symplectic Euler or Euler.
These two are means (the paper's MSE), the losses above sums over time and coordinates. Their
``units`` (``UNITS``) scale the residual r by a power of Δt only: "position" (q̂_{t+1} − q_{t+1})
or "acceleration" (that divided by Δt²: for leapfrog, M⁻¹ times Eq. 13's residual); Eq12Loss is in
acceleration, PositionStepLoss in position units by default. The same minimiser and gradient
direction either way, but Adam's ε is not scale-free: a position-unit residual is Δt² times
smaller, so the second-moment root √v̂ can fall below ε (docs/papers/ddlm.md, "The 2-body column").
A loss says what it learns from (``observes``: "qp" states, "q" positions);
``hnnsym.compatibility.data_problem`` checks the data and the model against it.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from hnnsym.config.build import instantiate
from hnnsym.errors import UserError
from hnnsym.ode.capabilities import has
from hnnsym.ode.discrete_gradient_formulas import discrete_gradient
from hnnsym.ode.dynamics import vector_field
from hnnsym.ode.gradients import GradientMethod
from hnnsym.ode.integrators import Integrator
from hnnsym.ode.lagrangian import EXPLICIT, explicit_step
from hnnsym.ode.problem import SolverStats
from hnnsym.ode.running import StepLoss
from hnnsym.ode.solve import solve, solve_loss
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.constraints import onto_manifold

INITS = ("observed", "smoothed", "learned")
UNITS = ("position", "acceleration")  # of the position-only losses' residuals (module doc)


@dataclass
class LossValue:
    """A loss value and the solver statistics of the rollout behind it (None without a solver;
    a backward pass through ``value`` adds its own iterations to ``stats``)."""

    value: Tensor
    stats: SolverStats | None = None
    defect: Tensor | None = None  # learned segment starts: mean ||Φ_L(z_k) − z_{k+1}|| (detached)


class Loss:
    """Base of the losses: ``evaluate`` gives a LossValue, calling gives its value."""

    min_window = 1  # the shortest train.window the loss accepts
    observes = "qp"  # what its windows hold: (q, p) states, or "q": positions only

    def evaluate(self, model: nn.Module, windows: Tensor) -> LossValue:
        raise NotImplementedError

    def __call__(self, model: nn.Module, windows: Tensor) -> Tensor:
        return self.evaluate(model, windows).value


def evaluate_loss(loss: Callable[[nn.Module, Tensor], Tensor], model: nn.Module,
                  windows: Tensor) -> LossValue:  # fmt: skip
    """``loss.evaluate`` for a Loss; any other callable's value with no statistics."""
    if isinstance(loss, Loss):
        return loss.evaluate(model, windows)
    return LossValue(loss(model, windows))


@dataclass
class LossContext:
    """What a loss may be built from: the integrator and gradient method of the run, the
    observation interval ``obs_dt`` and the train options (substeps, segments, init, continuity)."""

    integrator: Integrator
    gradient: GradientMethod | str
    obs_dt: float
    substeps: int = 1
    segments: int = 1
    init: str = "observed"
    init_iterations: int = 1
    continuity: float = 0.0
    # weight of each state component's squared error, (2d,); None: 1 each (the stored units).
    # train.loss_units=recording sets the squares of the file's state scales (Units.state_scales),
    # so the loss is the squared error in the recording's units, as evaluate scores it.
    weights: tuple[float, ...] | None = None


# the train option behind a LossContext field whose name is not that option's
_OPTION_OF_FIELD = {"weights": "loss_units=recording"}


@dataclass
class WindowLoss(Loss, LossContext):
    """The training loss of Choudhary et al. over windows (τ+1, B, 2d) of observations, made from the run's
    LossContext; it integrates with step h = obs_dt / substeps.

    With ``segments`` = S > 1 the window is cut into S pieces of τ/S steps, each started from its
    own observed (or smoothed) state (multiple shooting). ``init``: see the module doc.

    ``fused=True`` (``+method.loss.fused=true``): the loss goes through ``hnnsym.solve_loss`` as a
    ``StepLoss`` (weights 0 at t = 0 unless it counts, ``every`` = substeps, scale 1/B), so
    checkpoint and symplectic_adjoint fold it into their sweeps and hold only their
    ``keep_every`` checkpoints instead of the window's predicted states: the same value and
    gradient to rounding, less memory over long windows.

    ``weights`` (w_i, one per state component): every squared error is Σ_i w_i (ŷ_i − y_i)²
    (not with learned starts, whose Gauss–Newton steps assume unit weights).
    """

    fused: bool = False

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
        if not (math.isfinite(self.continuity) and self.continuity >= 0):
            raise ValueError(f"continuity must be finite and >= 0, got {self.continuity}")
        if self.weights is not None and not all(math.isfinite(w) and w > 0 for w in self.weights):
            raise ValueError(f"weights must be finite and > 0, got {self.weights}")
        if self.weights is not None and self.init == "learned":
            raise ValueError(
                "init=learned moves its starts by unweighted Gauss–Newton steps; "
                "train.loss_units=recording takes init=observed or smoothed"
            )
        if self.weights is not None and self.fused:
            raise ValueError(
                "fused=true takes no per-component weights (train.loss_units=recording); "
                "leave one of them at its default"
            )

    def squared_error(self, pred: Tensor, target: Tensor) -> Tensor:
        """Σ_i w_i (pred_i − target_i)² over the last axis (w_i = 1 without ``weights``)."""
        error = (pred - target) ** 2
        if self.weights is not None:
            error = error * error.new_tensor(self.weights)
        return error.sum(-1)

    def rollout(
        self, model: nn.Module, y0: Tensor, windows: Tensor, gradient
    ) -> tuple[Tensor, SolverStats]:
        """The predicted states at the observation times, (τ+1, B, 2d), from y0 (B, 2d), and the
        solver statistics. A constrained model (``position_constraints``, ``mass_matrix``) starts
        from y0 projected onto its manifold (``hnnsym.physics.constraints.onto_manifold``). A
        model with momenta of its own (``ModelCapability.OWN_MOMENTA``) observes (q, q̇): y0 and
        the windows are observations, the start is ``to_state(q₀, q̇₀)`` and its states are
        mapped back by ``to_observation``, so the loss compares (q, q̇)."""
        tau = windows.shape[0] - 1
        own = has(model, ModelCapability.OWN_MOMENTA)
        if own:
            d = y0.shape[-1] // 2
            y0, guess = model.to_state(y0[..., :d], y0[..., d:]), None
        else:
            y0, guess = self._start(model, y0, windows)
        solution = solve(
            model, y0, self.h, tau * self.substeps, self.integrator, gradient, guess=guess
        )
        ys = solution.ys[:: self.substeps]
        if own:
            ys = torch.cat(model.to_observation(ys), -1)
        return ys, solution.stats

    def _start(self, model: nn.Module, y0: Tensor, windows: Tensor) -> tuple[Tensor, Tensor | None]:
        """The rollout's start (on a constrained model's manifold) and stage-solver guess (the
        observed states, for ``predictor="observed"`` without substeps)."""
        guess = None
        if getattr(self.integrator, "predictor", None) == "observed" and self.substeps == 1:
            guess = windows
        return onto_manifold(model, y0), guess

    def smoothed_start(self, model: nn.Module, windows: Tensor) -> Tensor:
        """z (B, 2d): Gauss–Newton steps (∂Φ_t/∂z ≈ I) fitting the start to the whole window."""
        z = windows[0]
        with torch.no_grad():
            for _ in range(int(self.init_iterations)):
                pred, _ = self.rollout(model, z, windows, "backprop")
                z = z + (windows - pred).mean(0)
        return z.detach()

    def evaluate(self, model: nn.Module, windows: Tensor, y0: Tensor | None = None) -> LossValue:
        """The loss of ``windows`` (τ+1, B, 2d); ``y0`` (S·B, 2d, segment-major: row k·B + b is
        segment k of window b) gives the starts (learned ones), and the loss then counts t = 0,
        adds the continuity penalty and reports the junctions' defect (module doc)."""
        tau, batch = windows.shape[0] - 1, windows.shape[1]
        if self.segments > 1:
            length = tau // self.segments
            windows = torch.cat(
                [windows[k * length : (k + 1) * length + 1] for k in range(self.segments)], dim=1
            )
        first = 1
        if y0 is not None:
            first = 0
        elif self.init == "smoothed":
            y0 = self.smoothed_start(model, windows)
        else:
            y0 = windows[0]
        if self.fused and has(model, ModelCapability.OWN_MOMENTA):
            raise UserError(
                "method.loss.fused=true compares the solver's own states, but a model with "
                "momenta of its own is compared in (q, q̇); leave fused at false"
            )
        if self.fused:
            value, last, stats = self.fused_value(model, y0, windows, first)
        else:
            pred, stats = self.rollout(model, y0, windows, self.gradient)
            value = self.squared_error(pred[first:], windows[first:]).sum(0).mean()
            last = pred[-1]
        if first or self.segments == 1:
            return LossValue(value, stats)
        width = y0.shape[-1]
        ends, starts = last.reshape(self.segments, batch, width), y0.reshape(-1, batch, width)
        defect = self.squared_error(ends[:-1], starts[1:])  # (S−1, B): ||d_k||² per junction
        if self.continuity:
            value = value + self.continuity * defect.sum() / (self.segments * batch)
        return LossValue(value, stats, defect.detach().sqrt().mean())

    def fused_value(
        self, model: nn.Module, y0: Tensor, windows: Tensor, first: int
    ) -> tuple[Tensor, Tensor, SolverStats]:
        """(Σ_{t=first..τ} ||ŷ_t − y_t||² averaged over the batch, the last states ŷ_τ, the
        solver statistics), through ``solve_loss``: no trajectory is held."""
        tau = windows.shape[0] - 1
        y0, guess = self._start(model, y0, windows)
        weights = torch.ones(tau + 1, dtype=windows.dtype, device=windows.device)
        weights[:first] = 0
        loss = StepLoss(windows.detach(), weights, self.substeps, 1.0 / windows.shape[1])
        solution = solve_loss(
            model, y0, self.h, tau * self.substeps, loss, self.integrator, self.gradient,
            guess=guess,
        )  # fmt: skip
        return solution.value, solution.last, solution.stats


class LearnedStarts:
    """Free start states of ``init="learned"`` (SRNN): one per training observation,
    ``states`` (N, T+1, 2d), initialised at the observations. A window at times s..s+τ of
    trajectory n cut into S segments of L = τ/S steps starts segment k from states[n, s + kL].

    They are refined by plain SGD on each window's own loss ℓ_b = Σ_{t=0..L} ||Φ_t(z) − y_t||²:
    z ← z − lr ∂ℓ_b/∂z, once per optimizer step of θ, only the starts of the batch moving.
    With ∂Φ_t/∂z ≈ I, ∂²ℓ_b/∂z² ≈ 2(L+1) I, and lr = 1/(2(L+1)) would be a Gauss–Newton step
    (z jumps to the start that fits the window under the current flow); the flow stretches some
    directions (by e^{Lh} near the double well's saddle), which makes that step overshoot, so the
    default (``default_lr``) is half of it, 1/(4(L+1)): the error contracts by about half per
    step while the mean of ∂Φ_tᵀ∂Φ_t stays below 4. With the continuity penalty w (``WindowLoss``)
    the window's loss is J of the module doc, each z_k is the start of one junction and the end
    of another, ∂²J/∂z_k² ≈ 2(L+1+2w) I, and the default is again half of that step,
    1/(4(L+1+2w)).
    """

    def __init__(self, observed: Tensor, segments: int, lr: float):
        self.states = observed.detach().clone()
        self.segments, self.lr = int(segments), float(lr)
        self._where: tuple[Tensor, Tensor] | None = None

    @staticmethod
    def default_lr(window: int, segments: int, continuity: float = 0.0) -> float:
        """Half a Gauss–Newton step, 1/(4(L+1+2w)) for L = window/segments (class doc)."""
        return 1.0 / (4 * (window // segments + 1 + 2 * continuity))

    def select(self, batch_index: Tensor, times: Tensor) -> Tensor:
        """The starts (S·B, 2d), segment-major as ``WindowLoss.evaluate`` takes them, of the
        windows at ``times`` (B, τ+1) of trajectories ``batch_index`` (B,): a leaf that requires
        grad, for ``step``."""
        length = (times.shape[1] - 1) // self.segments
        rows = batch_index.to(self.states.device)[:, None]
        cols = times[:, : self.segments * length : length]  # (B, S) segment starts
        self._where = (rows, cols)
        z = self.states[rows, cols].transpose(0, 1).reshape(-1, self.states.shape[-1])
        return z.detach().requires_grad_(True)

    def step(self, z: Tensor) -> None:
        """Move the starts ``select`` gave by z.grad, the gradient of a loss that is the mean of
        the windows' losses over the S·B rows (so z.grad · S·B is ∂ℓ_b/∂z, or ∂J/∂z_k)."""
        if z.grad is None or self._where is None:
            raise RuntimeError("LearnedStarts.step needs the z of select() after backward()")
        rows, cols = self._where
        moved = (z - self.lr * z.shape[0] * z.grad).detach()
        self.states[rows, cols] = moved.reshape(self.segments, -1, z.shape[-1]).transpose(0, 1)
        self._where = None


@dataclass
class FiniteDifferenceLoss(Loss):
    """SHNN: forward differences of consecutive observations against f_θ at the scheme's point
    (``point`` "midpoint": (y_t + y_{t+1})/2; "euler": (q_{t+1}, p_t), symplectic Euler)."""

    obs_dt: float
    point: str = "midpoint"

    def __post_init__(self):
        if self.point not in ("midpoint", "euler"):
            raise ValueError(f"point must be 'midpoint' or 'euler', got {self.point!r}")

    def evaluate(self, model: nn.Module, windows: Tensor) -> LossValue:
        y0, y1 = windows[:-1], windows[1:]
        if self.point == "midpoint":
            at = 0.5 * (y0 + y1)
        else:
            d = windows.shape[-1] // 2
            at = torch.cat([y1[..., :d], y0[..., d:]], dim=-1)
        f = vector_field(model, at.reshape(-1, at.shape[-1])).reshape(at.shape)
        return LossValue((((y1 - y0) / self.obs_dt - f) ** 2).sum(dim=(0, 2)).mean())


@dataclass
class DerivativeLoss(Loss):
    """HNN (Greydanus et al.): central differences (y_{t+1} − y_{t−1})/2h against f_θ(y_t) at the
    window's interior points t = 1..τ−1 (needs τ >= 2)."""

    obs_dt: float
    min_window = 2

    def evaluate(self, model: nn.Module, windows: Tensor) -> LossValue:
        if windows.shape[0] < 3:
            raise ValueError(
                "the derivative loss needs windows of at least 2 steps (train.window>=2)"
            )
        mid = windows[1:-1]
        target = (windows[2:] - windows[:-2]) / (2 * self.obs_dt)
        f = vector_field(model, mid.reshape(-1, mid.shape[-1])).reshape(mid.shape)
        return LossValue(((target - f) ** 2).sum(dim=(0, 2)).mean())


@dataclass
class Eq12Loss(Loss):
    """DDLM (Aoshima et al.): mean squared residual of Eq. 12 over the position triples of windows
    (τ+1, B, d), τ >= 2, for a ``Potential`` model (V_θ, its mass matrix and discrete gradient)."""

    obs_dt: float
    units: str = "acceleration"  # or "position": the residual times Δt² (module doc)
    min_window = 2
    observes = "q"

    def __post_init__(self):
        _check_units(self.units)

    def evaluate(self, model: nn.Module, windows: Tensor) -> LossValue:
        if windows.shape[0] < 3:
            raise ValueError("Eq. 12 needs windows of at least 2 steps (train.window>=2)")
        steps, B, d = windows.shape[0] - 1, windows.shape[1], windows.shape[2]
        u, v = windows[1:].reshape(-1, d), windows[:-1].reshape(-1, d)
        dg = discrete_gradient(model, u, v, model.discrete_gradient, model.avf_nodes)
        dg = dg.reshape(steps, B, d)  # ∇̄V(q_{t+1}, q_t), t = 0..τ-1
        second = windows[2:] - 2 * windows[1:-1] + windows[:-2]
        residual = second @ model.mass_matrix().T / self.obs_dt**2 + 0.5 * (dg[1:] + dg[:-1])
        if self.units == "position":
            residual = residual * self.obs_dt**2
        return LossValue((residual**2).mean())


@dataclass
class PositionStepLoss(Loss):
    """The position-only baselines of Aoshima et al.: mean squared error of the explicit recurrence's
    q_{t+1} (``scheme`` leapfrog | symplectic_euler | euler) from (q_{t−1}, q_t) over windows
    (τ+1, B, d), τ >= 2, for a ``Potential`` model."""

    obs_dt: float
    scheme: str = "leapfrog"
    units: str = "position"  # or "acceleration": the residual divided by Δt² (module doc)
    min_window = 2
    observes = "q"

    def __post_init__(self):
        if self.scheme not in EXPLICIT:
            raise ValueError(f"scheme must be one of {EXPLICIT}, got {self.scheme!r}")
        _check_units(self.units)

    def evaluate(self, model: nn.Module, windows: Tensor) -> LossValue:
        if windows.shape[0] < 3:
            raise ValueError("a position recurrence needs windows of at least 2 steps")
        d = windows.shape[-1]
        q_prev, q = windows[:-2].reshape(-1, d), windows[1:-1].reshape(-1, d)
        pred = explicit_step(self.scheme, model, model.mass_matrix(), q_prev, q, self.obs_dt)
        residual = pred - windows[2:].reshape(-1, d)
        if self.units == "acceleration":
            residual = residual / self.obs_dt**2
        return LossValue((residual**2).mean())


def _check_units(units: str) -> None:
    if units not in UNITS:
        raise ValueError(f"units must be one of {UNITS}, got {units!r}")


def build_loss(partial: Callable[..., Loss], context: LossContext) -> Loss:
    """Complete a configured loss (a class or ``functools.partial`` from ``_target_`` with
    ``_partial_: true``) with the fields of the run's context that it takes. ValueError when the
    context sets a train option (substeps, segments, init) away from its default and the loss
    does not take it (only losses that integrate use them)."""
    accepted = inspect.signature(partial).parameters
    taken, unused = {}, []
    for f in fields(context):
        value = getattr(context, f.name)
        if f.name in accepted:
            taken[f.name] = value
        elif f.default is not MISSING and value != f.default:
            unused.append(f"train.{_OPTION_OF_FIELD.get(f.name, f'{f.name}={value}')}")
    name = getattr(getattr(partial, "func", partial), "__name__", str(partial))
    if unused:
        raise ValueError(f"{', '.join(unused)} applies to losses that integrate, not to {name}")
    return partial(**taken)


def build_run_loss(method: DictConfig, context: LossContext) -> Loss:
    """``method.loss`` (a partial loss class) completed with the run's LossContext."""
    partial = instantiate(method.loss, "method.loss")
    try:
        return build_loss(partial, context)
    except (TypeError, ValueError) as err:
        raise UserError(f"method.loss: {err}") from err
