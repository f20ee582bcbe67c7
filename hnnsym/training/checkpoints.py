"""Checkpoints of a training run: what they hold, writing and reading them, and whether a run dir
may be started, resumed or must be left alone.

``checkpoints/last.pt`` is written after every epoch and ``best.pt`` on each new best validation
loss; each holds the model, optimizer, scheduler and RNG states, the TrainState, and provenance
(resolved config, data file and its sha256, versions).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hnnsym.artifacts import atomic_path, now_utc, sha256, versions
from hnnsym.errors import UserError


def last_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.pt"


def best_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "best.pt"


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """torch.save, atomically."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_checkpoint(path: str | os.PathLike) -> dict:
    """torch.load on the CPU (RNG states must stay CPU tensors; load_state_dict moves the rest),
    with a one-line UserError for a truncated or foreign file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated or foreign files raise many kinds
        raise UserError(f"cannot read checkpoint {path} ({type(err).__name__}: {err})") from err


def trained_options(payload: dict) -> dict:
    """The ``train`` section of the resolved config a checkpoint was trained with ({} if none)."""
    return (payload.get("config") or {}).get("train") or {}


def provenance(
    cfg_container: dict, model_cfg: dict, dim: int, system: dict, data_file: Path
) -> dict:
    """What every checkpoint carries about how it was made."""
    return {
        "model_config": model_cfg,
        "dim": dim,
        "system": system,
        "config": cfg_container,
        "data_file": str(data_file),
        "data_sha256": sha256(data_file),
        "versions": versions(),
        "created": now_utc(),
    }


def resume_from(run_dir: Path, resume: bool | str, overwrite: bool) -> Path | None:
    """The checkpoint to resume from, or None for a fresh run; refuses to clobber a run.
    ``resume="auto"``: resume when there is a checkpoint (a finished run stays as it is), else
    start fresh — what sweeps that may be re-run want."""
    last = last_path(run_dir)
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
