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
4. Segments are subsampled (``every``), cut at the ends of split time ranges and into equal
   blocks of at most ``max_segment`` steps; those shorter than ``min_segment`` are dropped. Units
   are chosen (``scale``: auto, powers of two; ``choose_units``). Each segment is tiled by
   trajectories of T steps (``steps``, or ``auto_steps``), the last one ending at the segment's
   end (``cut``); the schema stores (N, T+1, width) per split, in the scaled units.
5. Segments (never single points or pieces of one) are dealt to train/val/test by the split
   rules (``choose_splits``: fractions by a permutation from ``seed``, or segment indices,
   trials, time ranges, every k-th); the file records the rules (attribute ``split``) and which
   rows went where (attribute ``segments``).

Written with system ``measured`` (no known H; d from the file), no ``clean`` split, and the
provenance: ``source``, ``source_sha256``, ``columns`` (JSON), ``ingest_config`` (YAML),
and the scales: ``units`` (``hnnsym.data.units.Units``).
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import sys
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
from hnnsym.data.units import Units
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
    comment: str | None = None,
    skip_rows: int = 0,
) -> pd.DataFrame:
    """The file's columns as a float64 DataFrame with string column names (rows in file order).

    Text: ``skip_rows`` lines are skipped first; then ``header`` auto|true|false (auto: a first
    line with a non-number field is a header; one starting with ``#``, ``%`` or ``comment`` is
    one, that marker left out), ``separator`` auto|comma|tab|whitespace|semicolon (auto: from the
    first line); every later line starting with ``comment`` is skipped. ``names`` names the
    columns in order and always replaces the header (a header line is then dropped, never read
    as data); there must be one per column. Without names, a headerless file's columns are "0",
    "1", ... (an empty header field: "Unnamed: <j>"). ``labels``: columns that may hold text (a
    trial id such as ``A``): text becomes the codes 0, 1, ... in order of first appearance, the
    texts listed in ``table.attrs["labels"][name]``. ``table.attrs["first_line"]``: the file
    line of the first row (text files). A file with no data rows, a header naming more or fewer
    columns than the rows have, as many names as columns not given, or a name given twice is a
    one-line DataError. The memory of the read is estimated from the file's size (text) or its
    arrays' declared sizes and refused above ``memory_limit`` (None: the memory available now)
    before reading.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no measurement file at {path} (ingest.source)")
    suffix = path.suffix.lower()
    check_memory(_table_memory(path, suffix), f"reading {path}", memory_limit)
    if names:
        names = [str(n) for n in names]
    if suffix in TEXT_SUFFIXES:
        table, lines = _read_text(path, header, separator, comment, skip_rows, bool(names))
    elif suffix == ".npz":
        table, lines = _read_arrays(path, _npz_arrays(path)), None
    elif suffix in (".h5", ".hdf5"):
        table, lines = _read_arrays(path, _h5_arrays(path)), None
    else:
        raise DataError(f"{path}: cannot read {suffix or 'a file without suffix'} files; use one "
                        f"of {', '.join(SUFFIXES)}")  # fmt: skip
    if names:
        if len(names) != table.shape[1]:
            raise UserError(f"ingest.names gives {len(names)} names, the rows of {path} have "
                            f"{table.shape[1]} columns; give {table.shape[1]} names, one per "
                            "column in order")  # fmt: skip
        table.columns = names
    twice = [n for j, n in enumerate(table.columns) if n in table.columns[:j]]
    if twice:
        raise DataError(f"{path}: two columns are named {twice[0]!r}; name them apart (in the "
                        "file, or with ingest.names=[...])")  # fmt: skip
    frame = _numeric(path, table, lines, [str(n) for n in labels])
    frame.attrs["first_line"] = None if lines is None else int(lines[0])
    return frame


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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_text(
    path: Path,
    header: str | bool,
    separator: str,
    comment: str | None = None,
    skip_rows: int = 0,
    named: bool = False,
) -> tuple[pd.DataFrame, np.ndarray]:
    """(table of strings, file line number (1-based) of each row). ``named``: ingest.names
    replaces the header, whose width is then not checked."""
    if comment is not None and not str(comment).strip():
        raise UserError(f"ingest.comment must be a non-blank prefix such as '#', got {comment!r}")
    if skip_rows < 0:
        raise UserError(f"ingest.skip_rows must be >= 0, got {skip_rows}")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: cannot parse it as a table (not UTF-8 text: byte {err.start}); "
                        "check ingest.source") from err  # fmt: skip
    lines = re.split(r"\r\n|\r|\n", text)
    at = next((i for i in range(skip_rows, len(lines)) if lines[i].strip()), None)
    if at is None:
        skipped = f" after the ingest.skip_rows={skip_rows} lines skipped" if skip_rows else ""
        raise DataError(f"{path} is empty{skipped}")
    first = lines[at].lstrip()
    markers = (*COMMENT_MARKERS, str(comment).strip()) if comment else COMMENT_MARKERS
    marker = next((mk for mk in markers if first.startswith(mk)), None)
    if marker is not None:
        first = first[len(marker) :]
    if separator == "auto":
        sep = "," if "," in first else "\t" if "\t" in first else ";" if ";" in first else r"\s+"
    elif separator in SEPARATORS:
        sep = SEPARATORS[separator]
    else:
        raise UserError(f"ingest.separator must be auto or one of {sorted(SEPARATORS)}, got "
                        f"{separator!r}")  # fmt: skip
    fields = [f.strip() for f in (first.split() if sep == r"\s+" else first.split(sep))]
    if header == "auto":
        has_header = marker is not None or not all(_is_number(f) for f in fields if f)
    elif isinstance(header, bool):
        has_header = header
    else:
        raise UserError(f"ingest.header must be auto, true or false, got {header!r}")
    skip = at + 1 if has_header or marker is not None else at  # a marked line is never data
    prefix = str(comment).strip() if comment else None
    numbers = [
        i for i in range(skip, len(lines))
        if lines[i].strip() and not (prefix and lines[i].lstrip().startswith(prefix))
    ]  # fmt: skip
    if not numbers:
        raise DataError(f"{path} holds no data rows{', only a header line' if has_header else ''}"
                        "; ingest needs measurements")  # fmt: skip
    options = dict(sep=sep, header=None, dtype=str, skipinitialspace=True,
                   engine="python" if sep == r"\s+" else "c")  # fmt: skip
    try:
        body = io.StringIO("\n".join(lines[i] for i in numbers))
        table = pd.read_csv(body, skip_blank_lines=False, **options)
        names = pd.read_csv(io.StringIO(first), keep_default_na=False, **options).iloc[0]
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except pd.errors.ParserError as err:
        msg = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise DataError(f"{path}: cannot parse it as a table ({msg}); check ingest.separator, "
                        "ingest.header, ingest.comment and ingest.skip_rows") from err  # fmt: skip
    if table.empty or len(table) != len(numbers):
        raise DataError(f"{path} holds no data rows{', only a header line' if has_header else ''}"
                        "; ingest needs measurements")  # fmt: skip
    if has_header and not named:
        names = [str(n).strip() for n in names]
        while len(names) > table.shape[1] and not names[-1]:  # a trailing separator names nothing
            names.pop()
        if len(names) != table.shape[1]:
            width = table.shape[1]
            raise DataError(
                f"{path}: the header names {len(names)} columns ({', '.join(names)}), the rows "
                f"have {width}; name every column with ingest.names=[...] ({width} names in "
                "order, they replace the header), or check ingest.separator"
            )
        table.columns = [n or f"Unnamed: {j}" for j, n in enumerate(names)]
    else:
        table.columns = [str(c) for c in table.columns]
    return table, np.asarray(numbers) + 1


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


def _numeric(
    path: Path, table: pd.DataFrame, lines: np.ndarray | None, labels: list[str]
) -> pd.DataFrame:
    """Every column as float64; empty cells NaN; anything else that is not a number is an error
    naming the first such cell (file line ``lines[i]`` for text files, else the row index), except in the
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
            where = f"row {i}" if lines is None else f"line {lines[i]}"
            cell = str(text.iloc[i])
            hint = (f"; skip comment lines with ingest.comment='{cell[0]}'"
                    if cell[:1] in COMMENT_MARKERS else "")  # fmt: skip
            raise DataError(f"{path}: {where}, column {name!r}: {cell!r} is not a number{hint}")
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
        unknown = [n for n in dict.fromkeys([*self.used(), *self.angles]) if n not in available]
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
    the first (recording units), and the states (n, width) = [q, p] or q (already unwrapped /
    converted, recording units)."""

    trial: float | None
    first_row: int
    last_row: int
    t0: float
    states: np.ndarray

    @property
    def steps(self) -> int:
        return self.states.shape[0] - 1

    def label(self, labels: list[str] | None) -> Any:
        return self.trial if labels is None or self.trial is None else labels[int(self.trial)]

    def record(self, index: int, dt: float, trajectories: int, labels: list[str] | None) -> dict:
        return {"index": index, "trial": self.label(labels), "rows": [self.first_row, self.last_row],
                "t0": self.t0, "t1": self.t0 + self.steps * dt, "steps": self.steps,
                "trajectories": trajectories}  # fmt: skip


# ---- splits: ingest.split.{val,test} ---------------------------------------------------------

RULE_KEYS = ("segments", "trials", "time", "every", "offset")
MIN_TRAJECTORIES = 5  # a split with fewer trajectories than this is warned about


def split_rule(name: str, value: Any) -> float | dict:
    """``ingest.split.<name>`` as a fraction, or a dict of criteria (``RULE_KEYS``) that a chosen
    segment meets all of: ``segments`` (indices), ``trials`` (ids or labels), ``time`` (one
    [start, end] or a list of them, recording units: segments are cut at the ends), ``every`` /
    ``offset`` (index % every == offset). A list is ``{segments: list}``."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    where = f"ingest.split.{name}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not 0 < value < 1:
            raise UserError(f"{where} must be a fraction in (0, 1), a list of segment indices or "
                            f"a rule such as {{trials: [2]}}, got {value}")  # fmt: skip
        return float(value)
    if isinstance(value, (list, tuple)):
        value = {"segments": list(value)}
    if not isinstance(value, dict) or not value:
        raise UserError(f"{where} must be a fraction, a list of segment indices, or a rule with "
                        f"one or more of {', '.join(RULE_KEYS)}; got {value!r}")  # fmt: skip
    unknown = [k for k in value if k not in RULE_KEYS]
    if unknown:
        raise UserError(f"{where} has no key {', '.join(map(repr, unknown))}; a rule takes "
                        f"{', '.join(RULE_KEYS)}")  # fmt: skip
    rule: dict[str, Any] = {}
    try:
        if "segments" in value:
            rule["segments"] = sorted({int(k) for k in _as_list(value["segments"])})
        if "trials" in value:
            rule["trials"] = _as_list(value["trials"])
        if "time" in value:
            ranges = _as_list(value["time"])
            if ranges and not isinstance(ranges[0], (list, tuple)):
                ranges = [ranges]
            rule["time"] = [[float(a), float(b)] for a, b in ranges]
            if not rule["time"] or any(not a < b for a, b in rule["time"]):
                raise ValueError
        if "offset" in value and "every" not in value:
            raise ValueError
        if "every" in value:
            rule["every"], rule["offset"] = int(value["every"]), int(value.get("offset", 0))
            if not 0 <= rule["offset"] < rule["every"]:
                raise ValueError
    except (TypeError, ValueError) as err:
        raise UserError(
            f"{where}={value!r}: segments is a list of indices, trials a list, time [start, end] "
            "with start < end (or a list of such), every k >= 1 with offset in 0..k-1"
        ) from err
    return rule


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _cut_at_times(segments: list[Segment], times: list[float], dt: float) -> list[Segment]:
    """Cut segments so that a state at a time in ``times`` starts a new segment (a range's start)
    and one past a range's end does too: no segment straddles a boundary."""
    if not times:
        return segments
    out = []
    for s in segments:
        starts = set()
        for a, b in times:
            starts.add(math.ceil((a - s.t0) / dt - 1e-9))  # first state at or after a
            starts.add(math.floor((b - s.t0) / dt + 1e-9) + 1)  # first state after b
        edges = [0, *sorted(k for k in starts if 0 < k <= s.steps), s.steps + 1]
        for a, b in zip(edges[:-1], edges[1:]):
            out.append(_part(s, a, b - 1, dt))
    return out


