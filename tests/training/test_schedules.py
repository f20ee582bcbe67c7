"""The trainer's learning-rate schedules (train.schedule)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from conftest import squared_output, tiny_trainer

from hnnsym.errors import UserError
from hnnsym.evaluation.stage import evaluate
from hnnsym.training.stage import train
from hnnsym.training.trainer import few_steps_advice, steps_per_epoch


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
    # on the raw iterate: the default weight average smooths the validation loss of 6 epochs
    lr = fitted(compose_config, tmp_path, "train.epochs=6", "train.plateau.patience=0",
                "train.plateau.factor=0.5", "train.early_stop.patience=100",
                "train.ema=null")["lr"]  # fmt: skip
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


@pytest.mark.parametrize("method", ["hnn", "shnn", "nssnn"])
def test_train_and_evaluate_run_in_process_on_a_composed_config(
    compose_config, tiny_dataset, tmp_path, method
):
    """The stage functions are what the CLIs call: train(cfg) then evaluate(cfg), no subprocess;
    each method's loss, integrator and gradient come from its method config."""
    path = tiny_dataset(sizes={"train": (16, 6), "val": (8, 6), "test": (2, 9)})
    overrides = [f"method={method}", "system=double_well", f"data_dir={path.parents[2]}",
                 f"run_dir={tmp_path / 'run'}", "train.epochs=2", "train.batch_size=8",
                 "train.window=3", "train.progress=false", "device=cpu"]  # fmt: skip
    result = train(compose_config("train", overrides))
    assert (result.state.epoch, result.state.finished) == (2, True)
    history = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert list(history["epoch"]) == [1, 2] and history["val_loss"].notna().all()
    # fixed-point iterations only where a loss integrates with an implicit integrator: SHNN has no
    # solver in its loss, NSSNN's Tao splitting is explicit
    assert (history["solver_mean_iterations"] > 0).all() == (method == "hnn")
    payload = torch.load(result.last, weights_only=False)
    assert payload["config"]["method"]["name"] == method
    metrics = evaluate(compose_config("evaluate", [*overrides, "eval.figures=false"]))
    assert metrics["checkpoint"]["epoch"] == result.state.best_epoch
    assert math.isfinite(metrics["h_l1"]) and metrics["config"]["method"]["name"] == method


def test_few_steps_per_epoch_are_said_on_every_progress_line(compose_config, tmp_path, capsys):
    """16 trajectories in batches of 16: one optimizer step per epoch (early stopping
    then ends the run before it has learned, and a note before training was easy to miss)."""
    assert steps_per_epoch(57, 64) == 1 and steps_per_epoch(57, 8) == 8
    assert few_steps_advice(57, 64) == "try train.batch_size=8 (8 steps per epoch)"
    assert few_steps_advice(512, 128) is None  # 4 steps: not said
    assert few_steps_advice(2, 2) == "try train.batch_size=1 (2 steps per epoch)"
    assert few_steps_advice(2, 1) == "only 2 training trajectories: add data for more steps"
    fitted(compose_config, tmp_path, "train.batch_size=16", "train.epochs=2")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2
    assert all(line.endswith("[only 1 optimizer step/epoch: try train.batch_size=2 (8 steps per "
                             "epoch)]") for line in lines)  # fmt: skip
    fitted(compose_config, tmp_path / "b", "train.batch_size=4", "train.epochs=1")
    assert "optimizer step" not in capsys.readouterr().out  # 4 steps per epoch


def test_the_no_improvement_warning_rule():
    """Warned when the best validation loss is not 1 % below epoch 1's (a best at epoch 1
    included), after two or more epochs; one line naming what to try."""
    from hnnsym.training.trainer import TrainState, no_improvement_warning

    def state(vals: list[float]) -> TrainState:
        best = min(vals)
        return TrainState(epoch=len(vals), history=[{"val_loss": v} for v in vals],
                          best_val=best, best_epoch=vals.index(best) + 1)  # fmt: skip

    assert no_improvement_warning(state([2.0])) is None  # one epoch: nothing to compare
    assert no_improvement_warning(state([2.0, 1.5, 1.0])) is None
    assert no_improvement_warning(state([2.0, 1.97])) is None
    for stuck in ([2.0, 2.0, 2.0], [2.0, 2.1, 2.05], [2.0, 1.99]):
        line = no_improvement_warning(state(stuck))
        assert line.startswith("warning: the validation loss never improved from 2.0000e+00")
        assert "\n" not in line and "ingest.scale=auto" in line and "train.lr" in line
