"""ingest on recordings as labs ship them: comment lines and headers that name fewer columns,
the units a model learns in (exact round trip), angles as periodic coordinates, and splits a
user chooses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.ingest import first_row, ingest, ingest_table
from hnnsym.data.readers import read_table
from hnnsym.data.segments import auto_steps, cut
from hnnsym.data.settings import Mapping, Options
from hnnsym.data.units import Units
from hnnsym.errors import DataError, UserError
from hnnsym.physics.systems import MEASURED

REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "real"


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text
    return text


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


# ---- reading ----------------------------------------------------------------------------------

ROWS = "0 0.1 -102 37.5\r\n0 0.2 -101 57.25\r\n0 0.3 -99 60\r\n"


def test_a_header_naming_fewer_columns_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = write(tmp_path / "m.txt", "% x v\r\n" + ROWS)
    with pytest.raises(DataError) as err:
        read_table(path)
    text = one_line(err)
    assert "the header names 2 columns (x, v), the rows have 4" in text
    assert "ingest.names=[...] (4 names" in text


def test_names_always_replace_the_header(tmp_path: Path) -> None:
    for header in ("% x v\r\n", "trial,t,x,v\r\n".replace(",", " "), "# a b c d e f\n", ""):
        path = write(tmp_path / "m.txt", header + ROWS)
        read = read_table(path, names=["trial", "t", "x", "v"])
        assert list(read.columns) == ["trial", "t", "x", "v"], header
        np.testing.assert_array_equal(read["x"], [-102, -101, -99])
        assert read.attrs["first_line"] == (2 if header else 1)
    with pytest.raises(UserError) as err:  # as many names as the rows have columns
        read_table(path, names=["t", "x", "v"])
    assert "ingest.names gives 3 names, the rows of" in one_line(err)
    assert "have 4 columns; give 4 names" in str(err.value)


def test_comment_lines_and_skipped_rows(tmp_path: Path) -> None:
    text = "recorded 2009\nby a camera\n// t x\n0 1\n// a pause\n\n1 2\n2 x3\n"
    path = write(tmp_path / "m.txt", text)
    with pytest.raises(DataError) as err:  # the line number counts every line of the file
        read_table(path, comment="//", skip_rows=2)
    assert "line 8, column 'x': 'x3' is not a number" in one_line(err)
    write(path, text.replace("x3", "3"))
    read = read_table(path, comment="//", skip_rows=2)
    assert list(read.columns) == ["t", "x"]
    np.testing.assert_array_equal(read.to_numpy(), [[0, 1], [1, 2], [2, 3]])
    assert read.attrs["first_line"] == 4
    # without ingest.comment a comment line is a cell that is not a number, with the hint
    write(path, "t x\n0 1\n# pause\n1 2\n")
    with pytest.raises(DataError) as err:
        read_table(path)
    assert "skip comment lines with ingest.comment='#'" in one_line(err)
    assert list(read_table(path, comment="#").columns) == ["t", "x"]


def test_the_first_row_is_logged_as_mapped_and_a_missing_column_named_once(tmp_path) -> None:
    path = write(tmp_path / "m.txt", "% x v\r\n" + ROWS)
    table = read_table(path, names=["trial", "t", "x", "v"])
    m = Mapping(time="t", trial="trial", positions=["x"], velocities=["v"])
    text = first_row(table, m, {"x": "px", "t": "s"})
    assert text == ("first row (line 2) as mapped: trial = 0 [trial], t = 0.1 s [time], "
                    "x = -102 px [q1], v = 37.5 [v1]")  # fmt: skip
    bad = Mapping(time="t", trial=None, positions=["theta"], angles=["theta"])
    with pytest.raises(UserError) as err:
        bad.check(list(table.columns), path)
    assert one_line(err).count("'theta'") == 1


SHARED = {
    "lipson_real_linear_h_1.txt": (["trial", "t", "x", "v"], 870),
    "lipson_real_double_linear_h_1.txt": (["trial", "t", "x1", "x2", "v1", "v2"], 495),
    "ibm_double_pendulum_run1.csv": (["x0", "y0", "x1", "y1", "x2", "y2"], None),
    "ibm_double_pendulum_run2.csv": (["x0", "y0", "x1", "y1", "x2", "y2"], None),
}


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/real is not here")
@pytest.mark.parametrize("name", list(SHARED))
def test_every_shared_recording_reads_as_shipped(name: str) -> None:
    names, rows = SHARED[name]
    path = REAL / name
    if name.startswith("lipson"):
        with pytest.raises(DataError, match=f"the rows have {len(names)}"):
            read_table(path)  # its header names fewer columns: never mapped by position
        want = np.loadtxt(path, comments="%")
    else:
        want = np.loadtxt(path, delimiter=",")
    read = read_table(path, names=names)
    assert list(read.columns) == names and len(read) == (rows or len(want))
    np.testing.assert_array_equal(read.to_numpy(), want)


@pytest.mark.skipif(not REAL.is_dir(), reason="../shared/data/real is not here")
def test_the_shared_oscillator_ingests_in_scaled_units(tmp_path: Path, compose_config) -> None:
    out = ingest(compose_config("ingest", [
        f"ingest.source={REAL / 'lipson_real_linear_h_1.txt'}", "ingest.names=[trial,t,x,v]",
        "ingest.trial=trial", "ingest.positions=[x]", "ingest.velocities=[v]",
        "ingest.units={t: s, x: px, v: px/s}", "ingest.max_segment=64",
        f"data_file={tmp_path / 'o.h5'}",
    ]))  # fmt: skip
    data = read_dataset(out, system=MEASURED, dim=1)
    units = Units.from_attrs(data.attrs, 1)
    assert units.labels == {"t": "s", "x": "px", "v": "px/s", "time": "s"}
    assert units.names == ("x",)
    # the frame times are rounded to ms (steps 0.033 / 0.034): uniform, obs_dt their mean
    assert data.attrs["obs_dt"] * units.time == pytest.approx((29.039 - 0.033) / 869, rel=1e-9)
    table = np.loadtxt(REAL / "lipson_real_linear_h_1.txt", comments="%")
    segments = json.loads(data.attrs["segments"])
    for name, split in data.splits.items():
        k = 0
        for rec in segments[name]:
            a, b = rec["rows"]
            want = cut(table[a : b + 1, 2:4], split.observed.shape[1] - 1)
            got = units.to_recording(split.observed[k : k + rec["trajectories"]])
            np.testing.assert_array_equal(got, want)
            k += rec["trajectories"]


# ---- units -------------------------------------------------------------------------------------


def oscillator(trials: int = 4, frames: int = 200, dt: float = 0.01) -> pd.DataFrame:
    """A damped oscillator in 'pixels' around 300 px, amplitude ~ 80 px, period ~ 0.6."""
    rng = np.random.default_rng(0)
    parts = []
    for k in range(trials):
        t = dt * np.arange(frames)
        x = 300 + 80 * np.exp(-0.1 * t) * np.cos(10 * t + k) + rng.normal(0, 1, frames)
        v = -800 * np.exp(-0.1 * t) * np.sin(10 * t + k) + rng.normal(0, 5, frames)
        parts.append(pd.DataFrame({"trial": k, "t": t, "x": x, "v": v}))
    return pd.concat(parts, ignore_index=True)


def rows_of(result, table: pd.DataFrame, columns: list[str], mass: float = 1.0) -> None:
    """Every stored trajectory, converted back with the file's Units, is exactly the recording."""
    for name, split in result.splits.items():
        k = 0
        back = result.units.to_recording(split.observed)
        for rec in result.records[name]:
            a, b = rec["rows"]
            want = cut(
                table[columns].to_numpy()[a : b + 1] * [1.0, mass], split.observed.shape[1] - 1
            )
            np.testing.assert_array_equal(back[k : k + rec["trajectories"]], want)
            k += rec["trajectories"]
        np.testing.assert_array_equal(split.t * result.units.time,
                                      result.obs_dt * result.units.time
                                      * np.arange(split.t.size))  # fmt: skip


