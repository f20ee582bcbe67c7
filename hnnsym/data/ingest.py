"""Measurements from a file into the HDF5 schema (``python -m hnnsym.ingest``, ``ingest(cfg)``).

Pipeline (every step logged):

1. ``read_table``: a .csv/.txt/.tsv/.dat file (header or none, comma/whitespace/tab/semicolon
   separated, CRLF fine; pandas), a .npz (one array per column; 2-D arrays give ``<key>_<j>``) or
   an .h5 (its 1-D/2-D datasets, the same way) -> a table of float64 columns. Empty cells are NaN
   (that row is dropped, i.e. a gap); text that is not a number is a one-line error.
2. Rows are grouped by the trial column (or are one recording) and cut into **segments** of
   uniformly spaced observations: a step dt_i = t_{i+1} - t_i ends a segment when
   dt_i > (1 + ``gap_tolerance``) · Δ (a dropped frame), dt_i <= 0 (time restarts) or a row is
   dropped, where Δ = median of all positive steps = ``obs_dt``. Steps that are neither a gap nor
   within ``jitter`` · Δ of Δ make the spacing irregular: refused, or (``irregular=resample``)
   each segment is linearly interpolated onto t_0 + kΔ. Nothing is ever integrated across a gap.
3. Per segment: angle columns are unwrapped (``np.unwrap``; ``wrapped=auto`` unwraps a column
   that has a jump |Δθ| > π), momenta are read, or p = mass · v from velocity columns, or from
   central differences of q (``velocities=finite_difference``), or left out (positions only,
   ``observe = q``).
4. Segments shorter than ``min_segment`` steps are dropped. Each remaining segment is cut into
   trajectories of T steps (``steps``, or the shortest segment's length), consecutive pieces
   sharing their end point; the schema stores (N, T+1, width) per split.
5. Segments (never single points or pieces of one) are dealt to train/val/test by a permutation
   drawn from ``seed``; the file records which rows went where (attribute ``segments``).

Written with system ``measured`` (no known H; d from the file), no ``clean`` split, and the
provenance: ``source``, ``source_sha256``, ``columns`` (JSON), ``ingest_config`` (YAML).
"""

from __future__ import annotations

import io
import json
import logging
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from hnnsym.artifacts import creatable_dir, sha256
from hnnsym.data.hdf5 import SPLITS, Split, write_dataset
from hnnsym.errors import DataError, UserError
from hnnsym.physics.systems import MEASURED
from hnnsym.resources import check_memory

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".csv", ".txt", ".tsv", ".dat")
SUFFIXES = (*TEXT_SUFFIXES, ".npz", ".h5", ".hdf5")
SEPARATORS = {"comma": ",", "tab": "\t", "whitespace": r"\s+", "semicolon": ";"}
OUT_DIR = "measured"  # default output: ${data_dir}/measured/<name>.h5
# A first line starting with one of these is a header (numpy.savetxt writes "# t x v", MATLAB
# "% t x v"): the marker is not a column name.
COMMENT_MARKERS = ("#", "%")
# Memory of reading a text file as a table, per byte of the file: measured 5x (17 digits a cell)
# to 10x (6 digits); the strings pandas holds per cell dominate.
TEXT_MEMORY_PER_BYTE = 12


# ---- reading a file into a table ------------------------------------------------------------


