"""Evaluating a model of a recording: horizons over windows tiling the test trajectories, the
baselines on the same windows, the recording's units, wrapped angles, the learned damping,
positions-only runs, the warning, and ``hnnsym.load_run`` against the CLI's numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from rk4 import rk4_trajectory

import hnnsym
from hnnsym.data.hdf5 import Split, write_dataset
from hnnsym.data.units import Units
from hnnsym.evaluation import horizons
from hnnsym.evaluation.stage import evaluate, summary
from hnnsym.training.stage import train

# powers of two: the conversions are exact; the angle coordinate is never scaled
UNITS = Units(time=0.25, q=(1.0,), action=4.0, periodic=(0,), names=("theta",),
              labels={"theta": "rad", "t": "s"})  # fmt: skip
DT = 0.05  # recording seconds between observations


def damped_pendulum(n: int, steps: int, seed: int, turns: int = 0) -> np.ndarray:
    """(n, steps+1, 2) (θ, ω) of θ̈ = −9 sin θ − 0.3 θ̇ (RK4, 10 substeps per DT), recording
    units; ``turns`` full turns added to θ of every other trajectory (an unwrapped recording)."""
    rng = np.random.default_rng(seed)
    y = np.stack([rng.uniform(-1.5, 1.5, n), rng.uniform(-1.0, 1.0, n)], -1)

    def f(y):
        return np.stack([y[:, 1], -9 * np.sin(y[:, 0]) - 0.3 * y[:, 1]], -1)

    traj = rk4_trajectory(f, y, DT / 10, steps, 10)
    traj[1::2, :, 0] += 2 * np.pi * turns
    return traj


def write_recording(path: Path, positions_only: bool = False) -> Path:
    """A measured file in scaled units with ``UNITS``: train 12 × 16 steps, val 4, test 3 × 24."""
    raw = {"train": damped_pendulum(12, 16, 0), "val": damped_pendulum(4, 16, 1),
           "test": damped_pendulum(3, 24, 2, turns=3)}  # fmt: skip
    splits = {}
    for name, traj in raw.items():
        stored = UNITS.to_scaled(traj[..., :1] if positions_only else traj)
        splits[name] = Split(stored, None, DT / UNITS.time * np.arange(traj.shape[1]))
    attrs = {"system": "measured", "system_params": {}, "dim": 1, "obs_dt": DT / UNITS.time,
             "observe": "q" if positions_only else "qp", "fine_dt": None, "integrator": None,
             "noise": None, "noise_std": None, "seed": 0, "config": None,
             "units": UNITS.as_attr()}  # fmt: skip
    write_dataset(path, splits, attrs)
    return path


# ---- the pieces -----------------------------------------------------------------------------


def test_wrapped_differences_ignore_full_turns_of_angles_only() -> None:
    truth = np.array([[0.1, 5.0], [-3.0, 1.0]])
    pred = truth + np.array([[2 * np.pi * 7 + 0.2, 0.5], [-2 * np.pi * 3 - 0.1, 2 * np.pi]])
    np.testing.assert_allclose(horizons.differences(pred, truth, [0]),
                               [[0.2, 0.5], [-0.1, 2 * np.pi]], atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(horizons.differences(pred, truth, []), pred - truth)


def test_horizons_are_clipped_and_windows_tile_each_trajectory() -> None:
    assert horizons.choose_horizons(None, 30) == [1, 4, 12]
    assert horizons.choose_horizons([1, 4, 12], 8) == [1, 4, 8]
    with pytest.raises(ValueError, match=">= 1"):
        horizons.choose_horizons([0, 3], 8)
    traj = np.arange(2 * 26 * 2, dtype=float).reshape(2, 26, 2)
    w = horizons.tile_windows(traj, 12)
    assert w.shape == (4, 13, 2)  # 2 per trajectory, the tail of 1 step left over
    np.testing.assert_array_equal(w[1, 0], traj[0, 12])  # adjacent windows share an end point
    np.testing.assert_array_equal(w[2], traj[1, :13])


def test_the_baselines_are_exact_for_their_own_motions() -> None:
    """No motion on rest, constant velocity on uniform motion (full turns included), the linear
    fit on a linear map: zero error, float64."""
    rng = np.random.default_rng(0)
    A = np.array([[0.99, 0.05], [-0.2, 0.97]])
    b = np.array([0.01, -0.02])
    y = [rng.standard_normal((5, 2))]
    for _ in range(20):
        y.append(y[-1] @ A.T + b)
    linear = np.stack(y, 1)
    coef = horizons.fit_linear(linear[:3], [])
    pred = horizons.baselines(linear[3:], 1, 0.1, coef, [])
    assert max(horizons.horizon_mse(pred["linear"], linear[3:, 1:], [20], []).values()) < 1e-25
    t = 0.1 * np.arange(13)
    uniform = np.stack([np.stack([3.0 + 2.0 * t, np.full_like(t, 2.0)], -1)] * 2)
    uniform[1, :, 0] = np.arctan2(np.sin(uniform[1, :, 0]), np.cos(uniform[1, :, 0]))  # wrapped
    pred = horizons.baselines(uniform, 1, 0.1, coef, [0])
    mse = horizons.horizon_mse(pred["constant_velocity"], uniform[:, 1:], [12], [0])
    assert mse[12] < 1e-26
    rest = np.ones((3, 5, 2))
    pred = horizons.baselines(rest, 1, 0.1, coef, [])
    assert horizons.horizon_mse(pred["no_motion"], rest[:, 1:], [4], [])[4] == 0.0


# ---- the stage ------------------------------------------------------------------------------


def overrides(tmp_path: Path, data: Path, run: str, *more: str) -> list[str]:
    return ["system=measured", f"data_file={data}", f"run_dir={tmp_path / run}", "device=cpu",
            "model.hidden=[16]", "seed=0", *more]  # fmt: skip


@pytest.fixture(scope="module")
def hnn_run(tmp_path_factory, request):
    """A (θ, ω) recording with units, an HNN trained for 3 epochs and evaluated."""
    from conftest import compose_config as _  # noqa: F401  (the fixture's module)
    from hydra import compose, initialize_config_dir

    from hnnsym.config import CONF_DIR

    tmp = tmp_path_factory.mktemp("hnn")
    data = write_recording(tmp / "rec.h5")

    def composed(stage, args):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=stage, overrides=args)

    common = overrides(tmp, data, "run", "train.window=4")
    train(composed("train", [*common, "train.epochs=3", "train.batch_size=8",
                             "train.progress=false"]))  # fmt: skip
    metrics = evaluate(composed("evaluate", [*common, "eval.slice_points=11",
                                             "eval.plot_trajectories=2"]))  # fmt: skip
    return tmp, data, metrics


def recording_windows(data: Path, length: int) -> np.ndarray:
    from hnnsym.data.hdf5 import read_dataset

    test = read_dataset(data, system="measured", dim=1).splits["test"].observed
    return horizons.tile_windows(UNITS.to_recording(test), length)


def test_a_recording_is_evaluated_at_horizons_beside_the_baselines(hnn_run) -> None:
    tmp, data, m = hnn_run
    assert m["horizons"] == [1, 4, 12] and m["main_horizon"] == 12
    assert m["horizon_times"] == pytest.approx([DT, 4 * DT, 12 * DT])  # recording seconds
    assert m["windows"] == 6  # 3 test trajectories of 24 steps, 2 windows each
    assert m["rollout_dt"] == pytest.approx(DT) and m["rollout_horizon"] == pytest.approx(24 * DT)
    for h in m["horizons"]:
        for b in horizons.BASELINES:
            assert m[f"ratio_h{h}_{b}"] == pytest.approx(m[f"mse_h{h}"] / m[f"mse_h{h}_{b}"])
    # the baselines, recomputed here in recording units with wrapped angle differences
    w = recording_windows(data, 12)
    assert np.abs(w[..., 0]).max() > 15  # unwrapped: three full turns in some test windows
    still = np.repeat(w[:, :1], 12, 1)
    d = horizons.wrap(still[..., 0] - w[:, 1:, 0])
    expected = np.mean(np.stack([d, still[..., 1] - w[:, 1:, 1]], -1)[:, :4] ** 2)
    assert m["mse_h4_no_motion"] == pytest.approx(expected, rel=1e-12)
    v = horizons.wrap(w[:, 1, 0] - w[:, 0, 0]) / DT
    q = w[:, :1, 0] + DT * np.arange(1, 13)[None, :] * v[:, None]
    d = np.stack([horizons.wrap(q - w[:, 1:, 0]), w[:, :1, 1] - w[:, 1:, 1]], -1)
    assert m["mse_h12_constant_velocity"] == pytest.approx(np.mean(d**2), rel=1e-12)
    assert m["mse_h12_linear"] < m["mse_h12_no_motion"]  # the fit has learned something
    assert set(m["mse_per_coordinate"]["model"]) == {"theta [rad]", "p(theta)"}
    assert m["units"]["time"] == 0.25
    assert "horizons.png" in m["files"]["figures"]
    json.loads((tmp / "run" / "eval" / "metrics.json").read_text())


def test_load_run_predicts_what_the_cli_evaluated(hnn_run) -> None:
    tmp, data, m = hnn_run
    run = hnnsym.load_run(tmp / "run")
    assert run.obs_dt == pytest.approx(DT)
    w = recording_windows(data, 12)
    times = DT * np.arange(1, 13)
    pred = run.predict(w[:, 0], times)  # (12, B, 2)
    assert pred.shape == (12, 6, 2)
    for h in m["horizons"]:
        err = horizons.differences(pred[:h].transpose(1, 0, 2), w[:, 1 : h + 1], [0])
        assert m[f"mse_h{h}"] == pytest.approx(np.mean(err**2), rel=1e-10)
    np.testing.assert_array_equal(run.predict(w[:, 0], np.array([0.0]))[0], w[:, 0])
    with pytest.raises(hnnsym.errors.UserError, match="multiples"):
        run.predict(w[:, 0], np.array([0.3 * DT]))


def test_the_summary_puts_baselines_beside_the_model_and_ends_with_the_warning(hnn_run) -> None:
    _, _, m = hnn_run
    text = summary(m)
    assert "no motion" in text and "constant velocity" in text and "linear" in text
    assert "12 (0.6)" in text
    lines = text.splitlines()
    beaten = m["mse_h12"] < min(m["mse_h12_no_motion"], m["mse_h12_constant_velocity"])
    assert (m["warning"] is None) == beaten
    forced = {**m, "warning": horizons_warning(m, 10.0)}
    last = summary(forced).splitlines()[-1]
    assert last.startswith("warning: the model's 12-step error") and "train.epochs" in last
    assert sum(line.startswith("warning:") for line in lines) == (0 if beaten else 1)


def horizons_warning(m: dict, factor: float) -> str | None:
    from hnnsym.evaluation.measured import not_learned_warning

    worse = {**m, "mse_h12": factor * max(m["mse_h12_no_motion"], m["mse_h12_constant_velocity"])}
    return not_learned_warning(worse)


def test_a_dissipative_model_reports_its_damping_in_recording_units(
    tmp_path: Path, compose_config
) -> None:
    data = write_recording(tmp_path / "rec.h5")
    common = overrides(tmp_path, data, "run", "model=dissipative_hnn", "train.window=4")
    train(compose_config("train", [*common, "train.epochs=1", "train.progress=false"]))
    m = evaluate(compose_config("evaluate", [*common, "eval.figures=false"]))
    run = hnnsym.load_run(tmp_path / "run")
    R = run.model.damping_matrix(None).double()
    scales = torch.as_tensor(UNITS.state_scales(2))
    expected = float((R * scales[:, None] * scales[None, :] / UNITS.action)[1, 1])
    assert m["damping_learned"] == pytest.approx(expected, rel=1e-12)
    assert "damping: learned" in summary(m)


def test_a_positions_only_recording_is_evaluated(tmp_path: Path, compose_config) -> None:
    data = write_recording(tmp_path / "rec_q.h5", positions_only=True)
    common = overrides(tmp_path, data, "run", "method=ddlm", "model=potential")
    train(compose_config("train", [*common, "train.epochs=1", "train.progress=false"]))
    m = evaluate(compose_config("evaluate", [*common, "eval.plot_trajectories=1"]))
    assert m["horizons"] == [1, 4, 12] and m["windows"] == 3  # windows of 13 steps, given 2
    for b in horizons.BASELINES:
        assert math.isfinite(m[f"mse_h12_{b}"])
    assert "positions.png" in m["files"]["figures"]
    run = hnnsym.load_run(tmp_path / "run")
    w = recording_windows(data, 13)
    pred = run.predict(w[:, :2].transpose(1, 0, 2), DT * np.arange(2, 14))
    err = horizons.differences(pred.transpose(1, 0, 2), w[:, 2:], [0])
    assert m["mse_h12"] == pytest.approx(np.mean(err**2), rel=1e-10)
    assert "theta [rad]" in m["mse_per_coordinate"]["model"]


def test_report_puts_the_baselines_beside_each_error(hnn_run) -> None:
    from hnnsym.reporting.report import build_report, markdown

    tmp, _, m = hnn_run
    rep = build_report(str(tmp / "run"), ["mse_h12", "traj_mse", "best_val_loss"])
    assert rep.metrics == [
        "mse_h12", "mse_h12_no_motion", "mse_h12_constant_velocity", "mse_h12_linear",
        "traj_mse", "traj_mse_no_motion", "traj_mse_constant_velocity", "traj_mse_linear",
        "best_val_loss",
    ]  # fmt: skip
    assert rep.table["mse_h12_linear_mean"].iloc[0] == pytest.approx(m["mse_h12_linear"])
    assert "mse_h12_constant_velocity" in markdown(rep, 3, "t")
