"""Through the CLI: a measured file that declares an angle trains a model that sees (cos θ, sin θ)
(``model.periodic`` from the file, kept in the checkpoint, rebuilt by evaluate); an unwrapped
recording of many turns learns exactly as the same one near 0; a run that learns nothing ends
with one ``warning:`` line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from stage_cli import assert_one_line_error, run_stage

from hnnsym import integrate
from hnnsym.checkpoints import load_checkpoint
from hnnsym.data.hdf5 import Split, write_dataset
from hnnsym.data.units import Units

pytestmark = pytest.mark.slow

TRAIN = ["system=measured", "train.progress=false", "train.batch_size=8", "train.epochs=6",
         "train.early_stop.patience=100", "dtype=float64", "seed=0"]  # fmt: skip
EVAL = ["eval.figures=false"]


def pendulum(y: torch.Tensor) -> torch.Tensor:
    return 0.5 * y[..., 1] ** 2 - torch.cos(y[..., 0])


def pendulum_splits(turns: np.ndarray | None = None) -> dict[str, Split]:
    """Pendulum trajectories (some rotating) from q0 in [−π, π), obs_dt 0.1; ``turns`` (one per
    trajectory of all splits): each shifted by 2π·turns, an unwrapped recording far from 0."""
    rng = np.random.default_rng(0)
    sizes = {"train": (24, 12), "val": (8, 12), "test": (4, 20)}
    out, k = {}, 0
    for name, (n, steps) in sizes.items():
        y0 = np.stack([rng.uniform(-math.pi, math.pi, n), rng.uniform(-2.5, 2.5, n)], -1)
        ys = integrate(pendulum, torch.as_tensor(y0), 0.02, 5 * steps, integrator="gauss_legendre4")
        observed = ys[::5].transpose(0, 1).numpy().copy()  # (n, steps + 1, 2)
        observed += 0.005 * rng.standard_normal(observed.shape)
        if turns is not None:
            observed[..., 0] += 2 * math.pi * turns[k : k + n, None]
        k += n
        out[name] = Split(observed, None, 0.1 * np.arange(steps + 1))
    return out


def write_measured(path: Path, splits: dict[str, Split], units: Units | None) -> Path:
    attrs = {"system": "measured", "system_params": {}, "dim": 1, "obs_dt": 0.1, "fine_dt": None,
             "integrator": None, "noise": None, "noise_std": None, "seed": 0, "config": None,
             "units": None if units is None else units.as_attr()}  # fmt: skip
    write_dataset(path, splits, attrs)
    return path


ANGLE = Units(1.0, (1.0,), 1.0, periodic=(0,))


def train(tmp: Path, data: Path, run: str, *extra: str):
    paths = [f"data_file={data}", f"run_dir={tmp / run}", f"hydra.run.dir={tmp / 'hydra'}"]
    return run_stage("train", *TRAIN, *paths, *extra)


def evaluate(tmp: Path, data: Path, run: str, *extra: str):
    paths = [f"data_file={data}", f"run_dir={tmp / run}", f"hydra.run.dir={tmp / 'hydra'}"]
    return run_stage("evaluate", *TRAIN, *EVAL, *paths, *extra)


def final_val(tmp: Path, run: str) -> float:
    return float(pd.read_csv(tmp / run / "metrics.csv")["val_loss"].iloc[-1])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_angle_trains_as_cos_sin_and_unwrapped_turns_learn_the_same(tmp_path, dtype):
    """float32 too: train shifts each trajectory's angles by whole turns to start near 0 (at
    107 rad float32's ulp, 7.6e-6, is above the stage solver's tolerance, 1e-6: the run failed)."""
    wrapped = write_measured(tmp_path / "wrapped.h5", pendulum_splits(), ANGLE)
    turns = np.where(np.arange(36) % 2 == 0, 16, -17)  # q ~ +100 and −107 rad
    unwrapped = write_measured(tmp_path / "unwrapped.h5", pendulum_splits(turns), ANGLE)
    mse = {}
    for data, run in ((wrapped, "wrapped"), (unwrapped, "unwrapped")):
        proc = train(tmp_path, data, run, f"dtype={dtype}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "model.periodic=[0]" in proc.stdout
        assert "warning:" not in proc.stderr, proc.stderr  # it learns
        payload = load_checkpoint(tmp_path / run / "checkpoints" / "best.pt")
        assert payload["model_config"]["periodic"] == [0]
        assert payload["model"]["net.0.weight"].shape[1] == 3  # cos q, sin q, p
        proc = evaluate(tmp_path, data, run)
        assert proc.returncode == 0, proc.stderr[-3000:]
        mse[run] = json.loads((tmp_path / run / "eval" / "metrics.json").read_text()).get(
            "traj_mse"
        )
    first = float(pd.read_csv(tmp_path / "wrapped" / "metrics.csv")["val_loss"][0])
    a, b = final_val(tmp_path, "wrapped"), final_val(tmp_path, "unwrapped")
    print(f"val loss: epoch 1 {first:.6e}; final wrapped {a:.17e}, unwrapped {b:.17e}")
    assert a < 0.8 * first, (first, a)  # learned
    # the network sees cos/sin, the integrator carries q itself and the loss compares differences
    # of q: 16 turns away from 0 the run is the same to float64 rounding
    assert abs(a - b) <= 1e-8 * a, (a, b)
    # the rollout stays unwrapped (the integrator carries q): the same errors against the data
    if None not in mse.values():
        assert abs(mse["wrapped"] - mse["unwrapped"]) <= 1e-8 * mse["wrapped"], mse


def test_periodic_from_the_data_and_an_explicit_mismatch_at_evaluate(tmp_path):
    """A file without units gives periodic []; evaluate asking for another periodic than the
    checkpoint's is refused; model.periodic=[] overrides the file's angles."""
    plain = write_measured(tmp_path / "plain.h5", pendulum_splits(), None)
    proc = train(tmp_path, plain, "plain", "train.epochs=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = load_checkpoint(tmp_path / "plain" / "checkpoints" / "best.pt")
    assert payload["model_config"]["periodic"] == []
    proc = evaluate(tmp_path, plain, "plain", "model.periodic=[0]")
    assert_one_line_error(proc, "holds model", "config asks for")
    angle = write_measured(tmp_path / "angle.h5", pendulum_splits(), ANGLE)
    proc = train(tmp_path, angle, "off", "train.epochs=2", "model.periodic=[]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = load_checkpoint(tmp_path / "off" / "checkpoints" / "best.pt")
    assert payload["model_config"]["periodic"] == []


def test_a_run_that_learns_nothing_ends_with_one_warning(tmp_path):
    data = write_measured(tmp_path / "m.h5", pendulum_splits(), ANGLE)
    proc = train(tmp_path, data, "stuck", "train.lr=1e-12", "train.epochs=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    assert "never improved from" in warnings[0] and "ingest.scale=auto" in warnings[0]
    assert "train.lr" in warnings[0]
    assert proc.stdout.index("done:") >= 0