def read_table(
    path: str | Path,
    header: str | bool = "auto",
    separator: str = "auto",
    names: Sequence[str] | None = None,
    labels: Sequence[str] = (),
    memory_limit: int | float | str | None = None,
) -> pd.DataFrame:
    """The file's columns as a float64 DataFrame with string column names (rows in file order).

    Text: ``header`` auto|true|false (auto: a first line with a non-number field is a header;
    one starting with ``#`` or ``%`` is one, that marker left out), ``separator``
    auto|comma|tab|whitespace|semicolon (auto: from the first line). ``names`` renames the
    columns in order (for a file without a header; default names "0", "1", ...; an empty header
    field: "Unnamed: <j>"). ``labels``: columns that may hold text (a trial id such as ``A``): text
    becomes the codes 0, 1, ... in order of first appearance, the texts listed in
    ``table.attrs["labels"][name]``. A file with no data rows, a header naming more or fewer
    columns than the rows have, or a name given twice is a one-line DataError. The memory of the
    read is estimated from the file's size (text) or its arrays' declared sizes and refused above
    ``memory_limit`` (None: the memory available now) before reading.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no measurement file at {path} (ingest.source)")
    suffix = path.suffix.lower()
    check_memory(_table_memory(path, suffix), f"reading {path}", memory_limit)
    if suffix in TEXT_SUFFIXES:
        table, first_row = _read_text(path, header, separator)
    elif suffix == ".npz":
        table, first_row = _read_arrays(path, _npz_arrays(path)), 0
    elif suffix in (".h5", ".hdf5"):
        table, first_row = _read_arrays(path, _h5_arrays(path)), 0
    else:
        raise DataError(f"{path}: cannot read {suffix or 'a file without suffix'} files; use one "
                        f"of {', '.join(SUFFIXES)}")  # fmt: skip
    if names:
        names = [str(n) for n in names]
        if len(names) != table.shape[1]:
            raise UserError(f"ingest.names gives {len(names)} names, {path} has "
                            f"{table.shape[1]} columns")  # fmt: skip
        table.columns = names
    twice = [n for j, n in enumerate(table.columns) if n in table.columns[:j]]
    if twice:
        raise DataError(f"{path}: two columns are named {twice[0]!r}; name them apart (in the "
                        "file, or with ingest.names=[...])")  # fmt: skip
    return _numeric(path, table, first_row, [str(n) for n in labels])


def _table_memory(path: Path, suffix: str) -> float:
    """Bytes that reading ``path`` as a table takes, about: ``TEXT_MEMORY_PER_BYTE`` per byte of
    text, or twice the declared bytes of the arrays (read, then the float64 table)."""
    if suffix in TEXT_SUFFIXES:
        return TEXT_MEMORY_PER_BYTE * path.stat().st_size
    sizes: list[int] = []

    def visit(_: str, obj: Any) -> None:  # the datasets _h5_arrays reads
        if isinstance(obj, h5py.Dataset) and obj.ndim in (1, 2):
            sizes.append(obj.size * max(obj.dtype.itemsize, 8))

    try:
        if suffix == ".npz":
            with zipfile.ZipFile(path) as z:
                sizes = [info.file_size for info in z.infolist()]
        elif suffix in (".h5", ".hdf5"):
            with h5py.File(path, "r") as f:
                f.visititems(visit)
    except (OSError, zipfile.BadZipFile):
        return 0  # not readable: the reader says so
    return 2 * sum(sizes)


def _sniff(path: Path) -> tuple[int, str]:
    """The first non-empty line (BOM and CR removed), and its index among the file's lines."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        for i, line in enumerate(fh):
            if line.strip():
                return i, line.strip("\r\n")
    raise DataError(f"{path} is empty")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_text(path: Path, header: str | bool, separator: str) -> tuple[pd.DataFrame, int]:
    """(table of strings, file line number of its first row)."""
    at, first = _sniff(path)
    marked = first.lstrip().startswith(COMMENT_MARKERS)
    if marked:
        first = first.lstrip()[1:]
    if separator == "auto":
        sep = "," if "," in first else "\t" if "\t" in first else ";" if ";" in first else r"\s+"
    elif separator in SEPARATORS:
        sep = SEPARATORS[separator]
    else:
        raise UserError(f"ingest.separator must be auto or one of {sorted(SEPARATORS)}, got "
                        f"{separator!r}")  # fmt: skip
    fields = [f.strip() for f in (first.split() if sep == r"\s+" else first.split(sep))]
    if header == "auto":
        has_header = marked or not all(_is_number(f) for f in fields if f)
    elif isinstance(header, bool):
        has_header = header
    else:
        raise UserError(f"ingest.header must be auto, true or false, got {header!r}")
    options = dict(sep=sep, header=None, dtype=str, skipinitialspace=True,
                   engine="python" if sep == r"\s+" else "c")  # fmt: skip
    skip = at + 1 if has_header or marked else at  # a marked line is never data
    try:
        table = pd.read_csv(path, skiprows=skip, encoding="utf-8-sig", **options)
        names = pd.read_csv(io.StringIO(first), keep_default_na=False, **options).iloc[0]
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        msg = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise DataError(f"{path}: cannot parse it as a table ({msg}); check ingest.separator "
                        "and ingest.header") from err  # fmt: skip
    if table.empty:
        raise DataError(f"{path} holds no data rows{', only a header line' if has_header else ''}"
                        "; ingest needs measurements")  # fmt: skip
    if has_header:
        names = [str(n).strip() for n in names]
        while len(names) > table.shape[1] and not names[-1]:  # a trailing separator names nothing
            names.pop()
        if len(names) != table.shape[1]:
            raise DataError(
                f"{path}: the header names {len(names)} columns ({', '.join(names)}), the rows "
                f"have {table.shape[1]}; check ingest.separator, or correct the header line"
            )
        table.columns = [n or f"Unnamed: {j}" for j, n in enumerate(names)]
    else:
        table.columns = [str(c) for c in table.columns]
    return table, skip + 1


