"""The data layer: ground-truth trajectories, the HDF5 file format, and training windows.

One HDF5 file per (system, noise, seed), ``data/<system>/<noise>/seed<k>.h5``::

    /train /val /test          groups, each with
        observed  (N, T+1, 2d) float64   clean + noise_std * N(0, 1), every state including t = 0
        clean     (N, T+1, 2d) float64   ground truth, y = [q, p]
        t         (T+1,)       float64   observation times k * obs_dt
    root attrs: schema_version, system, system_params (JSON), dim, obs_dt, fine_dt, integrator,
                noise, noise_std, seed, n_train, n_val, n_test, hnnsym_version, versions (JSON),
                config (resolved Hydra config, YAML), created (UTC ISO 8601)

``observed``/``clean`` are chunked one trajectory per chunk, gzip-compressed with the shuffle and
fletcher32 (checksum) filters, so corruption is detected on read. Plain h5py reads it all.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

import hnnsym
from hnnsym.artifacts import atomic_path, now_utc, versions
from hnnsym.errors import DataError

SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
ARRAYS = ("observed", "clean", "t")
JSON_ATTRS = ("system_params", "versions")
# What a writer must provide; write_dataset adds schema_version, n_<split>, and fills
# hnnsym_version, versions and created when absent.
REQUIRED_ATTRS = (
    "system", "system_params", "dim", "obs_dt", "fine_dt", "integrator", "noise", "noise_std",
    "seed", "config",
)  # fmt: skip


@dataclass
class Split:
    """One split. observed/clean: (N, T+1, 2d) float64; t: (T+1,)."""

    observed: np.ndarray
    clean: np.ndarray
    t: np.ndarray


@dataclass
class Dataset:
    path: Path
    attrs: dict
    splits: dict[str, Split]


# ---- writing --------------------------------------------------------------------------------


def write_dataset(
    path: str | os.PathLike, splits: dict[str, Split], attrs: dict, overwrite: bool = False
) -> None:
    """Write ``splits`` and root ``attrs`` to ``path`` atomically (temp file beside it + rename).

    Dict values of ``JSON_ATTRS`` are stored as JSON strings. Refuses to replace an existing file
    unless ``overwrite``.
    """
    path = Path(path)
    refuse_overwrite(path, overwrite)
    missing = [k for k in REQUIRED_ATTRS if k not in attrs]
    if missing:
        raise ValueError(f"write_dataset: missing root attrs {missing}")
    root = {
        "hnnsym_version": hnnsym.__version__,
        "versions": versions(),
        "created": now_utc(),
        **attrs,
        "schema_version": SCHEMA_VERSION,
    }
    for name, split in splits.items():
        _check_split(name, split, int(attrs["dim"]))
        root[f"n_{name}"] = int(split.observed.shape[0])
    try:
        _write_h5(path, splits, root, overwrite)
    except FileExistsError:
        refuse_overwrite(path, overwrite)  # another job wrote it meanwhile
        raise


def _write_h5(path: Path, splits: dict[str, Split], root: dict, overwrite: bool) -> None:
    with atomic_path(path, replace=overwrite) as tmp:
        with h5py.File(tmp, "w") as f:
            for key, value in root.items():
                f.attrs[key] = _encode_attr(key, value)
            for name, split in splits.items():
                group = f.create_group(name)
                for key in ("observed", "clean"):
                    data = np.ascontiguousarray(getattr(split, key), dtype=np.float64)
                    group.create_dataset(
                        key, data=data, chunks=(1, *data.shape[1:]), compression="gzip",
                        compression_opts=4, shuffle=True, fletcher32=True,
                    )  # fmt: skip
                group.create_dataset("t", data=np.asarray(split.t, dtype=np.float64))


def refuse_overwrite(path: str | os.PathLike, overwrite: bool) -> None:
    """DataError when ``path`` exists and ``overwrite`` is false."""
    if Path(path).exists() and not overwrite:
        raise DataError(
            f"{path} already exists; pass generate.overwrite=true to replace it "
            "(or choose another seed or data_dir)"
        )


def _check_split(name: str, split: Split, dim: int) -> None:
    obs, clean, t = (np.asarray(getattr(split, k)) for k in ARRAYS)
    if obs.ndim != 3 or obs.shape != clean.shape or obs.shape[-1] != 2 * dim:
        raise ValueError(
            f"split {name}: observed {obs.shape} and clean {clean.shape} must both be "
            f"(N, T+1, {2 * dim})"
        )
    if t.shape != (obs.shape[1],):
        raise ValueError(f"split {name}: t has shape {t.shape}, expected ({obs.shape[1]},)")


def _encode_attr(key: str, value: Any) -> Any:
    if isinstance(value, dict):
        if key not in JSON_ATTRS:
            raise TypeError(f"attr {key!r} is a dict; only {JSON_ATTRS} are stored as JSON")
        return json.dumps(value, sort_keys=True)
    return value


def _decode_attr(key: str, value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, np.generic):
        value = value.item()
    if key in JSON_ATTRS and isinstance(value, str):
        value = json.loads(value)
    return value


# ---- reading --------------------------------------------------------------------------------


def generate_command(path: str | os.PathLike, system: str | None = None) -> str:
    """The ``python -m hnnsym.generate`` command that writes ``path`` under the default layout
    ``<data_dir>/<system>/<noise>/seed<k>.h5`` (placeholders where the path does not say)."""
    path = Path(path)
    match = re.fullmatch(r"seed(-?\d+)\.h5", path.name)
    parts = path.parts
    if match and len(parts) >= 3:
        args = [f"system={system or parts[-3]}", f"noise={parts[-2]}", f"seed={match.group(1)}"]
        data_dir = Path(*parts[:-3]) if len(parts) > 3 else Path(".")
        if data_dir != Path("data"):
            args.append(f"data_dir={data_dir}")
    else:
        args = [f"system={system or '<system>'}", "noise=<noise>", "seed=<k>", f"data_file={path}"]
    return "python -m hnnsym.generate " + " ".join(args)


def read_dataset(
    path: str | os.PathLike,
    system: str | None = None,
    dim: int | None = None,
    splits: Iterable[str] = SPLITS,
) -> Dataset:
    """Read and validate a data file; ``system``/``dim``, when given, must match the file's."""
    path = Path(path)
    command = generate_command(path, system)
    if not path.exists():
        raise DataError(f"no data file at {path}; run `{command}` first")
    try:
        with h5py.File(path, "r") as f:
            attrs = {key: _decode_attr(key, value) for key, value in f.attrs.items()}
            _check_attrs(path, attrs, system, dim, command)
            out = {name: _read_split(path, f, name, int(attrs["dim"])) for name in splits}
    except OSError as err:
        raise DataError(
            f"{path} is not a readable HDF5 file, or is truncated or corrupt ({_first_line(err)}); "
            f"regenerate it: `{command} generate.overwrite=true`"
        ) from err
    return Dataset(path, attrs, out)


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _check_attrs(
    path: Path, attrs: dict, system: str | None, dim: int | None, command: str
) -> None:
    version = attrs.get("schema_version")
    if version is None:
        raise DataError(
            f"{path} has no schema_version attribute, so it was not written by hnnsym.generate; "
            f"regenerate it: `{command} generate.overwrite=true`"
        )
    if version != SCHEMA_VERSION:
        raise DataError(
            f"{path} has schema_version {version}, this hnnsym reads {SCHEMA_VERSION}; "
            f"regenerate it: `{command} generate.overwrite=true`"
        )
    if system is not None and attrs.get("system") != system:
        raise DataError(
            f"{path} holds system {attrs.get('system')!r}, not {system!r}; check the system= and "
            "data_file= overrides"
        )
    if dim is not None and attrs.get("dim") != dim:
        raise DataError(
            f"{path} holds dim={attrs.get('dim')} states, not dim={dim}; check the system= and "
            "data_file= overrides"
        )
    if not isinstance(attrs.get("dim"), int):
        raise DataError(f"{path} lacks a valid dim attribute; regenerate it with `{command}`")


