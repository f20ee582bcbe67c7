"""End to end through the real CLIs: generate -> train -> evaluate on a tiny configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from hnnsym.config.build import build_model, model_from_checkpoint
from hnnsym.evaluation.metrics import grid_errors
from hnnsym.physics.systems import get_system

pytestmark = pytest.mark.slow


def run_stage(stage: str, tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", f"hnnsym.{stage}", *overrides, f"data_dir={tmp / 'data'}",
           f"run_dir={tmp / 'run'}", f"hydra.run.dir={tmp / 'hydra' / stage}"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_generate_train_evaluate_learns_the_hamiltonian(tmp_path: Path) -> None:
    common = ["system=double_well", "noise=low", "seed=0"]
    run_stage("generate", tmp_path, *common, "generate.n_train=256", "generate.n_val=64",
              "generate.n_test=8", "generate.test_steps=100", "generate.train_steps=16")  # fmt: skip
    run_stage("train", tmp_path, *common, "train.epochs=40", "train.batch_size=64", "train.lr=0.03",
              "train.progress=false", "train.plateau.patience=100",
              "train.early_stop.patience=100")  # fmt: skip
    run_stage("evaluate", tmp_path, *common, "eval.figures=false")

    run = tmp_path / "run"
    history = pd.read_csv(run / "metrics.csv")
    assert list(history["epoch"]) == list(range(1, 41))
    assert history["val_loss"].iloc[-1] < 0.7 * history["val_loss"].iloc[0]
    metrics = json.loads((run / "eval" / "metrics.json").read_text())

    # the learned H against the same network untrained (same seed, same initialisation)
    payload = torch.load(run / "checkpoints" / "best.pt", weights_only=False)
    system = get_system("double_well")
    torch.manual_seed(0)
    untrained = build_model(payload["model_config"], 1).double()
    grid = system.grid(100)
    before = grid_errors(system, untrained, grid)["h_l1"]
    after = grid_errors(system, model_from_checkpoint(payload).double(), grid)["h_l1"]
    assert metrics["h_l1"] == pytest.approx(after, rel=0.05)  # evaluate's grid is finer
    assert after < before / 4, (before, after)  # measured: 0.68 -> 0.10
    assert payload["data_sha256"] == metrics["data"]["sha256"]
