"""python -m hnnsym.ingest: files of measurements -> the HDF5 schema, and train/evaluate on them
with no true H."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

import hnnsym
from hnnsym.artifacts import sha256
from hnnsym.data.example import pendulum_recording, wrap_angle, write_pendulum_csv
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.ingest import ingest, ingest_table
from hnnsym.data.readers import read_table
from hnnsym.data.segments import cut
from hnnsym.data.settings import Mapping, Options
from hnnsym.data.simulate import simulate
from hnnsym.data.units import Units
from hnnsym.errors import DataError, UserError
from hnnsym.evaluation.measured import learned_energy_along
from hnnsym.evaluation.stage import evaluate, summary
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.systems import MEASURED, get_system
from hnnsym.training.stage import train

REPO = Path(hnnsym.__file__).resolve().parent.parent
QP = Mapping(time="t", trial="trial", positions=["q"], momenta=["p"])


def recording(trials: int = 3, frames: int = 60, dt: float = 0.1, drop=(), seed: int = 0):
    """A table trial, t, q, p: q = t + trial (its own time), p random; rows ``drop`` removed."""
    rng = np.random.default_rng(seed)
    parts = []
    for k in range(trials):
        t = dt * np.arange(frames)
        parts.append(pd.DataFrame({"trial": k, "t": t, "q": t + 10 * k,
                                   "p": rng.standard_normal(frames)}))  # fmt: skip
    table = pd.concat(parts, ignore_index=True)
    return table.drop(index=list(drop)).reset_index(drop=True)


def all_records(result) -> list[dict]:
    return sorted((r for rs in result.records.values() for r in rs), key=lambda r: r["rows"])


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and text
    return text


# ---- reading ----------------------------------------------------------------------------------


def test_separators_header_and_crlf_variants_give_identical_arrays(tmp_path: Path) -> None:
    table = recording(trials=3, frames=30, drop=[7, 40])
    names = list(table.columns)
    values = table.to_numpy()

    def text(sep: str, header: bool, end: str) -> str:
        rows = [sep.join(names)] if header else []
        rows += [sep.join(f"{v:.17g}" for v in row) for row in values]
        return end.join(rows) + end

    variants = {
        "comma.csv": text(",", True, "\n"),
        "comma_crlf.csv": text(",", True, "\r\n"),
        "tab.tsv": text("\t", True, "\n"),
        "spaces.txt": text("   ", True, "\r\n"),
        "noheader.txt": text(" ", False, "\n"),
        "noheader_crlf.csv": text(",", False, "\r\n"),
        "semicolon.csv": text(";", True, "\n"),
    }
    results = {}
    for name, content in variants.items():
        path = tmp_path / name
        path.write_bytes(content.encode())
        if name.startswith("noheader"):  # default names "0", "1", ...; or ingest.names
            assert list(read_table(path).columns) == ["0", "1", "2", "3"]
            results[name] = read_table(path, names=names)
        else:
            results[name] = read_table(path)
    np.savez(tmp_path / "arrays.npz", **{n: table[n].to_numpy() for n in names})
    results["arrays.npz"] = read_table(tmp_path / "arrays.npz")
    with h5py.File(tmp_path / "arrays.h5", "w") as f:
        for n in names:
            f[n] = table[n].to_numpy()
    results["arrays.h5"] = read_table(tmp_path / "arrays.h5")[names]
    for name, read in results.items():
        assert list(read.columns) == names, name
        np.testing.assert_array_equal(read.to_numpy(), values, err_msg=name)
    # and the same files ingest to the same splits
    o = Options(min_segment=4)
    first = ingest_table(results["comma.csv"], QP, o, Path("x"))
    again = ingest_table(results["spaces.txt"], QP, o, Path("x"))
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(first.splits[split].observed, again.splits[split].observed)


def test_a_2d_array_of_an_npz_gives_one_column_per_entry(tmp_path: Path) -> None:
    q = np.arange(20.0).reshape(10, 2)
    np.savez(tmp_path / "x.npz", t=np.arange(10.0), q=q)
    read = read_table(tmp_path / "x.npz")
    assert list(read.columns) == ["t", "q_0", "q_1"]
    np.testing.assert_array_equal(read[["q_0", "q_1"]].to_numpy(), q)


def test_a_trial_column_of_names_is_coded_and_other_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "named.csv"
    table = recording(trials=3, frames=20)
    table["trial"] = table["trial"].map({0: "run A", 1: "run B", 2: "run C"})
    table.to_csv(path, index=False)
    read = read_table(path, labels=["trial"])
    assert read.attrs["labels"] == {"trial": ["run A", "run B", "run C"]}
    np.testing.assert_array_equal(read["trial"].to_numpy(), np.repeat([0.0, 1.0, 2.0], 20))
    result = ingest_table(read, QP, Options(min_segment=5), path)
    assert sorted(r["trial"] for r in all_records(result)) == ["run A", "run B", "run C"]
    with pytest.raises(DataError) as err:  # not a label column: text is an error
        read_table(path)
    assert "line 2, column 'trial': 'run A' is not a number" in one_line(err)


# ---- segments ---------------------------------------------------------------------------------


def test_segments_end_exactly_at_gaps_and_no_trajectory_crosses_one() -> None:
    # one trial of 100 frames; dropped: rows 30, 31 (a gap of 3 dt) and 70 (2 dt); then the
    # recording restarts (time goes back to 0) for 40 more frames
    t = np.concatenate([0.1 * np.arange(100), 0.1 * np.arange(40)])
    table = pd.DataFrame({"t": t, "q": np.arange(140.0), "p": np.zeros(140)})
    table = table.drop(index=[30, 31, 70]).reset_index(drop=True)
    m = Mapping(time="t", trial=None, positions=["q"], momenta=["p"])
    result = ingest_table(table, m, Options(min_segment=5, steps=5), Path("x"))
    # table rows after the drop: 0..29 | 30..67 (frames 32..69) | 68..96 (71..99) | 97..136
    assert [r["rows"] for r in all_records(result)] == [[0, 29], [30, 67], [68, 96], [97, 136]]
    assert [r["steps"] for r in all_records(result)] == [29, 37, 28, 39]
    # tiled: ceil(steps / 5) pieces, the last one ending at the segment's end (no lost tail)
    assert [r["trajectories"] for r in all_records(result)] == [6, 8, 6, 8]
    assert result.obs_dt == pytest.approx(0.1) and result.steps == 5
    for split in result.splits.values():  # q is the frame number: consecutive frames only
        np.testing.assert_array_equal(np.diff(split.observed[..., 0], axis=1), 1.0)
        np.testing.assert_allclose(split.t, 0.1 * np.arange(6))
    frames = {name: set(s.observed[..., 0].ravel()) for name, s in result.splits.items()}
    kept = set(table["q"])  # every frame of every segment is in some trajectory
    assert set().union(*frames.values()) == kept


def test_rows_with_empty_cells_are_dropped_as_gaps_and_short_segments_too(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    lines = ["t,q,p"] + [f"{0.1 * i:.1f},{i},{'' if i in (20, 35) else 0}" for i in range(50)]
    path.write_text("\n".join(lines) + "\n")
    m = Mapping(time="t", trial=None, positions=["q"], momenta=["p"])
    result = ingest_table(read_table(path), m, Options(min_segment=10, steps=10), path)
    assert [r["rows"] for r in all_records(result)] == [[0, 19], [21, 34], [36, 49]]
    assert result.notes["dropped_rows"] == 2


def test_unwrapping_recovers_a_continuous_angle() -> None:
    dt, n = 0.05, 400
    theta = 0.3 + 2.5 * dt * np.arange(n) + 0.2 * np.sin(np.arange(n) * dt)  # rotates
    wrapped = wrap_angle(theta)
    assert np.all((wrapped > -math.pi) & (wrapped <= math.pi))
    assert np.abs(np.diff(wrapped)).max() > math.pi  # it does wrap
    table = pd.DataFrame({"t": dt * np.arange(n), "theta": wrapped, "w": np.ones(n)})
    m = Mapping(time="t", trial=None, positions=["theta"], velocities=["w"], angles=["theta"])
    # one segment: cut into blocks only to have three splits
    o = Options(min_segment=10, steps=20, max_segment=100)
    result = ingest_table(table, m, o, Path("x"))
    assert result.notes["unwrapped"] == {"theta"}
    for name, split in result.splits.items():  # exactly the continuous angle (θ_0 is in (-π, π])
        want = [cut(theta[r["rows"][0] : r["rows"][1] + 1, None], 20) for r in result.records[name]]
        np.testing.assert_allclose(split.observed[..., :1], np.concatenate(want), atol=1e-12)
    # already continuous: auto leaves it alone; wrapped=false keeps the jumps
    plain = ingest_table(table.assign(theta=theta), m, o, Path("x"))
    assert plain.notes["unwrapped"] == set()
    kept = ingest_table(table, m, Options(**{**o.__dict__, "wrapped": False}), Path("x"))
    jumps = np.concatenate([np.abs(np.diff(s.observed[..., 0], axis=1)).ravel()
                            for s in kept.splits.values()])  # fmt: skip
    assert jumps.max() > math.pi


def test_irregular_spacing_is_refused_in_one_line_or_resampled() -> None:
    t = 0.1 * np.arange(60)
    t[10:] += 0.03  # one step of 0.13: neither uniform (2 %) nor a gap (> 0.15)
    table = pd.DataFrame({"t": t, "q": 2.0 * t + 1.0, "p": -t})
    m = Mapping(time="t", trial=None, positions=["q"], momenta=["p"])
    with pytest.raises(DataError) as err:
        ingest_table(table, m, Options(min_segment=5), Path("x"))
    assert "irregular time spacing" in one_line(err) and "ingest.irregular=resample" in str(
        err.value
    )
    o = Options(min_segment=5, steps=5, max_segment=20, irregular="resample")
    result = ingest_table(table, m, o, Path("x"))
    assert result.notes["resampled"] == 1 and result.obs_dt == pytest.approx(0.1)
    for split in result.splits.values():  # linear in t: the interpolation is exact
        q, p = split.observed[..., 0], split.observed[..., 1]
        np.testing.assert_allclose(np.diff(q, axis=1), 0.2, atol=1e-12)
        np.testing.assert_allclose(q, 1.0 - 2.0 * p, atol=1e-12)


# ---- splits -------------------------------------------------------------------------------------


def test_split_is_by_segment_seeded_and_reproducible() -> None:
    table = recording(trials=12, frames=40)
    o = Options(min_segment=5, steps=8, seed=3)
    a, b = ingest_table(table, QP, o, Path("x")), ingest_table(table, QP, o, Path("x"))
    rows = {name: {tuple(r["rows"]) for r in rs} for name, rs in a.records.items()}
    assert sum(map(len, rows.values())) == 12 == len(set().union(*rows.values()))  # disjoint
    assert all(rows.values())
    assert (len(rows["val"]), len(rows["test"])) == (2, 2)  # round(0.15 * 12)
    assert a.records == b.records
    for name in a.splits:
        np.testing.assert_array_equal(a.splits[name].observed, b.splits[name].observed)
        # q = t + 10·trial: every trajectory of a split comes from that split's trials
        trials = {r["trial"] for r in a.records[name]}
        assert set(np.floor(a.splits[name].observed[:, 0, 0] / 10)) <= trials
    other = ingest_table(table, QP, Options(min_segment=5, steps=8, seed=4), Path("x"))
    assert other.records != a.records


# ---- momenta ------------------------------------------------------------------------------------


def test_velocities_become_momenta_with_the_mass() -> None:
    table = recording(trials=4, frames=30).rename(columns={"p": "v"})
    table["q2"], table["v2"] = 2 * table["q"], 3 * table["v"]
    m = Mapping(time="t", trial="trial", positions=["q", "q2"], velocities=["v", "v2"])
    result = ingest_table(table, m, Options(min_segment=5, steps=29, mass=[0.5, 2.0]), Path("x"))
    assert result.observe == "qp" and result.dim == 2
    for split, records in zip(result.splits.values(), result.records.values()):
        for y, r in zip(split.observed, records):
            rows = slice(r["rows"][0], r["rows"][1] + 1)
            np.testing.assert_allclose(y[:, 2], 0.5 * table["v"].to_numpy()[rows])
            np.testing.assert_allclose(y[:, 3], 2.0 * 3 * table["v"].to_numpy()[rows])


def test_finite_difference_velocities_are_second_order() -> None:
    def error(dt: float) -> float:
        t = np.arange(0, 12, dt)
        trial = (t // 3).astype(int)  # four trials of t in [3k, 3k + 3)
        table = pd.DataFrame({"trial": trial, "t": t, "q": np.sin(t)})
        m = Mapping(time="t", trial="trial", positions=["q"], velocities="finite_difference")
        r = ingest_table(
            table, m, Options(min_segment=5, steps=round(2.5 / dt), mass=2.0), Path("x")
        )
        worst = 0.0
        for split, records in zip(r.splits.values(), r.records.values()):
            k = 0
            for rec in records:  # the segment's trajectories, as cut tiles it
                tt = rec["t0"] + dt * np.arange(rec["steps"] + 1)
                want = cut(2.0 * np.cos(tt)[:, None], split.observed.shape[1] - 1)
                got = split.observed[k : k + rec["trajectories"], :, 1:]
                worst = max(worst, np.abs(got - want).max())
                k += rec["trajectories"]
            assert k == split.observed.shape[0]
        return worst

    coarse, fine = error(0.02), error(0.01)
    assert fine < 1e-3 and 3.0 < coarse / fine < 5.0  # O(dt²), endpoints included


def test_positions_only_write_observe_q(tmp_path: Path, compose_config) -> None:
    path = tmp_path / "q.csv"
    recording(trials=4, frames=30).drop(columns="p").to_csv(path, index=False)
    cfg = compose_config("ingest", [f"ingest.source={path}", "ingest.trial=trial",
                                    "ingest.positions=[q]", "ingest.min_segment=5",
                                    f"data_dir={tmp_path}"])  # fmt: skip
    out = ingest(cfg)
    assert out == tmp_path / "measured" / "q.h5"
    data = read_dataset(out, system=MEASURED, dim=1)
    assert data.attrs["observe"] == "q" and data.splits["train"].observed.shape[-1] == 1


# ---- the file -----------------------------------------------------------------------------------


def test_provenance_attributes_and_no_clean_split(tmp_path: Path, compose_config) -> None:
    path = tmp_path / "pend.csv"
    recording(trials=5, frames=30).to_csv(path, index=False, lineterminator="\r\n")
    cfg = compose_config("ingest", [f"ingest.source={path}", "ingest.trial=trial",
                                    "ingest.positions=[q]", "ingest.momenta=[p]",
                                    "ingest.min_segment=5",
                                    f"data_file={tmp_path / 'o.h5'}"])  # fmt: skip
    out = ingest(cfg)
    with h5py.File(out) as f:
        attrs = dict(f.attrs)
        assert all("clean" not in f[s] for s in ("train", "val", "test"))
    assert attrs["system"] == MEASURED and attrs["dim"] == 1 and attrs["observe"] == "qp"
    assert attrs["source"] == str(path) and attrs["source_sha256"] == sha256(path)
    assert json.loads(attrs["columns"]) == {
        "time": "t", "trial": "trial", "positions": ["q"], "momenta": ["p"], "velocities": None,
        "angles": [],
    }  # fmt: skip
    assert f"source: {path}" in attrs["ingest_config"]
    assert "config" not in attrs and "fine_dt" not in attrs  # absent, not None
    data = read_dataset(out, system=MEASURED, dim=1)
    units = Units.from_attrs(data.attrs, 1)  # scale=auto (the default): powers of two
    assert math.log2(units.time) == round(math.log2(units.time))
    assert data.attrs["obs_dt"] * units.time == pytest.approx(0.1)
    assert data.splits["test"].clean is None
    segments = json.loads(attrs["segments"])
    assert sum(len(v) for v in segments.values()) == 5


def test_the_measured_system_has_no_h_and_takes_its_dim() -> None:
    system = get_system(MEASURED, dim=2)
    assert (system.dim, system.known, system.params) == (2, False, {"dim": 2})
    with pytest.raises(ValueError, match="no known Hamiltonian"):
        system(torch.zeros(1, 4))


# ---- one-line errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ("missing", "no measurement file at"),
        ("column", "has no column 'theta'; its columns: trial, t, q, p"),
        ("cell", "line 4, column 'q': 'abc' is not a number"),
        ("short", "no segment has ingest.min_segment=500 steps"),
        ("exists", "already exists; pass ingest.overwrite=true"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, compose_config, what: str, expected: str) -> None:
    path = tmp_path / "x.csv"
    table = recording(trials=3, frames=30)
    if what == "cell":
        table = table.astype(object)
        table.loc[2, "q"] = "abc"
    table.to_csv(path, index=False)
    out = tmp_path / "o.h5"
    if what == "exists":
        out.write_text("user data")
    overrides = [f"ingest.source={path if what != 'missing' else tmp_path / 'nope.csv'}",
                 "ingest.trial=trial", f"ingest.positions=[{'theta' if what == 'column' else 'q'}]",
                 "ingest.momenta=[p]", f"data_file={out}",
                 f"ingest.min_segment={500 if what == 'short' else 5}"]  # fmt: skip
    with pytest.raises(UserError) as err:
        ingest(compose_config("ingest", overrides))
    assert expected in one_line(err)
    if what == "exists":
        assert out.read_text() == "user data"


def test_the_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "hnnsym.ingest", f"ingest.source={tmp_path / 'none.csv'}",
         "ingest.positions=[q]", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: no measurement file at {tmp_path / 'none.csv'} (ingest.source)"
    ]


# ---- the example, end to end --------------------------------------------------------------------


def test_the_example_csv_looks_like_a_recording(tmp_path: Path) -> None:
    path = write_pendulum_csv(tmp_path / "p.csv", trials=3, frames=100, rotating=1, drop=0.05)
    raw = path.read_bytes()
    assert raw.startswith(b"trial,t,theta,omega\r\n") and raw.count(b"\r\n") == raw.count(b"\n")
    table = pd.read_csv(path)
    assert set(table["trial"]) == {1, 2, 3}
    assert table["theta"].between(-math.pi, math.pi).all()
    assert (table.groupby("trial")["t"].diff().dropna() > 0.06).any()  # dropped frames
    assert len(table) < 300
    with pytest.raises(DataError, match="already exists"):
        write_pendulum_csv(path)
    # the angular velocity is dθ/dt of the (unwrapped) angle
    rec = pendulum_recording(trials=2, frames=100, rotating=1, drop=0.0, noise=0.0)
    one = rec[rec["trial"] == 2]
    rate = np.diff(np.unwrap(one["theta"].to_numpy())) / 0.05
    mid = 0.5 * (one["omega"].to_numpy()[1:] + one["omega"].to_numpy()[:-1])
    assert np.abs(rate - mid).max() < 2e-3


def test_example_csv_ingest_train_evaluate(tmp_path: Path, compose_config) -> None:
    """The README's three commands, in process: ingest -> train (1 epoch) -> evaluate."""
    csv = write_pendulum_csv(tmp_path / "pendulum.csv", trials=6, frames=120, rotating=1)
    ingest(compose_config("ingest", [
        f"ingest.source={csv}", "ingest.trial=trial", "ingest.positions=[theta]",
        "ingest.velocities=[omega]", "ingest.mass=0.5", "ingest.angles=[theta]",
        "ingest.steps=16", "ingest.test_steps=40", f"data_dir={tmp_path / 'data'}",
    ]))  # fmt: skip
    data_file = tmp_path / "data" / "measured" / "pendulum.h5"
    data = read_dataset(data_file, system=MEASURED, dim=1)
    assert data.splits["test"].observed.shape[1] == 41
    common = ["system=measured", f"data_file={data_file}", f"run_dir={tmp_path / 'run'}",
              "device=cpu", "model.hidden=[8]"]  # fmt: skip
    result = train(compose_config("train", [*common, "train.epochs=1", "train.batch_size=16",
                                            "train.progress=false"]))  # fmt: skip
    assert result.state.epoch == 1
    payload = torch.load(result.best, weights_only=False)
    assert payload["system"] == {"name": MEASURED, "params": {"dim": 1}}
    metrics = evaluate(compose_config("evaluate", [*common, "eval.slice_points=21",
                                                   "eval.plot_trajectories=2"]))  # fmt: skip
    for key in ("h_l1", "h_l1_rel", "vf_l1", "energy_drift_true_max", "energy_drift_data_max"):
        assert metrics[key] is None, key
    assert any("no true H" in note for note in metrics["notes"])
    assert metrics["rollout_reference"] == "observed" and metrics["rollout_steps"] == 40
    assert metrics["short_horizon_steps"] == 6  # the training window
    for key in (
        "traj_l2_short",
        "traj_l2_final",
        "rel_err_gmean",
        "vpt_mean",
        "learned_energy_data_drift_mean",
        "energy_drift_pred_max",
    ):
        assert math.isfinite(metrics[key]), key
    out = tmp_path / "run" / "eval"
    assert set(metrics["files"]["figures"]) == {
        "learned_hamiltonian.png", "phase_portrait.png", "energy.png", "rollout_error.png",
        "training_data.png", "horizons.png"}  # fmt: skip
    assert all((out / f).stat().st_size > 0 for f in metrics["files"]["figures"])
    curves = pd.read_csv(out / "rollout.csv")
    assert len(curves) == 41 and "energy_drift_true_mean" not in curves
    assert "no true H" in summary(metrics)


