"""Property-based fuzzing of the two readers of user files: ``read_table`` (what ``ingest`` reads)
and ``read_dataset`` (what train and evaluate read). Either the read is correct (the values read
are the values written) or it is a one-line UserError/DataError: never another exception, never a
silent misread. Derandomized, bounded and without a hypothesis database, so the runs repeat."""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hnnsym.data.hdf5 import SPLITS, read_dataset
from hnnsym.data.readers import read_table
from hnnsym.errors import UserError

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def one_line(err: UserError) -> None:
    assert str(err) and "\n" not in str(err), repr(err)


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---- the text reader --------------------------------------------------------------------------
SEPARATORS = {",": "comma", ";": "semicolon", "\t": "tab", " ": "whitespace"}
NAN_CELLS = ("", "nan", "NaN", "NA")
NOT_NUMBERS = ("abc", "b'1.5'", "1+2j", "(1+0j)", "0x1F", "--1", "1.2.3", "TRUE")  # bytes, complex
names = st.text("abcxyz_0123456789", min_size=0, max_size=4)
cells = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True, width=64).map(repr),
    st.integers(-(2**53), 2**53).map(str),
    st.sampled_from(NAN_CELLS),
    st.sampled_from(NOT_NUMBERS),
)


@st.composite
def text_tables(draw):
    """(file text, separator, marker of the header line, header: list of names or None, cells:
    rows of strings)."""
    n_cols = draw(st.integers(1, 4))
    sep = draw(st.sampled_from(list(SEPARATORS)))
    header = draw(st.none() | st.lists(names, min_size=n_cols, max_size=n_cols))
    rows = draw(st.lists(st.lists(cells, min_size=n_cols, max_size=n_cols), max_size=5))
    if sep == " ":  # whitespace cannot hold an empty cell or name
        rows = [[c or "nan" for c in row] for row in rows]
        header = header and [n or "x" for n in header]
    marker = draw(st.sampled_from(["", "#", "# ", "%"]))
    lines = [] if header is None else [marker + sep.join(header)]
    lines += [sep.join(row) for row in rows]
    return "\n".join(lines) + draw(st.sampled_from(["", "\n"])), sep, marker, header, rows


def expected_value(cell: str) -> float:
    return math.nan if cell in NAN_CELLS else float(cell)


@FUZZ
@given(table=text_tables(), explicit_sep=st.booleans())
def test_read_table_reads_exactly_or_refuses_in_one_line(tmp_path: Path, table, explicit_sep):
    text, sep, marker, header, rows = table
    path = tmp_path / "m.csv"
    path.write_text(text)
    # headerless: header=false (auto would rightly take a first row holding text as the header)
    has_header = header is not None and not all(is_number(n) for n in header if n)
    if header is not None and not has_header:  # names that are numbers: a row of data
        header, rows = None, rows if marker else [header, *rows]  # (a marked line never is)
    try:
        read = read_table(
            path, header="auto" if has_header else False,
            separator=SEPARATORS[sep] if explicit_sep else "auto",
        )  # fmt: skip
    except UserError as err:
        one_line(err)
        return
    # It read: then the file was valid, and every value and name is the one written.
    rows = [row for row in rows if sep.join(row).strip()]  # a blank line is no row
    assert rows, "a file without data rows must be refused"
    assert not any(c in NOT_NUMBERS for row in rows for c in row), "text read as a number"
    values = np.array([[expected_value(c) for c in row] for row in rows])
    np.testing.assert_array_equal(read.to_numpy(), values)
    if header is None:
        assert list(read.columns) == [str(j) for j in range(values.shape[1])]
    else:
        assert len(set(header)) == len(header) or "" in header, "a repeated name must be refused"
        assert list(read.columns) == [n or f"Unnamed: {j}" for j, n in enumerate(header)]


@FUZZ
@given(sep=st.sampled_from(list(SEPARATORS)), marker=st.sampled_from(["#", "# ", "%", ""]),
       n=st.integers(1, 3))  # fmt: skip
def test_a_valid_text_file_always_reads(tmp_path: Path, sep, marker, n):
    """Valid by construction: distinct names, numbers in every cell."""
    header = [f"c{j}" for j in range(n)]
    values = np.arange(3 * n, dtype=np.float64).reshape(3, n) / 7
    path = tmp_path / "m.txt"
    path.write_text("\n".join([marker + sep.join(header)]
                              + [sep.join(map(repr, row)) for row in values.tolist()]))  # fmt: skip
    read = read_table(path)
    assert list(read.columns) == header
    np.testing.assert_array_equal(read.to_numpy(), values)


# ---- the HDF5 reader --------------------------------------------------------------------------
DT = 0.05
# One thing wrong with an otherwise valid file (the name says what): each must be refused.
BREAKS = [
    "complex", "bytes", "bool", "compound", "group", "no_observed", "no_t", "ndim", "width",
    "t_length", "clean_shape", "no_trajectories", "one_state", "nan_observed", "inf_t",
    "reversed_t", "t_step", "obs_dt_str", "obs_dt_array", "obs_dt_zero", "obs_dt_negative",
    "obs_dt_nan", "obs_dt_complex", "dim_str", "dim_float", "dim_zero", "schema", "observe",
    "system_params_list", "system_params_text", "split_dataset", "no_split",
]  # fmt: skip
# Harmless variations: each must read, with the values written.
KEEPS = ["int_observed", "float32_observed", "float32_t", "t_offset", "rounded_t", "no_clean"]