def _part(s: Segment, a: int, b: int, dt: float) -> Segment:
    """States a..b (inclusive) of a segment; rows are interpolated only as labels."""
    rows = np.linspace(s.first_row, s.last_row, s.steps + 1).round().astype(int)
    return Segment(s.trial, int(rows[a]), int(rows[b]), s.t0 + a * dt, s.states[a : b + 1])


def _meets(s: Segment, index: int, rule: dict, dt: float, labels: list[str] | None) -> bool:
    if "segments" in rule and index not in rule["segments"]:
        return False
    if "every" in rule and index % rule["every"] != rule["offset"]:
        return False
    if "trials" in rule:
        ids = {str(t) for t in rule["trials"]}
        trial = s.label(labels)
        numeric = isinstance(trial, float) and any(
            _is_number(str(t)) and float(t) == trial for t in rule["trials"]
        )
        if not numeric and str(trial) not in ids:
            return False
    if "time" in rule:
        t1, eps = s.t0 + s.steps * dt, 1e-6 * dt
        if not any(a - eps <= s.t0 and t1 <= b + eps for a, b in rule["time"]):
            return False
    return True


def choose_splits(
    segments: list[Segment], rules: dict[str, float | dict], seed: int, dt: float,
    labels: list[str] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Indices of the segments per split. Rules (``split_rule``) pick test, then val; a fraction
    takes round(fraction · n) (at least 1) of the segments not yet picked, by a permutation from
    ``seed``; train is the rest. Each split must get at least one segment."""
    n = len(segments)
    picked: dict[str, list[int]] = {}
    for name in ("test", "val"):
        rule = rules[name]
        if isinstance(rule, dict):
            picked[name] = [k for k, s in enumerate(segments) if _meets(s, k, rule, dt, labels)]
            if "segments" in rule and (bad := [k for k in rule["segments"] if k >= n]):
                raise UserError(f"ingest.split.{name}: no segment {bad[0]}; there are {n} "
                                f"(0..{n - 1}, in file order)")  # fmt: skip
            if not picked[name]:
                raise DataError(f"ingest.split.{name}={rule} picks none of the {n} segments; see "
                                "the segments in the log (index, trial, time)")  # fmt: skip
    if "test" in picked and "val" in picked and (both := set(picked["test"]) & set(picked["val"])):
        raise UserError(f"ingest.split: segment {min(both)} is picked for both val and test")
    if n < 3:
        raise DataError(
            f"{n} usable segment{'s' if n != 1 else ''}: train, val and test need one each "
            "(segments are never split between them); cut long segments into blocks with "
            "ingest.max_segment=<steps>, split by time (ingest.split={test: {time: [t0, t1]}, "
            "...}), or lower ingest.min_segment"
        )
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(n)
    for name in ("test", "val"):
        rule = rules[name]
        if isinstance(rule, float):
            taken = {k for v in picked.values() for k in v}
            free = [int(k) for k in order if k not in taken]
            left = 1 + (0 if "val" in picked or name == "val" else 1)  # train (and val) keep one
            count = min(max(1, round(rule * n)), len(free) - left)
            if count < 1:
                raise DataError(f"ingest.split.{name}={rule}: no segment is left for it ({n} "
                                "segments); lower the other split or cut more segments")  # fmt: skip
            picked[name] = free[:count]
    taken = {k for v in picked.values() for k in v}
    picked["train"] = [k for k in range(n) if k not in taken]
    if not picked["train"]:
        raise DataError(f"ingest.split leaves no segment for train (of {n}); pick fewer for val "
                        "and test")  # fmt: skip
    return {name: np.array(sorted(picked[name]), dtype=int) for name in SPLITS}


def split_segments(n: int, val: float, test: float, seed: int) -> dict[str, np.ndarray]:
    """Fractions of n segments per split (``choose_splits`` with fractions)."""
    dummy = [Segment(None, k, k, 0.0, np.zeros((1, 1))) for k in range(n)]
    return choose_splits(dummy, {"val": val, "test": test}, seed, 1.0)


# ---- the numeric settings ---------------------------------------------------------------------


@dataclass
class Options:
    """The numeric settings of ``ingest`` (hnnsym/conf/ingest.yaml). ``scale`` defaults to none
    here (``ingest_table`` keeps the recording's units); the CLI's default is auto."""

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
    val: Any = 0.15
    test: Any = 0.15
    seed: int = 0
    every: int = 1
    scale: Any = "none"

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
            "mass": all(m > 0 for m in np.atleast_1d(self.mass)),
            "every": isinstance(self.every, int) and self.every >= 1,
        }  # fmt: skip
        rules = {
            "gap_tolerance": "> 0", "jitter": ">= 0 and < ingest.gap_tolerance",
            "irregular": "refuse or resample", "wrapped": "auto, true or false",
            "min_segment": ">= 1", "steps": ">= 1 or null", "test_steps": ">= 1 or null",
            "max_segment": ">= 1 or null", "dt": "> 0 or null", "mass": "> 0",
            "every": "an integer >= 1",
        }  # fmt: skip
        for key, ok in problems.items():
            if not ok:
                raise UserError(f"ingest.{key} must be {rules[key]}, got {getattr(self, key)}")
        val, test = split_rule("val", self.val), split_rule("test", self.test)
        if isinstance(val, float) and isinstance(test, float) and val + test >= 1:
            raise UserError(f"ingest.split: fractions val + test must be < 1, got {val}, {test}")


def _groups(table: pd.DataFrame, trial: str | None) -> list[tuple[float | None, np.ndarray]]:
    """(trial id, row indices in file order) per trial, in order of first appearance."""
    if trial is None:
        return [(None, np.arange(len(table)))]
    ids = table[trial].to_numpy()
    out = []
    for value in pd.unique(ids[~np.isnan(ids)]):
        out.append((float(value), np.flatnonzero(ids == value)))
    return out


def time_resolution(t: np.ndarray) -> float:
    """The decimal resolution the times were written with (1e-3 for times in whole ms), or 0
    when they are not rounded to one (at most 1e-9 of the largest time off a multiple)."""
    t = t[np.isfinite(t)]
    if t.size == 0:
        return 0.0
    scale = max(float(np.abs(t).max()), 1e-300)
    for k in range(0, 10):
        r = 10.0**-k
        if np.abs(t / r - np.round(t / r)).max() * r <= 1e-9 * max(scale, r):
            return r
    return 0.0


def _median_dt(table: pd.DataFrame, m: Mapping, groups, dt: float | None) -> tuple[float, float]:
    """(obs_dt, resolution of the times). obs_dt: the median positive step; when the times are
    rounded to a resolution r (``time_resolution``) between 1e-4 and 0.05 of it, the mean of the
    steps within r of the median (rounded frame times, e.g. 0.033, 0.034 for 1/29.9 s)."""
    if m.time is None:
        if dt is None:
            raise UserError("with no time column (ingest.time=null) give the spacing ingest.dt")
        return float(dt), 0.0
    steps = np.concatenate([np.diff(table[m.time].to_numpy()[rows]) for _, rows in groups])
    steps = steps[np.isfinite(steps) & (steps > 0)]
    if steps.size == 0:
        raise DataError(f"column {m.time!r} has no increasing times: no time step to measure")
    median = float(np.median(steps))
    r = time_resolution(table[m.time].to_numpy())
    if not 1e-4 * median <= r <= 0.05 * median:  # not rounded, or the steps are whole quanta
        return median, 0.0
    regular = steps[np.abs(steps - median) <= 1.01 * r]
    return float(regular.mean()), r


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
    obs_dt, resolution = _median_dt(table, m, groups, o.dt)
    # steps within the jitter, or within the resolution the times were written with, are uniform
    allowed = max(o.jitter, 1.01 * resolution / obs_dt)
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
            off = np.abs(np.diff(tp) / obs_dt - 1) > allowed
            if off.any():
                notes["irregular_steps"] += int(off.sum())
                if o.irregular == "refuse":
                    i = int(np.flatnonzero(off)[0])
                    raise DataError(
                        f"irregular time spacing: the step from row {r[i]} to {r[i + 1]} (time "
                        f"{tp[i]:g} -> {tp[i + 1]:g}) is {tp[i + 1] - tp[i]:g}, the median step "
                        f"is {obs_dt:g} (allowed: ±{allowed:g} of it, gaps above "
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


def _limit(segments: list[Segment], max_segment: int | None, dt: float = 1.0) -> list[Segment]:
    """Cut segments longer than ``max_segment`` steps into the fewest equal blocks (steps differ
    by at most one) of at most that many, consecutive blocks sharing their end point (so one long
    recording can be split by blocks, and no tail is lost)."""
    if max_segment is None:
        return segments
    out = []
    for s in segments:
        k = max(1, math.ceil(s.steps / max_segment))
        edges = np.linspace(0, s.steps, k + 1).round().astype(int)
        out += [_part(s, int(a), int(b), dt) for a, b in zip(edges[:-1], edges[1:])]
    return out


def _subsample(segments: list[Segment], every: int) -> list[Segment]:
    """Every ``every``-th state of each segment (from its first)."""
    if every == 1:
        return segments
    out = []
    for s in segments:
        keep = np.arange(0, s.steps + 1, every)
        rows = np.linspace(s.first_row, s.last_row, s.steps + 1).round().astype(int)
        out.append(Segment(s.trial, s.first_row, int(rows[keep[-1]]), s.t0, s.states[keep]))
    return out


def cut(states: np.ndarray, steps: int) -> np.ndarray:
    """Trajectories of ``steps`` steps tiling one segment (n, w): ceil((n-1)/steps) pieces of
    steps+1 states, piece k = states[k·steps : (k+1)·steps + 1] (neighbours share their end
    point), except the last, which ends at the segment's last state (it overlaps the one before
    when (n-1) is not a multiple of steps): no tail is lost. (0, steps+1, w) when n-1 < steps."""
    n = states.shape[0] - 1
    if n < steps:
        return np.zeros((0, steps + 1, states.shape[1]))
    starts = [min(k * steps, n - steps) for k in range(math.ceil(n / steps))]
    return np.stack([states[a : a + steps + 1] for a in starts])


AUTO_STEPS_MAX = 64  # ingest.steps=null: T is chosen in [shortest usable segment, this]
AUTO_STEPS_KEEP = 0.95  # ... the largest T that keeps this fraction of the usable samples


def auto_steps(lengths: Sequence[int], groups: Sequence[Sequence[int]] = (),
               test_steps: int | None = None, lo: int | None = None) -> int:  # fmt: skip
    """T for segments of these step counts: the largest T in [lo, max(lo, AUTO_STEPS_MAX)] (lo:
    ingest.min_segment, at most the shortest segment)
    whose tiling (``cut``) covers at least AUTO_STEPS_KEEP of the samples (segments shorter than T
    are not used; T = min covers all) and, where such a T exists, gives every split (``groups``:
    the segment indices of each split; the test one tiled by ``test_steps`` when given) at least
    MIN_TRAJECTORIES trajectories."""
    lengths = np.asarray(lengths)
    lo = min(int(lengths.min()), lo or int(lengths.min()))
    total = float((lengths + 1).sum())

    def enough(steps: int) -> bool:
        for k, group in enumerate(groups):
            length = test_steps if k == len(groups) - 1 and test_steps else steps
            n = sum(math.ceil(lengths[i] / length) for i in group if lengths[i] >= length)
            if n < MIN_TRAJECTORIES:
                return False
        return True

    keeping = [
        steps for steps in range(lo, max(lo, min(AUTO_STEPS_MAX, int(lengths.max()))) + 1)
        if (lengths[lengths >= steps] + 1).sum() >= AUTO_STEPS_KEEP * total
    ]  # fmt: skip
    full = [steps for steps in keeping if enough(steps)]
    return max(full or keeping)


# ---- units: ingest.scale ----------------------------------------------------------------------


def _pow2(x: float) -> float:
    return float(2.0 ** round(math.log2(x))) if math.isfinite(x) and x > 0 else 1.0


def _geomean(values: np.ndarray) -> float:
    values = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.log(values).mean())) if values.size else 1.0


def auto_scales(segments: list[Segment], dim: int, periodic: Sequence[int], dt: float,
                mass: Any) -> tuple[float, list[float], float]:  # fmt: skip
    """(τ, a, c) from the data, each a power of two: a_i ~ std(q_i) (1 for an angle), τ the
    geometric mean over coordinates of std(q_i)/rms(q̇_i) (1/rms(θ̇) for an angle; q̇ by central
    differences), c the geometric mean of rms(p_i)·a_i so that p̃_i = p_i a_i / c is O(1) (p
    from the data, or mass · q̇ for positions only). A constant coordinate has a_i = 1 and no
    say in τ."""
    q = np.concatenate([s.states[:, :dim] for s in segments])
    qdot = np.concatenate([np.gradient(s.states[:, :dim], dt, axis=0) for s in segments
                           if s.steps >= 2] or [np.zeros((0, dim))])  # fmt: skip
    if segments[0].states.shape[1] == 2 * dim:
        p = np.concatenate([s.states[:, dim:] for s in segments])
    else:
        p = qdot * np.broadcast_to(np.asarray(mass, dtype=np.float64), (dim,))
    spread = q.std(0)
    spread[list(periodic)] = 1.0
    speed = np.sqrt((qdot**2).mean(0)) if qdot.shape[0] else np.zeros(dim)  # rms
    ok = (spread > 0) & (speed > 0)
    tau = _pow2(_geomean(spread[ok] / speed[ok])) if ok.any() else 1.0
    a = [1.0 if i in periodic else _pow2(float(spread[i])) for i in range(dim)]
    c = _pow2(_geomean(np.sqrt((p**2).mean(0)) * np.asarray(a))) if p.shape[0] else 1.0
    return tau, a, c


def choose_units(segments: list[Segment], m: Mapping, o: Options, dt: float,
                 labels: dict[str, str] | None = None) -> Units:  # fmt: skip
    """``ingest.scale``: auto, none, or {time, q, action} (what is not given is auto)."""
    periodic = tuple(j for j, n in enumerate(m.positions) if n in m.angles)
    scale = OmegaConf.to_container(o.scale) if OmegaConf.is_config(o.scale) else o.scale
    common = dict(periodic=periodic, names=tuple(m.positions), labels=dict(labels or {}))
    if scale == "none" or scale is None:
        return Units(1.0, (1.0,) * m.dim, 1.0, **common)
    if scale != "auto" and not isinstance(scale, dict):
        raise UserError(f"ingest.scale must be auto, none or {{time: τ, q: [...], action: c}}, "
                        f"got {scale!r}")  # fmt: skip
    given = {} if scale == "auto" else scale
    if unknown := [k for k in given if k not in ("time", "q", "action")]:
        raise UserError(f"ingest.scale has no key {unknown[0]!r}; it takes time, q, action")
    tau, a, c = auto_scales(segments, m.dim, periodic, dt, o.mass)
    try:
        tau = float(given.get("time", tau))
        c = float(given.get("action", c))
        if "q" in given:
            q = _as_list(given["q"])
            if len(q) == 1:
                q = [1.0 if j in periodic else float(q[0]) for j in range(m.dim)]
            if len(q) != m.dim:
                raise ValueError
            a = [float(v) for v in q]
    except (TypeError, ValueError) as err:
        raise UserError(f"ingest.scale={scale!r}: time and action are numbers, q one number or "
                        f"one per position ({m.dim})") from err  # fmt: skip
    if bad := [m.positions[j] for j in periodic if a[j] != 1.0]:
        raise UserError(f"ingest.scale.q: angle column {bad[0]} is never scaled; give 1 for it")
    if not all(math.isfinite(v) and v > 0 for v in (tau, c, *a)):
        raise UserError(f"ingest.scale: every scale must be a number > 0, got time {tau}, q {a}, "
                        f"action {c}")  # fmt: skip
    return Units(tau, tuple(a), c, **common)


@dataclass
class Ingested:
    splits: dict[str, Split]
    obs_dt: float  # stored (scaled) units
    dim: int
    observe: str
    steps: int
    test_steps: int
    records: dict[str, list[dict]]
    notes: dict
    units: Units = field(default_factory=lambda: Units.identity(1))
    rules: dict = field(default_factory=dict)


def warn(message: str) -> None:
    """A ``warning:`` line on stderr."""
    print(f"warning: {message}", file=sys.stderr)


def ingest_table(
    table: pd.DataFrame, m: Mapping, o: Options, path: Path, labels: dict[str, str] | None = None
) -> Ingested:
    """Segments, trajectories, units and splits of a table (``read_table``) under mapping ``m``;
    ``labels``: units of the columns as recorded (``Units.labels``). ``notes["warnings"]``: what
    ``ingest`` prints as ``warning:`` lines (a split with fewer than MIN_TRAJECTORIES)."""
    o.check()
    m.check(list(table.columns), path)
    mass = np.atleast_1d(np.asarray(o.mass, dtype=np.float64))
    if mass.size not in (1, m.dim):
        raise UserError(f"ingest.mass has {mass.size} values for {m.dim} positions: give one, "
                        "or one per position")  # fmt: skip
    trial_labels = table.attrs.get("labels", {}).get(m.trial) if m.trial else None
    rules = {"val": split_rule("val", o.val), "test": split_rule("test", o.test)}
    segments, obs_dt, notes = segments_of(table, m, o)
    segments = _subsample(segments, o.every)
    obs_dt *= o.every  # recording units
    times = [r for rule in rules.values() if isinstance(rule, dict) for r in rule.get("time", [])]
    segments = _cut_at_times(segments, times, obs_dt)
    segments = _limit(segments, o.max_segment, obs_dt)
    usable = [s for s in segments if s.steps >= o.min_segment]
    notes["short"] += len(segments) - len(usable)
    if not usable:
        longest = max((s.steps for s in segments), default=0)
        raise DataError(
            f"{path}: no segment has ingest.min_segment={o.min_segment} steps (found "
            f"{len(segments)} segments, the longest {longest} steps of {obs_dt:g}); lower "
            "ingest.min_segment or raise ingest.gap_tolerance"
        )
    units = choose_units(usable, m, o, obs_dt, labels)
    picked = choose_splits(usable, rules, o.seed, obs_dt, trial_labels)
    groups = [picked["train"], picked["val"], picked["test"]]
    steps = o.steps or auto_steps([s.steps for s in usable], groups, o.test_steps, o.min_segment)
    test_steps = o.test_steps or steps
    splits, records = {}, {}
    covered = np.zeros(len(table), dtype=bool)
    notes["warnings"] = []
    for name in SPLITS:
        length = test_steps if name == "test" else steps
        parts, records[name] = [], []
        for i in picked[name]:
            pieces = cut(usable[i].states, length)
            records[name].append(usable[i].record(int(i), obs_dt, len(pieces), trial_labels))
            parts.append(pieces)
            if len(pieces):
                covered[usable[i].first_row : usable[i].last_row + 1] = True
        observed = np.concatenate(parts)
        if observed.shape[0] == 0:
            longest = max(usable[i].steps for i in picked[name])
            which = "ingest.test_steps" if name == "test" else "ingest.steps"
            raise DataError(
                f"{path}: no {name} segment is {length} steps long (the longest has {longest}); "
                f"lower {which}"
            )
        if observed.shape[0] < MIN_TRAJECTORIES:
            notes["warnings"].append(f"split {name} has {observed.shape[0]} trajector"
                 f"{'y' if observed.shape[0] == 1 else 'ies'} of {length} steps (from "
                 f"{len(picked[name])} segments), fewer than {MIN_TRAJECTORIES}: its numbers will "
                 "be noisy; give it more segments (ingest.split) or shorter trajectories "
                 "(ingest.steps / ingest.test_steps)")  # fmt: skip
        dt = obs_dt / units.time
        splits[name] = Split(units.to_scaled(observed), None, dt * np.arange(length + 1))
    notes["segments"] = len(usable)
    notes["samples"] = (int(covered.sum()), len(table))
    return Ingested(splits, obs_dt / units.time, m.dim, m.observe, steps, test_steps, records,
                    notes, units, rules)  # fmt: skip


# ---- the stage --------------------------------------------------------------------------------


def options_from_config(i: DictConfig) -> Options:
    mass = OmegaConf.to_container(i.mass) if OmegaConf.is_list(i.mass) else i.mass

    def plain(value: Any) -> Any:
        return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value

    return Options(
        dt=i.dt, gap_tolerance=float(i.gap_tolerance), jitter=float(i.jitter),
        irregular=str(i.irregular), wrapped=i.wrapped, mass=mass, min_segment=int(i.min_segment),
        steps=i.steps, test_steps=i.test_steps, max_segment=i.max_segment,
        val=plain(i.split.val), test=plain(i.split.test), seed=int(i.seed),
        every=int(i.get("every", 1)), scale=plain(i.get("scale", "auto")),
    )  # fmt: skip


def _unit_labels(value: Any, columns: list[str], m: Mapping) -> dict[str, str]:
    """``ingest.units`` as {column: unit} (key ``time``: the time unit; a time column's unit is
    also given under ``time``); angle columns are in rad unless given."""
    given = {} if value is None else OmegaConf.to_container(value) if OmegaConf.is_config(
        value) else value  # fmt: skip
    if not isinstance(given, dict):
        raise UserError(
            f"ingest.units must map columns to units, e.g. {{t: s, x: px}}, got {value!r}"
        )
    labels = {str(k): str(v) for k, v in given.items()}
    unknown = [k for k in labels if k not in columns and k != "time"]
    if unknown:
        raise UserError(f"ingest.units names no column {', '.join(map(repr, unknown))}; the "
                        f"columns: {', '.join(columns)} (or time)")  # fmt: skip
    for a in m.angles:
        labels.setdefault(a, "rad")
    if m.time is not None and m.time in labels:
        labels.setdefault("time", labels[m.time])
    return labels


def first_row(table: pd.DataFrame, m: Mapping, units: dict[str, str]) -> str:
    """The first data row as mapped: ``name = value unit [role]`` for every column."""
    roles: dict[str, str] = {}
    if m.time:
        roles[m.time] = "time"
    if m.trial:
        roles[m.trial] = "trial"
    for j, n in enumerate(m.positions):
        roles[n] = f"q{j + 1}" + (" angle" if n in m.angles else "")
    for key, cols in (("p", m.momenta), ("v", m.velocities)):
        if isinstance(cols, list):
            roles.update({n: f"{key}{j + 1}" for j, n in enumerate(cols)})
    line = table.attrs.get("first_line")
    cells = []
    for name, value in table.iloc[0].items():
        unit = f" {units[name]}" if name in units else ""
        cells.append(f"{name} = {value:.6g}{unit} [{roles.get(name, 'unused')}]")
    return f"first row{f' (line {line})' if line else ''} as mapped: {', '.join(cells)}"


def _rule_text(rule: Any) -> str:
    if rule is None:
        return "the rest"
    return f"fraction {rule:g}" if isinstance(rule, float) else json.dumps(rule)


def _segment_text(r: dict) -> str:
    trial = r["trial"]
    trial = (
        ""
        if trial is None
        else f"trial {trial:g} "
        if isinstance(trial, float)
        else f"trial {trial} "
    )
    return f"#{r['index']} {trial}t {r['t0']:g}..{r['t1']:g}"


def describe_units(u: Units, m: Mapping, obs_dt: float) -> str:
    """The scales chosen, in the recording's units where ``u.labels`` gives them."""
    if u.time == 1.0 and u.action == 1.0 and all(a == 1.0 for a in u.q):
        return "units: the recording's (ingest.scale=none or all scales 1)"
    t_unit = f" {u.labels['time']}" if "time" in u.labels else ""
    qs = ", ".join(
        f"{n} / {a:g}{' ' + u.labels[n] if n in u.labels else ''}" for n, a in zip(m.positions, u.q)
    )
    ps = ", ".join(f"{b:g}" for b in u.p)
    angles = [m.positions[j] for j in u.periodic]
    return (f"units: stored t = t / {u.time:g}{t_unit}, q = {qs}, p = p / b with b = ({ps}) "
            f"(action {u.action:g}, H = {u.energy:g} H~); obs_dt {obs_dt * u.time:g} -> "
            f"{obs_dt:g}; angles (periodic, unscaled): {', '.join(angles) or 'none'}")  # fmt: skip


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
        cfg.memory_limit, None if i.comment is None else str(i.comment), int(i.skip_rows),
    )  # fmt: skip
    log.info("read %s: %d rows, columns %s", source, len(table), list(table.columns))
    unit_of = _unit_labels(i.get("units"), list(table.columns), mapping)
    log.info("%s", first_row(table, mapping, unit_of))
    result = ingest_table(table, mapping, options_from_config(i), source, unit_of)
    n = result.notes
    u = result.units
    every = int(i.get("every", 1))
    log.info(
        "obs_dt %g (median step%s); %d gaps, %d time restarts, %d rows with empty cells dropped, "
        "%d irregular steps (%d segments resampled); unwrapped %s",
        result.obs_dt * u.time, f" x ingest.every={every}" if every > 1 else "", n["gaps"],
        n["restarts"], n["dropped_rows"], n["irregular_steps"], n["resampled"],
        sorted(n["unwrapped"]) or "none",
    )  # fmt: skip
    log.info("%s", describe_units(u, mapping, result.obs_dt))
    log.info(
        "%d segments of >= %d steps (%d shorter dropped); T = %d steps per trajectory (%s), "
        "test %d; observe %s",
        n["segments"], i.min_segment, n["short"], result.steps,
        "ingest.steps" if i.steps else "auto: the longest keeping most samples", result.test_steps,
        result.observe,
    )  # fmt: skip
    used, total = n["samples"]
    log.info("rows used (spanned by trajectories): %d of %d (%.1f%%)", used, total,
             100 * used / max(total, 1))  # fmt: skip
    for name, split in result.splits.items():
        recs = result.records[name]
        log.info("%s (%s): %d segments -> %d trajectories; segments %s", name,
                 _rule_text(result.rules.get(name)), len(recs), split.observed.shape[0],
                 ", ".join(_segment_text(r) for r in recs))  # fmt: skip
    attrs = {
        "system": MEASURED, "system_params": {}, "dim": result.dim, "obs_dt": result.obs_dt,
        "observe": result.observe, "fine_dt": None, "integrator": None, "noise": None,
        "noise_std": None, "seed": int(i.seed), "config": None,
        "source": str(source), "source_sha256": sha256(source),
        "columns": json.dumps(mapping.as_dict()),
        "segments": json.dumps(result.records),
        "split": json.dumps({**result.rules, "seed": int(i.seed)}),
        "units": u.as_attr(),
        "ingest_config": OmegaConf.to_yaml(cfg.ingest, resolve=True),
    }  # fmt: skip
    for message in n["warnings"]:
        warn(message)
    write_dataset(out, result.splits, attrs, overwrite=bool(i.overwrite))
    return out