def _columns_of(path: Path, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for key, array in arrays.items():
        array = np.asarray(array)
        if array.ndim == 1:
            out[key] = array
        elif array.ndim == 2:
            out.update({f"{key}_{j}": array[:, j] for j in range(array.shape[1])})
        else:
            raise DataError(f"{path}: array {key} has shape {array.shape}; columns must be 1-D "
                            "(or 2-D: one column per entry of the second axis)")  # fmt: skip
    lengths = {k: len(v) for k, v in out.items()}
    if len(set(lengths.values())) > 1:
        raise DataError(f"{path}: the arrays have different lengths {lengths}")
    if not out:
        raise DataError(f"{path} holds no arrays")
    return out


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as err:
        raise DataError(f"{path} is not a readable .npz file ({err})") from err


def _h5_arrays(path: Path) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset) and obj.ndim in (1, 2):
            arrays[name] = obj[...]

    try:
        with h5py.File(path, "r") as f:
            f.visititems(visit)
    except OSError as err:
        raise DataError(f"{path} is not a readable HDF5 file ({err})") from err
    return arrays


def _read_arrays(path: Path, arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.DataFrame(_columns_of(path, arrays))


def _numeric(path: Path, table: pd.DataFrame, first_row: int, labels: list[str]) -> pd.DataFrame:
    """Every column as float64; empty cells NaN; anything else that is not a number is an error
    naming the first such cell (file line for text files, else the row index), except in the
    ``labels`` columns, which are then coded (``read_table``)."""
    out, coded = {}, {}
    for name in table.columns:
        column = table[name]
        if column.dtype.kind in "biuf":
            out[name] = column.to_numpy(dtype=np.float64)
            continue
        text = column.astype("string").str.strip()
        values = pd.to_numeric(text, errors="coerce")
        bad = values.isna() & text.notna() & (text != "") & ~text.str.lower().isin(["nan", "na"])
        if bad.any() and name in labels:
            codes, uniques = pd.factorize(text.where(text != ""))
            out[name] = np.where(codes < 0, np.nan, codes).astype(np.float64)
            coded[name] = [str(u) for u in uniques]
            continue
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            where = f"line {i + first_row}" if first_row else f"row {i}"
            raise DataError(f"{path}: {where}, column {name!r}: {text.iloc[i]!r} is not a number")
        out[name] = values.to_numpy(dtype=np.float64)
    frame = pd.DataFrame(out, index=range(len(table)))
    frame.attrs["labels"] = coded
    return frame


# ---- column mapping ---------------------------------------------------------------------------


FINITE_DIFFERENCE = "finite_difference"


@dataclass
class Mapping:
    """Which columns hold what. ``velocities`` is a list of columns or ``finite_difference``."""

    time: str | None
    trial: str | None
    positions: list[str]
    momenta: list[str] | None = None
    velocities: list[str] | str | None = None
    angles: list[str] = field(default_factory=list)

    @property
    def dim(self) -> int:
        return len(self.positions)

    @property
    def observe(self) -> str:
        """ "qp" when momenta come out (given, from velocities or differences), else "q"."""
        return "qp" if self.momenta or self.velocities else "q"

    def used(self) -> list[str]:
        """The columns read from the file."""
        names = [self.time, self.trial, *self.positions, *(self.momenta or [])]
        if isinstance(self.velocities, list):
            names += self.velocities
        return [n for n in names if n is not None]

    def check(self, available: Sequence[str], path: Path) -> None:
        """One-line errors for a mapping that does not fit the file."""
        if not self.positions:
            raise UserError("ingest.positions must name at least one position column")
        if self.momenta and self.velocities:
            raise UserError("give ingest.momenta or ingest.velocities, not both")
        if isinstance(self.velocities, str) and self.velocities != FINITE_DIFFERENCE:
            raise UserError(f"ingest.velocities must be a list of columns or {FINITE_DIFFERENCE}, "
                            f"got {self.velocities!r}")  # fmt: skip
        for key, cols in (("momenta", self.momenta), ("velocities", self.velocities)):
            if isinstance(cols, list) and len(cols) != self.dim:
                raise UserError(f"ingest.{key} has {len(cols)} columns, ingest.positions "
                                f"{self.dim}: give one per position")  # fmt: skip
        unknown = [n for n in [*self.used(), *self.angles] if n not in available]
        if unknown:
            raise UserError(f"{path} has no column {', '.join(map(repr, unknown))}; its columns: "
                            f"{', '.join(map(str, available))}")  # fmt: skip
        if not_q := [a for a in self.angles if a not in self.positions]:
            raise UserError(f"ingest.angles {not_q} must be position columns (ingest.positions)")
        if len(set(self.used())) != len(self.used()):
            raise UserError(f"a column is mapped twice: {self.used()}")

    def as_dict(self) -> dict:
        keys = ("time", "trial", "positions", "momenta", "velocities", "angles")
        return {key: getattr(self, key) for key in keys}


def _names(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, int)):
        return [str(value)]
    return [str(v) for v in value]


