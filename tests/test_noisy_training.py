"""Options of `train` for noisy data (issue 17): the weight average (train.ema, ema_start) and the
learned initial states (train.init=learned)."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_trainer
from torch import nn

from hnnsym.config.schemas import validated
from hnnsym.data.windows import random_windows
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import solve
from hnnsym.physics.systems import double_well
from hnnsym.training.losses import LearnedStarts, WindowLoss
from hnnsym.training.stage import build_trainer, train
from hnnsym.training.trainer import TrainData, Trainer, TrainOptions, WeightAverage


def squared_output(model, windows):
    return (model(windows[0]) ** 2).mean()


# ---- weight averaging ------------------------------------------------------------------------
@pytest.mark.parametrize("decay", [0.9, 1.0])
def test_weight_average_is_the_analytic_average_of_the_iterates(decay):
    """θ̄_n = θ̄_{n-1} + max(1-β, 1/n)(θ_n - θ̄_{n-1}) is the mean of θ_1..θ_m, m = 1/(1-β),
    then an EMA: θ̄_n = β^(n-m) mean(θ_1..θ_m) + Σ_{k=m+1..n} (1-β) β^(n-k) θ_k (β = 1: the mean
    of all), on the iterates of SGD with momentum on a random quadratic."""
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    target = torch.randn(16, 2, dtype=torch.float64)
    x = torch.randn(16, 3, dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    average = WeightAverage(model, decay)
    iterates = []
    for _ in range(30):
        optimizer.zero_grad()
        ((model(x) - target) ** 2).mean().backward()
        optimizer.step()
        average.update_parameters(model)
        iterates.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    thetas = torch.stack(iterates)  # (n, P)
    n = len(thetas)
    m = n if decay == 1.0 else round(1 / (1 - decay))
    expected = decay ** (n - m) * thetas[:m].mean(0)
    for k in range(m, n):  # 0-based k is the (k+1)-th iterate
        expected = expected + (1 - decay) * decay ** (n - 1 - k) * thetas[k]
    got = torch.cat([p.detach().flatten() for p in average.module.parameters()])
    assert int(average.n_averaged) == n
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(got, thetas[-1], atol=1e-3)  # the average is not the last iterate


def test_the_average_is_validated_and_checkpointed_the_raw_weights_kept(compose_config, tmp_path):
    cfg = compose_config("train", ["train.batch_size=4", "train.progress=false", "train.epochs=3",
                                   "train.ema=0.9", "train.ema_start=2"])  # fmt: skip
    trainer = tiny_trainer(cfg, squared_output, tmp_path)
    trainer.fit()
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    average, raw = trainer.average.module.state_dict(), trainer.model.state_dict()
    assert int(trainer.average.n_averaged) == 2 * 4  # epochs 2 and 3, 4 steps each
    assert all(torch.equal(payload["model"][k], average[k]) for k in average)
    assert all(torch.equal(payload["raw_model"][k], raw[k]) for k in raw)
    assert not all(torch.equal(average[k], raw[k]) for k in raw)
    assert trainer.state.history[-1]["val_loss"] == pytest.approx(trainer.validate(), rel=1e-12)
    with torch.no_grad():
        raw_val = float(squared_output(trainer.model, trainer.val_windows))
    assert trainer.state.history[-1]["val_loss"] != pytest.approx(raw_val, rel=1e-9)


def test_ema_out_of_range_is_a_one_line_user_error(compose_config):
    for value in ("0", "1.5"):
        cfg = compose_config("train", [f"train.ema={value}"])
        with pytest.raises(UserError, match=r"train.ema must be in \(0, 1\]"):
            validated(cfg, "train")


# ---- learned initial states ------------------------------------------------------------------
class TrueDoubleWell(nn.Module):
    """The true H as a model (one unused parameter for the optimizer)."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.system = double_well()

    def forward(self, y):
        return self.system(y) + 0.0 * self.unused


