"""Learning from positions only (Aoshima et al., DDLM): discrete gradients, the discrete Euler–Lagrange
equation (Eq. 12) and its Newton solve, exact energy conservation, the position baselines,
positions-only data files, one-line errors for data that do not fit the method, and a tiny
generate -> train -> evaluate run in-process."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from hnnsym.config import CONF_DIR
from hnnsym.data.hdf5 import generate_command, read_dataset
from hnnsym.data.simulate import generate
from hnnsym.errors import ConvergenceError
from hnnsym.evaluation.positions import rollout_positions
from hnnsym.evaluation.stage import evaluate
from hnnsym.ode import integrate
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.discrete_gradient_formulas import avf, gonzalez, gradient
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.lagrangian import (
    eq11_momentum,
    eq12_harmonic_stiffness,
    eq12_residual,
    explicit_step,
    model_energy,
    solve_eq12,
    velocities,
)
from hnnsym.physics.models import Potential
from hnnsym.physics.systems import get_system
from hnnsym.training.losses import Eq12Loss, PositionStepLoss
from hnnsym.training.stage import train

REPO = Path(__file__).resolve().parents[2]
F64 = torch.float64


def mlp_potential(d: int, seed: int = 0) -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Potential(d, hidden=(32, 32)).double()


class Pendulum(torch.nn.Module):
    """V(q) = 4(1 − cos q) with M = 1 (DGNet's pendulum, q̈ = −4 sin q), gradient in closed form."""

    capabilities = frozenset({Capability.ENERGY_GRADIENT})

    def forward(self, q):
        return (4 * (1 - torch.cos(q))).sum(-1)

    def energy_gradient(self, q):
        return 4 * torch.sin(q)


def quartic(q):
    return (0.25 * q**4 - 0.5 * q**2 + 0.3 * q[..., :1] * q**3).sum(-1)


# ---- discrete gradients ---------------------------------------------------------------------


def test_gonzalez_discrete_chain_rule_holds_to_rounding_in_float64():
    g = torch.Generator().manual_seed(0)
    u, v = torch.randn(512, 3, generator=g, dtype=F64), torch.randn(512, 3, generator=g, dtype=F64)
    for V in (mlp_potential(3), quartic):
        with torch.no_grad():
            dgv = gonzalez(V, u, v)
            terms = dgv * (u - v)
            defect = (V(u) - V(v) - terms.sum(-1)).abs()
            scale = V(u).abs() + V(v).abs() + terms.abs().sum(-1)  # what the sums round
        assert float((defect / scale).max()) < 4 * torch.finfo(F64).eps, float(defect.max())
        # symmetric, and the gradient at coincident points
        assert torch.allclose(gonzalez(V, v, u), dgv, rtol=0, atol=1e-13)
        assert torch.allclose(gonzalez(V, u, u), gradient(V, u), rtol=0, atol=1e-15)


def test_avf_is_exact_for_polynomials_and_converges_with_nodes_for_a_network():
    g = torch.Generator().manual_seed(1)
    u, v = torch.randn(256, 2, generator=g, dtype=F64), torch.randn(256, 2, generator=g, dtype=F64)
    # degree 4 <= 2k for k = 2 Gauss–Legendre nodes: the chain rule is exact to rounding
    with torch.no_grad():
        defect = quartic(u) - quartic(v) - (avf(quartic, u, v, nodes=2) * (u - v)).sum(-1)
    assert float(defect.abs().max()) < 1e-13
    # a network: a discrete gradient only up to the quadrature error, which shrinks with k
    V = mlp_potential(2)
    with torch.no_grad():
        far = [float((V(u) - V(v) - (avf(V, u, v, k) * (u - v)).sum(-1)).abs().max())
               for k in (1, 2, 4, 8)]  # fmt: skip
        w = v + 0.1 * (u - v)  # a segment of the length of one step of Eq. 12
        near = float((V(w) - V(v) - (avf(V, w, v, 4) * (w - v)).sum(-1)).abs().max())
    # measured: 0.067, 0.033, 2.2e-3, 2.3e-6 on |u - v| ~ 2; 4 nodes on |u - v| ~ 0.2: ~1e-13
    assert far[-1] < 1e-4 and all(a > b for a, b in zip(far, far[1:])), far
    assert near < 1e-11, near
    assert torch.allclose(avf(V, u, u), gradient(V, u), atol=1e-14)


def test_near_coincident_points_fall_back_to_the_midpoint_gradient_without_nan():
    V = mlp_potential(2)
    v = torch.randn(64, 2, generator=torch.Generator().manual_seed(2), dtype=F64)
    for gap in (1e-3, 1e-6, 1e-9, 1e-14, 0.0):
        u = (v + gap).requires_grad_(True)
        dgv = gonzalez(V, u, v)
        assert torch.isfinite(dgv).all()
        (grad_u,) = torch.autograd.grad(dgv.sum(), u)  # no NaN in the graph either
        assert torch.isfinite(grad_u).all()
        mid = gradient(V, 0.5 * (u + v).detach())
        assert float((dgv - mid).detach().abs().max()) < 1e-6  # the correction is O(gap²)
        if gap <= 1e-6:  # below the threshold δ = eps^(1/3): exactly ∇V at the midpoint
            assert torch.equal(dgv.detach(), mid)
        defect = (V(u) - V(v) - (dgv * (u - v)).sum(-1)).detach()
        assert float(defect.abs().max()) < 1e-15


# ---- Eq. 12 ---------------------------------------------------------------------------------


def pendulum_positions(h: float, steps: int, q0: torch.Tensor) -> torch.Tensor:
    """Exact positions (steps+1, B, 1) of q̈ = −4 sin q from rest at q0: Gauss–Legendre 6 at h/4
    (error ~1e-9, far below the residual's O(h²) ~ 1e-3)."""
    system = get_system("pendulum", g=4.0, length=1.0, mass=1.0)
    y0 = torch.cat([q0, torch.zeros_like(q0)], -1)
    fine = integrate(system, y0, h / 4, 4 * steps,
                     get_integrator("gauss_legendre6", tol=1e-15), "backprop")  # fmt: skip
    return fine[::4, :, :1]


def test_eq12_residual_vanishes_on_exact_data_at_second_order():
    V, M = Pendulum(), torch.eye(1, dtype=F64)
    q0 = torch.tensor([[0.5], [1.5], [2.5]], dtype=F64)
    sizes = []
    for h in (0.1, 0.05, 0.025):
        qs = pendulum_positions(h, round(1.6 / h), q0)
        r = eq12_residual(V, M, qs[:-2].reshape(-1, 1), qs[1:-1].reshape(-1, 1),
                          qs[2:].reshape(-1, 1), h)  # fmt: skip
        sizes.append(float(r.detach().abs().max()))
    orders = [math.log2(a / b) for a, b in zip(sizes, sizes[1:])]
    assert all(1.9 < p < 2.1 for p in orders), (sizes, orders)


def test_newton_solves_eq12_for_a_network_and_reports_failure_in_one_line():
    V, d = mlp_potential(2, seed=3), 2
    with torch.no_grad():
        V.net[-1].weight.mul_(20)  # a strongly nonlinear potential
    M = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=F64)
    g = torch.Generator().manual_seed(4)
    q_prev = torch.randn(16, d, generator=g, dtype=F64)
    q = q_prev + 0.1 * torch.randn(16, d, generator=g, dtype=F64)
    result = solve_eq12(V, M, q_prev, q, 0.1)
    assert bool(result.converged.all()) and int(result.iterations.max()) <= 4
    residual = eq12_residual(V, M, q_prev, q, result.q_next, 0.1).detach()
    assert float(residual.abs().max()) < 1e-9  # G is O(1/Δt²): |q⁺ error| ~ 1e-11·Δt²
    with pytest.raises(ConvergenceError) as err:
        solve_eq12(V, M, q_prev, q, 0.1, max_iter=1)
    assert "\n" not in str(err.value) and "did not converge for 16 of 16" in str(err.value)
    recorded = solve_eq12(V, M, q_prev, q, 0.1, max_iter=1, on_fail="record")
    assert not bool(recorded.converged.any())


