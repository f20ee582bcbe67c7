"""The baselines of Table 1: their losses against closed forms, Tao's integrator against an
independent solver, the NODE model, the configs, and (slow) each baseline through the CLIs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from hnnsym import integrate
from hnnsym.config import CONF_DIR
from hnnsym.config.build import build_integrator, build_model
from hnnsym.errors import IncompatibleError, UserError
from hnnsym.evaluation.metrics import energies, grid_errors, rollout_metrics
from hnnsym.evaluation.rollout import rollout
from hnnsym.ode.dynamics import has_hamiltonian, vector_field
from hnnsym.ode.integrators import TaoSplitting, get_integrator
from hnnsym.physics.models import NODE
from hnnsym.physics.systems import get_system
from hnnsym.reporting.table1 import (
    PAPER,
    build_table1,
    load_method_runs,
    noise_sweep,
    setting_labels,
    write_noise_sweep,
    write_table1,
)
from hnnsym.training.losses import (
    DerivativeLoss,
    FiniteDifferenceLoss,
    LossContext,
    WindowLoss,
    build_run_loss,
)

REPO = Path(__file__).resolve().parents[2]
CONF = CONF_DIR
F64 = torch.float64


def states(system, n: int, seed: int = 0) -> torch.Tensor:
    return system.sample(n, torch.Generator().manual_seed(seed))


# ---- SHNN: finite differences at the scheme's point ------------------------------------------


def test_shnn_midpoint_loss_vanishes_on_implicit_midpoint_data_of_the_true_H():
    system = get_system("coupled_oscillator")
    y0 = states(system, 16)
    h = 0.05
    data = integrate(system, y0, h, 6, get_integrator("implicit_midpoint", tol=1e-15), "backprop")
    loss = FiniteDifferenceLoss(h, "midpoint")(system, data)
    assert float(loss.detach()) < 1e-20
    # and the symplectic Euler variant on symplectic Euler data (q' = q + h H_p(q', p), ...)
    data = integrate(system, y0, h, 6, get_integrator("symplectic_euler", tol=1e-15), "backprop")
    assert float(FiniteDifferenceLoss(h, "euler")(system, data).detach()) < 1e-20
    assert float(FiniteDifferenceLoss(h, "midpoint")(system, data).detach()) > 1e-6  # wrong point


def test_shnn_midpoint_loss_on_the_exact_rotation_flow_equals_its_closed_form():
    """H = (q² + p²)/2: the exact flow is y_{t+1} = R y_t, R = cos h I + sin h A (A = [[0, 1],
    [-1, 0]]), and (R − I)/h − A(R + I)/2 = α I + β A with α = (cos h − 1)/h + sin h / 2,
    β = sin h / h − (1 + cos h)/2; since y·Ay = 0 the loss is (α² + β²) Σ_t |y_t|²."""
    system = get_system("mass_spring")
    h, tau = 0.1, 6
    c, s = math.cos(h), math.sin(h)
    R = torch.tensor([[c, s], [-s, c]], dtype=F64)
    y = [states(system, 8)]
    for _ in range(tau):
        y.append(y[-1] @ R.T)
    data = torch.stack(y)
    alpha, beta = (c - 1) / h + s / 2, s / h - (1 + c) / 2
    expected = (alpha**2 + beta**2) * (data[:-1] ** 2).sum(dim=(0, 2)).mean()
    got = FiniteDifferenceLoss(h, "midpoint")(system, data)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    assert abs(beta) == pytest.approx(h**2 / 12, rel=0.01)  # the residual is O(h²)


def test_shnn_residual_on_exact_flow_data_is_second_order_and_euler_first_order():
    system = get_system("double_well")
    y0 = states(system, 16)
    with torch.no_grad():
        ref = integrate(
            system, y0, 0.0005, 120, get_integrator("gauss_legendre6", tol=1e-15), "backprop"
        )
    rms = {}
    for every in (20, 10, 5):  # h = 0.01, 0.005, 0.0025
        data = ref[::every][:7]
        h = 0.0005 * every
        rms[every] = {p: float(FiniteDifferenceLoss(h, p)(system, data).detach()) ** 0.5
                      for p in ("midpoint", "euler")}  # fmt: skip
    for a, b in ((20, 10), (10, 5)):
        assert math.log2(rms[a]["midpoint"] / rms[b]["midpoint"]) == pytest.approx(2, abs=0.1)
        assert math.log2(rms[a]["euler"] / rms[b]["euler"]) == pytest.approx(1, abs=0.1)


# ---- HNN: central differences ------------------------------------------------------------------


def test_derivative_loss_on_the_exact_rotation_flow_equals_its_closed_form():
    """(R − R⁻¹)/2h = (sin h / h) A exactly, so the residual at y_t is (sin h/h − 1) A y_t."""
    system = get_system("mass_spring")
    h, tau = 0.1, 6
    c, s = math.cos(h), math.sin(h)
    R = torch.tensor([[c, s], [-s, c]], dtype=F64)
    y = [states(system, 8, seed=1)]
    for _ in range(tau):
        y.append(y[-1] @ R.T)
    data = torch.stack(y)
    expected = (s / h - 1) ** 2 * (data[1:-1] ** 2).sum(dim=(0, 2)).mean()
    torch.testing.assert_close(DerivativeLoss(h)(system, data), expected, rtol=1e-12, atol=0)


def test_losses_from_the_method_configs_and_their_errors():
    integ = get_integrator("implicit_midpoint")
    ctx = LossContext(integ, "backprop", 0.01)

    def method(name: str, **loss) -> OmegaConf:
        node = OmegaConf.load(CONF / "method" / f"{name}.yaml")  # package method: the node itself
        node.loss.merge_with(loss)
        return node

    assert isinstance(build_run_loss(method("hnn"), ctx), WindowLoss)
    assert build_run_loss(method("shnn", point="euler"), ctx) == FiniteDifferenceLoss(0.01, "euler")
    assert build_run_loss(method("hnn_derivative"), ctx) == DerivativeLoss(0.01)
    bad = OmegaConf.create(
        {"name": "x", "loss": {"_target_": "hnnsym.training.losses.L1", "_partial_": True}}
    )
    with pytest.raises(UserError, match="method.loss: .*L1"):
        build_run_loss(bad, ctx)
    with pytest.raises(UserError, match="train.substeps=2 applies to losses that integrate"):
        build_run_loss(method("hnn_derivative"), LossContext(integ, "backprop", 0.01, substeps=2))
    with pytest.raises(UserError, match="init must be one of"):
        build_run_loss(method("hnn"), LossContext(integ, "backprop", 0.01, init="denoised"))


# ---- the rollout loss with a smoothed initial state --------------------------------------------


def test_smoothed_start_is_the_window_mean_under_a_zero_field():
    """H = 0: Φ_t(z) = z, so one Gauss–Newton step gives z = mean_t y_t exactly, and the loss is
    Σ_{t≥1} |y_t − mean|²."""

    def zero(y):
        return 0.0 * y.sum(-1)

    gen = torch.Generator().manual_seed(3)
    data = torch.randn(7, 5, 2, generator=gen, dtype=F64)
    loss = WindowLoss(get_integrator("implicit_midpoint"), "backprop", 0.01, init="smoothed")
    z = loss.smoothed_start(zero, data)
    torch.testing.assert_close(z, data.mean(0), rtol=1e-14, atol=1e-15)
    expected = ((data[1:] - data.mean(0)) ** 2).sum(dim=(0, 2)).mean()
    torch.testing.assert_close(loss(zero, data), expected, rtol=1e-13, atol=0)


def test_smoothed_start_iterates_to_a_window_matched_on_average():
    """For H = (q² + p²)/2 the implicit midpoint map is the Cayley matrix C. The iteration
    z ← z + mean_t (y_t − C^t z) converges to z with mean_t C^t z = mean_t y_t; the least-squares
    start mean_t C^{−t} y_t (C is orthogonal) differs from it by O(τh) of the noise."""
    system = get_system("mass_spring")
    h, tau = 0.05, 6
    A = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=F64)
    eye = torch.eye(2, dtype=F64)
    C = torch.linalg.solve(eye - h / 2 * A, eye + h / 2 * A)
    powers = [torch.linalg.matrix_power(C, t) for t in range(tau + 1)]
    gen = torch.Generator().manual_seed(4)
    clean = integrate(
        system,
        states(system, 6),
        h,
        tau,
        get_integrator("implicit_midpoint", tol=1e-15),
        "backprop",
    )
    data = clean + 0.05 * torch.randn(clean.shape, generator=gen, dtype=F64)
    z_fixed = torch.linalg.solve(torch.stack(powers).mean(0), data.mean(0).T).T
    z_lsq = torch.stack([data[t] @ torch.linalg.inv(powers[t]).T for t in range(tau + 1)]).mean(0)
    integ = get_integrator("implicit_midpoint", tol=1e-15)
    many = WindowLoss(integ, "backprop", h, init="smoothed", init_iterations=40)
    torch.testing.assert_close(many.smoothed_start(system, data), z_fixed, rtol=0, atol=1e-12)
    one = WindowLoss(integ, "backprop", h, init="smoothed").smoothed_start(system, data)
    noise = (data[0] - clean[0]).norm(dim=-1)
    # one step contracts the distance by |I − mean_t C^t| ≈ τh/2 = 0.15
    assert ((one - z_fixed).norm(dim=-1) < 0.25 * noise).all()
    assert ((z_fixed - z_lsq).norm(dim=-1) < 0.2 * noise).all()
    # and the start is much closer to the clean one than the observation is (7 points averaged)
    assert (one - clean[0]).norm(dim=-1).mean() < 0.6 * noise.mean()


# ---- Tao's integrator ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["coupled_oscillator", "henon_heiles"])
def test_tao_is_second_order_against_gauss_legendre6(name):
    system = get_system(name)
    y0 = states(system, 8)
    with torch.no_grad():
        ref = integrate(
            system, y0, 0.0025, 200, get_integrator("gauss_legendre6", tol=1e-15), "backprop"
        )[-1]
        errs = []
        for h in (0.02, 0.01, 0.005):
            traj = integrate(system, y0, h, round(0.5 / h), TaoSplitting(omega=10.0), "backprop")
            errs.append(float((traj[-1] - ref).abs().max()))
    orders = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert orders == pytest.approx([2.0, 2.0], abs=0.1), errs


def test_tao_conserves_energy_on_a_nonseparable_system_over_long_times():
    system = get_system("coupled_oscillator")
    with torch.no_grad():
        traj = integrate(system, states(system, 16), 0.01, 2000, "tao", "backprop")
    e = energies(system, traj)
    drift = (e - e[0]).abs()
    first, last = drift[:500].max(), drift[-500:].max()
    assert first < 1e-3  # measured 1.7e-4 (implicit midpoint: exact for this quadratic H)
    assert last < 1.5 * first  # bounded, not secular


def test_tao_binding_is_the_exact_flow_of_the_binding_hamiltonian():
    """φ_C^δ against Gauss–Legendre 6 on ω(|q − x|² + |p − y|²)/2 with pairs (q, p), (x, y)."""
    omega, delta, d = 3.0, 0.2, 2
    tao = TaoSplitting(omega)
    z = torch.randn(5, 4 * d, generator=torch.Generator().manual_seed(5), dtype=F64)  # q p x y

    def H_C(w):  # canonical layout [Q, P] = [q, x, p, y]
        q, x, p, y = w.split(d, dim=-1)
        return 0.5 * omega * (((q - x) ** 2).sum(-1) + ((p - y) ** 2).sum(-1))

    q, p, x, y = z.split(d, dim=-1)
    gl6 = get_integrator("gauss_legendre6", tol=1e-15)
    ref = integrate(H_C, torch.cat([q, x, p, y], -1), delta / 50, 50, gl6, "backprop")[-1]
    rq, rx, rp, ry = ref.split(d, dim=-1)
    torch.testing.assert_close(tao.bind(z, delta, d), torch.cat([rq, rp, rx, ry], -1),
                               rtol=0, atol=1e-12)  # fmt: skip


def test_tao_registry_config_and_refusals():
    assert get_integrator("tao", omega=5).omega == 5.0
    node = OmegaConf.to_container(OmegaConf.load(CONF / "integrator" / "tao.yaml"))
    assert build_integrator(node) == TaoSplitting(node["omega"])
    with pytest.raises(ValueError, match="apply to tao only"):
        get_integrator("implicit_midpoint", omega=3.0)
    with pytest.raises(ValueError, match="omega must be a finite number > 0"):
        TaoSplitting(0.0)
    system = get_system("double_well")
    y0 = states(system, 2)
    with pytest.raises(
        IncompatibleError,
        match="needs an integrator with Runge–Kutta stage .*use gradient=backprop",
    ):
        integrate(system, y0, 0.01, 3, "tao", "symplectic_adjoint")
    with pytest.raises(IncompatibleError, match="vector field without one"):
        integrate(NODE(1).double(), y0, 0.01, 3, "tao", "backprop")


def test_tao_backprop_gradient_matches_finite_differences():
    torch.manual_seed(0)
    model = build_model(OmegaConf.load(CONF / "model" / "hnn.yaml"), 1).double()
    y0 = states(get_system("double_well"), 4)
    loss = WindowLoss(TaoSplitting(10.0), "backprop", 0.05)
    target = integrate(get_system("double_well"), y0, 0.05, 4, "gauss_legendre6", "backprop")
    value = loss(model, target)
    (grad,) = torch.autograd.grad(value, [model.net[0].bias])
    eps = 1e-6
    with torch.no_grad():
        model.net[0].bias[0] += eps
        up = loss(model, target)
        model.net[0].bias[0] -= 2 * eps
        down = loss(model, target)
    assert float(grad[0]) == pytest.approx(float(up - down) / (2 * eps), rel=1e-6)


# ---- NODE ---------------------------------------------------------------------------------------


def test_node_plugs_into_integrate_and_every_gradient_method():
    torch.manual_seed(0)
    node = build_model({"_target_": "hnnsym.physics.models.NODE", "hidden": [8, 8]}, 1).double()
    assert isinstance(node, NODE) and not has_hamiltonian(node)
    y = torch.randn(6, 2, dtype=F64)
    torch.testing.assert_close(vector_field(node, y), node(y))
    assert not vector_field(node, y, create_graph=False).requires_grad
    target = torch.randn(5, 6, 2, dtype=F64)
    grads = {}
    for gradient in ("backprop", "symplectic_adjoint", "checkpoint"):
        midpoint = get_integrator("implicit_midpoint", tol=1e-14)
        traj = integrate(node, y, 0.1, 4, midpoint, gradient)
        loss = ((traj - target) ** 2).sum()
        grads[gradient] = torch.autograd.grad(loss, list(node.parameters()))
    for gradient in ("symplectic_adjoint", "checkpoint"):
        for a, b in zip(grads["backprop"], grads[gradient]):
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-12)


def test_node_trains_and_has_no_hamiltonian_metrics():
    system = get_system("mass_spring")
    torch.manual_seed(0)
    node = NODE(1, hidden=(16,)).double()
    with torch.no_grad():
        data = integrate(system, states(system, 32), 0.1, 6, "gauss_legendre6", "backprop")
    loss = WindowLoss(get_integrator("rk4"), "backprop", 0.1)
    opt = torch.optim.Adam(node.parameters(), lr=0.02)
    first = loss(node, data).item()
    for _ in range(30):
        opt.zero_grad()
        loss(node, data).backward()
        opt.step()
    assert loss(node, data).item() < 0.2 * first
    node.requires_grad_(False)
    m = grid_errors(system, node, system.grid(20))
    assert all(math.isnan(m[k]) for k in ("h_l1", "h_l1_raw", "h_l1_rel", "h_offset"))
    assert math.isfinite(m["vf_l1"]) and 0 < m["vf_rel"] < 1
    with pytest.raises(ValueError, match="no Hamiltonian"):
        energies(node, data[0])
    y0 = data[0, :8]
    with torch.no_grad():
        truth = integrate(system, y0, 0.1, 20, "gauss_legendre6", "backprop")
    result = rollout(node, y0, 0.1, 20, "rk4")
    r = rollout_metrics(result, truth, 0.1 * torch.arange(21, dtype=F64), system, node)
    assert math.isnan(r.summary["energy_drift_pred_max"])
    assert math.isfinite(r.summary["traj_mse"]) and math.isfinite(
        r.summary["energy_drift_true_max"]
    )


# ---- configs ------------------------------------------------------------------------------------


def test_baseline_method_configs_build_the_papers_mlp(compose_config):
    for name, loss, arch in (("shnn", "FiniteDifferenceLoss", "HNN"),
                             ("hnn_derivative", "DerivativeLoss", "HNN"),
                             ("nssnn", "WindowLoss", "HNN"), ("node", "WindowLoss", "NODE")):  # fmt: skip
        cfg = compose_config("train", [f"method={name}"])
        assert cfg.method.name == name and cfg.method.loss._target_.endswith(f".{loss}")
        model = build_model(cfg.model, 2)
        assert type(model).__name__ == arch
        widths = [m.out_features for m in model.net if isinstance(m, torch.nn.Linear)]
        assert widths == [16, 32, 16, 1 if arch == "HNN" else 4]


def test_experiments_select_each_method(compose_config):
    expected = {
        "table1": ("hnn", "implicit_midpoint", "symplectic_adjoint", "observed"),
        "table1_shnn": ("shnn", "implicit_midpoint", "symplectic_adjoint", "observed"),
        "table1_hnn_derivative": (
            "hnn_derivative",
            "implicit_midpoint",
            "symplectic_adjoint",
            "observed",
        ),
        "table1_nssnn": ("nssnn", "tao", "backprop", "observed"),
        "table1_node": ("node", "rk4", "backprop", "observed"),
        "table1_smoothed": ("hnn", "implicit_midpoint", "symplectic_adjoint", "smoothed"),
        "table1_ema": ("hnn", "implicit_midpoint", "symplectic_adjoint", "observed"),
        "table1_paper_time": ("hnn", "implicit_midpoint", "symplectic_adjoint", "observed"),
    }
    assert compose_config("train", ["experiment=table1_ema"]).train.ema == 0.99
    assert compose_config("train", ["experiment=table1"]).train.ema is None
    # the paper's training time: the plain mean of the second half of a cosine run, no early stop
    swa = compose_config("train", ["experiment=table1_paper_time"])
    assert (swa.train.ema, swa.train.ema_start, swa.train.epochs) == (1.0, 100, 200)
    assert swa.train.schedule == "cosine" and swa.train.early_stop.patience >= swa.train.epochs
    assert list(swa.model.hidden) == [32, 32, 32] and swa.train.window == 6
    # the weight average is the default; the papers' settings pin it off
    assert compose_config("train", []).train.ema == 0.99
    for overrides in (["method=chnn"], ["method=clnn"], ["experiment=ddlm_pendulum"]):
        assert compose_config("train", overrides).train.ema is None, overrides
    dirs = set()
    for exp, (model, integ, grad, init) in expected.items():
        for stage in ("train", "evaluate"):
            cfg = compose_config(stage, [f"experiment={exp}", "system=double_well"])
            got = (cfg.method.name, cfg.integrator.name, cfg.gradient.name, cfg.train.get("init"))
            n = 4 if stage == "train" else 3  # train.init only matters to train
            assert got[:n] == (model, integ, grad, init)[:n], (exp, stage)
            assert cfg.run_dir.startswith("outputs/table1/")
        dirs.add(cfg.run_dir)
    assert len(dirs) == len(expected)  # no two methods share a run dir
    high = compose_config("train", ["experiment=table1_smoothed", "noise=high"])
    assert high.run_dir.startswith("outputs/table1/smoothed/") and "/high/" in high.run_dir


def test_method_nssnn_selects_tao_and_backprop(compose_config):
    cfg = compose_config("train", ["method=nssnn"])
    assert (cfg.integrator.name, cfg.gradient.name) == ("tao", "backprop")
    assert cfg.integrator.omega > 0
    cfg = compose_config("train", ["method=nssnn", "integrator=rk4"])  # the command line wins
    assert cfg.integrator.name == "rk4"
    cfg = compose_config("train", ["method=node"])  # its network too
    assert (cfg.model.name, cfg.integrator.name, cfg.gradient.name) == ("node", "rk4", "backprop")


def fake_run(root: Path, system: str, model: str, noise: str, seed: int, h_l1: float | None,
             wall: tuple[float, ...] = (10.0, 20.0, 30.0), init: str | None = None,
             ema: float | None = None, checkpoint: str = "best",
             refit_seconds: float | None = None) -> None:  # fmt: skip
    """A run dir as train + evaluate leave it (config.yaml, metrics.csv, eval/metrics.json), the
    evaluation of ``checkpoint`` (best: epoch 2, last: epoch 3), refit (train.refit) in
    ``refit_seconds`` (None: not refit)."""
    run = root / system / model / noise / f"seed{seed}"
    (run / "eval").mkdir(parents=True)
    train = {"epochs": 3, "lr": 0.01} | ({"init": init} if init else {}) | {"ema": ema}
    config = {"seed": seed, "system": {"name": system}, "model": {"name": model},
              "noise": {"name": noise, "std": {"none": 0.0, "low": 0.01, "high": 0.1}[noise]},
              "integrator": {"name": "implicit_midpoint"}, "train": train,
              "run_dir": str(run)}  # fmt: skip
    (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
    val = [3.0, 1.0, 2.0]  # best at epoch 2: time_to_best = wall[1]
    pd.DataFrame({"epoch": [1, 2, 3], "train_loss": val, "val_loss": val,
                  "wall_time": list(wall)}).to_csv(run / "metrics.csv", index=False)  # fmt: skip
    metrics = {"h_l1": h_l1, "traj_mse": 0.5, "energy_drift_true_max": 0.1, "vpt_mean": 4.0,
               "h_l1_rel": h_l1, "vf_rel": 0.2,
               "checkpoint": {"which": checkpoint, "epoch": 2 if checkpoint == "best" else 3,
                              "refit": None if refit_seconds is None else
                              {"method": "last_layer", "seconds": refit_seconds}}}  # fmt: skip
    (run / "eval" / "metrics.json").write_text(json.dumps(metrics))


def test_table1_aggregates_runs_beside_the_paper_and_sweeps_noise(tmp_path):
    root = tmp_path / "runs"
    for seed, err in enumerate((0.001, 0.003)):
        fake_run(root, "double_well", "hnn", "low", seed, err, wall=(5.0, 10.0 + seed, 15.0))
        fake_run(root, "double_well", "hnn", "high", seed, 10 * err)
        fake_run(root / "smoothed", "double_well", "hnn", "low", seed, err / 2, init="smoothed")
        fake_run(root / "ema", "double_well", "hnn", "low", seed, err / 4, ema=0.99)
    fake_run(root, "double_well", "node", "low", 0, None)
    fake_run(root, "henon_heiles", "shnn", "low", 0, 0.05)
    fake_run(root / "ddlm", "pendulum", "ddlm", "low", 0, None)  # not a Table 1 system
    table, notes = build_table1([str(root)])
    assert "pendulum" not in set(table["system"])
    assert any("left out 1 run(s) of systems not in Table 1 (pendulum)" in n for n in notes)
    rows = table.set_index(["system", "method"])
    ours = rows.loc[("double_well", "This work")]
    assert ours["n"] == 2 and ours["h_l1_mean"] == pytest.approx(0.002)  # noise=high left out
    assert ours["h_l1_std"] == pytest.approx(math.sqrt(2) * 0.001)
    assert ours["time_to_checkpoint_mean"] == pytest.approx(10.5)  # wall time at the best val loss
    assert ours["paper_h_l1_mean"] == 0.00035 and ours["paper_runtime_mean"] == 100.16
    assert rows.loc[("double_well", "This work, smoothed y0"), "h_l1_mean"] == pytest.approx(0.001)
    assert rows.loc[("double_well", "This work, EMA"), "h_l1_mean"] == pytest.approx(0.0005)
    assert math.isnan(rows.loc[("double_well", "NODE"), "h_l1_mean"])
    assert rows.loc[("henon_heiles", "SHNN"), "paper_h_l1_mean"] == 0.07238
    assert rows.loc[("coupled_oscillator", "NSSNN"), "n"] == 0  # paper only
    assert list(table["system"].unique()) == ["double_well", "coupled_oscillator", "henon_heiles"]
    paths = write_table1(table, tmp_path / "results", notes=notes)
    text = paths["md"].read_text()
    assert "0.078556" in text and "100.16" in text and "0.002 ± 0.0014" in text
    assert "\\pm" in paths["tex"].read_text()

    runs, keys, _ = load_method_runs([str(root)])
    sweep = noise_sweep(runs, keys)
    line = sweep[(sweep["method"] == "This work")]
    assert list(line["noise.std"]) == [0.01, 0.1]
    assert list(line["h_l1_mean"]) == pytest.approx([0.002, 0.02])
    written = write_noise_sweep(sweep, tmp_path / "results")
    assert written["png"].stat().st_size > 1000


def test_table1_runtime_is_the_whole_run_where_the_last_checkpoint_was_evaluated(tmp_path):
    """The weight-averaged row evaluates last.pt, the average at the end of training: its runtime
    is the training's whole wall time, not the time until the best validation loss."""
    root = tmp_path / "runs"
    fake_run(root, "double_well", "hnn", "low", 0, 0.001, wall=(5.0, 10.0, 15.0))
    fake_run(root / "swa", "double_well", "hnn", "low", 0, 0.001, wall=(5.0, 10.0, 15.0),
             ema=1.0, checkpoint="last")  # fmt: skip
    rows = build_table1([str(root)])[0].set_index(["system", "method"])
    assert rows.loc[("double_well", "This work"), "time_to_checkpoint_mean"] == 10.0
    assert rows.loc[("double_well", "This work, EMA"), "time_to_checkpoint_mean"] == 15.0


