"""Metrics against hand-computed and analytic values."""

from __future__ import annotations

import math

import pytest
import torch

import hnnsym
from hnnsym.data.simulate import simulate
from hnnsym.errors import ConvergenceError
from hnnsym.evaluation.metrics import (
    default_grid_points,
    geometric_mean_over_time,
    grid_errors,
    hamiltonian_error,
    relative_error,
    rollout_metrics,
    valid_prediction_time,
)
from hnnsym.evaluation.rollout import RolloutResult, rollout
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.models import HNN
from hnnsym.physics.systems import get_system

F64 = torch.float64


def tensor(*values):
    return torch.tensor(values, dtype=F64)


# ---- grid errors ----------------------------------------------------------------------------


def test_hamiltonian_error_constant_offset_is_removed():
    h = tensor(0.0, 1.0, 2.0, 3.0)
    m = hamiltonian_error(h, h + 3.0)
    assert m["h_l1"] == pytest.approx(0.0, abs=1e-15)
    assert m["h_l1_raw"] == pytest.approx(3.0)
    assert m["h_l1_rel"] == pytest.approx(0.0, abs=1e-15)
    assert m["h_offset"] == pytest.approx(-3.0)


def test_hamiltonian_error_doubled_by_hand():
    # H_true - 2 H_true = -(0, 1, 2, 3); c = -1.5; |-(h) + 1.5| = (1.5, 0.5, 0.5, 1.5) -> 1.0
    # raw: mean(0, 1, 2, 3) = 1.5; spread: mean |h - 1.5| = 1.0 -> rel = 1.0
    h = tensor(0.0, 1.0, 2.0, 3.0)
    m = hamiltonian_error(h, 2 * h)
    assert (m["h_l1"], m["h_l1_raw"], m["h_l1_rel"], m["h_offset"]) == pytest.approx(
        (1.0, 1.5, 1.0, -1.5)
    )


@pytest.mark.parametrize("name", ["double_well", "henon_heiles"])
def test_grid_errors_of_affine_models(name):
    """On a system's real grid: H_pred = a H + b gives h_l1_rel = |1 - a| exactly, and the vector
    field error vf_rel = |1 - a| (f scales by a, the offset has no gradient)."""
    system = get_system(name)
    grid = system.grid(9 if system.dim == 2 else 41)
    assert grid.shape[0] > 100
    exact = grid_errors(system, system, grid)
    assert exact["h_l1"] == exact["h_l1_raw"] == exact["vf_l1"] == 0.0
    shifted = grid_errors(system, lambda y: system(y) - 7.0, grid)
    assert shifted["h_l1"] < 1e-14 and shifted["vf_l1"] == 0.0
    assert shifted["h_l1_raw"] == pytest.approx(7.0)
    scaled = grid_errors(system, lambda y: 0.25 * system(y) + 2.0, grid)
    assert scaled["h_l1_rel"] == pytest.approx(0.75, rel=1e-12)
    assert scaled["vf_rel"] == pytest.approx(0.75, rel=1e-12)
    assert scaled["grid_size"] == grid.shape[0]


def test_untrained_network_is_far_from_true_h():
    system = get_system("double_well")
    grid = system.grid(60)
    torch.manual_seed(0)
    model = HNN(1).double()
    untrained = grid_errors(system, model, grid)
    assert untrained["h_l1_rel"] > 0.3 and untrained["vf_rel"] > 0.3


def test_default_grid_points_give_about_1e5_box_points():
    assert default_grid_points(1) == 316 and default_grid_points(2) == 18
    hh = get_system("henon_heiles").grid(default_grid_points(2))
    assert 10_000 < hh.shape[0] < 100_000  # energy-filtered 18^4 = 104,976 box points


# ---- relative error, geometric mean, valid prediction time ----------------------------------


def test_relative_error_by_hand():
    pred = torch.tensor([[3.0, 0.0], [1.0, 2.0], [1.0, 2.0], [0.0, 0.0]], dtype=F64)
    true = torch.tensor([[0.0, 4.0], [-1.0, -2.0], [1.0, 2.0], [0.0, 0.0]], dtype=F64)
    # ||(3,-4)|| / (3 + 4) = 5/7; opposite vectors -> 1; equal -> 0; both zero -> 0
    assert relative_error(pred, true).tolist() == pytest.approx([5 / 7, 1.0, 0.0, 0.0])