def test_energy_is_conserved_to_1e10_over_1e4_steps():
    """E_n = ½p_n²/M + V(q_n) with p_n from Eq. 11, along 10⁴ Newton steps of Eq. 12."""
    V, M, h = Pendulum(), torch.eye(1, dtype=F64), 0.2
    q0 = torch.tensor([[0.5], [2.0], [3.0]], dtype=F64)  # 3.0: close to the top (E = 7.96 < 8)
    qs = rollout_positions(_PositionModel(V), q0, q0, h, 10_000).positions
    assert torch.isfinite(qs).all()
    energy = model_energy(V, M, qs, velocities("eq12", qs, h, V, M))
    drift = (energy[1:] - energy[1]).abs().max()
    assert float(drift) < 1e-10, float(drift)
    # and the leapfrog energy oscillates by orders of magnitude more over the same horizon
    q_lf = [q0, q0]
    for _ in range(200):
        q_lf.append(explicit_step("leapfrog", V, M, q_lf[-2], q_lf[-1], h, False))
    q_lf = torch.stack(q_lf)
    e_lf = model_energy(V, M, q_lf, velocities("leapfrog", q_lf, h))
    assert float(torch.nanmean((e_lf[1:-1] - e_lf[1:-1].mean(0)) ** 2)) > 1e-4


