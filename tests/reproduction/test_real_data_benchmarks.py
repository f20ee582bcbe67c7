"""benchmarks/real_physical_fit.py and benchmarks/real_table.py on a synthetic recording: an exact
damped oscillator written as a lab file (pixels, a trial column), ingested as a user would."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import load_benchmark

from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.ingest import ingest

pytest.importorskip("scipy")


def oscillator_file(path: Path, k=6.0, c=0.05, x0=3.0, dt=1 / 30, n=600) -> Path:
    """x(t) of ẍ = −k (x − x0) − c ẋ, exact, with its velocity: rows trial, t, x, v."""
    w = math.sqrt(k - c * c / 4)
    t = np.arange(n) * dt
    env = np.exp(-c * t / 2)
    x = x0 + 100 * env * np.cos(w * t)
    v = 100 * env * (-c / 2 * np.cos(w * t) - w * np.sin(w * t))
    rows = np.column_stack([np.zeros(n), t, x, v])
    path.write_text("% x v\n" + "\n".join(" ".join(f"{a:.12g}" for a in r) for r in rows) + "\n")
    return path


def test_the_physical_fit_recovers_a_damped_oscillator(tmp_path, compose_config) -> None:
    src = oscillator_file(tmp_path / "osc.txt")
    out = ingest(compose_config("ingest", [
        f"ingest.source={src}", "ingest.names=[trial,t,x,v]", "ingest.trial=trial",
        "ingest.positions=[x]", "ingest.velocities=[v]", "ingest.max_segment=64",
        f"data_file={tmp_path / 'osc.h5'}",
    ]))  # fmt: skip
    fit = load_benchmark("real_physical_fit").fit_file(out, None)
    assert fit["horizons"] == [1, 4, 12] and fit["windows"] >= 5
    assert fit["fit"]["K"][0][0] == pytest.approx(6.0, rel=1e-4)
    assert fit["fit"]["C"][0][0] == pytest.approx(0.05, abs=1e-4)
    assert fit["fit"]["x0"][0] == pytest.approx(3.0, abs=1e-3)
    scale = fit["mse_h12_no_motion"]
    assert fit["mse_h12"] < 1e-8 * scale  # exact data: the right model rolls out exactly
    assert fit["mse_h12_linear"] < 1e-6 * scale  # an exact linear ODE is a linear map too

    # the table: a fake evaluated run beside the fit, its ratio to the fit and the linear one
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "physical_fit.json").write_text(json.dumps({"results": [fit]}))
    run = tmp_path / "runs" / "osc" / "dissipative_hnn" / "seed0" / "eval"
    run.mkdir(parents=True)
    metrics = {
        "system": {"name": "measured"}, "data": {"file": str(out)},
        "model_config": {"name": "dissipative_hnn"}, "config": {"seed": 0},
        "horizons": fit["horizons"], "main_horizon": 12, "windows": fit["windows"],
        **{f"mse_h{h}": 2 * fit[f"mse_h{h}"] for h in fit["horizons"]},
        **{f"mse_h{h}_{b}": fit[f"mse_h{h}_{b}"] for h in fit["horizons"]
           for b in ("no_motion", "constant_velocity", "linear")},
    }  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(metrics))
    table = load_benchmark("real_table")
    rows = table.rows(
        table.load_runs(tmp_path / "runs"), table.load_physical(bench / "physical_fit.json")
    )
    model = next(r for r in rows if r["predictor"] == "dissipative_hnn")
    assert model["ratio_physical"] == pytest.approx(2.0)
    assert model["per_seed"] == [2 * fit["mse_h12"]]
    assert [r["predictor"] for r in rows] == ["dissipative_hnn", "physical fit", "no_motion",
                                              "constant_velocity", "linear"]  # fmt: skip
    assert "| dissipative_hnn | 0 |" in table.markdown(rows, tmp_path / "runs", None)


def double_pendulum_motion(params, seconds=24.0, fps=400) -> tuple[np.ndarray, np.ndarray]:
    """Times (n,) and states (n, 4) θ₁, θ₂, θ̇₁, θ̇₂ of a damped compound double pendulum
    integrated by scipy (solve_ivp, tight tolerances) from its equations written out here."""
    from scipy.integrate import solve_ivp

    beta, gamma, delta, eps, phi, c1, c2 = params

    def rhs(_t, y):
        t1, t2, w1, w2 = y
        c, s = math.cos(t1 - t2), math.sin(t1 - t2)
        m = np.array([[1.0, beta * c], [beta * c, gamma]])
        f = np.array([-beta * s * w2**2 - delta * math.sin(t1 - phi) - c1 * w1 + c2 * (w2 - w1),
                      beta * s * w1**2 - eps * math.sin(t2 - phi) - c2 * (w2 - w1)])  # fmt: skip
        return [w1, w2, *np.linalg.solve(m, f)]

    t = np.arange(int(seconds * fps)) / fps
    sol = solve_ivp(rhs, (0, t[-1]), [phi + 2.0, phi - 1.0, 0.0, 3.0], t_eval=t,
                    method="DOP853", rtol=1e-11, atol=1e-11)  # fmt: skip
    return t, sol.y.T


def double_pendulum_file(path: Path, params, pivot=(1000.0, 1200.0), arms=(600.0, 460.0),
                         seconds=24.0, fps=400) -> Path:  # fmt: skip
    """``double_pendulum_motion`` filmed as the IBM files are: rows of integer pixels
    x_pivot, y_pivot, x_bob1, y_bob1, x_bob2, y_bob2, no header, ``fps`` frames per second."""
    t, y = double_pendulum_motion(params, seconds, fps)
    t1, t2 = y[:, 0], y[:, 1]
    b1 = np.column_stack([pivot[0] + arms[0] * np.cos(t1), pivot[1] + arms[0] * np.sin(t1)])
    b2 = b1 + arms[1] * np.column_stack([np.cos(t2), np.sin(t2)])
    rows = np.column_stack([np.tile(pivot, (len(t), 1)), b1, b2]).round().astype(int)
    path.write_text("\n".join(",".join(map(str, r)) for r in rows) + "\n")
    return path


def test_the_physical_fit_recovers_a_filmed_double_pendulum(tmp_path, compose_config) -> None:
    truth = (0.1, 0.07, 70.0, 6.5, 0.4, 0.05, 0.01)  # gravity 0.4 rad off the image x axis
    src = double_pendulum_file(tmp_path / "dp.csv", truth)
    out = ingest(compose_config("ingest", [
        f"ingest.source={src}", "ingest.names=[x0,y0,x1,y1,x2,y2]", "ingest.time=null",
        "ingest.dt=0.0025", "ingest.every=4", "ingest.positions=[x1,y1,x2,y2]",
        "ingest.max_segment=128", "ingest.split={val: 0.15, test: {time: [18.0, 24.0]}}",
        f"data_file={tmp_path / 'dp.h5'}",
    ]))  # fmt: skip
    fit = load_benchmark("real_physical_fit").fit_file(out, None)
    assert fit["horizons"] == [10, 25] and fit["windows"] >= 8
    assert fit["chain"]["pivot_px"] == pytest.approx([1000.0, 1200.0], abs=0.5)
    assert fit["chain"]["l1_px"] == pytest.approx(600.0, abs=0.5)
    got = fit["fit"]
    for name, value in zip(("beta", "gamma", "delta", "epsilon", "phi"), truth):
        assert got[name] == pytest.approx(value, rel=0.02, abs=0.005), name
    assert got["c1"] == pytest.approx(0.05, abs=0.01) and got["c2"] == pytest.approx(
        0.01, abs=0.005
    )
    # pixel rounding is the only noise: far below constant velocity, in px and in angles
    for key in ("mse_h25", "mse_angles_h25"):
        assert fit[key] < 1e-3 * fit[f"{key}_constant_velocity"], key
    # px²: the rounding to whole pixels (±0.5 px) is all the noise; from two frames it sets the
    # start rates, from the smoothed state much less
    assert fit["mse_h10_physical_sg_start"] < 2.0 and fit["mse_h10"] < 10.0


def test_the_physical_fit_on_a_film_ingested_as_a_chain_in_angles(tmp_path, compose_config):
    truth = (0.1, 0.07, 70.0, 6.5, 0.4, 0.05, 0.01)
    src = double_pendulum_file(tmp_path / "dp.csv", truth)
    out = ingest(compose_config("ingest", [
        f"ingest.source={src}", "ingest.names=[x0,y0,x1,y1,x2,y2]", "ingest.time=null",
        "ingest.dt=0.0025", "ingest.every=4",
        "ingest.points={pivot: [x0,y0], bob1: [x1,y1], bob2: [x2,y2]}", "ingest.chain=detect",
        "ingest.coordinates=angles", "ingest.velocities=smoothing",
        "ingest.max_segment=128", "ingest.split={val: 0.15, test: {time: [18.0, 24.0]}}",
        f"data_file={tmp_path / 'dp.h5'}",
    ]))  # fmt: skip
    fit = load_benchmark("real_physical_fit").fit_file(out, None)
    assert fit["start"] == "the file's state" and fit["horizons"] == [10, 25]
    assert fit["chain"]["pivot_px"] == pytest.approx([1000.0, 1200.0], abs=0.5)
    for name, value in zip(("beta", "gamma", "delta", "epsilon", "phi"), truth):
        assert fit["fit"][name] == pytest.approx(value, rel=0.02, abs=0.005), name
    for key in ("mse_h25", "mse_angles_h25", "mse_points_h25"):
        assert fit[key] < 1e-3 * fit[f"{key}_constant_velocity"], key
    assert fit["mse_points_h10"] < 2.0  # px²: whole-pixel rounding is the only noise


def test_the_physical_fit_on_a_recording_in_angles_with_dropped_frames(tmp_path, compose_config):
    """Angles and rates as an encoder records them, at 100 frames/s, with noise and dropped
    frames: ingest cuts segments at the gaps, and the pendulum is fitted across them."""
    truth = (0.1, 0.07, 70.0, 6.5, -1.2, 0.05, 0.01)
    t, y = double_pendulum_motion(truth, seconds=30.0, fps=100)
    rng = np.random.default_rng(0)
    y = y + rng.normal(0, [2e-4, 2e-4, 2e-3, 2e-3], y.shape)
    keep = np.ones(len(t), dtype=bool)
    keep[rng.choice(np.arange(20, len(t) - 20), 12, replace=False)] = False  # dropped frames
    wrapped = np.angle(np.exp(1j * y[:, :2]))  # an encoder reports angles in (-pi, pi]
    path = tmp_path / "encoder.csv"
    rows = np.column_stack([t, wrapped, y[:, 2:]])[keep]
    path.write_text("t,theta1,theta2,omega1,omega2\n"
                    + "\n".join(",".join(f"{v:.9g}" for v in r) for r in rows) + "\n")  # fmt: skip
    out = ingest(compose_config("ingest", [
        f"ingest.source={path}", "ingest.positions=[theta1,theta2]",
        "ingest.velocities=[omega1,omega2]", "ingest.angles=[theta1,theta2]",
        "ingest.max_segment=128", "ingest.min_segment=30",
        "ingest.split={val: 0.15, test: {time: [24.0, 30.0]}}", f"data_file={tmp_path / 'e.h5'}",
    ]))  # fmt: skip
    segments = json.loads(read_dataset(out).attrs["segments"])
    assert sum(len(v) for v in segments.values()) > 12  # cut at the gaps
    fit = load_benchmark("real_physical_fit").fit_file(out, None)
    assert fit["start"] == "the file's state" and "chain" not in fit
    for name, value in zip(("beta", "gamma", "delta", "epsilon", "phi"), truth):
        assert fit["fit"][name] == pytest.approx(value, rel=0.03, abs=0.01), name
    assert fit["mse_angles_h25"] < 1e-3 * fit["mse_angles_h25_constant_velocity"]
    md = load_benchmark("real_physical_fit").markdown([fit])
    assert "oscillators" not in md and "| e | 25 |" in md  # in the pendulum's table only


def test_a_film_rewritten_as_an_encoder_log(tmp_path):
    """benchmarks/encoder_from_film.py: the joint angles (wrapped) and smoothed rates of a
    jittery film at 100 frames/s, 1 % of the frames dropped; never over an existing log."""
    from tests.filmed_pendulum import DT, rods, tracked

    t, theta, omega = rods(6.0)
    film = tmp_path / "film.csv"
    tracked(theta, jitter=1.0).to_csv(film, header=False, index=False)
    out = tmp_path / "log.csv"
    encoder = load_benchmark("encoder_from_film")
    assert encoder.main([str(film), str(out)]) == 0
    log = np.loadtxt(out, delimiter=",", skiprows=1)
    kept = np.rint(log[:, 0] / DT).astype(int)  # film frames
    assert (kept % 4 == 0).all() and len(log) == len(t[::4]) - round(0.01 * len(t[::4]))
    assert np.abs(log[:, 1:3]).max() <= np.pi
    wrapped_error = np.angle(np.exp(1j * (log[:, 1:3] - theta[kept])))
    # the film's own angles, unsmoothed: 1 px of jitter on points 300 and 200 px apart
    assert np.sqrt((wrapped_error**2).mean()) < 0.01 and np.abs(wrapped_error).max() < 0.05
    rate_error = log[:, 3:] - omega[kept]
    assert np.sqrt((rate_error**2).mean()) < 0.05 * np.sqrt((omega**2).mean())
    before = out.read_bytes()
    assert encoder.main([str(film), str(out), "--drop", "0.5"]) == 2
    assert out.read_bytes() == before
