"""The integrators, measured: convergence order against an independent solver (scipy DOP853),
symplecticity of the one-step map, long-run energy behaviour, the tableaux' algebra, the stage
solver's failure reporting and ``integrate``'s argument checks. All in float64.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pytest
import torch
from conftest import make_model
from omegaconf import OmegaConf
from scipy.integrate import solve_ivp
from torch.autograd.functional import jacobian

from hnnsym import integrate, solve
from hnnsym.config import CONF_DIR
from hnnsym.config.build import build_gradient, build_integrator
from hnnsym.errors import ConvergenceError, UserError
from hnnsym.ode.integrators import TABLEAUX, get_integrator
from hnnsym.ode.problem import SolverStats
from hnnsym.physics.models import HNN, SeparableHNN
from hnnsym.physics.systems import get_system

F64 = torch.float64
THEORY = {
    "implicit_midpoint": 2,
    "gauss_legendre4": 4,
    "gauss_legendre6": 6,
    "leapfrog": 2,
    "symplectic_euler": 1,
    "rk4": 4,
}
SYMPLECTIC = [name for name in THEORY if name != "rk4"]
# Step sizes per method: large enough that the error stays well above the reference's 1e-13
# (GL6 at h = 1/8 over T = 2 is already ~1e-11), small enough to be in the asymptotic regime.
STEP_SIZES = {
    "implicit_midpoint": [0.2, 0.1, 0.05, 0.025],
    "gauss_legendre4": [0.4, 0.2, 0.1, 0.05],
    "gauss_legendre6": [0.5, 0.25, 0.125],
    "leapfrog": [0.2, 0.1, 0.05, 0.025],
    "symplectic_euler": [0.2, 0.1, 0.05, 0.025],
    "rk4": [0.4, 0.2, 0.1, 0.05],
}
T_END = 2.0


def unflagged(system):
    """The bare H function of a System: no ``separable`` flag, so every implicit method goes
    through the fixed-point solver (the System itself is flagged when its H is separable)."""
    return system.hamiltonian


# ---- independent reference: hand-written right-hand sides for scipy ---------------------------
def _rhs_coupled_oscillator(t, y, alpha=0.5):
    q, p = y
    return [p + alpha * q, -q - alpha * p]


def _rhs_henon_heiles(t, y):
    qx, qy, px, py = y
    return [px, py, -qx - 2 * qx * qy, -qy - qx**2 + qy**2]


def _rhs_double_well(t, y):
    q, p = y
    return [p, q - q**3]


CASES = {
    # name: (system name, rhs, initial states (B, 2d))
    "coupled_oscillator": (
        "coupled_oscillator",
        _rhs_coupled_oscillator,
        [[1.0, 0.5], [-0.7, 1.2]],
    ),
    "henon_heiles": (
        "henon_heiles",
        _rhs_henon_heiles,
        [[0.2, -0.1, 0.15, 0.3], [-0.3, 0.2, 0.1, -0.2]],
    ),
    "double_well": ("double_well", _rhs_double_well, [[0.4, 0.9], [1.3, -0.3]]),
}


@functools.lru_cache
def _reference(case: str) -> np.ndarray:
    """y(T_END) from scipy's DOP853 at rtol = atol = 1e-13: (B, 2d)."""
    _, rhs, y0 = CASES[case]
    out = [
        solve_ivp(rhs, (0.0, T_END), y, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
        for y in y0
    ]
    return np.stack(out)


def _measured_order(integrator: str, case: str, separable: bool) -> tuple[float, list, SolverStats]:
    system_name, _, y0 = CASES[case]
    system = get_system(system_name)
    H = system if separable else unflagged(system)
    y0 = torch.tensor(y0, dtype=F64)
    ref = _reference(case)
    hs, errs, stats = STEP_SIZES[integrator], [], SolverStats()
    for h in hs:
        with torch.no_grad():
            sol = solve(
                H, y0, h, round(T_END / h), get_integrator(integrator, tol=1e-14), "backprop"
            )
        stats.merge(sol.stats)
        errs.append(float(np.abs(sol.ys[-1].numpy() - ref).max()))
    slope = float(np.polyfit(np.log(hs), np.log(errs), 1)[0])
    return slope, errs, stats


@pytest.mark.parametrize("integrator", list(THEORY))
@pytest.mark.parametrize("case", ["coupled_oscillator", "henon_heiles"])
def test_convergence_order_through_the_stage_solver(integrator, case):
    """Nonseparable path (no ``separable`` flag): every implicit method goes through fixed-point
    iteration; the slope of log error vs log h matches the theoretical order within ±0.3."""
    slope, errs, stats = _measured_order(integrator, case, separable=False)
    assert abs(slope - THEORY[integrator]) <= 0.3, (slope, errs)
    assert TABLEAUX[integrator].order == THEORY[integrator]
    if integrator == "rk4":
        assert stats.steps == 0  # explicit: no fixed-point solves
    else:
        assert stats.steps > 0 and stats.unconverged == 0


@pytest.mark.parametrize("integrator", ["leapfrog", "symplectic_euler"])
@pytest.mark.parametrize("case", ["henon_heiles", "double_well"])
def test_convergence_order_explicit_separable_path(integrator, case):
    """With H flagged separable, leapfrog is kick–drift–kick and symplectic Euler explicit: no
    fixed-point iteration at all, and the same order."""
    slope, errs, stats = _measured_order(integrator, case, separable=True)
    assert abs(slope - THEORY[integrator]) <= 0.3, (slope, errs)
    assert stats.steps == 0


@pytest.mark.parametrize("integrator", ["leapfrog", "symplectic_euler"])
def test_explicit_path_equals_the_implicit_solve(integrator):
    """The explicit evaluation order computes the same map as solving the stage equations."""
    system = get_system("henon_heiles")
    y0 = torch.tensor(CASES["henon_heiles"][2], dtype=F64)
    integ = get_integrator(integrator, tol=1e-15)
    with torch.no_grad():
        explicit = integrate(system, y0, 0.1, 20, integ, "backprop")
        implicit = integrate(unflagged(system), y0, 0.1, 20, integ, "backprop")
    torch.testing.assert_close(explicit, implicit, rtol=0, atol=1e-14)


# ---- symplecticity ----------------------------------------------------------------------------
def _J(d: int) -> torch.Tensor:
    eye, zero = torch.eye(d, dtype=F64), torch.zeros(d, d, dtype=F64)
    return torch.cat([torch.cat([zero, eye], 1), torch.cat([-eye, zero], 1)], 0)


def _symplectic_case(name: str):
    """(H, y) for one symplecticity check."""
    if name == "coupled_oscillator":
        return get_system("coupled_oscillator"), torch.tensor([0.7, -0.4], dtype=F64)
    if name == "henon_heiles":
        return get_system("henon_heiles"), torch.tensor([0.2, -0.1, 0.15, 0.3], dtype=F64)
    cls, d = {"hnn_d1": (HNN, 1), "hnn_d2": (HNN, 2), "separable_hnn_d1": (SeparableHNN, 1)}[name]
    y = torch.tensor([0.6, -0.3, 0.4, 0.2][: 2 * d], dtype=F64)
    return make_model(cls, d, seed=d, gain=20.0), y


SYMPLECTIC_CASES = ["coupled_oscillator", "henon_heiles", "hnn_d1", "hnn_d2", "separable_hnn_d1"]
H_SYMPLECTIC = 0.3


def _one_step_map(name: str, integrator: str):
    """(M, M - I) with M = ∂y_1/∂y_0, by autograd through the converged fixed-point solve."""
    H, y = _symplectic_case(name)
    integ = get_integrator(integrator, tol=1e-15)
    M = jacobian(lambda x: integrate(H, x[None], H_SYMPLECTIC, 1, integ, "backprop")[-1, 0], y)
    return M, M - torch.eye(y.shape[0], dtype=F64)


def _symplecticity_defect(M: torch.Tensor) -> float:
    """max |MᵀJM - J|: zero exactly when the map is symplectic."""
    J = _J(M.shape[0] // 2)
    return float((M.T @ J @ M - J).abs().max())


@pytest.mark.parametrize("case", SYMPLECTIC_CASES)
@pytest.mark.parametrize("integrator", SYMPLECTIC)
def test_one_step_map_is_symplectic(integrator, case):
    M, M_minus_I = _one_step_map(case, integrator)
    assert float(M_minus_I.abs().max()) > 0.05  # a real step, not a near-identity map
    assert _symplecticity_defect(M) <= 1e-12


@pytest.mark.parametrize("case", SYMPLECTIC_CASES)
def test_rk4_one_step_map_is_not_symplectic(case):
    """The same check detects a non-symplectic method, on the same problems."""
    M, _ = _one_step_map(case, "rk4")
    assert _symplecticity_defect(M) > 1e-8


@pytest.mark.parametrize("name", list(THEORY))
def test_tableau_symplecticity_condition(name):
    """b_i = b̂_i and b_i â_ij + b̂_j a_ji = b_i b̂_j (a on q, â on p): holds exactly for the
    symplectic tableaux, fails for RK4; weights sum to one (consistency)."""
    t = TABLEAUX[name]
    a, b = np.array(t.a_q), np.array(t.b_q)
    ah, bh = np.array(t.a_p), np.array(t.b_p)
    assert b.sum() == pytest.approx(1, abs=1e-15) and bh.sum() == pytest.approx(1, abs=1e-15)
    defect = np.abs(b[:, None] * ah + (bh[:, None] * a).T - np.outer(b, bh)).max()
    defect = max(defect, np.abs(b - bh).max())
    assert t.symplectic == (name in SYMPLECTIC)
    if t.symplectic:
        assert defect <= 1e-15
    else:
        assert defect > 0.01


@pytest.mark.parametrize("name", ["implicit_midpoint", "gauss_legendre4", "gauss_legendre6"])
def test_gauss_legendre_is_its_own_symplectic_partner(name):
    t = TABLEAUX[name]
    np.testing.assert_allclose(np.array(t.symplectic_partner().a_q), np.array(t.a_q), atol=1e-15)


def test_partner_of_a_partitioned_tableau_is_refused():
    with pytest.raises(ValueError, match="partitioned"):
        TABLEAUX["leapfrog"].symplectic_partner()


# ---- energy over a long run -----------------------------------------------------------------
ENERGY_H, ENERGY_STEPS = 0.2, 500  # T = 100: ~15 periods of the pendulum


@functools.lru_cache
def _energy_error(integrator: str) -> np.ndarray:
    """H(y_n) - H(y_0) along a pendulum rollout: (steps+1, B)."""
    system = get_system("pendulum")
    y0 = torch.tensor([[0.5, 0.0], [1.2, 0.3], [-0.8, 0.9]], dtype=F64)
    H = system if integrator in ("leapfrog", "symplectic_euler") else unflagged(system)
    with torch.no_grad():
        traj = integrate(H, y0, ENERGY_H, ENERGY_STEPS, integrator, "backprop")
    E = system(traj.reshape(-1, 2)).reshape(ENERGY_STEPS + 1, -1)
    return (E - E[0]).numpy()


def _first_last_tenth(err: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    tenth = ENERGY_STEPS // 10
    return np.abs(err[1 : tenth + 1]).max(0), np.abs(err[-tenth:]).max(0)


@pytest.mark.parametrize("integrator", SYMPLECTIC)
def test_symplectic_energy_error_stays_bounded(integrator):
    """No secular trend: the largest energy error in the last tenth of the run is no larger than
    in the first tenth (up to 20%), for each initial condition."""
    err = _energy_error(integrator)
    first, last = _first_last_tenth(err)
    assert (first > 1e-13).all()  # above rounding: the comparison means something
    assert (last <= 1.2 * first).all(), (first, last)


def test_rk4_energy_drifts():
    """RK4 loses energy steadily: the mean error over each tenth of the run decreases strictly,
    and the last tenth's largest error is over 5x the first's (linear drift: ~10x)."""
    err = _energy_error("rk4")
    first, last = _first_last_tenth(err)
    assert (last > 5 * first).all(), (first, last)
    tenths = err[1:].reshape(10, -1, err.shape[1]).mean(1)
    assert (np.diff(tenths, axis=0) < 0).all()


# ---- non-convergence ------------------------------------------------------------------------
DW_FAR = [[2.0, 2.0]]


def test_step_too_large_raises_a_clear_convergence_error():
    system = get_system("double_well")
    y0 = torch.tensor(DW_FAR, dtype=F64)
    with pytest.raises(ConvergenceError) as info:
        integrate(system, y0, 2.0, 3, "implicit_midpoint", "backprop")
    msg = str(info.value)
    assert "at step 0" in msg and "residual" in msg and "smaller dt" in msg
    assert "diverged" in msg  # h = 2 blows the iteration up: it stops at the first non-finite value


def test_iteration_cap_raises_with_step_and_residual():
    system = get_system("double_well")
    y0 = torch.tensor([[0.5, 0.1]], dtype=F64)
    with pytest.raises(ConvergenceError, match=r"at step 0: residual \S+ > tol 1e-300 after 1 "):
        integ = get_integrator("gauss_legendre4", tol=1e-300, max_iter=1)
        integrate(system, y0, 0.1, 3, integ, "backprop")


def test_on_fail_warn_and_ignore_report_through_stats():
    system = get_system("double_well")
    y0 = torch.tensor([[0.5, 0.1]], dtype=F64)
    opts = dict(tol=1e-300, max_iter=2)
    integ = get_integrator("implicit_midpoint", on_fail="warn", **opts)
    with pytest.warns(RuntimeWarning, match="did not converge at step") as record:
        sol = solve(system, y0, 0.1, 4, integ, "backprop")
    traj, stats = sol.ys, sol.stats
    assert len(record) == 4
    assert all(f"at step {n}:" in str(w.message) for n, w in enumerate(record))
    assert torch.isfinite(traj).all()
    assert (stats.steps, stats.unconverged, stats.iterations) == (4, 4, 8)
    assert stats.first_failure == "at step 0" and stats.max_residual > 0

    integ = get_integrator("implicit_midpoint", on_fail="ignore", **opts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = solve(system, y0, 0.1, 4, integ, "backprop").stats
    assert stats.unconverged == 4


def test_stats_of_a_converged_run():
    system = get_system("double_well")
    y0 = torch.tensor([[0.5, 0.1], [-1.0, 0.3]], dtype=F64)
    integ = get_integrator("gauss_legendre4", tol=1e-13)
    stats = solve(system, y0, 0.1, 6, integ, "backprop").stats
    assert stats.steps == 6 and stats.unconverged == 0 and stats.first_failure == ""
    assert 1 <= stats.mean_iterations <= stats.max_iterations <= 50
    assert stats.max_residual <= 1e-13


# ---- argument validation --------------------------------------------------------------------
SOLVER_OPTIONS = ("tol", "max_iter", "predictor", "on_fail")


def _call(**overrides):
    """integrate() on a small problem; solver options in ``overrides`` build the integrator (they
    belong to the integrator object, not to integrate)."""
    options = {k: overrides.pop(k) for k in SOLVER_OPTIONS if k in overrides}
    args = dict(
        H=get_system("double_well"),
        y0=torch.tensor([[0.5, 0.1]], dtype=F64),
        h=0.1,
        steps=3,
        integrator="implicit_midpoint",
        gradient="backprop",
    )
    args.update(overrides)
    if options:
        args["integrator"] = get_integrator(args["integrator"], **options)
    return integrate(**args)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(y0=torch.zeros(2, dtype=F64)), r"y0 must have shape \(B, 2d\), got \(2,\)"),
        (dict(y0=torch.zeros(2, 3, dtype=F64)), r"y0 must have shape \(B, 2d\), got \(2, 3\)"),
        (dict(y0=torch.zeros(1, 2, 2, dtype=F64)), r"y0 must have shape \(B, 2d\)"),
        (dict(h=0.0), "step size h must be a finite number > 0, got 0.0"),
        (dict(h=-0.1), "step size h must be a finite number > 0, got -0.1"),
        (dict(h=math.nan), "step size h must be a finite number > 0, got nan"),
        (dict(h=math.inf), "step size h must be a finite number > 0, got inf"),
        (dict(h="0.1"), "step size h must be a finite number > 0"),
        (dict(steps=-1), "steps must be a whole number >= 0, got -1"),
        (dict(steps=2.5), "steps must be a whole number >= 0, got 2.5"),
        (dict(integrator="nope"), "unknown integrator 'nope'; choose one of .*implicit_midpoint"),
        (dict(gradient="nope"), "unknown gradient method 'nope'; choose one of .*backprop"),
        (dict(guess=torch.zeros(3, 1, 2, dtype=F64)), r"guess must have shape \(4, 1, 2\)"),
        (dict(tol=0.0), "tol must be > 0"),
        (dict(max_iter=0), "max_iter must be >= 1"),
        (dict(predictor="magic"), "predictor must be one of"),
        (dict(on_fail="shrug"), "on_fail must be one of"),
    ],
)
def test_integrate_rejects_bad_arguments(overrides, message):
    with pytest.raises(ValueError, match=message):
        _call(**overrides)


def test_integrate_output_shape():
    y0 = torch.tensor([[0.5, 0.1], [0.2, -0.3], [1.0, 0.0]], dtype=F64)
    out = _call(y0=y0, steps=5)
    assert out.shape == (6, 3, 2) and out.dtype == F64
    assert torch.equal(out[0], y0)
    zero = _call(y0=y0, steps=0)
    assert zero.shape == (1, 3, 2) and torch.equal(zero[0], y0)


# ---- integrators and gradient methods from their config groups ---------------------------------


@pytest.mark.parametrize("group", ["integrator", "gradient"])
def test_every_config_of_the_group_builds_the_object_its_name_labels(group):
    build = build_integrator if group == "integrator" else build_gradient
    files = sorted((CONF_DIR / group).glob("*.yaml"))
    assert len(files) >= 5
    for path in files:
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        assert "_target_" in node, path
        assert build(node).name == node["name"] == path.stem


def test_a_key_the_integrator_does_not_take_is_one_line():
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "integrator" / "tao.yaml"))
    with pytest.raises(
        UserError, match=r"^integrator=tao takes no key integrator.tol \(it takes: omega\)$"
    ):
        build_integrator({**node, "tol": 1e-8})
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "gradient" / "checkpoint.yaml"))
    with pytest.raises(UserError, match="^gradient=checkpoint takes no key gradient.chunk "):
        build_gradient({**node, "chunk": 4})
    with pytest.raises(UserError, match="integrator.name is 'rk4' but its _target_ builds 'tao'"):
        build_integrator({"_target_": "hnnsym.ode.integrators.TaoSplitting", "name": "rk4"})


def test_the_name_nodes_of_older_checkpoints_still_build():
    # before _target_, a node was the name plus the stage-solver keys of every integrator
    old = {"name": "tao", "omega": 5.0, "tol": None, "max_iter": 50, "predictor": "extrapolate"}
    assert build_integrator(old) == get_integrator("tao", omega=5.0)
    rk = build_integrator({"name": "gauss_legendre4", "tol": 1e-9, "predictor": "rk2"})
    assert (rk.name, rk.solver.tol, rk.predictor) == ("gauss_legendre4", 1e-9, "rk2")
    grad = build_gradient({"name": "checkpoint", "keep_every": "sqrt"})
    assert (grad.name, grad.keep_every) == ("checkpoint", "sqrt")
    with pytest.raises(UserError, match="integrator 'euler' is not one of"):
        build_integrator({"name": "euler"})
