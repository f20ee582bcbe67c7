"""Evaluating a model of a chain recorded in joint angles (a file with a ``chain`` attribute, as
``ingest.coordinates=angles`` writes it): besides the errors in the file's (θ, θ̇), the errors
in the tracked points (the recording's units²) and in the wrapped angles, for the model and the
baselines; the points recomputed here from the geometry written out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from rk4 import rk4_trajectory

from hnnsym.config import CONF_DIR
from hnnsym.data.chains import recorded_chain
from hnnsym.data.hdf5 import Split, read_dataset, write_dataset
from hnnsym.data.units import Units
from hnnsym.evaluation import horizons
from hnnsym.evaluation.chains import chain_points
from hnnsym.evaluation.stage import evaluate, summary
from hnnsym.training.stage import train

ORIGIN, LENGTHS = (600.0, 400.0), (300.0, 200.0)  # px
# angles unscaled; the rates stored as p = 1 · θ̇ with time and action scales (powers of two)
UNITS = Units(time=0.125, q=(1.0, 1.0), action=2.0, periodic=(0, 1),
              names=("theta_bob1", "theta_bob2"),
              labels={"theta_bob1": "rad", "theta_bob2": "rad", "time": "s"})  # fmt: skip
DT = 0.02  # s
CHAIN = {"points": ["pivot", "bob1", "bob2"], "fixed": "pivot", "origin": list(ORIGIN),
         "lengths": list(LENGTHS), "coordinates": "angles", "units": "px",
         "angles": ["theta_bob1", "theta_bob2"]}  # fmt: skip


def damped_double_pendulum(n: int, steps: int, seed: int) -> np.ndarray:
    """(n, steps+1, 4) (θ₁, θ₂, θ̇₁, θ̇₂) of a damped point-mass double pendulum (RK4), gravity
    along +x of the image (θ = 0 hanging), angles unwrapped."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([rng.uniform(-1.0, 1.0, (n, 2)), rng.normal(0, 1.0, (n, 2))], -1)

    def f(y):
        t1, t2, w1, w2 = y.T
        c, s = np.cos(t1 - t2), np.sin(t1 - t2)
        m = np.stack([np.stack([2.0 + 0 * c, c], -1), np.stack([c, 1.0 + 0 * c], -1)], -2)
        force = np.stack([-s * w2**2 - 20 * np.sin(t1) - 0.1 * w1,
                          s * w1**2 - 10 * np.sin(t2) - 0.1 * w2], -1)  # fmt: skip
        return np.concatenate([y[:, 2:], np.linalg.solve(m, force[..., None])[..., 0]], -1)

    return rk4_trajectory(f, y, DT / 4, steps, 4)


def write_chain_recording(path: Path) -> Path:
    raw = {"train": damped_double_pendulum(16, 20, 0), "val": damped_double_pendulum(4, 25, 1),
           "test": damped_double_pendulum(3, 25, 2)}  # fmt: skip
    splits = {name: Split(UNITS.to_scaled(traj), None, DT / UNITS.time * np.arange(traj.shape[1]))
              for name, traj in raw.items()}  # fmt: skip
    attrs = {"system": "measured", "system_params": {}, "dim": 2, "obs_dt": DT / UNITS.time,
             "observe": "qp", "fine_dt": None, "integrator": None, "noise": None,
             "noise_std": None, "seed": 0, "config": None, "units": UNITS.as_attr(),
             "ingest_config": json.dumps({"velocities": "smoothing", "mass": 1.0}),
             "chain": json.dumps(CHAIN)}  # fmt: skip
    write_dataset(path, splits, attrs)
    return path


def by_hand(theta: np.ndarray) -> np.ndarray:
    """The two bobs (…, 4) in px, written out for two links."""
    x1 = ORIGIN[0] + LENGTHS[0] * np.cos(theta[..., 0])
    y1 = ORIGIN[1] + LENGTHS[0] * np.sin(theta[..., 0])
    x2 = x1 + LENGTHS[1] * np.cos(theta[..., 1])
    y2 = y1 + LENGTHS[1] * np.sin(theta[..., 1])
    return np.stack([x1, y1, x2, y2], -1)


def test_chain_points_and_which_files_have_them() -> None:
    theta = np.random.default_rng(0).uniform(-7, 7, (5, 3, 2))
    np.testing.assert_allclose(chain_points(CHAIN, theta), by_hand(theta), rtol=1e-13)
    assert recorded_chain({"chain": json.dumps(CHAIN)})["lengths"] == list(LENGTHS)
    assert recorded_chain({}) is None


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chain")
    data = write_chain_recording(tmp / "rec.h5")

    def composed(stage, args):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=stage, overrides=args)

    common = ["system=measured", f"data_file={data}", f"run_dir={tmp / 'run'}", "device=cpu",
              "experiment=recording_chain", "model.hidden=[16]", "seed=0"]  # fmt: skip
    train(composed("train", [*common, "train.epochs=2", "train.progress=false"]))
    metrics = evaluate(composed("evaluate", common))  # figures too: the arms in motion
    return data, metrics


