"""Training on windows of observations (Choudhary et al.), with resume: the epoch loop and checkpoints.

The losses (Choudhary et al.'s rollout loss ``WindowLoss`` and the baselines' ones) are in
``hnnsym.training.losses``; the trainer is the same for all of them.

A run that learned nothing says so (``no_improvement_warning``, printed by ``hnnsym.train`` at
its end): after two or more epochs, its best validation loss is not at least
``NO_IMPROVEMENT_MARGIN`` (1 %) below the first epoch's (which includes a best at epoch 1). Such a
run usually sees data in units its network cannot resolve (a validation loss that stays at the
"no motion" level), a learning rate too large or too small, or too few epochs.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from hnnsym.artifacts import atomic_path, now_utc
from hnnsym.checkpoints import (
    best_path,
    last_path,
    load_checkpoint,
    save_checkpoint,
    trained_options,
)
from hnnsym.config.build import same_model
from hnnsym.config.schemas import TrainOptions
from hnnsym.data.windows import take_windows, window_times
from hnnsym.errors import ConvergenceError, UserError
from hnnsym.ode.problem import SolverStats
from hnnsym.progress import progress
from hnnsym.signals import deferred_signals
from hnnsym.training.losses import LearnedStarts, evaluate_loss
from hnnsym.training.refit import LastLayerRefit


@dataclass
class TrainState:
    """Everything that changes during training and must survive a resume."""

    epoch: int = 0
    history: list[dict] = field(default_factory=list)
    best_val: float = math.inf
    best_epoch: int = -1
    bad_epochs: int = 0
    elapsed: float = 0.0  # wall seconds spent training, summed over resumes
    time_to_best: float = math.nan
    finished: bool = False
    stop_reason: str = ""


NO_IMPROVEMENT_MARGIN = 0.01  # a best val loss above (1 − this) × epoch 1's: nothing learned


def no_improvement_warning(state: TrainState) -> str | None:
    """The one-line ``warning:`` of a run whose validation loss never improved by
    ``NO_IMPROVEMENT_MARGIN`` on its first epoch's (see the module docstring), else None."""
    if len(state.history) < 2:
        return None
    first = float(state.history[0]["val_loss"])
    if state.best_val < (1 - NO_IMPROVEMENT_MARGIN) * first:
        return None
    return (
        f"warning: the validation loss never improved from {first:.4e} (epoch 1; best "
        f"{state.best_val:.4e} at epoch {state.best_epoch} of {state.epoch}): the model learned "
        "nothing; try ingest's scaling (ingest.scale=auto), a smaller train.lr, more "
        "train.epochs, or check the data"
    )


@dataclass
class TrainData:
    """Training trajectories (N, T+1, 2d), fixed validation windows (τ+1, M, 2d), and the
    generator of the batch order and window starts."""

    train: Tensor
    val_windows: Tensor
    generator: torch.Generator


LossFunction = Callable[[nn.Module, Tensor], Tensor]  # a Loss, or any callable giving a scalar

# Fewer optimizer steps per epoch than this is said (before training and on every progress line):
# early stopping counts epochs, so such a run may stop before it has learned anything.
FEW_STEPS = 4
SUGGESTED_STEPS = 8  # the steps per epoch of the batch size suggested then