def test_table1_runtime_counts_the_refit_of_the_checkpoint_evaluated(tmp_path):
    """A run whose checkpoint was refit after training (train.refit): its runtime adds the
    refit's seconds, which the training's wall time in metrics.csv does not hold."""
    root = tmp_path / "runs"
    fake_run(root, "double_well", "hnn", "low", 0, 0.001, wall=(5.0, 10.0, 15.0),
             checkpoint="last", refit_seconds=4.5)  # fmt: skip
    rows = build_table1([str(root)])[0].set_index(["system", "method"])
    assert rows.loc[("double_well", "This work"), "time_to_checkpoint_mean"] == 19.5


def test_table1_without_runs_shows_the_papers_numbers(tmp_path):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("train: {epochs: 1}\nseed: 0\n")
    with pytest.raises(UserError, match="no runs found"):
        build_table1([str(tmp_path / "nothing")])
    table, notes = build_table1([str(tmp_path / "runs")])
    assert len(table) == len(PAPER) and (table["n"] == 0).all()
    paths = write_table1(table, tmp_path / "results", notes=notes)
    assert "0.04303" in paths["md"].read_text()
    assert pd.read_csv(paths["csv"])["paper_h_l1_mean"].notna().sum() == len(PAPER)


# ---- end to end through the CLIs (slow) ---------------------------------------------------------