def mapping_from_config(i: DictConfig) -> Mapping:
    velocities = i.velocities
    if velocities is not None and not (
        isinstance(velocities, str) and velocities == FINITE_DIFFERENCE
    ):
        velocities = _names(velocities)
    return Mapping(
        time=None if i.time is None else str(i.time),
        trial=None if i.trial is None else str(i.trial),
        positions=_names(i.positions) or [],
        momenta=_names(i.momenta),
        velocities=velocities,
        angles=_names(i.angles) or [],
    )


# ---- segments ---------------------------------------------------------------------------------


@dataclass
class Segment:
    """Uniformly spaced observations of one trial: rows (first, last) of the table, the time of
    the first, and the states (n, width) = [q, p] or q (already unwrapped / converted)."""

    trial: float | None
    first_row: int
    last_row: int
    t0: float
    states: np.ndarray

    @property
    def steps(self) -> int:
        return self.states.shape[0] - 1

    def record(self, trajectories: int, labels: list[str] | None = None) -> dict:
        trial = self.trial if labels is None or self.trial is None else labels[int(self.trial)]
        return {"trial": trial, "rows": [self.first_row, self.last_row], "t0": self.t0,
                "steps": self.steps, "trajectories": trajectories}  # fmt: skip


@dataclass
class Options:
    """The numeric settings of ``ingest`` (hnnsym/conf/ingest.yaml)."""

    dt: float | None = None
    gap_tolerance: float = 0.5
    jitter: float = 0.02
    irregular: str = "refuse"
    wrapped: str | bool = "auto"
    mass: float | list[float] = 1.0
    min_segment: int = 16
    steps: int | None = None
    test_steps: int | None = None
    max_segment: int | None = None
    val: float = 0.15
    test: float = 0.15
    seed: int = 0

    def check(self) -> None:
        problems = {
            "gap_tolerance": self.gap_tolerance > 0,
            "jitter": 0 <= self.jitter < self.gap_tolerance,
            "irregular": self.irregular in ("refuse", "resample"),
            "wrapped": self.wrapped in ("auto", True, False),
            "min_segment": self.min_segment >= 1,
            "steps": self.steps is None or self.steps >= 1,
            "test_steps": self.test_steps is None or self.test_steps >= 1,
            "max_segment": self.max_segment is None or self.max_segment >= 1,
            "dt": self.dt is None or self.dt > 0,
            "split": 0 < self.val and 0 < self.test and self.val + self.test < 1,
            "mass": all(m > 0 for m in np.atleast_1d(self.mass)),
        }  # fmt: skip
        rules = {
            "gap_tolerance": "> 0", "jitter": ">= 0 and < ingest.gap_tolerance",
            "irregular": "refuse or resample", "wrapped": "auto, true or false",
            "min_segment": ">= 1", "steps": ">= 1 or null", "test_steps": ">= 1 or null",
            "max_segment": ">= 1 or null", "dt": "> 0 or null",
            "split": "fractions val, test > 0 with val + test < 1", "mass": "> 0",
        }  # fmt: skip
        for key, ok in problems.items():
            if not ok:
                shown = (self.val, self.test) if key == "split" else getattr(self, key)
                raise UserError(f"ingest.{key} must be {rules[key]}, got {shown}")


