"""Options of `train` for noisy data: the weight average (train.ema, ema_start), the
learned initial states (train.init=learned) and multiple shooting with learned segment starts
joined by a continuity penalty (train.continuity)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import squared_output, tiny_trainer
from scipy.optimize import least_squares
from torch import nn

from hnnsym.config.schemas import EarlyStopSchema, validated
from hnnsym.data.windows import random_windows, strided_windows
from hnnsym.errors import UserError
from hnnsym.evaluation.initial_states import fit_initial_states
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import solve
from hnnsym.physics.systems import double_well
from hnnsym.training.losses import LearnedStarts, WindowLoss
from hnnsym.training.stage import build_trainer, train
from hnnsym.training.trainer import TrainData, Trainer, TrainOptions, WeightAverage


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


H_STEP, SIGMA = 0.05, 0.05
MIDPOINT = get_integrator("implicit_midpoint", tol=1e-13)


def clean_and_noisy(n: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n exact implicit-midpoint trajectories (n, steps+1, 2) of the true double well (h = 0.05)
    from random starts, and the same plus Gaussian noise of std SIGMA (seeded)."""
    gen = torch.Generator().manual_seed(0)
    y0 = (torch.rand(n, 2, generator=gen, dtype=torch.float64) - 0.5) * 2.4
    clean = solve(double_well(), y0, H_STEP, steps, MIDPOINT, "backprop").ys.detach()
    clean = clean.transpose(0, 1)
    return clean, clean + SIGMA * torch.randn(clean.shape, generator=gen, dtype=torch.float64)


def fit_true_starts(observed, window, segments, tmp_path, continuity=0.0, epochs=6):
    """θ fixed at the truth (SGD with lr 0): only the learned starts move, one step per epoch on
    windows of ``window`` steps in ``segments`` segments. Returns (starts, trainer)."""
    model = TrueDoubleWell()
    loss = WindowLoss(MIDPOINT, "symplectic_adjoint", H_STEP, segments=segments, init="learned",
                      continuity=continuity)  # fmt: skip
    lr = LearnedStarts.default_lr(window, segments, continuity)
    starts = LearnedStarts(observed, segments, lr)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: 1.0)
    options = TrainOptions(epochs=epochs, batch_size=16, window=window, val_batch_size=64,
                           early_stop=EarlyStopSchema(100, 0.0), schedule="none", ema=None,
                           progress=False)  # fmt: skip
    trainer = Trainer(model, loss, optimizer, scheduler,
                      TrainData(observed, observed[:8, : window + 1].transpose(0, 1),
                                torch.Generator()),
                      options, tmp_path, {"model_config": {}}, starts)  # fmt: skip
    trainer.fit()
    return starts, trainer


