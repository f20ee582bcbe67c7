"""The data layer: ground-truth trajectories, the HDF5 file format, and training windows.

One HDF5 file per (system, noise, seed), ``data/<system>/<noise>/seed<k>.h5``::

    /train /val /test          groups, each with
        observed  (N, T+1, 2d) float64   clean + noise_std * N(0, 1), every state including t = 0
        clean     (N, T+1, 2d) float64   ground truth, y = [q, p]  (optional)
        t         (T+1,)       float64   observation times k * obs_dt
    root attrs: schema_version, system, system_params (JSON), dim, obs_dt, fine_dt, integrator,
                noise, noise_std, seed, n_train, n_val, n_test, hnnsym_version, versions (JSON),
                config (resolved Hydra config, YAML), created (UTC ISO 8601), observe

``observe`` says what ``observed`` holds: "qp", (q, p) states (N, T+1, 2d), or "q", positions only
(N, T+1, d) (``generate.observe=q``, Aoshima et al.); absent means "qp". ``clean`` is always (N, T+1, 2d).

``observed``/``clean`` are chunked one trajectory per chunk, gzip-compressed with the shuffle and
fletcher32 (checksum) filters, so corruption is detected on read. Plain h5py reads it all.

A file need not come from ``generate`` (measured trajectories written with h5py): ``read_dataset``
requires only ``REQUIRED_ATTRS`` and, per split it reads, ``REQUIRED_ARRAYS``; the simulation's
attributes (``OPTIONAL_ATTRS``) and ``clean`` are optional. A file is taken as written by
``generate`` when it has the ``config`` and ``hnnsym_version`` attributes (``made_by_generate``):
then an error says how to regenerate it, otherwise what the file must contain.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from hnnsym.artifacts import now_utc, versions, write_bytes
from hnnsym.errors import DataError, first_line
from hnnsym.physics.systems import MEASURED, SYSTEMS
from hnnsym.resources import check_memory
from hnnsym.version import __version__

SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
ARRAYS = ("observed", "clean", "t")
REQUIRED_ARRAYS = ("observed", "t")  # per split; clean (the ground truth) only simulated data have
JSON_ATTRS = ("system_params", "versions", "units")  # units: hnnsym.data.units.Units
# The root attributes every data file must have (hand-written ones too), and what they must hold.
REQUIRED_ATTRS = {
    "schema_version": f"the schema version, {SCHEMA_VERSION}",
    "system": "the name of a built-in system, or measured (no known H: python -m hnnsym.ingest)",
    "dim": "an integer d >= 1, the degrees of freedom: states have 2d components",
    "obs_dt": "the time between observations, a number > 0",
}
# The optional ones (the simulation's settings and the provenance that generate writes), with the
# value read_dataset gives them when the file has none.
OPTIONAL_ATTRS: dict[str, Any] = {
    "system_params": {}, "fine_dt": None, "integrator": None, "noise": None, "noise_std": None,
    "seed": None, "n_train": None, "n_val": None, "n_test": None, "hnnsym_version": None,
    "versions": None, "config": None, "created": None, "observe": "qp", "units": None,
}  # fmt: skip
OBSERVE = ("qp", "q")  # values of the observe attribute: states [q, p], or positions q only
# The stored dtypes read (as float64): integers and reals. Any other is refused, never converted
# (a complex array would lose its imaginary part, text would be parsed): what each kind is.
READ_KINDS = "iuf"
REFUSED_KINDS = {
    "c": "complex numbers", "b": "booleans", "S": "byte strings", "U": "text",
    "O": "variable-length data (text or objects)", "V": "compound or opaque records",
    "M": "dates", "m": "time deltas",
}  # fmt: skip
# How far a step of t may be from obs_dt, as a fraction of obs_dt (beyond the rounding of t's
# stored float type): a clock's rounding passes, a wrong obs_dt or a skipped frame does not.
T_RTOL = 1e-3
# What write_dataset's caller (generate) must provide; write_dataset adds schema_version,
# n_<split>, and fills hnnsym_version, versions and created when absent.
WRITE_ATTRS = (
    "system", "system_params", "dim", "obs_dt", "fine_dt", "integrator", "noise", "noise_std",
    "seed", "config",
)  # fmt: skip
# Where a data file's required contents are documented (named in the errors about them).
SCHEMA_DOC = "docs/guide/recordings.md, section 'File format'"


@dataclass
class Split:
    """One split. observed/clean: (N, T+1, 2d) float64; t: (T+1,). ``clean`` is None when the
    file has no ground truth (measured data)."""

    observed: np.ndarray
    clean: np.ndarray | None
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

    Dict values of ``JSON_ATTRS`` are stored as JSON strings; attributes that are None are left
    out (they read as None), and so is a split's ``clean`` when None (measured data). Refuses to
    replace an existing file unless ``overwrite``.
    """
    path = Path(path)
    refuse_overwrite(path, overwrite)
    missing = [k for k in WRITE_ATTRS if k not in attrs]
    if missing:
        raise ValueError(f"write_dataset: missing root attrs {missing}")
    root = {
        "hnnsym_version": __version__,
        "versions": versions(),
        "created": now_utc(),
        **attrs,
        "schema_version": SCHEMA_VERSION,
    }
    for name, split in splits.items():
        _check_split(name, split, int(attrs["dim"]), attrs.get("observe", "qp"))
        root[f"n_{name}"] = int(split.observed.shape[0])
    try:
        _write_h5(path, splits, root, overwrite)
    except FileExistsError:
        refuse_overwrite(path, overwrite)  # another job wrote it meanwhile
        raise