def _run(module: str, tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", module, *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_each_baseline_trains_evaluates_and_lands_in_table1(tmp_path):
    common = ["system=double_well", "noise=low", "seed=0", f"data_dir={tmp_path / 'data'}",
              "hydra.sweep.dir=" + str(tmp_path / "hydra")]  # fmt: skip
    _run("hnnsym.generate", tmp_path, *common[:4], "generate.n_train=128", "generate.n_val=32",
         "generate.n_test=4", "generate.test_steps=40", "generate.train_steps=8",
         f"hydra.run.dir={tmp_path / 'hydra' / 'generate'}")  # fmt: skip
    experiments = "experiment=table1_shnn,table1_hnn_derivative,table1_nssnn,table1_node"
    _run("hnnsym.train", tmp_path, "-m", experiments, *common, "train.epochs=3",
         "train.batch_size=64", "train.val_batch_size=64")  # fmt: skip
    _run("hnnsym.evaluate", tmp_path, "-m", experiments, *common, "eval.figures=false",
         "eval.grid_points=40")  # fmt: skip
    runs = tmp_path / "outputs" / "table1" / "double_well"  # the experiments' run_dir, from cwd
    found = {}
    for metrics_file in runs.glob("*/*/low/seed0/eval/metrics.json"):
        model = metrics_file.parts[-6]
        found[model] = json.loads(metrics_file.read_text())
        history = pd.read_csv(metrics_file.parent.parent / "metrics.csv")
        assert len(history) == 3 and history["val_loss"].notna().all()
    assert set(found) == {"shnn", "hnn_derivative", "nssnn", "node"}
    assert found["nssnn"]["rollout_integrator"] == "tao"
    for model in ("shnn", "hnn_derivative", "nssnn"):
        assert found[model]["h_l1"] is not None and math.isfinite(found[model]["h_l1"])
    node = found["node"]
    assert node["h_l1"] is None and node["energy_drift_pred_max"] is None and node["notes"]
    assert math.isfinite(node["traj_mse"]) and math.isfinite(node["vf_rel"])
    table, _ = build_table1([str(tmp_path / "outputs" / "table1")])
    ours = table[table["n"] > 0].set_index("method")
    assert set(ours.index) == {"SHNN", "NSSNN", "HNN (derivative)", "NODE"}
    assert math.isnan(ours.loc["NODE", "h_l1_mean"])
    assert ours.loc["SHNN", "time_to_checkpoint_mean"] > 0


def test_settings_of_one_method_get_their_own_line_label():
    table = pd.DataFrame({
        "method": ["This work", "This work", "SHNN", "This work"],
        "train.epochs": [25, 100, 25, 25],
        "noise.std": [0.01, 0.01, 0.01, 0.1],
    })  # fmt: skip
    labels = setting_labels(table, ["train.epochs"])
    assert list(labels) == ["This work", "This work, train.epochs=100", "SHNN", "This work"]
    assert list(setting_labels(table)) == list(table["method"])


def test_the_double_well_with_a_separable_h_is_the_paper_time_recipe_with_its_structure(
    compose_config,
):
    """experiment=double_well_separable (docs/papers/table1.md): table1_paper_time's optimiser and
    weight mean, a separable H with a learned mass and a 4x output layer, windows of 16, 100
    epochs, the mean from 50, its own run directory."""
    cfg = compose_config("train", ["experiment=double_well_separable", "seed=1"])
    paper_time = compose_config("train", ["experiment=table1_paper_time", "system=double_well"])
    assert cfg.system.name == "double_well"
    assert cfg.model._target_ == "hnnsym.physics.models.SeparableHNN"
    assert (cfg.model.kinetic, cfg.model.output_gain, list(cfg.model.hidden)) == (
        "mass",
        4,
        [32, 32, 32],
    )
    assert (cfg.train.window, cfg.train.epochs, cfg.train.ema, cfg.train.ema_start) == (
        16,
        100,
        1.0,
        50,
    )
    assert cfg.train.early_stop.patience >= cfg.train.epochs
    for key in ("schedule", "lr", "batch_size", "init"):
        assert cfg.train[key] == paper_time.train[key], key
    assert (cfg.integrator.name, cfg.gradient.name) == ("implicit_midpoint", "symplectic_adjoint")
    assert cfg.run_dir.startswith("outputs/table1/separable/") and cfg.run_dir != paper_time.run_dir
