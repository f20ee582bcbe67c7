"""CHNN on a filmed double pendulum as a user runs it: ingest the tracked points as a chain
(detected, relative to the fixed point, velocities by smoothing) -> train -> evaluate. The model
takes the recorded chain's constraints and observes (x, ẋ); a file of points without a chain,
or positions only, is refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from filmed_pendulum import DT, LENGTHS, rods, tracked
from stage_cli import assert_one_line_error, run_stage

from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.units import Units

INGEST = ("ingest.names=[x0,y0,x1,y1,x2,y2]", "ingest.time=null", f"ingest.dt={DT}",
          "ingest.every=4", "ingest.max_segment=50")  # fmt: skip
CHAIN = ("ingest.points={pivot: [x0,y0], bob1: [x1,y1], bob2: [x2,y2]}", "ingest.chain=detect")
TRAIN = ("system=measured", "model=chnn", "method=chnn", "model.hidden=[32,32]",
         "model.mass=full", "model.friction=joint", "train.epochs=6", "train.batch_size=8",
         "train.window=4", "train.progress=false")  # fmt: skip


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]


def film(tmp_path: Path) -> Path:
    _, theta, _ = rods(8.0)
    path = tmp_path / "film.csv"
    tracked(theta, jitter=1.0).round().astype(int).to_csv(path, index=False, header=False)
    return path


def test_chnn_learns_a_filmed_chain_with_its_recorded_constraints(tmp_path):
    src, data = film(tmp_path), tmp_path / "points.h5"
    ok(run_stage("ingest", f"ingest.source={src}", *INGEST, *CHAIN, "ingest.velocities=smoothing",
                 f"data_file={data}"))  # fmt: skip
    args = (*TRAIN, f"data_file={data}", f"run_dir={tmp_path / 'run'}")
    ok(run_stage("train", *args))
    payload = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)
    model_cfg = payload["model_config"]
    assert model_cfg["system"] == "chain_pendulum" and model_cfg["own_momenta"] is True
    scale = Units.from_attrs(read_dataset(data, splits=()).attrs, 4).q[0]
    lengths = [v * scale for v in model_cfg["system_params"]["lengths"]]
    assert all(abs(a - b) < 0.5 for a, b in zip(lengths, LENGTHS)), lengths  # px
    proc = run_stage("evaluate", *args, "eval.horizons=[5,10]")
    ok(proc)
    assert (tmp_path / "run" / "eval" / "chain_motion.png").stat().st_size > 10_000  # the arms
    metrics = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    assert all(math.isfinite(metrics[f"mse_h{h}"]) for h in (5, 10))
    # the error in the tracked points (px²), without the velocities, beside the baselines'
    assert all(math.isfinite(metrics[f"mse_points_h{h}"]) for h in (5, 10))
    assert metrics["mse_points_h10_no_motion"] < metrics["mse_h10_no_motion"]
    assert metrics["damping_learned"] > 0  # the joint friction, reported


def test_chnn_refuses_points_without_a_chain_or_without_velocities(tmp_path):
    src = film(tmp_path)
    plain = tmp_path / "plain.h5"
    ok(run_stage("ingest", f"ingest.source={src}", *INGEST, "ingest.positions=[x1,y1,x2,y2]",
                 "ingest.velocities=smoothing", f"data_file={plain}"))  # fmt: skip
    proc = run_stage("train", *TRAIN, f"data_file={plain}", f"run_dir={tmp_path / 'a'}")
    assert_one_line_error(proc, "learns in Cartesian coordinates with constraints",
                          "ingest.chain")  # fmt: skip
    still = tmp_path / "still.h5"
    ok(run_stage("ingest", f"ingest.source={src}", *INGEST, *CHAIN, f"data_file={still}"))
    proc = run_stage("train", *TRAIN, f"data_file={still}", f"run_dir={tmp_path / 'b'}")
    assert_one_line_error(proc, "positions only")