def test_auto_units_round_trip_exactly_and_none_is_the_recording() -> None:
    table = oscillator()
    m = Mapping(time="t", trial="trial", positions=["x"], velocities=["v"])
    auto = ingest_table(table, m, Options(scale="auto", min_segment=10), Path("x"))
    u = auto.units
    for s in (u.time, u.action, *u.q):
        assert math.log2(s) == round(math.log2(s))  # powers of two
    assert u.q == (64.0,) and u.time == 0.125  # std(x) ~ 55, std(x)/rms(v) ~ 0.1
    assert 0.3 < np.abs(auto.splits["train"].observed[..., 1]).max() < 10  # p̃ is O(1)
    rows_of(auto, table, ["x", "v"])
    none = ingest_table(table, m, Options(scale="none", min_segment=10), Path("x"))
    assert none.units == Units(1.0, (1.0,), 1.0, names=("x",))
    assert none.obs_dt == pytest.approx(0.01)
    for name in none.splits:  # the recording's numbers, the same trajectories as auto
        np.testing.assert_array_equal(
            none.splits[name].observed, u.to_recording(auto.splits[name].observed)
        )
    rows_of(none, table, ["x", "v"])
    given = ingest_table(table, m, Options(scale={"time": 0.5}, mass=2.0, min_segment=10),
                         Path("x"))  # fmt: skip
    assert given.units.time == 0.5 and given.units.q == (64.0,)
    rows_of(given, table, ["x", "v"], mass=2.0)
    with pytest.raises(UserError, match="ingest.scale has no key 'tau'"):
        ingest_table(table, m, Options(scale={"tau": 1}), Path("x"))


