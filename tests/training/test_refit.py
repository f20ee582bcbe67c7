"""train.refit=last_layer (hnnsym.training.refit): H's last layer refit by least squares to the
training trajectories' implicit-midpoint steps, after training."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from conftest import make_model, tiny_attrs

from hnnsym.checkpoints import load_checkpoint
from hnnsym.config.build import model_from_checkpoint
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import Split, write_dataset
from hnnsym.errors import UserError
from hnnsym.evaluation.stage import evaluate
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import integrate
from hnnsym.physics.models import HNN, SeparableHNN
from hnnsym.physics.systems import get_system
from hnnsym.training import refit
from hnnsym.training.refit import refit_last_layer, refit_problem
from hnnsym.training.stage import build_trainer, train

H = 0.1


def trajectories(model, n: int, steps: int, seed: int = 0) -> torch.Tensor:
    """(n, steps+1, 2d) implicit-midpoint trajectories of ``model`` from random states, float64,
    the stage equations solved to 1e-14."""
    gen = torch.Generator().manual_seed(seed)
    y0 = 2 * torch.rand(n, 2 * model.dim, generator=gen, dtype=torch.float64) - 1
    integ = get_integrator("implicit_midpoint", tol=1e-14, max_iter=200)
    with torch.no_grad():
        return integrate(model, y0, H, steps, integ, "backprop").transpose(0, 1)


def models():
    return [
        make_model(HNN, 1, 0, 2.0),
        make_model(HNN, 2, 1, 2.0),
        make_model(lambda d, **kw: HNN(d, periodic=[0], **kw), 1, 6, 2.0),
        make_model(lambda d, **kw: SeparableHNN(d, kinetic="mass", **kw), 1, 2, 2.0),
        make_model(lambda d, **kw: SeparableHNN(d, kinetic="mlp", **kw), 2, 3, 2.0),
    ]


@pytest.mark.parametrize(
    "model", models(), ids=["hnn1", "hnn2", "hnn_angle", "separable_mass", "separable_mlp"]
)
def test_refit_recovers_the_head_that_made_the_trajectories(model):
    """Trajectories of the model itself, its head then perturbed: the refit gives back the field
    that made them (the residual of the summed steps drops by 1e-12 or more, and the refit
    model's own trajectories are the data to 1e-7), and the head itself in every direction the
    data resolve."""
    data = trajectories(model, 64, 12)
    true = model.head_coefficients().detach().clone()
    gen = torch.Generator().manual_seed(5)
    model.set_head_coefficients(true * (1 + 0.1 * torch.randn(true.shape, generator=gen,
                                                               dtype=torch.float64)))  # fmt: skip
    perturbed = trajectories(model, 64, 12)
    assert (perturbed - data).abs().max() > 1e-3
    result = refit_last_layer(model, data, H)
    assert result.residual_after < 1e-12 * result.residual_before
    assert result.rows == data.numel()
    # the directions below RCOND, left as perturbed, move the states by a little over 1e-8
    again = trajectories(model, 64, 12)
    torch.testing.assert_close(again, data, rtol=0, atol=1e-7)
    if result.rank == result.coefficients:
        torch.testing.assert_close(model.head_coefficients().detach(), true, rtol=1e-6, atol=1e-8)


def test_refit_is_the_least_squares_fit_block_by_block(monkeypatch):
    """On noisy trajectories, weighted per component, with the rows reduced in many blocks: the
    same coefficients and residuals as numpy's least squares on the whole system written out."""
    model = make_model(HNN, 1, 4, 2.0)
    data = trajectories(model, 40, 10)
    gen = torch.Generator().manual_seed(1)
    noisy = data + 0.01 * torch.randn(data.shape, generator=gen, dtype=torch.float64)
    weights = (1.0, 4.0)
    old = model.head_coefficients().detach().clone()
    # the system written out: rows (trajectory, k, component), the summed steps less their mean
    mid = 0.5 * (noisy[:, :-1] + noisy[:, 1:])
    x = mid.reshape(-1, 2).requires_grad_(True)
    feats = model.head_features(x)
    grads = torch.stack(
        [torch.autograd.grad(feats[:, j].sum(), x, retain_graph=True)[0] for j in
         range(feats.shape[1])], -1)  # fmt: skip # (M, 2, K)
    field = torch.stack([grads[:, 1], -grads[:, 0]], 1).reshape(40, 10, 2, -1).detach()
    summed = torch.cat([torch.zeros_like(field[:, :1]), H * field.cumsum(1)], 1)
    scale = torch.tensor(weights, dtype=torch.float64).sqrt()
    A = ((summed - summed.mean(1, keepdim=True)) * scale[:, None]).reshape(-1, field.shape[-1])
    b = ((noisy - noisy.mean(1, keepdim=True)) * scale).reshape(-1)
    expected = old.numpy() + np.linalg.lstsq(A.numpy(), (b - A @ old).numpy(), rcond=None)[0]
    monkeypatch.setattr(refit, "ROWS_PER_BLOCK", 50)  # 2 trajectories (44 rows) per block
    monkeypatch.setattr(refit, "RCOND", 1e-14)  # every direction, as numpy's lstsq here
    result = refit_last_layer(model, noisy, H, weights)
    assert result.rank == result.coefficients == 16
    np.testing.assert_allclose(model.head_coefficients().detach().numpy(), expected, rtol=1e-7)
    new = model.head_coefficients().detach()
    assert result.residual_before == pytest.approx(float((A @ old - b).square().mean()), rel=1e-9)
    assert result.residual_after == pytest.approx(float((A @ new - b).square().mean()), rel=1e-9)
    assert result.residual_after < result.residual_before


def test_a_fit_that_is_no_mass_leaves_the_model_unchanged():
    model = SeparableHNN(1, kinetic="mass").double()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    c = model.head_coefficients().detach().clone()
    c[0] = -0.5
    with pytest.raises(ValueError, match="not a positive mass"):
        model.set_head_coefficients(c)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(TypeError, match="float64"):
        refit_last_layer(SeparableHNN(1, kinetic="mass"), torch.zeros(2, 3, 2), H)


def test_refit_problem_names_what_it_needs():
    hnn, midpoint = HNN(1), get_integrator("implicit_midpoint")
    assert refit_problem(hnn, midpoint, 1, 2) is None
    assert "integrator=implicit_midpoint, not gauss_legendre4" in refit_problem(
        hnn, get_integrator("gauss_legendre4"), 1, 2
    )
    assert "train.substeps=1, not 2" in refit_problem(hnn, midpoint, 2, 2)
    assert "positions alone" in refit_problem(hnn, midpoint, 1, 1)
    from hnnsym.physics.dissipative import DissipativeHNN

    assert "model=hnn or separable_hnn" in refit_problem(DissipativeHNN(1), midpoint, 1, 2)


# ---- through the train stage ------------------------------------------------------------------
def double_well_file(tmp_path, noise: float = 0.01):
    """data/double_well/low/seed0.h5 of implicit-midpoint double-well trajectories at h = 0.1
    (the stage's obs_dt), with noise."""
    rng = np.random.default_rng(0)
    splits = {}
    for name, (n, steps) in {"train": (48, 8), "val": (16, 8), "test": (4, 12)}.items():
        y0 = torch.from_numpy(rng.uniform(-1.5, 1.5, (n, 2)))
        integ = get_integrator("implicit_midpoint", tol=1e-14, max_iter=200)
        with torch.no_grad():
            clean = (
                integrate(get_system("double_well"), y0, H, steps, integ, "backprop")
                .transpose(0, 1)
                .numpy()
            )
        observed = clean + noise * rng.standard_normal(clean.shape)
        splits[name] = Split(observed, clean, H * np.arange(steps + 1))
    path = tmp_path / "data" / "double_well" / "low" / "seed0.h5"
    write_dataset(path, splits, tiny_attrs("double_well", 1))
    return path


SEPARABLE = ("model=separable_hnn", "model.kinetic=mass", "model.output_gain=4")


def overrides(path, run_dir, *extra, model=SEPARABLE):
    return [f"data_dir={path.parents[2]}", "system=double_well", f"run_dir={run_dir}",
            "train.batch_size=8", "train.window=4", "train.progress=false", "device=cpu",
            "train.epochs=6", "train.refit=last_layer", *model, *extra]  # fmt: skip


def test_train_refits_both_checkpoints_once_in_float64(compose_config, tmp_path, capsys):
    path = double_well_file(tmp_path)
    result = train(compose_config("train", overrides(path, tmp_path / "run")))
    assert "refit best.pt: the last layer by least squares" in capsys.readouterr().out
    payloads = {w: load_checkpoint(getattr(result, w)) for w in ("best", "last")}
    for payload in payloads.values():
        entry = payload["refit"]
        assert entry["method"] == "last_layer" and "skipped" not in entry
        assert entry["residual_after"] <= entry["residual_before"]
        assert np.isfinite(entry["val_loss_after"])
        assert {t.dtype for t in payload["model"].values()} == {torch.float64}
        model = model_from_checkpoint(payload)  # rebuilt in the dtype it was saved in
        assert next(model.parameters()).dtype == torch.float64
        assert all(torch.equal(model.state_dict()[k], v) for k, v in payload["model"].items())
    raw = payloads["last"]["raw_model"]  # what resuming continues from: as trained
    assert {t.dtype for t in raw.values()} == {torch.float32}
    # the refit moved the head, not the features
    trained = payloads["last"]["average"]
    head = "potential_net.6.weight"
    assert not torch.allclose(payloads["last"]["model"][head], trained[f"module.{head}"].double())
    first = "potential_net.0.weight"
    assert torch.equal(payloads["last"]["model"][first], trained[f"module.{first}"].double())
    # evaluate reads the refit model, in float64, and says it was refit
    metrics = evaluate(compose_config("evaluate", overrides(
        path, tmp_path / "run", "eval.figures=false", "eval.checkpoint=last")))  # fmt: skip
    assert metrics["checkpoint"]["refit"] == payloads["last"]["refit"]
    assert np.isfinite(metrics["h_l1"])
    # a finished run run again is not refit twice
    before = result.last.read_bytes()
    train(compose_config("train", overrides(path, tmp_path / "run", "train.resume=auto")))
    assert result.last.read_bytes() == before


def test_a_refit_that_fails_keeps_the_trained_model_with_a_note(
    compose_config, tmp_path, capsys, monkeypatch
):
    def no_mass(model, trajectories, h, weights=None):
        raise ValueError("the fitted 1/m is -1, not a positive mass")

    monkeypatch.setattr("hnnsym.training.refit.refit_last_layer", no_mass)
    path = double_well_file(tmp_path)
    result = train(compose_config("train", overrides(path, tmp_path / "run")))
    assert "left last.pt's model as trained" in capsys.readouterr().err
    payload = load_checkpoint(result.last)
    assert payload["refit"]["skipped"] == "the fitted 1/m is -1, not a positive mass"
    average = payload["average"]
    assert all(torch.equal(v, average[f"module.{k}"]) for k, v in payload["model"].items())


def test_the_refit_validates_eagerly_where_the_run_compiles(compose_config, tmp_path):
    """A compiled run's refit model (float64) is validated by an eager copy of the run's loss:
    the compiled one would first compile float64 programs for it."""
    path = double_well_file(tmp_path)
    cfg = compose_config("train", overrides(path, tmp_path / "run", "integrator.compile=true"))
    cfg = validated(cfg, "system", "noise", "train")
    data = torch.randn(4, 9, 2)
    trainer = build_trainer(cfg, tmp_path / "run", data, data, H, 1, path,
                            {"name": "double_well", "params": {}}, {})  # fmt: skip
    assert trainer.loss.integrator.compile
    assert not trainer.refit.loss.integrator.compile
    assert trainer.refit.loss.integrator.tableau == trainer.loss.integrator.tableau
    assert trainer.refit.h == H


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["integrator=gauss_legendre4"], "needs integrator=implicit_midpoint, not gauss_legendre4"),
        (["train.substeps=2"], "needs train.substeps=1, not 2"),
        (["model=node"], "needs a model H = c·ψ(y) + b"),
        (["train.refit=everything"], "train.refit must be last_layer"),
    ],
)
def test_what_the_refit_cannot_serve_is_refused_before_training(
    compose_config, tmp_path, extra, message
):
    path = double_well_file(tmp_path)
    model = ("model=node",) if "model=node" in extra else SEPARABLE
    extra = [e for e in extra if e != "model=node"]
    cfg = compose_config("train", overrides(path, tmp_path / "run", *extra, model=model))
    with pytest.raises(UserError, match=re.escape(message)):
        train(cfg)
    assert not (tmp_path / "run" / "checkpoints" / "last.pt").exists()