def _groups(table: pd.DataFrame, trial: str | None) -> list[tuple[float | None, np.ndarray]]:
    """(trial id, row indices in file order) per trial, in order of first appearance."""
    if trial is None:
        return [(None, np.arange(len(table)))]
    ids = table[trial].to_numpy()
    out = []
    for value in pd.unique(ids[~np.isnan(ids)]):
        out.append((float(value), np.flatnonzero(ids == value)))
    return out


def _median_dt(table: pd.DataFrame, m: Mapping, groups, dt: float | None) -> float:
    if m.time is None:
        if dt is None:
            raise UserError("with no time column (ingest.time=null) give the spacing ingest.dt")
        return float(dt)
    steps = np.concatenate([np.diff(table[m.time].to_numpy()[rows]) for _, rows in groups])
    steps = steps[np.isfinite(steps) & (steps > 0)]
    if steps.size == 0:
        raise DataError(f"column {m.time!r} has no increasing times: no time step to measure")
    return float(np.median(steps))


def _unwrap(q: np.ndarray, names: list[str], angles: list[str], wrapped: str | bool) -> list[str]:
    """Unwrap the angle columns of q (n, d) in place; returns the names unwrapped."""
    done = []
    for j, name in enumerate(names):
        if name not in angles or wrapped is False:
            continue
        jumps = np.abs(np.diff(q[:, j])) > math.pi
        if wrapped is True or jumps.any():
            q[:, j] = np.unwrap(q[:, j])
            done.append(name)
    return done


