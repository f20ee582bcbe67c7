"""Checkpoints of a training run: what they hold, writing and reading them, and whether a run dir
may be started, resumed or must be left alone. Below training and evaluation, which both read them.

``checkpoints/last.pt`` is written after every epoch and ``best.pt`` on each new best validation
loss; each holds the model, optimizer, scheduler and RNG states, the TrainState, and provenance
(resolved config, data file and its sha256, versions).

A checkpoint holds only tensors, None, bools, numbers, strings, lists and dicts (``plain``), so it
is read with ``torch.load(weights_only=True)``, which runs no code stored in the file, plus the
sha256 of its contents (``payload_sha256``), checked on every read with the finiteness of the
model state. A checkpoint of an earlier hnnsym (pickled objects such as torch's ``TorchVersion``,
no checksum) is refused, naming ``python -m hnnsym.convert_checkpoint``, which rewrites it once
the user confirms they trust it.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy
import torch

from hnnsym.artifacts import now_utc, sha256, versions, write_bytes
from hnnsym.errors import UserError, first_line

CHECKSUM = "sha256"  # the payload key of the checksum of the rest of the payload
CONVERT = "python -m hnnsym.convert_checkpoint"
# the entries of a payload that are model state: refused when not finite
MODEL_STATE = ("model", "raw_model", "average", "learned_states")
MODEL_KEYS = ("model", "model_config", "dim", "system")  # what rebuilds a run's model


class UnsafeCheckpointError(UserError):
    """A checkpoint in an earlier format (``needs_unpickle``: one that only a full unpickle can
    read, which runs code the file may carry; else one without a checksum), to be converted."""

    def __init__(self, message: str, needs_unpickle: bool):
        super().__init__(message)
        self.needs_unpickle = needs_unpickle


def last_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "last.pt"


def best_path(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "best.pt"


def plain(value: Any, where: str = "") -> Any:
    """``value`` made of what ``torch.load(weights_only=True)`` reads back unchanged: tensors
    (detached), None, bool, int, float, str, lists, and dicts keyed by str or int. Tuples become
    lists, mappings dicts, numpy scalars and subclasses of str/int/float (``TorchVersion``) the
    Python ones, paths strings; TypeError, naming the key, for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            key = plain(key, f"{where}/{key!r}")
            if type(key) not in (str, int):
                raise TypeError(f"checkpoint key {where}/{key!r} is a {type(key).__name__}")
            out[key] = plain(item, f"{where}/{key!r}")
        return out
    if isinstance(value, (list, tuple)):
        return [plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, numpy.generic):
        return plain(value.item(), where)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(f"checkpoint value {where or '/'} is a {type(value).__name__}")


def payload_sha256(payload: Any) -> str:
    """sha256 of a ``plain`` payload: every entry by key path in sorted key order, a tensor as its
    dtype, shape and bytes, anything else as its type and repr."""
    digest = hashlib.sha256()

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            digest.update(f"{where}\0dict\0{len(value)}\n".encode())
            for key in sorted(value, key=lambda k: (type(k).__name__, k)):
                walk(value[key], f"{where}/{key!r}")
        elif isinstance(value, list):
            digest.update(f"{where}\0list\0{len(value)}\n".encode())
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
        elif isinstance(value, torch.Tensor):
            t = value.detach().cpu().resolve_conj().resolve_neg().contiguous()
            digest.update(f"{where}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().data)
        else:
            digest.update(f"{where}\0{type(value).__name__}\0{value!r}\n".encode())

    walk(payload, "")
    return digest.hexdigest()


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """torch.save of the ``plain`` payload with its checksum, atomically. Serialised in memory
    first: torch's zip writer fails on a full disk with a RuntimeError mid-file, a plain write
    with one line (``write_bytes``)."""
    safe = plain(payload)
    safe.pop(CHECKSUM, None)
    safe[CHECKSUM] = payload_sha256(safe)
    buffer = io.BytesIO()
    torch.save(safe, buffer)
    write_bytes(path, buffer.getvalue())


def load_checkpoint(path: str | os.PathLike, require: tuple[str, ...] = ()) -> dict:
    """The payload of a checkpoint (without its checksum), read with ``weights_only=True`` on the
    CPU (RNG states must stay CPU tensors; load_state_dict moves the rest). One-line UserError for
    a truncated, foreign or corrupted file (checksum mismatch), a non-finite model state or a
    payload without the keys in ``require``; UnsafeCheckpointError for one of an earlier format."""
    payload = read_safely(path)
    if not isinstance(payload, dict):
        raise UserError(
            f"{path} holds a {type(payload).__name__}, not a checkpoint of hnnsym.train"
        )
    stored = payload.pop(CHECKSUM, None)
    if stored is None:
        raise UnsafeCheckpointError(
            f"checkpoint {path} carries no checksum (an earlier hnnsym wrote it); convert it with "
            f"`{CONVERT} {path}`",
            needs_unpickle=False,
        )
    if stored != payload_sha256(payload):
        raise UserError(
            f"checkpoint {path} is corrupted: its contents do not match the sha256 stored in it; "
            "use an intact copy or train again"
        )
    check_finite(payload, path)
    if missing := [k for k in require if k not in payload]:
        raise UserError(f"checkpoint {path} lacks {missing}; was it written by hnnsym.train?")
    return payload


def run_checkpoint(run_dir: Path, which: str, hint: str) -> tuple[Path, dict]:
    """(path, payload) of ``run_dir/checkpoints/<which>.pt``, holding what rebuilds the model
    (``MODEL_KEYS``); ``hint`` ends the error when there is none."""
    path = run_dir / "checkpoints" / f"{which}.pt"
    if not path.exists():
        raise UserError(f"no checkpoint at {path}; {hint}")
    return path, load_checkpoint(path, require=MODEL_KEYS)


def read_safely(path: str | os.PathLike) -> Any:
    """``torch.load(weights_only=True)`` on the CPU, with one-line errors; a file that only a
    full unpickle can read raises UnsafeCheckpointError naming what it would unpickle."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        try:
            unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # not a zip checkpoint: no way to tell without unpickling
            unsafe = []
        if not unsafe:
            raise UserError(f"cannot read checkpoint {path} ({first_line(err)})") from None
        named = ", ".join(unsafe[:3]) + (", ..." if len(unsafe) > 3 else "")
        raise UnsafeCheckpointError(
            f"checkpoint {path} holds pickled objects ({named}) that only a full unpickle reads, "
            "which runs code stored in the file; if you trust the file, convert it with "
            f"`{CONVERT} {path}`",
            needs_unpickle=True,
        ) from None
    except Exception as err:  # truncated or foreign files raise many kinds
        raise UserError(
            f"cannot read checkpoint {path} ({type(err).__name__}: {first_line(err)})"
        ) from None


def check_finite(payload: dict, path: str | os.PathLike) -> None:
    """UserError naming the first tensor of the model state (``MODEL_STATE``) holding NaN/inf."""
    for key in MODEL_STATE:
        for where, tensor in _tensors(payload.get(key), key):
            if tensor.is_floating_point() or tensor.is_complex():
                if not bool(torch.isfinite(tensor).all()):
                    raise UserError(
                        f"checkpoint {path} holds non-finite values (NaN or inf) in {where}"
                    )


def _tensors(value: Any, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors in nested dicts and lists, with their key paths."""
    if isinstance(value, torch.Tensor):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, f"{where}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{where}[{i}]")


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