class _Harmonic(torch.nn.Module):
    """V(q) = ½ k q²."""

    capabilities = frozenset({Capability.ENERGY_GRADIENT})

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, q):
        return 0.5 * self.k * (q**2).sum(-1)

    def energy_gradient(self, q):
        return self.k * q


def test_eq12_with_the_modified_stiffness_reproduces_the_harmonic_oscillator_exactly():
    """Eq. 12 with V = ½k*q², k* = (2/Δt)²tan²(ωΔt/2), predicts q = r cos(ωt + φ) to rounding
    (the mass–spring energy floor of make table-ddlm rests on it); the true k = ω² drifts in
    phase at O((ωΔt)²) per unit time."""
    omega, h, steps = 2.0, 0.2, 100
    t = h * torch.arange(steps + 1, dtype=F64)[:, None]
    r, phi = torch.tensor([0.1, 0.5, 1.0], dtype=F64), torch.tensor([0.0, 1.0, 4.0], dtype=F64)
    q = (r * torch.cos(omega * t + phi))[..., None]  # (T+1, B, 1)
    k_star = eq12_harmonic_stiffness(omega, h)
    assert k_star == pytest.approx(omega**2 * (1 + (omega * h) ** 2 / 6), rel=(omega * h) ** 4)
    exact = rollout_positions(_PositionModel(_Harmonic(k_star)), q[0], q[1], h, steps).positions
    assert float((exact - q).abs().max()) < 1e-12
    true_k = rollout_positions(_PositionModel(_Harmonic(omega**2)), q[0], q[1], h, steps).positions
    assert float((true_k - q).abs().max()) > 0.1 * float(r.max())
    with pytest.raises(ValueError, match="omega\\*dt < pi"):
        eq12_harmonic_stiffness(omega, 2.0)


class _PositionModel(torch.nn.Module):
    """A known V as a position model (M = I, Gonzalez discrete gradient)."""

    discrete_gradient, avf_nodes = "gonzalez", 4
    capabilities = frozenset({Capability.ENERGY_GRADIENT, Capability.MASS_MATRIX})

    def __init__(self, V):
        super().__init__()
        self.V = V

    def forward(self, q):
        return self.V(q)

    def energy_gradient(self, q):
        return self.V.energy_gradient(q)

    def mass_matrix(self):
        return torch.eye(1, dtype=F64)