def segments_of(table: pd.DataFrame, m: Mapping, o: Options) -> tuple[list[Segment], float, dict]:
    """Cut the table into segments of uniformly spaced states. Returns (segments, obs_dt, notes:
    counts of gaps, dropped rows/segments, unwrapped and resampled columns for the log)."""
    groups = _groups(table, m.trial)
    obs_dt = _median_dt(table, m, groups, o.dt)
    q_all = table[m.positions].to_numpy()
    if m.momenta:
        v_all, factor = table[m.momenta].to_numpy(), 1.0
    elif isinstance(m.velocities, list):
        v_all, factor = table[m.velocities].to_numpy(), np.broadcast_to(
            np.asarray(o.mass, dtype=np.float64), (m.dim,))  # fmt: skip
    else:
        v_all, factor = None, 1.0
    used = table[m.used()].to_numpy()
    if m.trial is not None:  # rows without a trial id belong to none
        notes_missing_trial = int(np.isnan(table[m.trial].to_numpy()).sum())
    else:
        notes_missing_trial = 0
    notes = {"gaps": 0, "restarts": 0, "dropped_rows": 0, "irregular_steps": 0,
             "unwrapped": set(), "resampled": 0, "short": 0}  # fmt: skip
    notes["dropped_rows"] += notes_missing_trial
    segments: list[Segment] = []
    for trial, rows in groups:
        finite = np.isfinite(used[rows]).all(1)
        notes["dropped_rows"] += int((~finite).sum())
        if m.time is None:
            t = rows * obs_dt  # rows equally spaced: a dropped row leaves a gap of 2 dt
        else:
            t = table[m.time].to_numpy()[rows]
        keep = rows[finite]
        t = t[finite]
        dt = np.diff(t)
        gap = dt > (1 + o.gap_tolerance) * obs_dt
        restart = dt <= 0
        notes["gaps"] += int(gap.sum())
        notes["restarts"] += int(restart.sum())
        cuts = np.flatnonzero(gap | restart) + 1
        for piece in np.split(np.arange(len(keep)), cuts):
            if piece.size == 0:
                continue
            r, tp = keep[piece], t[piece]
            q = q_all[r].copy()
            notes["unwrapped"].update(_unwrap(q, m.positions, m.angles, o.wrapped))
            v = None if v_all is None else v_all[r] * factor
            off = np.abs(np.diff(tp) / obs_dt - 1) > o.jitter
            if off.any():
                notes["irregular_steps"] += int(off.sum())
                if o.irregular == "refuse":
                    i = int(np.flatnonzero(off)[0])
                    raise DataError(
                        f"irregular time spacing: the step from row {r[i]} to {r[i + 1]} (time "
                        f"{tp[i]:g} -> {tp[i + 1]:g}) is {tp[i + 1] - tp[i]:g}, the median step "
                        f"is {obs_dt:g} (allowed: ±{o.jitter:g} of it, gaps above "
                        f"{1 + o.gap_tolerance:g} times it); pass ingest.irregular=resample to "
                        "interpolate onto a uniform grid, or adjust ingest.jitter / "
                        "ingest.gap_tolerance"
                    )
                grid = tp[0] + obs_dt * np.arange(
                    int(math.floor((tp[-1] - tp[0]) / obs_dt + 1e-9)) + 1
                )
                q = np.stack([np.interp(grid, tp, q[:, j]) for j in range(m.dim)], 1)
                if v is not None:
                    v = np.stack([np.interp(grid, tp, v[:, j]) for j in range(m.dim)], 1)
                notes["resampled"] += 1
            if m.velocities == FINITE_DIFFERENCE:
                if q.shape[0] < 3:
                    notes["short"] += 1
                    continue
                v = np.gradient(q, obs_dt, axis=0, edge_order=2) * np.broadcast_to(
                    np.asarray(o.mass, dtype=np.float64), (m.dim,))  # fmt: skip
            states = q if v is None else np.concatenate([q, v], 1)
            segments.append(Segment(trial, int(r[0]), int(r[-1]), float(tp[0]), states))
    return segments, obs_dt, notes