def _read_split(path: Path, f: h5py.File, name: str, dim: int) -> Split:
    if name not in f:
        raise DataError(
            f"{path} has no split {name!r} (it has {sorted(f.keys())}); regenerate it with "
            f"`{generate_command(path)} generate.overwrite=true`"
        )
    group = f[name]
    missing = [k for k in ARRAYS if k not in group]
    if missing:
        raise DataError(f"{path}: split {name!r} lacks {missing}; regenerate the file")
    arrays = {k: np.asarray(group[k][...], dtype=np.float64) for k in ARRAYS}
    obs, clean, t = arrays["observed"], arrays["clean"], arrays["t"]
    if (
        obs.ndim != 3
        or obs.shape != clean.shape
        or obs.shape[-1] != 2 * dim
        or t.shape != obs.shape[1:2]
    ):
        raise DataError(
            f"{path}: split {name!r} has observed {obs.shape}, clean {clean.shape}, t {t.shape}; "
            f"expected (N, T+1, {2 * dim}) twice and (T+1,)"
        )
    for key, array in arrays.items():
        if not np.isfinite(array).all():
            raise DataError(
                f"{path}: split {name!r} {key} contains NaN or Inf; regenerate the file "
                "(a diverging ground truth? try a smaller generate.fine_dt)"
            )
    return Split(obs, clean, t)