def test_eq11_momentum_and_the_losses_vanish_on_their_own_schemes():
    V, M, h = mlp_potential(1, seed=5), torch.eye(1, dtype=F64) * 1.5, 0.1
    q0 = torch.tensor([[0.3], [-0.7]], dtype=F64)
    qs = [q0, q0 + 0.05]
    for _ in range(6):
        qs.append(solve_eq12(V, M, qs[-2], qs[-1], h).q_next)
    windows = torch.stack(qs)
    V.mass_matrix = lambda: M  # the loss reads the model's mass matrix
    assert float(Eq12Loss(h)(V, windows).detach()) < 1e-20
    p = eq11_momentum(V, M, windows[0], windows[1], h)
    assert torch.allclose(p, velocities("eq12", windows[:2], h, V, M)[1] @ M.T, atol=1e-14)
    lf = [q0, q0 + 0.05]
    for _ in range(6):
        lf.append(explicit_step("leapfrog", V, M, lf[-2], lf[-1], h, False))
    lf = torch.stack(lf).detach()
    with torch.no_grad():
        assert float(PositionStepLoss(h, "leapfrog")(V, lf)) < 1e-28
        assert float(PositionStepLoss(h, "euler")(V, lf)) > 1e-12  # a different recurrence


# ---- data, errors, pipeline -----------------------------------------------------------------

TINY = [
    "experiment=ddlm_pendulum", "noise=low", "generate.n_train=4", "generate.n_val=2",
    "generate.n_test=3", "generate.train_steps=16", "generate.test_steps=24",
    "generate.fine_dt=0.05", "train.epochs=3", "train.window=8", "train.batch_size=4",
]  # fmt: skip
RUN = ["model.hidden=[16,16]"]  # train and evaluate only (generate has no model)