def _limit(segments: list[Segment], max_segment: int | None) -> list[Segment]:
    """Cut segments longer than ``max_segment`` steps into consecutive blocks of that many (so one
    long recording can be split by blocks); rows are interpolated only as labels."""
    if max_segment is None:
        return segments
    out = []
    for s in segments:
        for a in range(0, s.steps, max_segment):
            b = min(a + max_segment, s.steps)
            if b - a < 1:
                continue
            rows = np.linspace(s.first_row, s.last_row, s.steps + 1).round().astype(int)
            out.append(Segment(s.trial, int(rows[a]), int(rows[b]), s.t0, s.states[a : b + 1]))
    return out


def cut(states: np.ndarray, steps: int) -> np.ndarray:
    """Consecutive trajectories of ``steps`` steps from one segment (n, w): (floor((n-1)/steps),
    steps+1, w), piece k = states[k·steps : (k+1)·steps + 1] (neighbours share their end point)."""
    k = (states.shape[0] - 1) // steps
    return np.stack([states[i * steps : (i + 1) * steps + 1] for i in range(k)]) if k else (
        np.zeros((0, steps + 1, states.shape[1])))  # fmt: skip


def split_segments(n: int, val: float, test: float, seed: int) -> dict[str, np.ndarray]:
    """Indices of n segments per split: a permutation from ``seed``, at least one segment in each
    split, round(val·n) and round(test·n) in val and test, the rest in train."""
    if n < 3:
        raise DataError(
            f"{n} usable segment{'s' if n != 1 else ''}: train, val and test need one each "
            "(segments are never split between them); cut long segments into blocks with "
            "ingest.max_segment=<steps>, or lower ingest.min_segment"
        )
    n_val = min(max(1, round(val * n)), n - 2)
    n_test = min(max(1, round(test * n)), n - 1 - n_val)
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(n)
    return {"test": np.sort(order[:n_test]), "val": np.sort(order[n_test : n_test + n_val]),
            "train": np.sort(order[n_test + n_val :])}  # fmt: skip


@dataclass
class Ingested:
    splits: dict[str, Split]
    obs_dt: float
    dim: int
    observe: str
    steps: int
    test_steps: int
    records: dict[str, list[dict]]
    notes: dict


def ingest_table(table: pd.DataFrame, m: Mapping, o: Options, path: Path) -> Ingested:
    """Segments, trajectories and splits of a table (``read_table``) under mapping ``m``."""
    o.check()
    m.check(list(table.columns), path)
    mass = np.atleast_1d(np.asarray(o.mass, dtype=np.float64))
    if mass.size not in (1, m.dim):
        raise UserError(f"ingest.mass has {mass.size} values for {m.dim} positions: give one, "
                        "or one per position")  # fmt: skip
    labels = table.attrs.get("labels", {}).get(m.trial) if m.trial else None
    segments, obs_dt, notes = segments_of(table, m, o)
    segments = _limit(segments, o.max_segment)
    usable = [s for s in segments if s.steps >= o.min_segment]
    notes["short"] += len(segments) - len(usable)
    if not usable:
        longest = max((s.steps for s in segments), default=0)
        raise DataError(
            f"{path}: no segment has ingest.min_segment={o.min_segment} steps (found "
            f"{len(segments)} segments, the longest {longest} steps of {obs_dt:g}); lower "
            "ingest.min_segment or raise ingest.gap_tolerance"
        )
    steps = o.steps or min(s.steps for s in usable)
    test_steps = o.test_steps or steps
    picked = split_segments(len(usable), o.val, o.test, o.seed)
    splits, records = {}, {}
    for name in SPLITS:
        length = test_steps if name == "test" else steps
        parts, records[name] = [], []
        for i in picked[name]:
            pieces = cut(usable[i].states, length)
            records[name].append(usable[i].record(len(pieces), labels))
            parts.append(pieces)
        observed = np.concatenate(parts)
        if observed.shape[0] == 0:
            longest = max(usable[i].steps for i in picked[name])
            which = "ingest.test_steps" if name == "test" else "ingest.steps"
            raise DataError(
                f"{path}: no {name} segment is {length} steps long (the longest has {longest}); "
                f"lower {which}"
            )
        splits[name] = Split(observed, None, obs_dt * np.arange(length + 1))
    notes["segments"] = len(usable)
    return Ingested(splits, obs_dt, m.dim, m.observe, steps, test_steps, records, notes)