def steps_per_epoch(trajectories: int, batch_size: int) -> int:
    """Optimizer steps per epoch: one window per trajectory, in batches of ``batch_size``."""
    return -(-trajectories // batch_size)


def few_steps_advice(trajectories: int, batch_size: int) -> str | None:
    """``try train.batch_size=K (S steps per epoch)`` when an epoch has fewer than FEW_STEPS
    optimizer steps, else None."""
    if steps_per_epoch(trajectories, batch_size) >= FEW_STEPS:
        return None
    suggested = max(1, -(-trajectories // SUGGESTED_STEPS))
    if suggested >= batch_size:
        return f"only {trajectories} training trajectories: add data for more steps"
    steps = steps_per_epoch(trajectories, suggested)
    return f"try train.batch_size={suggested} ({steps} steps per epoch)"


class WeightAverage(AveragedModel):
    """An average θ̄ of the optimizer's iterates θ_1, θ_2, ... (one per step):

        θ̄_n = θ̄_{n−1} + a_n (θ_n − θ̄_{n−1}),   a_n = max(1 − β, 1/n),

    the plain mean of the iterates while n <= 1/(1 − β), an exponential moving average with
    decay β (horizon 1/(1 − β) steps) after; β = 1 is stochastic weight averaging (the mean of
    all). Unlike a bare EMA started at θ_1 it forgets the random initialisation at once.
    ``module`` holds θ̄; ``n_averaged`` (a buffer, in the state dict) counts the steps.
    """

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"the weight average's decay must be in (0, 1], got {decay}")
        self.decay = float(decay)
        super().__init__(model, avg_fn=self._average, use_buffers=False)

    def _average(self, averaged: Tensor, current: Tensor, n: Tensor) -> Tensor:
        """θ̄ after the (n+1)-th iterate (n of them averaged before)."""
        weight = max(1.0 - self.decay, 1.0 / (int(n) + 1))
        return averaged + weight * (current - averaged)


class Trainer:
    """Epoch loop, validation, checkpoints (last.pt every epoch, best.pt on improvement).

    With ``options.ema`` the weight average (``WeightAverage``) of the optimizer's iterates is what
    is validated and checkpointed as ``model`` (early stopping, the plateau schedule and best.pt
    see it); the raw weights, which the optimizer keeps stepping, are saved beside it for resume.
    With ``starts`` (``init="learned"``) each batch's windows start from their learned states,
    which take one step per batch after θ's; with segments, the epoch's mean junction defect
    (``LossValue.defect``) is the ``continuity_defect`` column of metrics.csv.
    """

    def __init__(
        self,
        model: nn.Module,
        loss: LossFunction,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        data: TrainData,
        options: TrainOptions,
        run_dir: Path,
        provenance: dict,
        starts: LearnedStarts | None = None,
        refit: LastLayerRefit | None = None,
    ):
        self.model, self.loss, self.optimizer, self.scheduler = model, loss, optimizer, scheduler
        self.train, self.val_windows, self.generator = data.train, data.val_windows, data.generator
        self.options, self.run_dir, self.provenance = options, Path(run_dir), provenance
        self.starts = starts
        self.refit = refit  # train.refit: refit(model, training trajectories), in place
        self.average = None if options.ema is None else WeightAverage(model, options.ema)
        self.state = TrainState()
        # runs the handlers of the signals deferred since its last call; set by fit
        self._safe_point: Callable[[], None] = _no_safe_point

    @property
    def averaging(self) -> bool:
        """Whether the weight average holds any iterate yet (then it is the model of record)."""
        return self.average is not None and int(self.average.n_averaged) > 0

    @property
    def model_of_record(self) -> nn.Module:
        """What is validated and checkpointed: the weight average once it has begun, else θ."""
        return self.average.module if self.averaging else self.model

    # ---- checkpoints -------------------------------------------------------------------------
    @property
    def last_path(self) -> Path:
        return last_path(self.run_dir)

    @property
    def best_path(self) -> Path:
        return best_path(self.run_dir)

    def payload(self) -> dict:
        extra = {}
        if self.average is not None:
            extra["raw_model"] = self.model.state_dict()
            extra["average"] = self.average.state_dict()
        if self.starts is not None:
            extra["learned_states"] = self.starts.states
        return {
            **self.provenance,
            **extra,
            "model": self.model_of_record.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "state": self.state.__dict__.copy(),
            "epoch": self.state.epoch,
            "saved": now_utc(),
        }

    def restore(self, payload: dict, path: Path) -> None:
        """Continue from a checkpoint of this run; refuses one made for another architecture."""
        if not same_model(payload.get("model_config") or {}, self.provenance["model_config"]):
            raise UserError(
                f"checkpoint {path} holds model {payload.get('model_config')}, but the config asks "
                f"for {self.provenance['model_config']}; resume with the overrides it was trained with"
            )
        options = trained_options(payload)
        for key, ours in (("schedule", self.options.schedule), ("ema", self.options.ema),
                          ("init", "learned" if self.starts is not None else None)):  # fmt: skip
            saved = options.get(key, {"schedule": "plateau"}.get(key))
            if key == "init" and saved != "learned":
                saved = None  # observed and smoothed keep no state: either may resume the other
            if saved != ours:
                shown = "null" if saved is None else saved
                raise UserError(f"checkpoint {path} was trained with train.{key}={shown}; "
                                "resume with it")  # fmt: skip
        try:
            self.model.load_state_dict(payload.get("raw_model", payload["model"]))
            if self.average is not None:
                self.average.load_state_dict(payload["average"])
        except RuntimeError as err:
            raise UserError(f"checkpoint {path} does not fit the model: {err}") from err
        if self.starts is not None:
            self.starts.states.copy_(payload["learned_states"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.generator.set_state(payload["generator"])
        torch.set_rng_state(payload["torch_rng"])
        self.state = TrainState(**payload["state"])

    def write_metrics(self) -> None:
        with atomic_path(self.run_dir / "metrics.csv") as tmp:
            pd.DataFrame(self.state.history).to_csv(tmp, index=False)

    # ---- one epoch ---------------------------------------------------------------------------
    def validate(self, model: nn.Module | None = None, loss: LossFunction | None = None) -> float:
        """The validation loss of ``model`` (default: the model of record), in its dtype, by
        ``loss`` (default: the run's)."""
        model = self.model_of_record if model is None else model
        loss = self.loss if loss is None else loss
        dtype = next(model.parameters()).dtype
        total, n = 0.0, self.val_windows.shape[1]
        with torch.no_grad():
            size = self.options.val_batch_size
            for start in range(0, n, size):
                w = self.val_windows[:, start : start + size].to(dtype)
                total += float(loss(model, w)) * w.shape[1]
        return total / n

    def run_epoch(self) -> dict:
        t = self.options
        stats = SolverStats()
        n = self.train.shape[0]
        order = torch.randperm(n, generator=self.generator)
        start = time.perf_counter()
        # the epoch's windows in one gather, the same draws as batch by batch (one start per
        # trajectory, in batch order): the batches' gathers from data that the solves have pushed
        # out of the caches took 0.3 ms each at 512 windows on one CPU core, this 0.2 ms a batch
        epoch_times = window_times(self.train, t.window, order, self.generator)
        epoch_windows = take_windows(self.train, order, epoch_times)
        batches = [slice(i, i + t.batch_size) for i in range(0, n, t.batch_size)]
        running, defect = 0.0, None
        bar = progress(
            batches, desc=f"epoch {self.state.epoch + 1}/{t.epochs}", leave=False,
            enabled=t.progress, dynamic_ncols=True,
        )  # fmt: skip
        for k, batch in enumerate(bar):
            self._safe_point()
            idx, times = order[batch], epoch_times[batch]
            windows = epoch_windows[:, batch].contiguous()
            # None, not zeros: on CUDA a compiled backward's gradients live in the CUDA graphs'
            # pool, which this batch's forward reuses (``compiled.uses_cuda_graphs``)
            self.optimizer.zero_grad(set_to_none=True)
            if self.starts is not None:
                z = self.starts.select(idx, times)
                value = self.loss.evaluate(self.model, windows, y0=z)
            else:
                value = evaluate_loss(self.loss, self.model, windows)
            loss = value.value
            if not torch.isfinite(loss):
                raise _Diverged(f"loss {loss.item()} at epoch {self.state.epoch + 1}, batch {k}")
            loss.backward()
            stats.merge(value.stats)  # after backward: forward and adjoint iterations
            try:
                self.optimizer.step()
            except RuntimeError as err:  # e.g. a step size beyond the dtype's range
                raise _Diverged(f"the optimizer step failed at epoch {self.state.epoch + 1}, "
                                f"batch {k} ({err})") from err  # fmt: skip
            # one reduction and one read-back for all of them (the largest |entry|, NaN if any)
            largest = torch.nn.utils.get_total_norm(self.model.parameters(), math.inf, foreach=True)
            if not math.isfinite(largest):
                raise _Diverged(
                    f"non-finite parameters after the step at epoch {self.state.epoch + 1}, batch {k}"
                )
            if self.starts is not None:
                self.starts.step(z)
            if self.average is not None and self.state.epoch + 1 >= t.ema_start:
                self.average.update_parameters(self.model)
            running += (loss.item() - running) / (k + 1)
            if value.defect is not None:  # the running mean, as for the loss
                d = float(value.defect)
                defect = d if defect is None else defect + (d - defect) / (k + 1)
            bar.set_postfix(loss=f"{running:.3e}")
        val = self.validate()
        if not math.isfinite(val):
            raise _Diverged(f"validation loss {val} at epoch {self.state.epoch + 1}")
        seconds = time.perf_counter() - start
        extra = {} if defect is None else {"continuity_defect": defect}
        return {
            "epoch": self.state.epoch + 1,
            "train_loss": running,
            **extra,
            "val_loss": val,
            "lr": self.optimizer.param_groups[0]["lr"],
            "epoch_time": seconds,
            "wall_time": self.state.elapsed + seconds,
            "solver_mean_iterations": stats.mean_iterations,
            "solver_max_iterations": stats.max_iterations,
            "solver_unconverged": stats.unconverged,
        }

    def fit(self) -> TrainState:
        """Train to the budget or early stop. Signals with Python handlers (Ctrl-C's SIGINT,
        submitit's pre-timeout SIGUSR2) are deferred to the next batch boundary or to after the
        epoch's checkpoints are written (``hnnsym.signals``): last.pt always holds a whole epoch.
        Ctrl-C is then raised as ``Interrupted`` (a KeyboardInterrupt saying what was saved)."""
        with deferred_signals() as self._safe_point:
            try:
                state = self._fit()
                if self.refit is not None and state.finished:
                    self._refit_checkpoints()
                self._safe_point()  # a signal during the last epoch's writes
                return state
            except KeyboardInterrupt:
                if self.state.epoch:
                    saved = (f"{self.last_path} holds epoch {self.state.epoch}; continue with "
                             "train.resume=true")  # fmt: skip
                else:
                    saved = "no epoch had completed, nothing was saved"
                raise Interrupted(saved) from None
            finally:  # epochs run outside ``fit`` (a benchmark's) have no signals deferred
                self._safe_point = _no_safe_point

    def _few_steps(self) -> str:
        """The progress line's warning when an epoch is only a few optimizer steps."""
        n, size = self.train.shape[0], self.options.batch_size
        advice = few_steps_advice(n, size)
        if advice is None:
            return ""
        steps = steps_per_epoch(n, size)
        return f"  [only {steps} optimizer step{'s' if steps > 1 else ''}/epoch: {advice}]"

    def _fit(self) -> TrainState:
        t, s = self.options, self.state
        while s.epoch < t.epochs and not s.finished:
            self._safe_point()
            try:
                row = self.run_epoch()
            except (_Diverged, ConvergenceError) as err:
                where = f"the last good checkpoint is kept at {self.last_path} (epoch {s.epoch})"
                if s.epoch == 0:
                    where = "no epoch completed, so no checkpoint was written"
                what = (
                    "training diverged" if isinstance(err, _Diverged) else "the integrator failed"
                )
                raise UserError(
                    f"{what}: {err}; {where}; try a smaller train.lr, train.substeps > 1 or a "
                    f"larger integrator.max_iter"
                ) from err
            s.epoch += 1
            s.elapsed = row["wall_time"]
            s.history.append(row)
            if isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                self.scheduler.step(row["val_loss"])
            else:
                self.scheduler.step()
            improved = row["val_loss"] < s.best_val * (1 - t.early_stop.min_delta)
            if row["val_loss"] < s.best_val:
                s.best_val, s.best_epoch, s.time_to_best = row["val_loss"], s.epoch, s.elapsed
            s.bad_epochs = 0 if improved else s.bad_epochs + 1
            if s.bad_epochs >= t.early_stop.patience:
                s.finished, s.stop_reason = True, f"validation plateau ({s.bad_epochs} epochs)"
            elif s.epoch >= t.epochs:
                s.finished, s.stop_reason = True, "epoch budget"
            row["best_val_loss"] = s.best_val
            payload = self.payload()
            if s.best_epoch == s.epoch:
                save_checkpoint(self.best_path, payload)
            save_checkpoint(self.last_path, payload)
            self.write_metrics()  # after last.pt: every row of metrics.csv has its checkpoint
            tqdm.write(
                f"epoch {s.epoch:3d}  train {row['train_loss']:.4e}  val {row['val_loss']:.4e}  "
                f"lr {row['lr']:.1e}  {row['epoch_time']:.1f}s" + self._few_steps()
            )
        return s

    def _refit_checkpoints(self) -> None:
        """``train.refit``: the model of record in best.pt and last.pt refit
        (``hnnsym.training.refit``) and kept in float64, with what the refit did and the
        validation loss before and after (both in float64) under the checkpoint's ``refit`` key.
        Once: a checkpoint that has that key (a finished run run again) stays as it is. A fit
        that is no model (a mass that is not > 0, a field the stage solver does not converge on)
        leaves the checkpoint's model as trained, with a note."""
        done: dict[int, dict] = {}  # epoch -> the refit payload entries (best.pt = last.pt)
        for path in (self.best_path, self.last_path):
            payload = load_checkpoint(path)
            if "refit" in payload:
                continue
            epoch = int(payload["epoch"])
            if epoch not in done:
                done[epoch] = self._refit_model(payload["model"], path)
            payload.update(done[epoch])
            save_checkpoint(path, payload)

    def _refit_model(self, state: dict, path: Path) -> dict:
        start = time.perf_counter()
        model = copy.deepcopy(self.model_of_record).to(torch.float64)
        model.load_state_dict(state)
        before = self.validate(model, self.refit.loss)
        try:
            result = self.refit(model, self.train)
            after = self.validate(model, self.refit.loss)
            if not math.isfinite(after):
                raise ValueError(f"its validation loss is {after}")
        except (ValueError, ConvergenceError) as err:
            print(f"note: train.refit={self.options.refit} left {path.name}'s model as trained: "
                  f"the refit model failed ({err})", file=sys.stderr)  # fmt: skip
            return {"refit": {"method": self.options.refit, "skipped": str(err)}}
        seconds = time.perf_counter() - start
        tqdm.write(
            f"refit {path.name}: the last layer by least squares ({result.rank} of "
            f"{result.coefficients} coefficients resolved, {self.train.shape[0]} trajectories); "
            f"val {before:.4e} -> {after:.4e}  {seconds:.1f}s"
        )
        entry = {**result.as_dict(), "val_loss_before": before, "val_loss_after": after,
                 "seconds": seconds}  # fmt: skip
        return {"model": model.state_dict(), "refit": entry}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training; the message says what the run dir holds."""


def _no_safe_point() -> None:
    """``Trainer._safe_point`` outside ``fit``: no signals deferred, nothing to run."""


class _Diverged(RuntimeError):
    pass
