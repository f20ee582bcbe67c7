"""Signals with Python handlers run at safe points (hnnsym.signals), and the trainer's safe points
are its batch boundaries and the ends of its epochs' writes."""

from __future__ import annotations

import os
import signal

import pytest
import torch
from conftest import squared_output, tiny_trainer

from hnnsym.signals import deferred_signals


class Requeued(BaseException):
    """What submitit's pre-timeout handler does in effect: unwind (it calls sys.exit)."""


@pytest.fixture
def usr2_handler():
    """Installs a SIGUSR2 handler that records its calls and raises Requeued; restores the old."""
    calls: list[str] = []

    def handler(signum, frame):
        calls.append(signal.Signals(signum).name)
        raise Requeued

    previous = signal.signal(signal.SIGUSR2, handler)
    yield calls
    signal.signal(signal.SIGUSR2, previous)


def test_a_signal_runs_its_handler_at_the_safe_point_not_where_it_came(usr2_handler):
    events = []
    with deferred_signals((signal.SIGUSR2,)) as safe_point:
        try:  # an acquire/release pair the handler must not unwind through
            events.append("acquired")
            os.kill(os.getpid(), signal.SIGUSR2)
            events.append("work after the signal")
        finally:
            events.append("released")
        assert usr2_handler == []
        with pytest.raises(Requeued):
            safe_point()
    assert events == ["acquired", "work after the signal", "released"]
    assert usr2_handler == ["SIGUSR2"]
    assert signal.getsignal(signal.SIGUSR2).__name__ == "handler"  # restored


def test_a_signal_pending_at_a_normal_exit_is_raised_again_and_at_an_error_dropped(usr2_handler):
    with pytest.raises(Requeued):
        with deferred_signals((signal.SIGUSR2,)):
            signal.raise_signal(signal.SIGUSR2)
            assert usr2_handler == []
    assert usr2_handler == ["SIGUSR2"]
    with pytest.raises(ValueError, match="the block's own error"):
        with deferred_signals((signal.SIGUSR2,)):
            signal.raise_signal(signal.SIGUSR2)
            raise ValueError("the block's own error")
    assert usr2_handler == ["SIGUSR2"]


def test_default_and_ignored_signals_are_left_as_they_are():
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        with deferred_signals((signal.SIGUSR1, signal.SIGTERM)):
            assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_ctrl_c_is_deferred_too_and_raises_keyboard_interrupt_at_the_safe_point():
    # Python's own Ctrl-C handler, also where the suite was started with SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with deferred_signals() as safe_point:
            signal.raise_signal(signal.SIGINT)
            with pytest.raises(KeyboardInterrupt):
                safe_point()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_trainer_handles_a_signal_after_the_batch_it_came_in(
    compose_config, tmp_path, usr2_handler
):
    """The pre-timeout signal in the middle of a batch's loss: the batch's optimizer step is
    taken, then the handler runs, before the next batch's loss."""
    cfg = compose_config("train", ["train.batch_size=4", "train.progress=false",
                                   "train.epochs=3", "train.early_stop.patience=100"])  # fmt: skip
    log: list[str] = []

    def loss(model, windows, stats=None):
        log.append("loss")
        if log.count("loss") == 3:
            os.kill(os.getpid(), signal.SIGUSR2)
            log.append("signal sent")
        return squared_output(model, windows)

    trainer = tiny_trainer(cfg, loss, tmp_path)
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (log.append("step"), step(*a, **k))[1]
    with pytest.raises(Requeued):
        trainer.fit()
    assert usr2_handler == ["SIGUSR2"]
    assert log == ["loss", "step", "loss", "step", "loss", "signal sent", "step"]
    assert signal.getsignal(signal.SIGUSR2).__name__ == "handler"


def test_the_trainer_handles_a_signal_during_an_epochs_writes_after_them(
    compose_config, tmp_path, usr2_handler
):
    cfg = compose_config("train", ["train.batch_size=8", "train.progress=false",
                                   "train.epochs=3", "train.early_stop.patience=100"])  # fmt: skip
    trainer = tiny_trainer(cfg, squared_output, tmp_path)
    write_metrics = trainer.write_metrics

    def write_metrics_signalled():
        if trainer.state.epoch == 2:
            os.kill(os.getpid(), signal.SIGUSR2)
        write_metrics()

    trainer.write_metrics = write_metrics_signalled
    with pytest.raises(Requeued):
        trainer.fit()
    assert torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)["epoch"] == 2
    assert len((tmp_path / "metrics.csv").read_text().splitlines()) == 1 + 2