@st.composite
def data_files(draw):
    dim = draw(st.integers(1, 2))
    observe = draw(st.sampled_from(["qp", "q"]))
    width = 2 * dim if observe == "qp" else dim
    shapes = {name: (draw(st.integers(1, 3)), draw(st.integers(2, 5))) for name in SPLITS}
    seed = draw(st.integers(0, 2**16))
    change = draw(st.sampled_from([None, *KEEPS, *BREAKS]))
    where = draw(st.sampled_from(SPLITS))
    return dim, observe, width, shapes, seed, change, where


def write_file(path: Path, dim, observe, width, shapes, seed, change, where) -> dict:
    """The file, with ``change`` applied to split ``where``; returns the arrays as written."""
    rng = np.random.default_rng(seed)
    attrs = {"schema_version": 1, "system": "measured", "dim": dim, "obs_dt": DT,
             "observe": observe, "system_params": json.dumps({"a": 1.0})}  # fmt: skip
    attr_changes = {
        "obs_dt_str": ("obs_dt", str(DT)), "obs_dt_array": ("obs_dt", np.array([DT, DT])),
        "obs_dt_zero": ("obs_dt", 0.0), "obs_dt_negative": ("obs_dt", -DT),
        "obs_dt_nan": ("obs_dt", math.nan), "obs_dt_complex": ("obs_dt", complex(DT, 1)),
        "dim_str": ("dim", str(dim)), "dim_float": ("dim", float(dim)), "dim_zero": ("dim", 0),
        "schema": ("schema_version", 2), "observe": ("observe", "pq"),
        "system_params_list": ("system_params", "[1, 2]"),
        "system_params_text": ("system_params", "a=1"),
    }  # fmt: skip
    if change in attr_changes:
        key, value = attr_changes[change]
        attrs[key] = value
    written = {}
    with h5py.File(path, "w") as f:
        f.attrs.update(attrs)
        for name, (n, states) in shapes.items():
            if name != where:
                change_here = None
            else:
                change_here = change
                if change == "no_trajectories":
                    n = 0
                if change == "one_state":
                    states = 1
            observed = rng.normal(size=(n, states, width))
            clean = rng.normal(size=(n, states, 2 * dim))
            t = 1.5 * (change_here == "t_offset") + DT * np.arange(states)
            if change_here == "split_dataset":
                f[name] = observed
                continue
            if change_here == "no_split":
                continue
            g = f.create_group(name)
            put = {
                "int_observed": ("observed", (observed * 100).astype(np.int32)),
                "float32_observed": ("observed", observed.astype(np.float32)),
                "float32_t": ("t", t.astype(np.float32)),
                "rounded_t": ("t", t * (1 + 1e-12)),
                "complex": ("observed", observed + 1j),
                "bytes": ("observed", np.char.encode(observed.astype(str))),
                "bool": ("observed", observed > 0),
                "compound": ("observed", np.zeros(observed.shape, dtype=[("q", "f8"), ("i", "i4")])),
                "ndim": ("observed", observed[..., 0]),
                "width": ("observed", rng.normal(size=(n, states, width + 1))),
                "t_length": ("t", t[:-1]),
                "clean_shape": ("clean", clean[:, :-1]),
                "nan_observed": ("observed", np.where(observed > 1, np.nan, observed)),
                "inf_t": ("t", np.where(np.arange(states) == states - 1, np.inf, t)),
                "reversed_t": ("t", t[::-1]),
                "t_step": ("t", 2 * t),
            }  # fmt: skip
            if change_here == "nan_observed":
                observed[0, 0, 0] = 2.0  # at least one NaN
            arrays = {"observed": observed, "clean": clean, "t": t}
            if change_here in put:
                key, value = put[change_here]
                arrays[key] = value
            if change_here == "no_clean":
                del arrays["clean"]
            for key, value in arrays.items():
                if (key, change_here) in (("observed", "no_observed"), ("t", "no_t")):
                    continue
                if (key, change_here) == ("observed", "group"):
                    g.create_group(key)
                    continue
                g[key] = value
            written[name] = arrays
    return written


@FUZZ
@given(spec=data_files(), read_clean=st.booleans())
def test_read_dataset_reads_exactly_or_refuses_in_one_line(tmp_path: Path, spec, read_clean):
    path = tmp_path / "d.h5"
    written = write_file(path, *spec)
    change = spec[-2]
    try:
        data = read_dataset(path, arrays=("observed", "clean", "t") if read_clean else ())
    except UserError as err:
        one_line(err)
        assert change in BREAKS, f"a valid file ({change}) was refused: {err}"
        return
    assert change not in BREAKS, f"{change} was read"
    assert data.attrs["dim"] == spec[0] and data.attrs["obs_dt"] == DT
    for name, arrays in written.items():
        split = data.splits[name]
        for key in ("observed", "t") + (("clean",) if read_clean else ()):
            if key in arrays:
                read = getattr(split, key)
                assert read.dtype == np.float64
                np.testing.assert_array_equal(read, np.asarray(arrays[key], dtype=np.float64))
        if not read_clean or "clean" not in arrays:
            assert split.clean is None


@pytest.mark.parametrize("limit", ["1KiB", 1000])
def test_a_read_larger_than_memory_limit_is_refused_before_reading(tmp_path: Path, limit):
    path = tmp_path / "d.h5"
    write_file(path, 1, "qp", 2, {name: (3, 5) for name in SPLITS}, 0, None, "train")
    with h5py.File(path, "r+") as f:
        del f["train/observed"], f["train/clean"]
        f["train"].create_dataset("observed", shape=(10**9, 5, 2), dtype="f8", chunks=(1, 5, 2))
    with pytest.raises(UserError, match=r"train/observed declares shape \(1000000000, 5, 2\)") as e:
        read_dataset(path, memory_limit=limit)
    one_line(e.value)
    assert "memory_limit" in str(e.value)