def test_the_learned_energy_along_the_data_is_zero_for_a_conserved_h_and_not_for_damping() -> None:
    system = get_system("pendulum")
    y0 = torch.tensor([[0.5, 0.0], [1.0, 0.2], [-1.2, 0.3]], dtype=torch.float64)
    traj = simulate(system, y0, 0.05, 1, 100, get_integrator("gauss_legendre6", tol=1e-13))
    exact = learned_energy_along(system, traj, 1024)
    assert float(exact["rel"]) < 1e-7 and float(exact["drift"].max()) < 1e-8
    damped = traj * torch.exp(-0.01 * torch.arange(101, dtype=torch.float64))[:, None, None]
    lossy = learned_energy_along(system, damped, 1024)
    assert float(lossy["rel"]) > 0.05


def test_a_measured_file_names_its_system(tmp_path: Path, compose_config, tiny_dataset) -> None:
    path = tmp_path / "x.csv"
    recording(trials=3, frames=20).to_csv(path, index=False)
    overrides = [f"ingest.source={path}", "ingest.trial=trial", "ingest.positions=[q]",
                 "ingest.momenta=[p]", "ingest.min_segment=5", f"data_dir={tmp_path}"]  # fmt: skip
    out = ingest(compose_config("ingest", overrides))
    with pytest.raises(DataError) as err:  # read as a built-in system: say system=measured
        read_dataset(out, system="pendulum", dim=1)
    assert "pass system=measured" in one_line(err)
    simulated = tiny_dataset(system="pendulum")
    with pytest.raises(DataError) as err:
        read_dataset(simulated, system=MEASURED)
    assert "holds system 'pendulum', not 'measured'" in one_line(err)