def test_the_points_and_angles_errors_beside_the_baselines(chain_run) -> None:
    data, m = chain_run
    assert m["horizons"] == [10, 25] and m["points_units"] == "px"
    assert m["windows"] == 3  # 3 test trajectories of 25 steps
    w = horizons.tile_windows(UNITS.to_recording(read_dataset(data, system="measured", dim=2)
                                                 .splits["test"].observed), 25)  # fmt: skip
    truth = by_hand(w[:, 1:, :2])
    still = by_hand(np.repeat(w[:, :1, :2], 25, 1))
    for h in (10, 25):
        expected = np.mean((still[:, :h] - truth[:, :h]) ** 2)
        assert m[f"mse_points_h{h}_no_motion"] == pytest.approx(expected, rel=1e-12)
        d = horizons.wrap(w[:, :1, :2] - w[:, 1 : h + 1, :2])
        assert m[f"mse_angles_h{h}_no_motion"] == pytest.approx(np.mean(d**2), rel=1e-12)
        for b in horizons.BASELINES:
            assert math.isfinite(m[f"mse_points_h{h}_{b}"]) and m[f"mse_points_h{h}_{b}"] > 0
        assert math.isfinite(m[f"mse_points_h{h}"]) and math.isfinite(m[f"mse_angles_h{h}"])
    # the model's error in px is that of its angles through the same map: a small angle error
    # δθ moves the bobs by about l δθ, so px² / rad² lies between l₁² and (l₁ + l₂)² · 2
    ratio = m["mse_points_h10"] / m["mse_angles_h10"]
    assert LENGTHS[1] ** 2 / 2 < ratio < 2 * (LENGTHS[0] + LENGTHS[1]) ** 2
    assert any("tracked points" in note for note in m["notes"])


def test_the_summary_and_metrics_json_carry_them(chain_run) -> None:
    _, m = chain_run
    text = summary(m)
    assert "in the tracked points (px²)" in text and "in the joint angles (rad², wrapped)" in text
    saved = json.loads((Path(m["files"]["dir"]) / "metrics.json").read_text())
    assert saved["mse_points_h25_linear"] == pytest.approx(m["mse_points_h25_linear"])
    assert (Path(m["files"]["dir"]) / "chain_motion.png").stat().st_size > 10_000  # the arms


def test_the_learned_chain_in_a_compound_pendulums_terms() -> None:
    """A set to a compound pendulum's (links' form [[α, β], [β, γ]] ⊗ I, friction R) reads back
    as M / M₁₁ = [[1, β/α], [β/α, γ/α]], no offsets, no anisotropy, R / α / τ."""
    import torch

    from hnnsym.evaluation.chains import learned_chain
    from hnnsym.physics.lagrangian_models import LagrangianModel

    alpha, beta, gamma, tau = 2.0, 0.3, 0.25, 0.5
    over_links = np.kron(np.array([[alpha, beta], [beta, gamma]]), np.eye(2))
    links_of_points = np.kron(np.array([[1.0, 0.0], [-1.0, 1.0]]), np.eye(2))
    A = torch.as_tensor(links_of_points.T @ over_links @ links_of_points)
    R = torch.tensor([[0.05, -0.02], [-0.02, 0.02]], dtype=torch.float64)
    model = LagrangianModel(2, mass="chain", periodic=(0, 1)).double()
    with torch.no_grad():
        C = torch.linalg.cholesky(A)
        diag = torch.log(torch.expm1(C.diagonal() - model.mass_eps))
        model.chain_factor.copy_(C.tril(-1) + torch.diag(diag))
        model.damping_factor.copy_(torch.linalg.cholesky(R))
    got = learned_chain(model, tau)
    np.testing.assert_allclose(got["inertia"], [[1, beta / alpha], [beta / alpha, gamma / alpha]],
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(got["offsets"], np.zeros((2, 2)), atol=1e-12)
    assert got["anisotropy"] < 1e-12
    np.testing.assert_allclose(got["friction"], R.numpy() / alpha / tau, atol=1e-12)
    assert learned_chain(LagrangianModel(2), tau) is None


def test_the_chain_run_reports_its_learned_chain(chain_run) -> None:
    _, m = chain_run
    c = m["learned_chain"]
    assert c["inertia"][0][0] == pytest.approx(1.0) and np.shape(c["friction"]) == (2, 2)
    assert "learned chain: M / M₁₁" in summary(m)