def test_geometric_mean_over_time_analytic():
    t = torch.linspace(0.0, 2.0, 21, dtype=F64)
    # log e(t) = -3 t is linear, so the trapezoid rule is exact: mean over [t1, T] of -3t
    err = torch.exp(-3 * t)[:, None].repeat(1, 2)
    err[0] = 0.0  # the rollout starts on the truth
    expected = math.exp(-3 * (t[1] + t[-1]) / 2)
    assert geometric_mean_over_time(err, t).tolist() == pytest.approx([expected] * 2, rel=1e-12)
    const = torch.full((21, 1), 0.2, dtype=F64)
    assert float(geometric_mean_over_time(const, t)) == pytest.approx(0.2, rel=1e-12)
    # a piecewise-constant case by hand: t = 0, 1, 2, 3 with e = (0, 1e-2, 1e-2, 1e-4):
    # ∫_1^3 log e = log(1e-2) + (log(1e-2) + log(1e-4)) / 2 -> mean = (-2 - 3) / 2 decades
    err = tensor(0.0, 1e-2, 1e-2, 1e-4)[:, None]
    value = float(geometric_mean_over_time(err, tensor(0.0, 1.0, 2.0, 3.0)))
    assert value == pytest.approx(10**-2.5, rel=1e-12)
    zero = torch.zeros(5, 1, dtype=F64)
    assert 0.0 <= float(geometric_mean_over_time(zero, t[:5])) < 1e-300


def test_valid_prediction_time_by_hand():
    t = torch.arange(6, dtype=F64) * 0.1
    err = torch.tensor(
        [[0.0, 0.0, 0.0], [0.05, 0.01, 0.2], [0.08, 0.02, 0.0],
         [0.12, 0.03, 0.0], [0.05, 0.04, 0.0], [0.2, math.nan, 0.0]],
        dtype=F64,
    )  # fmt: skip
    vpt, censored = valid_prediction_time(err, t, 0.1)
    # first exceedance at t = 0.3 (the later dip does not count); NaN counts; at t = 0.1
    assert vpt.tolist() == pytest.approx([0.3, 0.5, 0.1])
    assert censored.tolist() == [False, False, False]
    vpt, censored = valid_prediction_time(err[:5, 1:2], t[:5], 0.1)
    assert vpt.tolist() == pytest.approx([0.4]) and censored.tolist() == [True]


# ---- rollouts -------------------------------------------------------------------------------


def rotation(y0, angles):
    """Harmonic oscillator (m = k = 1) flow by angle: q = q0 cos a + p0 sin a, p = -q0 sin a + p0 cos a."""
    c, s = torch.cos(angles)[:, None], torch.sin(angles)[:, None]
    q0, p0 = y0[:, 0], y0[:, 1]
    return torch.stack([q0 * c + p0 * s, -q0 * s + p0 * c], -1)


@pytest.mark.parametrize("substeps", [1, 2])
def test_true_h_rollout_matches_analytic_midpoint_rotation(substeps):
    """Implicit midpoint on H = (q^2 + p^2)/2 is exactly a rotation by 2 atan(h/2) per step (the
    Cayley transform), so the rollout and its error against the exact flow are known in closed
    form; it conserves the quadratic H to round-off."""
    system = get_system("mass_spring")
    y0 = torch.tensor([[1.0, 0.0], [0.3, -0.5], [0.0, 0.8]], dtype=F64)
    dt, steps = 0.05, 80
    n = torch.arange(steps + 1, dtype=F64)
    t = n * dt
    # tol 1e-15: the stage equations solved to round-off, so the quadratic H is kept to round-off
    midpoint = get_integrator("implicit_midpoint", tol=1e-15)
    result = rollout(system, y0, dt, steps, midpoint, substeps=substeps, segment=30)
    theta = substeps * 2 * math.atan(dt / substeps / 2)
    assert (result.states - rotation(y0, n * theta)).abs().max() < 1e-12
    truth = rotation(y0, t)
    m = rollout_metrics(result, truth, t, system, system, threshold=0.1)
    # |R(a) y0 - R(b) y0| = 2 |y0| sin(|a - b| / 2)
    expected_l2 = 2 * y0.norm(dim=-1)[None, :] * torch.sin(n[:, None] * abs(theta - dt) / 2)
    assert torch.allclose(m.per_trajectory["l2"], expected_l2, rtol=1e-8, atol=1e-13)
    assert m.summary["traj_l2_mean"] == pytest.approx(float(expected_l2.mean()), rel=1e-8)
    assert m.summary["energy_drift_true_max"] < 1e-14
    assert m.summary["energy_drift_pred_max"] < 1e-14
    assert m.summary["rollout_failed"] == 0.0 and m.summary["vpt_censored"] == 1.0
    assert m.summary["vpt_mean"] == pytest.approx(steps * dt)
    assert m.summary["rollout_dt"] == pytest.approx(dt / substeps)