# ---- the stage --------------------------------------------------------------------------------


def options_from_config(i: DictConfig) -> Options:
    mass = OmegaConf.to_container(i.mass) if OmegaConf.is_list(i.mass) else i.mass
    return Options(
        dt=i.dt, gap_tolerance=float(i.gap_tolerance), jitter=float(i.jitter),
        irregular=str(i.irregular), wrapped=i.wrapped, mass=mass, min_segment=int(i.min_segment),
        steps=i.steps, test_steps=i.test_steps, max_segment=i.max_segment,
        val=float(i.split.val), test=float(i.split.test), seed=int(i.seed),
    )  # fmt: skip


def output_path(cfg: DictConfig) -> Path:
    """``data_file``, or ``${data_dir}/measured/<ingest.name or the source's stem>.h5``."""
    if cfg.get("data_file"):
        return Path(cfg.data_file)
    name = cfg.ingest.name or Path(str(cfg.ingest.source)).stem
    return Path(cfg.data_dir) / OUT_DIR / f"{name}.h5"


def ingest(cfg: DictConfig) -> Path:
    """Read ``ingest.source``, segment, split and write the HDF5 file; returns its path."""
    i = cfg.ingest
    if i.source is None:
        raise UserError("give the measurement file: ingest.source=<path>")
    source = Path(str(i.source))
    out = output_path(cfg)
    if out.exists() and not i.overwrite:  # before any work
        raise DataError(f"{out} already exists; pass ingest.overwrite=true to replace it, or "
                        "data_file=<path> to write elsewhere")  # fmt: skip
    creatable_dir(out.parent, "the directory of data_file")
    mapping = mapping_from_config(i)
    table = read_table(
        source, i.header, str(i.separator), _names(i.names), _names(i.trial) or [],
        cfg.memory_limit,
    )  # fmt: skip
    log.info("read %s: %d rows, columns %s", source, len(table), list(table.columns))
    result = ingest_table(table, mapping, options_from_config(i), source)
    n = result.notes
    log.info(
        "obs_dt %g (median step); %d gaps, %d time restarts, %d rows with empty cells dropped, "
        "%d irregular steps (%d segments resampled); unwrapped %s",
        result.obs_dt, n["gaps"], n["restarts"], n["dropped_rows"], n["irregular_steps"],
        n["resampled"], sorted(n["unwrapped"]) or "none",
    )  # fmt: skip
    log.info(
        "%d segments of >= %d steps (%d shorter dropped); T = %d steps per trajectory (%s), "
        "test %d; observe %s",
        n["segments"], i.min_segment, n["short"], result.steps,
        "ingest.steps" if i.steps else "the shortest usable segment", result.test_steps,
        result.observe,
    )  # fmt: skip
    for name, split in result.splits.items():
        log.info("%s: %d segments -> %d trajectories", name, len(result.records[name]),
                 split.observed.shape[0])  # fmt: skip
    attrs = {
        "system": MEASURED, "system_params": {}, "dim": result.dim, "obs_dt": result.obs_dt,
        "observe": result.observe, "fine_dt": None, "integrator": None, "noise": None,
        "noise_std": None, "seed": int(i.seed), "config": None,
        "source": str(source), "source_sha256": sha256(source),
        "columns": json.dumps(mapping.as_dict()),
        "segments": json.dumps(result.records),
        "ingest_config": OmegaConf.to_yaml(cfg.ingest, resolve=True),
    }  # fmt: skip
    write_dataset(out, result.splits, attrs, overwrite=bool(i.overwrite))
    return out