def test_angles_are_periodic_unscaled_and_many_turns_ingest(tmp_path, compose_config) -> None:
    dt, n = 0.01, 3000
    t = dt * np.arange(n)
    theta = -0.1 - 4.0 * t + 0.3 * np.sin(3 * t)  # 120 rad: about 19 turns, unwrapped
    x = 500 + 100 * np.cos(3 * t)
    path = tmp_path / "spin.csv"
    pd.DataFrame({"t": t, "theta": theta, "x": x}).to_csv(path, index=False)
    out = ingest(compose_config("ingest", [
        f"ingest.source={path}", "ingest.positions=[x,theta]", "ingest.angles=[theta]",
        "ingest.velocities=finite_difference", "ingest.max_segment=200",
        f"data_file={tmp_path / 'o.h5'}",
    ]))  # fmt: skip
    data = read_dataset(out, system=MEASURED, dim=2)
    units = Units.from_attrs(data.attrs, 2)
    assert units.periodic == (1,) and units.q[1] == 1.0 and units.q[0] == 64.0
    assert units.labels == {"theta": "rad"}
    low = min(split.observed[..., 1].min() for split in data.splits.values())
    assert low < -100  # the angle is stored continuous, in radians


# ---- splits ------------------------------------------------------------------------------------


QP = Mapping(time="t", trial="trial", positions=["x"], velocities=["v"])


def picked(result) -> dict[str, list[int]]:
    return {name: [r["index"] for r in recs] for name, recs in result.records.items()}


def test_explicit_splits_by_trial_index_time_and_pattern() -> None:
    table = oscillator(trials=6, frames=100)
    by_trial = ingest_table(table, QP, Options(test={"trials": [2]}, val=[0, 5], min_segment=10),
                            Path("x"))  # fmt: skip
    assert picked(by_trial) == {"train": [1, 3, 4], "val": [0, 5], "test": [2]}
    assert {r["trial"] for r in by_trial.records["test"]} == {2.0}
    pattern = Options(test={"every": 3, "offset": 2}, val=0.2, max_segment=20, min_segment=10)
    result = ingest_table(table, QP, pattern, Path("x"))  # 6 trials x 5 blocks = 30 segments
    assert picked(result)["test"] == list(range(2, 30, 3)) and len(picked(result)["val"]) == 6
    one = oscillator(trials=1, frames=3001)  # one long run: test = a time range, cut out of it
    o = Options(test={"time": [20.0, 29.0]}, val={"time": [[5.0, 7.0]]}, min_segment=10)
    result = ingest_table(one, QP, o, Path("x"))
    (test,) = result.records["test"]
    assert test["t0"] == pytest.approx(20.0) and test["t1"] == pytest.approx(29.0)
    (val,) = result.records["val"]
    assert (val["t0"], val["t1"]) == (pytest.approx(5.0), pytest.approx(7.0))
    assert [r["t0"] for r in result.records["train"]] == pytest.approx([0.0, 7.01, 29.01])
    with pytest.raises(UserError, match="segment 2 is picked for both val and test"):
        ingest_table(table, QP, Options(test=[2], val={"trials": [2]}, min_segment=10), Path("x"))
    with pytest.raises(UserError, match="ingest.split.test has no key 'trial'"):
        ingest_table(table, QP, Options(test={"trial": [2]}), Path("x"))
    with pytest.raises(DataError, match="picks none of the 6 segments"):
        ingest_table(table, QP, Options(test={"trials": [9]}, min_segment=10), Path("x"))


def test_the_split_is_recorded_and_a_small_split_warned_about(
    tmp_path: Path, compose_config, capsys
) -> None:
    path = tmp_path / "osc.csv"
    oscillator(trials=6, frames=100).to_csv(path, index=False)
    out = ingest(compose_config("ingest", [
        f"ingest.source={path}", "ingest.trial=trial", "ingest.positions=[x]",
        "ingest.velocities=[v]", "ingest.steps=40", "ingest.split={test: {trials: [3]}}",
        f"data_file={tmp_path / 'o.h5'}",
    ]))  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "warning: split test has 3 trajectories of 40 steps (from 1 segments), fewer than 5" in err
    )
    assert "warning: split val" in err  # 0.15 of 6: one segment, 3 trajectories
    data = read_dataset(out, system=MEASURED, dim=1)
    assert json.loads(data.attrs["split"]) == {"val": 0.15, "test": {"trials": [3]}, "seed": 0}
    segments = json.loads(data.attrs["segments"])
    assert [r["trial"] for r in segments["test"]] == [3.0]
    assert sum(len(v) for v in segments.values()) == 6


def test_every_subsamples_and_auto_t_keeps_most_samples() -> None:
    table = oscillator(trials=6, frames=201)
    result = ingest_table(table, QP, Options(every=4, min_segment=10), Path("x"))
    assert result.obs_dt == pytest.approx(0.04)
    train = result.splits["train"].observed
    first = result.records["train"][0]
    rows = table[["x", "v"]].to_numpy()[first["rows"][0] : first["rows"][1] + 1 : 4]
    np.testing.assert_array_equal(train[0], rows[: train.shape[1]])
    # 50 steps a segment: T = 50 keeps everything, but gives val/test (one segment) 1 trajectory:
    # the largest T with >= 5 per split (ceil(50 / T) pieces) is 12
    assert result.steps == 12
    assert auto_steps([50] * 6) == 50  # no splits to serve: the longest that keeps all
    assert auto_steps([20] * 2 + [2000]) == 64  # the 2 short ones hold 2 % of the samples
    assert auto_steps([20] * 30 + [200]) == 20