def composed(stage: str, root: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(stage, [*TINY, f"data_dir={root / 'data'}", *overrides])


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """Positions-only and (q, p) files of the same tiny pendulum setting, seed 0."""
    root = tmp_path_factory.mktemp("ddlm")
    generate(composed("generate", root))
    generate(composed("generate", root, "generate.observe=qp"))
    return root


def test_positions_only_files_hold_the_q_of_the_same_states(data_root):
    q_file = data_root / "data" / "pendulum" / "low" / "seed0_q.h5"
    qp = read_dataset(data_root / "data" / "pendulum" / "low" / "seed0.h5")
    q = read_dataset(q_file)
    assert q.attrs["observe"] == "q" and qp.attrs["observe"] == "qp"
    assert q.splits["train"].observed.shape == (4, 17, 1)
    assert q.splits["train"].clean.shape == (4, 17, 2)
    np.testing.assert_array_equal(q.splits["test"].observed, qp.splits["test"].observed[..., :1])
    assert "generate.observe=q" in generate_command(q_file)


def run_cli(stage: str, root: Path, run: str, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("HNNSYM_DEBUG", None)
    cmd = [sys.executable, "-m", f"hnnsym.{stage}", *TINY, f"data_dir={root / 'data'}",
           f"run_dir={root / 'runs' / run}", *overrides]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_data_that_do_not_fit_the_method_get_one_line_errors_through_the_cli(data_root):
    qp_file = data_root / "data" / "pendulum" / "low" / "seed0.h5"
    q_file = data_root / "data" / "pendulum" / "low" / "seed0_q.h5"
    procs = {  # both at once: each is mostly start-up
        "momenta": run_cli("train", data_root, "a", "method=hnn", f"data_file={q_file}"),
        "positions": run_cli("train", data_root, "b", "method=ddlm", f"data_file={qp_file}"),
    }
    for what, proc in procs.items():
        _, stderr = proc.communicate(timeout=300)
        lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in stderr, stderr
        if what == "momenta":
            assert "holds positions only" in lines[0] and "needs momenta" in lines[0]
        else:
            assert "holds (q, p) states" in lines[0] and "positions only" in lines[0]


def test_train_and_evaluate_ddlm_in_process(data_root, tmp_path):
    run = [f"run_dir={tmp_path / 'run'}"]
    run += RUN
    result = train(composed("train", data_root, "method=ddlm", *run))
    assert result.state.epoch == 3 and math.isfinite(result.state.best_val)
    metrics = evaluate(
        composed("evaluate", data_root, "method=ddlm", *run, "eval.plot_trajectories=2")
    )
    saved = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    assert saved["q_mse"] == metrics["q_mse"] and metrics["prediction"]["scheme"] == "eq12"
    for key in ("q_mse", "energy_mse", "energy_var_model", "v_l1", "vpt_mean"):
        assert math.isfinite(metrics[key]), key
    assert metrics["h_l1"] is None and metrics["vf_rel"] is None and metrics["notes"]
    assert metrics["rollout_failed"] == 0 and metrics["rollout_steps"] == 24
    assert metrics["energy_drift_pred_max"] < 1e-10  # the modelled energy, to the Newton tolerance
    figures = set(metrics["files"]["figures"])
    assert {"positions.png", "energy.png", "potential.png"} <= figures
    # a baseline predicts with its own recurrence from the same data
    lf_run = [f"run_dir={tmp_path / 'lf'}", *RUN]
    base = train(composed("train", data_root, "method=ddlm_leapfrog", *lf_run))
    assert base.state.epoch == 3
    lf = evaluate(composed("evaluate", data_root, "method=ddlm_leapfrog", "eval.figures=false",
                           *lf_run))  # fmt: skip
    assert lf["prediction"]["scheme"] == "leapfrog" and math.isfinite(lf["energy_var_model"])


def test_learned_mass_matrix_is_positive_definite_and_trained():
    model = Potential(2, hidden=(8, 8), mass="learned").double()
    assert torch.equal(model.mass_matrix(), torch.eye(2, dtype=F64))  # starts at M = I
    with torch.no_grad():
        model.mass_factor.copy_(torch.tensor([[0.5, 9.0], [-2.0, -1.0]]))  # upper part unused
    M = model.mass_matrix().detach()
    assert torch.allclose(M, M.T) and float(torch.linalg.eigvalsh(M).min()) > 0
    windows = torch.randn(5, 3, 2, generator=torch.Generator().manual_seed(6), dtype=F64)
    Eq12Loss(0.1)(model, windows).backward()
    assert float(model.mass_factor.grad.abs().sum()) > 0


def test_table_ddlm_puts_the_paper_beside_the_mean_and_std_over_seeds(tmp_path):
    from omegaconf import OmegaConf

    from hnnsym.artifacts import write_text
    from hnnsym.reporting.table_ddlm import PAPER, build_table

    for method, seeds in (("ddlm", (0, 1)), ("ddlm_leapfrog", (0,))):
        for seed in seeds:
            cfg = composed("train", tmp_path, f"method={method}", f"seed={seed}",
                           f"run_dir={tmp_path}/runs/${{run_name}}")  # fmt: skip
            container = OmegaConf.to_container(cfg, resolve=True)
            run = Path(container["run_dir"])
            write_text(run / "config.yaml", OmegaConf.to_yaml(container))
            write_text(run / "metrics.csv", "epoch,train_loss,val_loss,wall_time\n1,1,1,2.5\n")
            metrics = {"q_mse": 1e-3 * (seed + 1), "energy_mse": 2e-5, "energy_var_model": 1e-27,
                       "v_l1": 0.01, "checkpoint": {"which": "best", "epoch": 1}}  # fmt: skip
            write_text(run / "eval" / "metrics.json", json.dumps(metrics))
    table, notes = build_table(str(tmp_path / "runs"))
    row = table[
        (table.system == "pendulum") & (table.method == "proposed") & (table.noise == "low")
    ]
    assert int(row.n.iloc[0]) == 2 and row.q_mse_mean.iloc[0] == pytest.approx(1.5e-3)
    assert row.train_time_mean.iloc[0] == 2.5 and math.isnan(row.paper_q_mse_mean.iloc[0])
    paper = table[(table.system == "pendulum") & (table.method == "proposed")
                  & (table.noise == "none")]  # fmt: skip
    assert paper.paper_q_mse_mean.iloc[0] == PAPER[("proposed", "pendulum")][0]
    assert int(paper.n.iloc[0]) == 0