def _write_h5(path: Path, splits: dict[str, Split], root: dict, overwrite: bool) -> None:
    """The file is built in memory and then written as bytes: a full disk or a read-only place
    is then an OSError of one plain write (one line, no partial file), never a failure inside
    the HDF5 library."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for key, value in root.items():
            if value is not None:  # absent reads as None (OPTIONAL_ATTRS)
                f.attrs[key] = _encode_attr(key, value)
        for name, split in splits.items():
            group = f.create_group(name)
            for key in ("observed", "clean"):
                if getattr(split, key) is None:  # measured data have no ground truth
                    continue
                data = np.ascontiguousarray(getattr(split, key), dtype=np.float64)
                group.create_dataset(
                    key, data=data, chunks=chunk_shape(data.shape), compression="gzip",
                    compression_opts=4, shuffle=True, fletcher32=True,
                )  # fmt: skip
            group.create_dataset("t", data=np.asarray(split.t, dtype=np.float64))
    write_bytes(path, buffer.getvalue(), replace=overwrite)


CHUNK_BYTES = 1 << 16  # a stored chunk: whole trajectories, at most this many bytes (or one)


def chunk_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The HDF5 chunk of a (N, T+1, width) float64 array: as many whole trajectories as fit in
    ``CHUNK_BYTES`` (at least one). Each chunk is inflated and checksummed on its own, so one
    trajectory per chunk made reading Table 1's training and validation splits (24,576
    trajectories of 33 states) take 160 ms on one CPU core, against 28 ms for 64 KiB chunks."""
    row = 8 * math.prod(shape[1:])
    return (max(1, min(shape[0], CHUNK_BYTES // max(row, 1))), *shape[1:])


def refuse_overwrite(path: str | os.PathLike, overwrite: bool) -> None:
    """DataError when ``path`` exists and ``overwrite`` is false."""
    if Path(path).exists() and not overwrite:
        raise DataError(
            f"{path} already exists; pass generate.overwrite=true to replace it "
            "(or choose another seed or data_dir)"
        )


def observed_width(dim: int, observe: str) -> int:
    """Components of one observation: d for positions only (observe "q"), else 2d."""
    return dim if observe == "q" else 2 * dim


def _check_split(name: str, split: Split, dim: int, observe: str = "qp") -> None:
    obs, t = np.asarray(split.observed), np.asarray(split.t)
    clean = None if split.clean is None else np.asarray(split.clean)
    if observe not in OBSERVE:
        raise ValueError(f"observe must be one of {OBSERVE}, got {observe!r}")
    width = observed_width(dim, observe)
    if (
        obs.ndim != 3 or obs.shape[-1] != width
        or (clean is not None and clean.shape != (*obs.shape[:2], 2 * dim))
    ):  # fmt: skip
        raise ValueError(
            f"split {name}: observed {obs.shape} and clean {getattr(clean, 'shape', None)} must be "
            f"(N, T+1, {width}) and (N, T+1, {2 * dim})"
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
    if system == MEASURED:  # a file of measurements is written by ingest
        return f"python -m hnnsym.ingest ingest.source=<your file> ... data_file={path}"
    match = re.fullmatch(r"seed(-?\d+)(_q)?\.h5", path.name)
    parts = path.parts
    if match and len(parts) >= 3:
        args = [f"system={system or parts[-3]}", f"noise={parts[-2]}", f"seed={match.group(1)}"]
        data_dir = Path(*parts[:-3]) if len(parts) > 3 else Path(".")
        if data_dir != Path("data"):
            args.append(f"data_dir={data_dir}")
        if match.group(2):  # seed<k>_q.h5: positions only
            args.append("generate.observe=q")
    else:
        args = [f"system={system or '<system>'}", "noise=<noise>", "seed=<k>", f"data_file={path}"]
    return "python -m hnnsym.generate " + " ".join(args)


def read_dataset(
    path: str | os.PathLike,
    system: str | None = None,
    dim: int | None = None,
    splits: Iterable[str] = SPLITS,
    arrays: Iterable[str] = ARRAYS,
    memory_limit: int | float | str | None = None,
) -> Dataset:
    """Read and validate a data file; ``system``/``dim``, when given, must match the file's.
    ``arrays``: which of ``ARRAYS`` to read (the required ones are always read and checked;
    ``train`` leaves out ``clean``, which it never uses, and saves reading half the file).

    Every attribute of the schema is in ``Dataset.attrs``: the optional ones the file lacks have
    their ``OPTIONAL_ATTRS`` value (None; ``system_params``: {}). A missing or malformed required
    attribute or dataset is a one-line DataError naming it and saying what to do. Every dataset of
    the splits read (``clean`` too) is checked from its declared type and shape first, and the
    memory the read needs is estimated from them and refused (UserError) above ``memory_limit``
    (the config's; None: the memory available now) before anything is read.
    """
    path = Path(path)
    command = generate_command(path, system)
    if not path.exists():
        raise DataError(f"no data file at {path}; run `{command}` first")
    try:
        with h5py.File(path, "r") as f:
            attrs = _decode_attrs(path, f.attrs, command)
            _check_attrs(path, attrs, system, dim, command)
            observe = attrs.get("observe", "qp")
            if not isinstance(observe, str) or observe not in OBSERVE:
                raise DataError(f"{path}: root attribute observe must be one of {OBSERVE} (what "
                                f"`observed` holds), got {observe!r}")  # fmt: skip
            stored = {
                name: _split_datasets(path, f, name, int(attrs["dim"]), observe, tuple(arrays))
                for name in splits
            }
            _check_read_memory(path, stored, memory_limit)
            out = {
                name: _read_split(path, f, name, datasets, float(attrs["obs_dt"]))
                for name, datasets in stored.items()
            }
    except OSError as err:
        raise DataError(
            f"{path} is not a readable HDF5 file, or is truncated or corrupt ({first_line(err)}); "
            f"regenerate it: `{command} generate.overwrite=true` (or write your file again)"
        ) from err
    for key, default in OPTIONAL_ATTRS.items():
        attrs.setdefault(key, dict(default) if isinstance(default, dict) else default)
    return Dataset(path, attrs, out)


def made_by_generate(attrs: Any) -> bool:
    """Was the file written by ``generate``? It writes ``config`` and ``hnnsym_version``, which a
    hand-written file (of measurements, say) has no reason to carry. ``attrs``: the file's, or
    ``Dataset.attrs`` (where the absent ones are None)."""
    return attrs.get("config") is not None and attrs.get("hnnsym_version") is not None


def _what_to_do(attrs: Any, command: str, own: str = "") -> str:
    """The advice closing an error about a file: regenerate it when ``generate`` wrote it, else
    ``own`` (a file written by hand: how to fix it), default: where the schema is documented."""
    if made_by_generate(attrs):
        return f"regenerate it: `{command} generate.overwrite=true`"
    return own or f"see {SCHEMA_DOC} for what a data file must contain"


def _decode_attrs(path: Path, raw: Any, command: str) -> dict:
    attrs = {}
    for key, value in raw.items():
        try:
            attrs[key] = _decode_attr(key, value)
        except ValueError as err:  # a JSON attribute that is not JSON
            raise DataError(
                f"{path}: attribute {key} is not valid JSON ({first_line(err)}); "
                + _what_to_do(raw, command, f"store it as a JSON string ({SCHEMA_DOC})")
            ) from err
        if key in JSON_ATTRS and not isinstance(attrs[key], dict):
            raise DataError(
                f"{path}: attribute {key} must be a JSON object (name: value), got "
                f"{attrs[key]!r}; " + _what_to_do(raw, command, f"see {SCHEMA_DOC}")
            )
    return attrs


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_attrs(
    path: Path, attrs: dict, system: str | None, dim: int | None, command: str
) -> None:
    """The required attributes are there and valid, and match ``system``/``dim`` when given."""

    def fix(own: str) -> str:
        return _what_to_do(
            attrs, command, f"{own} (see {SCHEMA_DOC}: what a data file must contain)"
        )

    version = attrs.get("schema_version")
    if version is None:
        raise DataError(
            f"{path} has no schema_version attribute; "
            + fix(f"set schema_version={SCHEMA_VERSION} on a file written in this schema")
        )
    if not _is_number(version) or version != SCHEMA_VERSION:
        raise DataError(
            f"{path} has schema_version {version!r}, this hnnsym reads {SCHEMA_VERSION}; "
            + fix(f"write the file in schema {SCHEMA_VERSION}")
        )
    missing = [k for k in REQUIRED_ATTRS if k not in attrs]
    if missing:
        what = ", ".join(f"{k} ({REQUIRED_ATTRS[k]})" for k in missing)
        s, it = ("s", "them") if len(missing) > 1 else ("", "it")
        raise DataError(f"{path} lacks the required root attribute{s} {what}; " + fix(f"add {it}"))
    problems = {
        "system": not isinstance(attrs["system"], str) or not attrs["system"],
        "dim": not isinstance(attrs["dim"], int) or isinstance(attrs["dim"], bool)
        or attrs["dim"] < 1,
        "obs_dt": not _is_number(attrs["obs_dt"]) or not math.isfinite(attrs["obs_dt"])
        or attrs["obs_dt"] <= 0,
    }  # fmt: skip
    for key, bad in problems.items():
        if bad:
            raise DataError(
                f"{path}: root attribute {key} must be {REQUIRED_ATTRS[key]}, got "
                f"{attrs[key]!r}; " + fix("correct it")
            )
    if system is not None and attrs["system"] != system:
        if attrs["system"] == MEASURED:
            raise DataError(
                f"{path} holds measurements (system {MEASURED!r}: no known H, written by "
                f"python -m hnnsym.ingest); pass system={MEASURED}"
            )
        if attrs["system"] not in SYSTEMS:
            raise DataError(
                f"{path} holds system {attrs['system']!r}, which is not a built-in system "
                f"({', '.join(sorted(SYSTEMS))}): train and evaluate need one (evaluate compares "
                "with its H); set the file's system attribute to the built-in system the data "
                f"come from, and pass the same system=, or to {MEASURED} for data of no known H "
                f"(what python -m hnnsym.ingest writes) and pass system={MEASURED}"
            )
        raise DataError(
            f"{path} holds system {attrs['system']!r}, not {system!r}; check the system= and "
            "data_file= overrides"
        )
    if dim is not None and attrs["dim"] != dim:
        raise DataError(
            f"{path} holds dim={attrs['dim']} states, not dim={dim}; check the system= and "
            "data_file= overrides"
        )


def _split_datasets(
    path: Path, f: h5py.File, name: str, dim: int, observe: str, wanted: tuple[str, ...]
) -> dict[str, h5py.Dataset]:
    """The datasets of split ``name`` to read (the required ones and those of ``wanted`` the file
    has), after checking every dataset of the split from its declared type and shape (nothing is
    read): a group with ``REQUIRED_ARRAYS``, real numbers, shapes that fit, N >= 1 trajectories of
    T+1 >= 2 states."""
    command = generate_command(path, f.attrs.get("system"))
    arrays_doc = " and ".join(REQUIRED_ARRAYS)

    def fix(own: str) -> str:
        return _what_to_do(f.attrs, command, own)

    add = (
        f"add a group {name} with the datasets {arrays_doc} ({SCHEMA_DOC}; train reads train "
        "and val, evaluate test)"
    )
    if name not in f:
        raise DataError(f"{path} has no split {name!r} (it has {sorted(f.keys())}); " + fix(add))
    if not isinstance(f[name], h5py.Group):
        raise DataError(f"{path}: split {name} is an HDF5 dataset, not a group; " + fix(add))
    group = f[name]
    missing = [k for k in REQUIRED_ARRAYS if k not in group]
    if missing:
        raise DataError(
            f"{path}: split {name!r} lacks the dataset{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}; " + fix(f"every split needs {arrays_doc} ({SCHEMA_DOC})")
        )
    datasets = {}
    for key in (k for k in ARRAYS if k in group):
        obj = group[key]
        if not isinstance(obj, h5py.Dataset):
            raise DataError(
                f"{path}: {name}/{key} is an HDF5 {type(obj).__name__.lower()}, not a dataset; "
                + fix(f"store {key} as an array ({SCHEMA_DOC})")
            )
        if obj.dtype.kind not in READ_KINDS:
            what = REFUSED_KINDS.get(obj.dtype.kind, f"dtype {obj.dtype}")
            raise DataError(
                f"{path}: split {name!r} {key} holds {what} ({obj.dtype}), not real numbers; "
                + fix(f"store {key} as float64 ({SCHEMA_DOC})")
            )
        datasets[key] = obj
    shape = {k: d.shape if d.shape is not None else () for k, d in datasets.items()}
    obs, clean, t = shape["observed"], shape.get("clean"), shape["t"]
    width = observed_width(dim, observe)  # d for positions only (observe "q"), else 2d
    if (
        len(obs) != 3
        or (clean is not None and clean != (*obs[:2], 2 * dim))
        or obs[-1] != width
        or t != obs[1:2]
    ):
        shapes = f"observed {obs}" + ("" if clean is None else f", clean {clean}")
        raise DataError(
            f"{path}: split {name!r} has {shapes}, t {t}; expected (N, T+1, {width}) "
            f"for observed (observe={observe}), (N, T+1, {2 * dim}) for clean and (T+1,) for t"
        )
    if obs[0] < 1 or obs[1] < 2:
        raise DataError(
            f"{path}: split {name!r} holds no trajectories of two or more states (observed "
            f"{obs}: N={obs[0]} trajectories of T+1={obs[1]} states); train reads train and val, "
            "evaluate test: each needs N >= 1 and T+1 >= 2; " + fix("add trajectories")
        )
    return {k: d for k, d in datasets.items() if k in wanted or k in REQUIRED_ARRAYS}


def _check_read_memory(
    path: Path, stored: dict[str, dict[str, h5py.Dataset]], limit: int | float | str | None
) -> None:
    """Refuse a read whose float64 arrays (plus the stored ones where a conversion copies) would
    exceed ``limit``, from the declared shapes; names the largest dataset."""
    flat = {f"{name}/{key}": d for name, datasets in stored.items() for key, d in datasets.items()}
    sizes = {k: d.size * (8 + (0 if d.dtype == np.float64 else d.dtype.itemsize))
             for k, d in flat.items()}  # fmt: skip
    if sizes:
        largest = max(sizes, key=sizes.__getitem__)
        check_memory(
            sum(sizes.values()),
            f"reading {path} (splits {', '.join(stored)}; {largest} declares shape "
            f"{flat[largest].shape} {flat[largest].dtype})",
            limit,
        )


def _read_split(
    path: Path, f: h5py.File, name: str, datasets: dict[str, h5py.Dataset], obs_dt: float
) -> Split:
    """Read the checked ``datasets`` of split ``name`` as float64: finite values, and times t
    that step by ``obs_dt``."""
    command = generate_command(path, f.attrs.get("system"))
    arrays = {k: np.asarray(d[...], dtype=np.float64) for k, d in datasets.items()}
    for key, array in arrays.items():
        if not np.isfinite(array).all():
            raise DataError(
                f"{path}: split {name!r} {key} contains NaN or Inf; "
                + _what_to_do(f.attrs, command, "drop or repair those trajectories")
                + (" (a diverging ground truth? try a smaller generate.fine_dt)"
                   if made_by_generate(f.attrs) else "")
            )  # fmt: skip
    t = arrays["t"]
    steps = np.diff(t)
    stored = datasets["t"].dtype
    rounding = 4 * np.finfo(stored if stored.kind == "f" else np.float64).eps * np.abs(t).max()
    bad = np.flatnonzero(~(np.abs(steps - obs_dt) <= T_RTOL * obs_dt + rounding))
    if bad.size:
        i = int(bad[0])
        raise DataError(
            f"{path}: split {name!r} t[{i + 1}] = {t[i + 1]:.10g} follows t[{i}] = {t[i]:.10g}, a "
            f"step of {steps[i]:.10g}, not obs_dt = {obs_dt:.10g} (t must increase by obs_dt, "
            f"within {T_RTOL:.1%}, at every step); "
            + _what_to_do(f.attrs, command, "correct t or the obs_dt attribute")
        )
    return Split(arrays["observed"], arrays.get("clean"), t)
