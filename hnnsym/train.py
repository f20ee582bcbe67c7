"""python -m hnnsym.train — learn H_θ from the data file that ``generate`` wrote for these overrides."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from hnnsym.artifacts import exclusive_dir, load_checkpoint, write_text
from hnnsym.cli import UserError, configure, exits_cleanly, resolve_dtype
from hnnsym.data import random_windows, read_dataset
from hnnsym.gradients import get_gradient
from hnnsym.integrators import integrator_from_config
from hnnsym.losses import LossContext, build_loss
from hnnsym.models import model_from_config
from hnnsym.schemas import validated
from hnnsym.systems import get_system
from hnnsym.training import Trainer, provenance


def check_config(cfg: DictConfig) -> None:
    """Types (hnnsym.schemas), then the ranges and cross-field rules of the train section."""
    t = validated(cfg, "system", "noise", "train").train
    for key in ("epochs", "batch_size", "window", "segments", "substeps", "val_batch_size"):
        if t[key] < 1:
            raise UserError(f"train.{key} must be >= 1, got {t[key]}")
    if not t.lr > 0:
        raise UserError(f"train.lr must be > 0, got {t.lr}")
    if t.window % t.segments:
        raise UserError(
            f"train.window ({t.window}) must be a multiple of train.segments ({t.segments})"
        )
    if cfg.integrator.predictor == "observed" and t.substeps != 1:
        raise UserError("integrator.predictor=observed needs train.substeps=1")


def prepare_run_dir(run_dir: Path, resume: bool | str, overwrite: bool) -> Path | None:
    """The checkpoint to resume from, or None for a fresh run; refuses to clobber a run.
    ``resume="auto"``: resume when there is a checkpoint (a finished run stays as it is), else
    start fresh — what sweeps that may be re-run want."""
    last = run_dir / "checkpoints" / "last.pt"
    if resume == "auto":
        resume = last.exists()
    elif not isinstance(resume, bool):
        raise UserError(f"train.resume must be true, false or auto, got {resume!r}")
    if resume:
        if not last.exists():
            raise UserError(f"train.resume=true but there is no checkpoint at {last}")
        return last
    if last.exists() and not overwrite:
        raise UserError(
            f"{run_dir} already holds a run; pass train.resume=true to continue it or "
            f"train.overwrite=true to replace it"
        )
    return None


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    check_config(cfg)
    t = cfg.train
    device, dtype = configure(cfg), resolve_dtype(cfg.dtype)
    system = get_system(cfg.system.name, **cfg.system.params)
    data_file = Path(cfg.data_file)
    data = read_dataset(data_file, system=system.name, dim=system.dim, splits=("train", "val"))
    obs_dt = float(data.attrs["obs_dt"])
    train = torch.as_tensor(
        data.splits["train"].observed[: t.max_train], dtype=dtype, device=device
    )
    val = torch.as_tensor(data.splits["val"].observed[: t.max_val], dtype=dtype, device=device)
    if t.window > train.shape[1] - 1:
        raise UserError(
            f"train.window={t.window} is longer than the trajectories ({train.shape[1] - 1} steps)"
        )
    if t.batch_size > train.shape[0]:
        print(
            f"note: train.batch_size={t.batch_size} exceeds the {train.shape[0]} training "
            "trajectories; each epoch is one batch of all of them",
            file=sys.stderr,
        )

    run_dir = Path(cfg.run_dir)
    in_use = (
        "; jobs that differ only in keys outside run_name need their own run_dir, e.g. "
        "'run_dir=outputs/${run_name}/lr${train.lr}'"
    )
    with exclusive_dir(run_dir, "train", in_use):
        fit(cfg, run_dir, system, train, val, obs_dt, device, dtype, data_file)


def fit(cfg: DictConfig, run_dir: Path, system, train, val, obs_dt: float, device, dtype,
        data_file: Path) -> None:  # fmt: skip
    """Build model, loss and trainer for this run (its dir locked) and train."""
    t = cfg.train
    resume_from = prepare_run_dir(run_dir, t.resume, t.overwrite)
    torch.manual_seed(cfg.seed)
    model = model_from_config(cfg.model, system.dim).to(device=device, dtype=dtype)
    generator = torch.Generator().manual_seed(cfg.seed)
    val_generator = torch.Generator().manual_seed(cfg.seed + 1_000_003)
    val_windows = random_windows(val, t.window, torch.arange(val.shape[0]), val_generator)

    try:
        integrator = integrator_from_config(OmegaConf.to_container(cfg.integrator, resolve=True))
        gradient = get_gradient(cfg.gradient.name)
        context = LossContext(integrator, gradient, obs_dt, int(t.substeps), int(t.segments),
                              t.get("init", "observed"), int(t.get("init_iterations", 1)))  # fmt: skip
        loss = build_loss(cfg.model.get("loss", "rollout"), context)
    except ValueError as err:
        raise UserError(str(err)) from err
    if t.window < getattr(loss, "min_window", 1):
        raise UserError(
            f"loss {cfg.model.get('loss')} needs train.window >= {loss.min_window}, got {t.window}"
        )
    container = OmegaConf.to_container(cfg, resolve=True)
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    system_info = {"name": system.name, "params": dict(system.params)}
    trainer = Trainer(
        model, loss, train, val_windows, cfg, run_dir, generator,
        provenance(container, model_cfg, system.dim, system_info, data_file),
    )  # fmt: skip
    if resume_from is not None:
        trainer.restore(load_checkpoint(resume_from), resume_from)
        print(f"resuming {run_dir} from epoch {trainer.state.epoch}")
    write_text(run_dir / "config.yaml", OmegaConf.to_yaml(container))
    try:
        state = trainer.fit()
    except KeyboardInterrupt:
        saved = (
            f"{trainer.last_path} holds epoch {trainer.state.epoch}; continue with train.resume=true"
            if trainer.state.epoch
            else "no epoch had completed, nothing was saved"
        )
        print(f"\ninterrupted; {saved}", file=sys.stderr)
        sys.exit(130)
    print(
        f"done: {state.stop_reason}; best val loss {state.best_val:.4e} at epoch {state.best_epoch} "
        f"({state.time_to_best:.1f}s of {state.elapsed:.1f}s)\n"
        f"  checkpoints: {trainer.best_path}, {trainer.last_path}\n"
        f"  metrics:     {run_dir / 'metrics.csv'}\n"
        f"next: python -m hnnsym.evaluate {' '.join(shared_overrides())}"
    )


def shared_overrides() -> list[str]:
    """This run's command-line overrides, for evaluate (which composes the train section too)."""
    task = HydraConfig.get().overrides.task
    return [o for o in task if not o.lstrip("+~").startswith("hydra")]


if __name__ == "__main__":
    main()