def test_true_h_rollout_matches_clean_henon_heiles_data():
    """The true H rolled out with Gauss–Legendre 4 stays within its truncation error of a
    Gauss–Legendre 6 ground truth; an untrained network is off by orders of magnitude."""
    system = get_system("henon_heiles")
    y0 = system.sample(4, torch.Generator().manual_seed(1))
    dt, steps = 0.05, 40
    truth = simulate(system, y0, dt / 2, 2, steps, get_integrator("gauss_legendre6", tol=1e-14))
    t = torch.arange(steps + 1, dtype=F64) * dt
    result = rollout(system, y0, dt, steps, "gauss_legendre4")
    m = rollout_metrics(result, truth, t, system, system)
    assert m.summary["traj_l2_mean"] < 1e-8
    # the true H along the predicted path: GL4's bounded O(h^4) energy error, nothing more
    energy = system(result.states.reshape(-1, 4)).reshape(steps + 1, 4)
    assert m.summary["energy_drift_true_max"] == float((energy - energy[0]).abs().max())
    assert 0 < m.summary["energy_drift_true_max"] < dt**4
    assert m.summary["energy_drift_data_max"] < 1e-12
    assert m.summary["rel_err_gmean"] < 1e-8 and m.summary["vpt_censored"] == 1.0
    torch.manual_seed(0)
    model = HNN(2).double().requires_grad_(False)
    bad = rollout_metrics(rollout(model, y0, dt, steps, "gauss_legendre4"), truth, t, system, model)
    assert bad.summary["traj_l2_mean"] > 1e4 * m.summary["traj_l2_mean"]


def _first_failure_by_single_steps(H, y0, dt, steps, integrator):
    """Independent reference: step one trajectory at a time until it fails or leaves R^n."""
    out = []
    for b in range(y0.shape[0]):
        y, fail = y0[b : b + 1], -1
        for k in range(1, steps + 1):
            try:
                y = hnnsym.integrate(H, y, dt, 1, integrator, "backprop")[-1]
            except ConvergenceError:
                fail = k
                break
            if not torch.isfinite(y).all():
                fail = k
                break
        out.append(fail)
    return out


@pytest.mark.parametrize("integrator", ["implicit_midpoint", "rk4"])
def test_failing_trajectories_are_isolated_and_reported(integrator):
    """H = p^2/2 - q^4 sends q to infinity in finite time from q0 = 1; from q0 = 0.01 it barely
    moves. The fixed-point iteration (implicit midpoint) or the state itself (rk4: overflow to
    Inf/NaN) gives up at some step; the rollout must mark that trajectory alone, at that step."""

    def H(y):
        return 0.5 * y[:, 1] ** 2 - y[:, 0] ** 4

    y0 = torch.tensor([[0.01, 0.0], [1.0, 0.0], [0.02, 0.01], [1.5, 0.0]], dtype=F64)
    dt, steps = 0.05, 60
    expected = _first_failure_by_single_steps(H, y0, dt, steps, integrator)
    assert expected[0] == expected[2] == -1 and expected[1] > 1 and expected[3] > 0
    result = rollout(H, y0, dt, steps, integrator, segment=7)
    assert result.fail_step.tolist() == expected
    assert all(bool(r) == (f >= 0) for r, f in zip(result.fail_reason, expected))
    fine = hnnsym.integrate(H, y0[[0, 2]], dt, steps, integrator, "backprop")
    assert torch.allclose(result.states[:, [0, 2]], fine, rtol=0, atol=1e-12)
    for b in (1, 3):
        k = expected[b]
        assert torch.isfinite(result.states[:k, b]).all() and result.states[k:, b].isnan().all()

    t = torch.arange(steps + 1, dtype=F64) * dt
    truth = torch.zeros_like(result.states)
    m = rollout_metrics(result, truth + 0.5, t, lambda y: 0.5 * (y**2).sum(-1), H, threshold=0.5)
    assert m.summary["rollout_failed"] == 0.5
    fail_times = [float(t[expected[b]]) for b in (1, 3)]
    assert m.summary["rollout_fail_time_mean"] == pytest.approx(sum(fail_times) / 2)
    assert (m.per_trajectory["rel_err"][expected[1] :, 1] == 1.0).all()
    assert m.per_trajectory["vpt"][1] <= fail_times[0] + 1e-12
    for key in ("traj_mse", "traj_l2_mean", "energy_drift_true_max", "rel_err_gmean"):
        assert math.isfinite(m.summary[key])
    assert int(m.curves["n_valid"][-1]) == 2


def test_rollout_result_valid_mask():
    states = torch.zeros(4, 3, 2, dtype=F64)
    result = RolloutResult(states, torch.tensor([-1, 2, 0]), ["", "x", "y"], 0.1, 1)
    assert result.valid().tolist() == [
        [True, True, False], [True, True, False], [True, False, False], [True, False, False],
    ]  # fmt: skip
