"""The trainer's learning-rate schedules (train.schedule)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from conftest import tiny_trainer

from hnnsym.cli import UserError


def squared_output(model, windows, stats=None):
    return (model(windows[0]) ** 2).mean()


def fitted(compose_config, tmp_path, *overrides: str) -> pd.DataFrame:
    cfg = compose_config("train", ["train.batch_size=8", "train.progress=false", *overrides])
    tiny_trainer(cfg, squared_output, tmp_path).fit()
    return pd.read_csv(tmp_path / "metrics.csv")


def test_cosine_schedule_anneals_from_lr_to_zero(compose_config, tmp_path):
    epochs = 8
    lr = fitted(compose_config, tmp_path, "train.schedule=cosine", f"train.epochs={epochs}",
                "train.lr=0.01", "train.early_stop.patience=100")["lr"]  # fmt: skip
    # the lr column is the rate used during that epoch: 0.01 (1 + cos(pi e / E)) / 2, e = 0..E-1
    expected = [0.005 * (1 + math.cos(math.pi * e / epochs)) for e in range(epochs)]
    assert lr.tolist() == pytest.approx(expected, rel=1e-12)


def test_plateau_schedule_halves_after_patience(compose_config, tmp_path):
    lr = fitted(compose_config, tmp_path, "train.epochs=6", "train.plateau.patience=0",
                "train.plateau.factor=0.5", "train.early_stop.patience=100")["lr"]  # fmt: skip
    assert lr.iloc[0] == 0.01 and lr.is_monotonic_decreasing and lr.iloc[-1] < 0.01


def test_unknown_schedule_is_a_user_error(compose_config, tmp_path):
    with pytest.raises(UserError, match="train.schedule must be one of"):
        fitted(compose_config, tmp_path, "train.schedule=linear")


def test_resume_refuses_another_schedule(compose_config, tmp_path):
    fitted(compose_config, tmp_path, "train.epochs=2", "train.schedule=cosine")
    cfg = compose_config("train", ["train.epochs=3", "train.progress=false"])  # plateau
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    payload["config"] = {"train": {"schedule": "cosine"}}
    trainer = tiny_trainer(cfg, squared_output, tmp_path)
    with pytest.raises(UserError, match="train.schedule=cosine; resume with it"):
        trainer.restore(payload, tmp_path / "checkpoints" / "last.pt")