@pytest.mark.parametrize("segments", [1, 2])
def test_learned_starts_move_to_the_clean_starts(tmp_path, segments):
    """Noisy observations of exact implicit-midpoint trajectories of the true H: with θ fixed at
    the truth, the learned starts (one Gauss–Newton-sized SGD step per epoch through the symplectic
    adjoint) move from the noisy observations to within a fraction of the noise of the clean
    states (least squares over the window's L+1 points: about σ/√(L+1)); the states that start no
    segment stay at their observations."""
    n, steps, h, sigma = 64, 8, 0.05, 0.05
    gen = torch.Generator().manual_seed(0)
    y0 = (torch.rand(n, 2, generator=gen, dtype=torch.float64) - 0.5) * 2.4
    midpoint = get_integrator("implicit_midpoint", tol=1e-13)
    clean = solve(double_well(), y0, h, steps, midpoint, "backprop").ys.detach().transpose(0, 1)
    observed = clean + sigma * torch.randn(clean.shape, generator=gen, dtype=torch.float64)
    model = TrueDoubleWell()
    loss = WindowLoss(midpoint, "symplectic_adjoint", h, segments=segments, init="learned")
    starts = LearnedStarts(observed, segments, LearnedStarts.default_lr(steps, segments))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1.0)
    options = TrainOptions(epochs=6, batch_size=16, window=steps, val_batch_size=64, patience=100,
                           min_delta=0.0, schedule="none", progress=False)  # fmt: skip
    trainer = Trainer(model, loss, optimizer, scheduler,
                      TrainData(observed, observed[:8].transpose(0, 1), torch.Generator()),
                      options, tmp_path, {"model_config": {}}, starts)  # fmt: skip
    at = list(range(0, steps, steps // segments))  # the segment starts
    before = (observed[:, at] - clean[:, at]).norm(dim=-1).mean()
    trainer.fit()
    after = (starts.states[:, at] - clean[:, at]).norm(dim=-1).mean()
    assert after < 0.6 * before, (float(before), float(after))
    others = [t for t in range(steps + 1) if t not in at]
    assert torch.equal(starts.states[:, others], observed[:, others])
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert torch.equal(payload["learned_states"], starts.states)


# ---- through the train stage: resume, and the default path -----------------------------------
def stage_overrides(path, run_dir, *extra):
    return [f"data_dir={path.parents[2]}", "system=double_well", f"run_dir={run_dir}",
            "train.batch_size=4", "train.window=4", "train.progress=false", "device=cpu",
            "train.early_stop.patience=100", *extra]  # fmt: skip


def test_resume_with_ema_and_learned_starts_is_exact(compose_config, tiny_dataset, tmp_path,
                                                     monkeypatch):  # fmt: skip
    """4 epochs straight = 2 epochs, Ctrl-C, and a resume to 4 (model, raw weights, average,
    learned starts and validation losses bit for bit)."""
    path = tiny_dataset(sizes={"train": (12, 6), "val": (4, 6), "test": (2, 9)})
    options = ("train.ema=0.8", "train.init=learned", "train.window=6", "train.segments=2")
    straight = train(compose_config("train", stage_overrides(path, tmp_path / "a", *options,
                                                             "train.epochs=4")))  # fmt: skip
    run_epoch = Trainer.run_epoch

    def interrupted_at_epoch_3(self):
        if self.state.epoch == 2:
            raise KeyboardInterrupt
        return run_epoch(self)

    monkeypatch.setattr(Trainer, "run_epoch", interrupted_at_epoch_3)
    with pytest.raises(KeyboardInterrupt, match="holds epoch 2"):
        train(compose_config("train", stage_overrides(path, tmp_path / "b", *options,
                                                      "train.epochs=4")))  # fmt: skip
    monkeypatch.setattr(Trainer, "run_epoch", run_epoch)
    resumed = train(compose_config("train", stage_overrides(
        path, tmp_path / "b", *options, "train.epochs=4", "train.resume=true")))  # fmt: skip
    a = torch.load(straight.last, weights_only=False)
    b = torch.load(resumed.last, weights_only=False)
    for key in ("model", "raw_model", "average"):
        assert a[key].keys() == b[key].keys()
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    assert torch.equal(a["learned_states"], b["learned_states"])
    assert [r["val_loss"] for r in a["state"]["history"]] == [
        r["val_loss"] for r in b["state"]["history"]
    ]
    # a run without the average refuses to resume one with it
    with pytest.raises(UserError, match=r"train.ema=0.8; resume with it"):
        train(compose_config("train", stage_overrides(
            path, tmp_path / "b", "train.init=learned", "train.window=6", "train.segments=2",
            "train.epochs=5", "train.resume=true")))  # fmt: skip


def test_options_off_train_the_bits_of_plain_adam_on_random_windows(compose_config, tmp_path):
    """With the options off (the weight average, on by default, too), the trainer is Adam on
    batches of random windows, bit for bit, as written out here."""
    cfg = compose_config("train", ["train.batch_size=4", "train.progress=false", "train.epochs=2",
                                   "train.window=3", "train.ema=null"])  # fmt: skip
    trainer = tiny_trainer(cfg, squared_output, tmp_path)
    assert trainer.average is None and trainer.starts is None
    trainer.fit()
    reference = tiny_trainer(cfg, squared_output, tmp_path / "ref")  # same data, model, generator
    model, data, generator = reference.model, reference.train, reference.generator
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr)
    for _ in range(2):
        order = torch.randperm(data.shape[0], generator=generator)
        for i in range(0, data.shape[0], 4):
            windows = random_windows(data, 3, order[i : i + 4], generator)
            optimizer.zero_grad()
            squared_output(model, windows).backward()
            optimizer.step()
    assert all(torch.equal(p, q) for p, q in zip(trainer.model.parameters(), model.parameters()))
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert not {"raw_model", "average", "learned_states"} & set(payload)


def test_val_window_sets_the_validation_windows_and_is_checked(compose_config, tiny_dataset,
                                                               tmp_path):  # fmt: skip
    path = tiny_dataset(sizes={"train": (8, 6), "val": (4, 6), "test": (2, 9)})
    cfg = compose_config("train", stage_overrides(path, tmp_path / "run", "train.val_window=6"))
    cfg = validated(cfg, "system", "noise", "train")
    data = torch.randn(8, 7, 2, dtype=torch.float64)
    trainer = build_trainer(cfg, tmp_path / "run", data, data[:4], 0.1, 1, path,
                            {"name": "double_well", "params": {}})  # fmt: skip
    assert trainer.val_windows.shape == (7, 4, 2)  # 6 steps, not train.window=4
    bad = compose_config("train", stage_overrides(path, tmp_path / "run", "train.val_window=5",
                                                  "train.segments=2"))  # fmt: skip
    with pytest.raises(UserError, match=r"train.val_window \(5\) must be a multiple"):
        validated(bad, "train")