@pytest.mark.parametrize("segments", [1, 2])
def test_learned_starts_move_to_the_clean_starts(tmp_path, segments):
    """Noisy observations of exact implicit-midpoint trajectories of the true H: with θ fixed at
    the truth, the learned starts (one Gauss–Newton-sized SGD step per epoch through the symplectic
    adjoint) move from the noisy observations to within a fraction of the noise of the clean
    states (least squares over the window's L+1 points: about σ/√(L+1)); the states that start no
    segment stay at their observations."""
    steps = 8
    clean, observed = clean_and_noisy(64, steps)
    at = list(range(0, steps, steps // segments))  # the segment starts
    before = (observed[:, at] - clean[:, at]).norm(dim=-1).mean()
    starts, _ = fit_true_starts(observed, steps, segments, tmp_path)
    after = (starts.states[:, at] - clean[:, at]).norm(dim=-1).mean()
    assert after < 0.6 * before, (float(before), float(after))
    others = [t for t in range(steps + 1) if t not in at]
    assert torch.equal(starts.states[:, others], observed[:, others])
    payload = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert torch.equal(payload["learned_states"], starts.states)


# ---- multiple shooting: learned segment starts joined by the continuity penalty ---------------
def test_continuity_penalty_is_the_sum_of_the_junction_defects_and_zero_on_clean_data():
    """The loss with continuity w is the loss without it plus w Σ_{b,k} ||Φ_L(z_k) − z_{k+1}||²
    / (S·B), the defects computed here by solving each segment on its own; started from the clean
    states of exact trajectories of the true H, the defects vanish (to the solver's tolerance)."""
    steps, segments, length = 12, 3, 4
    clean, observed = clean_and_noisy(5, steps)
    windows = observed.transpose(0, 1)  # (τ+1, B, 2): whole trajectories
    batch = windows.shape[1]
    z = torch.cat([observed[:, k * length] for k in range(segments)])  # segment-major (S·B, 2)
    model = TrueDoubleWell()

    def loss(w, starts):
        return WindowLoss(MIDPOINT, "backprop", H_STEP, segments=segments, init="learned",
                          continuity=w).evaluate(model, windows, y0=starts)  # fmt: skip

    ends = solve(double_well(), z, H_STEP, length, MIDPOINT, "backprop").ys[-1]
    defects = ((ends[:-batch] - z[batch:]) ** 2).sum(-1)  # (S−1)·B junctions
    plain, tied = loss(0.0, z), loss(2.5, z)
    expected = plain.value + 2.5 * defects.sum() / (segments * batch)
    torch.testing.assert_close(tied.value, expected, rtol=1e-12, atol=0)
    assert tied.value > plain.value * 1.01  # the noisy starts do not join
    torch.testing.assert_close(tied.defect, defects.sqrt().mean(), rtol=1e-12, atol=0)
    assert plain.defect is not None  # reported without the penalty too
    z_clean = torch.cat([clean[:, k * length] for k in range(segments)])
    on_clean = loss(2.5, z_clean)
    assert float(on_clean.defect) < 1e-11
    assert float((on_clean.value - loss(0.0, z_clean).value).detach()) < 1e-20


def test_multiple_shooting_with_continuity_denoises_the_starts_and_joins_the_segments(tmp_path):
    """Whole noisy trajectories of the true H (16 steps) in 4 segments with learned starts: the
    continuity penalty (w = 4) brings the starts closer to the clean states than the segments
    fitted apart (w = 0; each start then fits its own 5 observations) and cuts the defect at the
    junctions, which the epochs' mean in metrics.csv shows falling."""
    steps, segments = 16, 4
    clean, observed = clean_and_noisy(64, steps)
    at = list(range(0, steps, steps // segments))
    before = (observed[:, at] - clean[:, at]).norm(dim=-1).mean()
    result = {}
    for w in (0.0, 4.0):
        starts, trainer = fit_true_starts(observed, steps, segments, tmp_path / str(w), w)
        result[w] = (
            (starts.states[:, at] - clean[:, at]).norm(dim=-1).mean(),
            [row["continuity_defect"] for row in trainer.state.history],
        )
    (apart, defect_apart), (joined, defect_joined) = result[0.0], result[4.0]
    assert joined < 0.45 * before, (float(before), float(joined))
    assert joined < 0.9 * apart, (float(apart), float(joined))
    assert defect_joined[-1] < 0.25 * defect_joined[0], defect_joined
    assert defect_joined[-1] < 0.6 * defect_apart[-1], (defect_apart, defect_joined)
    csv = (tmp_path / "4.0" / "metrics.csv").read_text().splitlines()[0]
    assert "continuity_defect" in csv.split(",")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.continuity=-1"], r"train.continuity must be a finite number >= 0, got -1"),
        (["train.continuity=inf"], r"train.continuity must be a finite number >= 0"),
        (["train.continuity=2", "train.window=4", "train.segments=2"],
         r"train.continuity=2.0 joins segments that start from learned states: it needs "
         r"train.init=learned"),
        (["train.continuity=2", "train.init=learned"],
         r"train.continuity=2.0 joins segments: it needs train.segments > 1"),
    ],
)  # fmt: skip
def test_bad_continuity_is_a_one_line_user_error(compose_config, overrides, message):
    cfg = compose_config("train", overrides)
    with pytest.raises(UserError, match=message) as err:
        validated(cfg, "train")
    assert "\n" not in str(err.value)


# ---- fitted starts at evaluation ----------------------------------------------------------------
def test_fitted_initial_states_are_the_least_squares_starts():
    """fit_initial_states (Levenberg–Marquardt, central-difference Jacobians through the rollout)
    gives the least-squares start of each trajectory under the true H, as scipy's least_squares
    finds it through the same integrator, and is closer to the clean starts than y_0."""
    clean, observed = clean_and_noisy(6, 8)
    windows = observed.transpose(0, 1)
    z, rms = fit_initial_states(double_well(), windows, H_STEP, MIDPOINT, iterations=6)

    def residual(b):
        def r(start):
            one = torch.as_tensor(start, dtype=torch.float64)[None]
            ys = solve(double_well(), one, H_STEP, 8, MIDPOINT, "backprop").ys.detach()
            return (ys[:, 0] - windows[:, b]).flatten().numpy()

        return r

    for b in range(2):
        best = least_squares(residual(b), windows[0, b].numpy(), xtol=1e-14, ftol=1e-14)
        np.testing.assert_allclose(z[b].numpy(), best.x, rtol=0, atol=1e-9)
        assert rms[b] == pytest.approx(np.sqrt(2 * best.cost / (9 * 2)), rel=1e-6)
    start = clean[:, 0]
    assert (z - start).norm(dim=-1).mean() < 0.6 * (windows[0] - start).norm(dim=-1).mean()


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
    options = (
        "train.ema=0.8",
        "train.init=learned",
        "train.window=6",
        "train.segments=2",
        "train.continuity=1",
    )
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
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.train.lr, fused=True)  # the default
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
    strided = compose_config("train", stage_overrides(path, tmp_path / "run", "train.val_window=3",
                                                      "train.val_stride=2"))  # fmt: skip
    strided = validated(strided, "system", "noise", "train")
    trainer = build_trainer(strided, tmp_path / "run", data, data[:4], 0.1, 1, path,
                            {"name": "double_well", "params": {}})  # fmt: skip
    # starts 0, 2 of each of the 4 validation trajectories (6 steps): the same on any seed
    assert torch.equal(trainer.val_windows, strided_windows(data[:4], 3, 2))
    assert trainer.val_windows.shape == (4, 8, 2)
    bad = compose_config("train", stage_overrides(path, tmp_path / "run", "train.val_window=5",
                                                  "train.segments=2"))  # fmt: skip
    with pytest.raises(UserError, match=r"train.val_window \(5\) must be a multiple"):
        validated(bad, "train")
