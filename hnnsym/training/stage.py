"""The train stage: ``train(cfg)`` learns H_θ from the data file that ``generate`` wrote for the
same overrides, into ``cfg.run_dir`` (checkpoints, metrics.csv, config.yaml)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from hnnsym.artifacts import (
    claim_output_dir,
    exclusive_dir,
    mark_output_dir,
    remove_stale_temporaries,
    requeued,
    write_text,
)
from hnnsym.checkpoints import (
    best_path,
    last_path,
    load_checkpoint,
    provenance,
    resume_from,
)
from hnnsym.compatibility import (
    coordinates_problem,
    data_problem,
    momenta_problem,
    recording_model_config,
)
from hnnsym.config.build import (
    build_gradient,
    build_integrator,
    build_model,
    build_optimizer,
    build_scheduler,
)
from hnnsym.config.runtime import configure, resolve_dtype
from hnnsym.config.schemas import validated
from hnnsym.data.chains import tracked_points
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.units import Units
from hnnsym.data.velocities import velocity_map
from hnnsym.data.windows import random_windows, strided_windows
from hnnsym.errors import UserError
from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.pendulums import CONSTRAINED_SYSTEMS
from hnnsym.physics.systems import MEASURED, system_from_config
from hnnsym.training.losses import LearnedStarts, LossContext, build_run_loss
from hnnsym.training.refit import LastLayerRefit, refit_problem
from hnnsym.training.trainer import (
    TrainData,
    Trainer,
    TrainState,
    few_steps_advice,
    steps_per_epoch,
)

# Shown when two jobs of a sweep would write one run dir.
_RUN_DIR_HINT = (
    "; if it is another job of this sweep, jobs that differ only in keys outside run_name need "
    "their own run_dir, e.g. 'run_dir=outputs/${run_name}/lr${train.lr}'"
)


@dataclass
class TrainResult:
    state: TrainState
    run_dir: Path
    best: Path
    last: Path


def train(cfg: DictConfig) -> TrainResult:
    """Validate ``cfg``, read the data, lock the run dir, build the parts and train."""
    validated(cfg, "system", "noise", "train")
    t = cfg.train
    device, dtype = configure(cfg), resolve_dtype(cfg.dtype)
    data_file = Path(cfg.data_file)
    node = OmegaConf.to_container(cfg.system, resolve=True)
    if node["name"] == MEASURED and "dim" not in (node.get("params") or {}):  # d is the file's
        node["params"] = {"dim": read_dataset(data_file, system=MEASURED, splits=()).attrs["dim"]}
    try:
        system = system_from_config(node)
    except (TypeError, ValueError) as err:
        raise UserError(str(err)) from err
    data = read_dataset(
        data_file, system=system.name, dim=system.dim, splits=("train", "val"), arrays=(),
        memory_limit=cfg.memory_limit,
    )  # fmt: skip
    stored = data.attrs.get("system_params") or {}
    # systems whose parameters (beyond dim) the file must match: a custom H, and the constrained
    # systems' masses and lengths (files of other masses share the path)
    if (system.name == "custom" or system.name in CONSTRAINED_SYSTEMS) and (
        differ := [k for k, v in system.params.items() if stored.get(k) != v]
    ):
        raise UserError(
            f"{data_file} holds another {system.name} system: its system.{differ[0]} is "
            f"{stored.get(differ[0])!r}, the config's {system.params[differ[0]]!r}; train with the "
            "system overrides it was generated with"
        )
    asked = OmegaConf.to_container(cfg.model, resolve=True)
    if (adapted := recording_model_config(asked, system.name, data.attrs)) is not asked:
        with open_dict(cfg):
            cfg.model = adapted
    model_periodic(cfg, Units.from_attrs(data.attrs, system.dim).periodic, data_file)
    obs_dt = float(data.attrs["obs_dt"])
    angles = list(cfg.model.get("periodic") or [])
    trajectories = torch.as_tensor(
        near_zero(data.splits["train"].observed[: t.max_train], angles), dtype=dtype, device=device
    )
    val = torch.as_tensor(
        near_zero(data.splits["val"].observed[: t.max_val], angles), dtype=dtype, device=device
    )
    if t.window > trajectories.shape[1] - 1:
        raise UserError(
            f"train.window={t.window} is longer than the trajectories "
            f"({trajectories.shape[1] - 1} steps)"
        )
    n = trajectories.shape[0]
    if advice := few_steps_advice(n, t.batch_size):
        steps = steps_per_epoch(n, t.batch_size)
        said = (
            f"{'exceeds' if t.batch_size > n else 'equals'} the {n} training trajectories: each "
            "epoch is one optimizer step on all of them"
            if t.batch_size >= n
            else f"makes {steps} optimizer steps per epoch of the {n} training trajectories"
        )
        print(
            f"note: train.batch_size={t.batch_size} {said}, and early stopping (after "
            f"train.early_stop.patience={t.early_stop.patience} epochs) may end the run before it "
            f"has learned; {advice}",
            file=sys.stderr,
        )
    run_dir = claim_output_dir(
        cfg.run_dir, "train", bool(t.overwrite), "train.overwrite",
        own_files=("checkpoints/last.pt",), what="the run directory",
    )  # fmt: skip
    with exclusive_dir(run_dir, "train", _RUN_DIR_HINT):
        # a run killed mid-write (SIGKILL, OOM) leaves its writes' temporaries: this job owns them
        for written in (run_dir / "metrics.csv", run_dir / "config.yaml",
                        last_path(run_dir), best_path(run_dir)):  # fmt: skip
            remove_stale_temporaries(written)
        resume = t.resume
        if requeued() and resume is False:  # this job's own run, begun before its requeue
            resume = "auto"
        checkpoint = resume_from(run_dir, resume, t.overwrite)
        trainer = build_trainer(cfg, run_dir, trajectories, val, obs_dt, system.dim, data_file,
                                {"name": system.name, "params": dict(system.params)},
                                data.attrs)  # fmt: skip
        if checkpoint is not None:
            trainer.restore(load_checkpoint(checkpoint), checkpoint)
            print(f"resuming {run_dir} from epoch {trainer.state.epoch}")
        mark_output_dir(run_dir, "train", "the run directory")
        write_text(run_dir / "config.yaml", OmegaConf.to_yaml(trainer.provenance["config"]))
        state = trainer.fit()
    return TrainResult(state, run_dir, trainer.best_path, trainer.last_path)


def model_periodic(cfg: DictConfig, angles: tuple[int, ...], data_file: Path) -> None:
    """Set ``model.periodic: null`` (the model configs' default) to the positions the data file
    declares angles (its ``units`` attribute; none without it), so the model sees them through
    (cos q, sin q) and the checkpoint's model config names them; a list the user gave stays."""
    if "periodic" not in cfg.model:
        if angles:
            print(
                f"note: {data_file} declares positions {list(angles)} angles, but model "
                f"{cfg.model.get('name')} takes no model.periodic: it sees them as plain numbers",
                file=sys.stderr,
            )
        return
    if cfg.model.periodic is None:
        cfg.model.periodic = list(angles)
    if cfg.model.periodic:
        print(f"model.periodic={list(cfg.model.periodic)}: these positions enter as (cos, sin)")


def near_zero(observed: np.ndarray, angles: list[int]) -> np.ndarray:
    """Each trajectory (N, T+1, width) with its ``angles`` (positions the model sees through
    cos/sin) shifted by the multiple of 2π that brings its first value into [−π, π]: the model
    and the loss (differences of q) see the same trajectory, and an unwrapped recording many
    turns from 0 keeps its resolution in float32 (ulp 7.6e-6 at 100 rad, above the stage
    solver's tolerance). In float64, before the cast to the training dtype."""
    if not angles:
        return observed
    out = np.array(observed, dtype=np.float64)
    turns = np.round(out[:, :1, angles] / (2 * np.pi))
    out[..., angles] -= 2 * np.pi * turns
    return out


def observed_velocities(
    model: torch.nn.Module, system: dict, attrs: dict, data_file: Path, *states: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The file's (q, p) states (N, T+1, 2d) as the (q, q̇) a model with momenta of its own
    observes (``hnnsym.data.velocities``); UserError where the file gives no q̇."""
    known = system_from_config(system)
    if problem := momenta_problem(model, known, attrs, states[0], str(data_file)):
        raise UserError(problem)
    mapping = velocity_map(known, attrs)
    with torch.no_grad():
        return tuple(mapping.to_velocities(s.to(torch.float64)).to(s.dtype) for s in states)


def recording_weights(units: Units, width: int, velocities: bool) -> tuple[float, ...]:
    """The squares of the scales that take each component of a training window to the
    recording's units: (a, b) of ``Units.state_scales`` for (q, p) states, and a_i / time for
    the rates of a model that observes (q, q̇) (``velocities``)."""
    scales = units.state_scales(width)
    if velocities and width == 2 * units.dim:
        scales = np.concatenate([units.q, np.asarray(units.q) / units.time])
    return tuple(float(s) ** 2 for s in scales)


def build_trainer(
    cfg: DictConfig,
    run_dir: Path,
    trajectories: torch.Tensor,
    val: torch.Tensor,
    obs_dt: float,
    dim: int,
    data_file: Path,
    system: dict,
    attrs: dict | None = None,
) -> Trainer:
    """The Trainer of this run: model, loss, optimizer and scheduler from their ``_target_``
    configs, the seeded generators, fixed validation windows, and the provenance. ``attrs``: the
    data file's attributes (what q̇ is, for a model with momenta of its own)."""
    t = cfg.train
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, dim).to(device=trajectories.device, dtype=trajectories.dtype)
    if has(model, ModelCapability.OWN_MOMENTA):
        trajectories, val = observed_velocities(model, system, attrs or {}, data_file,
                                                trajectories, val)  # fmt: skip
    generator = torch.Generator().manual_seed(cfg.seed)
    val_generator = torch.Generator().manual_seed(cfg.seed + 1_000_003)
    val_window = t.window if t.val_window is None else t.val_window
    if t.val_stride is None:
        val_windows = random_windows(val, val_window, torch.arange(val.shape[0]), val_generator)
    else:
        val_windows = strided_windows(val, val_window, t.val_stride)
    try:
        integrator = build_integrator(cfg.integrator)
        gradient = build_gradient(cfg.gradient)
    except ValueError as err:
        raise UserError(str(err)) from err
    weights = None
    if t.loss_units == "recording":
        units = Units.from_attrs(attrs or {}, dim)
        weights = recording_weights(
            units, trajectories.shape[-1], has(model, ModelCapability.OWN_MOMENTA)
        )
    context = LossContext(integrator, gradient, obs_dt, int(t.substeps), int(t.segments),
                          str(t.init), int(t.init_iterations), float(t.continuity),
                          weights)  # fmt: skip
    loss = build_run_loss(cfg.method, context)
    if t.window < loss.min_window:
        raise UserError(
            f"method {cfg.method.name}'s loss needs train.window >= {loss.min_window}, "
            f"got {t.window}"
        )
    width = trajectories.shape[-1]  # states (2d) or positions only (d): what the loss must take
    observes = getattr(loss, "observes", "qp")
    if problem := data_problem(observes, width, dim, model, cfg.method.name, str(data_file)):
        raise UserError(problem)
    if problem := coordinates_problem(system["name"], model, tracked_points(attrs or {})):
        raise UserError(problem)
    refit = None
    if t.refit is not None:
        if problem := refit_problem(model, integrator, int(t.substeps), width):
            raise UserError(problem)
        eager = replace(context, integrator=replace(integrator, compile=False))
        refit = LastLayerRefit(obs_dt, weights, build_run_loss(cfg.method, eager))
    optimizer = build_optimizer(t, model)
    scheduler = build_scheduler(t, optimizer)
    container = OmegaConf.to_container(cfg, resolve=True)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    starts = None
    if t.init == "learned":
        lr = t.init_lr
        if lr is None:
            lr = LearnedStarts.default_lr(t.window, t.segments, float(t.continuity))
        starts = LearnedStarts(trajectories, t.segments, lr)
    return Trainer(
        model, loss, optimizer, scheduler,
        TrainData(trajectories, val_windows, generator), OmegaConf.to_object(t), run_dir,
        provenance(container, model_cfg, dim, system, data_file), starts, refit,
    )  # fmt: skip
