"""The Lagrangian model (model=lagrangian, momenta of its own: it observes (q, q̇)) through the
CLI as a user runs it, with tiny budgets: generate -> train -> evaluate on the angle-coordinate
chain pendulum, and ingest -> train -> evaluate on a recording with velocities (the spring–mass
file of ``make real-data``); the loss decreases and the metrics, in the data's own coordinates,
are finite. A recording of momenta (no mass known) is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from stage_cli import assert_one_line_error, run_stage

REAL = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "real" / "lipson_real_linear_h_1.txt"
)
TRAIN = ("model=lagrangian", "train.epochs=8", "train.batch_size=8", "train.window=4",
         "train.progress=false")  # fmt: skip
INGEST = ("ingest.names=[trial,t,x,v]", "ingest.trial=trial", "ingest.positions=[x]",
          "ingest.units={t: s, x: px, v: px/s}", "ingest.max_segment=64")  # fmt: skip


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


def loss_decreased(run: Path) -> None:
    losses = pd.read_csv(run / "metrics.csv")["train_loss"]
    assert losses.iloc[-1] < 0.8 * losses.iloc[0], list(losses)


def test_chain_pendulum_angles_generate_train_evaluate(tmp_path):
    common = ("system=chain_pendulum_angles", f"data_file={tmp_path / 'd.h5'}")
    ok(run_stage("generate", *common, "generate.n_train=32", "generate.n_val=8",
                 "generate.n_test=4", "generate.test_steps=20", "generate.train_steps=8"))  # fmt: skip
    args = (*common, *TRAIN, f"run_dir={tmp_path / 'run'}")
    ok(run_stage("train", *args))
    loss_decreased(tmp_path / "run")
    proc = run_stage("evaluate", *args, "eval.figures=false")
    ok(proc)
    m = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    # compared in Cartesian coordinates of the data's (q, p), the chain's own comparison
    assert math.isfinite(m["rel_err_gmean"]) and m["rel_err_gmean"] < 1.0
    assert m["rollout_failed"] == 0.0


def test_pendulum_metrics_through_the_map(tmp_path):
    common = ("system=pendulum", f"data_file={tmp_path / 'd.h5'}")
    ok(run_stage("generate", *common, "generate.n_train=32", "generate.n_val=8",
                 "generate.n_test=4", "generate.test_steps=20", "generate.train_steps=8"))  # fmt: skip
    args = (*common, *TRAIN, f"run_dir={tmp_path / 'run'}")
    ok(run_stage("train", *args))
    ok(run_stage("evaluate", *args, "eval.figures=false", "eval.grid_points=20"))
    m = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    for key in ("h_l1", "vf_l1", "traj_mse", "rel_err_gmean", "energy_drift_pred_max"):
        assert math.isfinite(m[key]), key
    assert any("momenta of its own" in note for note in m["notes"])


@pytest.mark.skipif(not REAL.exists(), reason=f"{REAL} is not on this machine")
def test_recording_with_velocities_ingest_train_evaluate(tmp_path):
    ok(run_stage("ingest", f"ingest.source={REAL}", *INGEST, "ingest.velocities=[v]",
                 "data_file=r.h5", cwd=tmp_path))  # fmt: skip
    args = ("system=measured", "data_file=r.h5", *TRAIN, "run_dir=run")
    ok(run_stage("train", *args, cwd=tmp_path))
    loss_decreased(tmp_path / "run")
    ok(run_stage("evaluate", *args, "eval.figures=false", cwd=tmp_path))
    m = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    # in the recording's units (px, px/s), beside the trivial baselines on the same trajectories
    assert math.isfinite(m["traj_mse"]) and m["traj_mse"] < m["traj_mse_no_motion"]
    assert m["units"]["labels"]["x"] == "px"


@pytest.mark.skipif(not REAL.exists(), reason=f"{REAL} is not on this machine")
def test_recording_of_momenta_is_refused(tmp_path):
    ok(run_stage("ingest", f"ingest.source={REAL}", *INGEST, "ingest.momenta=[v]",
                 "data_file=r.h5", cwd=tmp_path))  # fmt: skip
    proc = run_stage("train", "system=measured", "data_file=r.h5", *TRAIN, "run_dir=run",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(proc, "LagrangianModel", "not ingested with velocities")
