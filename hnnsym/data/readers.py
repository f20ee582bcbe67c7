"""Reading a measurement file into a table of float64 columns (``read_table``): .csv/.txt/.tsv/.dat
(header or none, comma/whitespace/tab/semicolon separated; pandas), .npz and .h5 (one column per
1-D array, ``<key>_<j>`` per column of a 2-D one). Text that is not a number is a one-line error;
empty cells are NaN."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from hnnsym.errors import DataError, UserError
from hnnsym.resources import check_memory

TEXT_SUFFIXES = (".csv", ".txt", ".tsv", ".dat")
SUFFIXES = (*TEXT_SUFFIXES, ".npz", ".h5", ".hdf5")
SEPARATORS = {"comma": ",", "tab": "\t", "whitespace": r"\s+", "semicolon": ";"}
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


def is_number_text(text: str) -> bool:
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
        has_header = marker is not None or not all(is_number_text(f) for f in fields if f)
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
