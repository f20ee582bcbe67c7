"""The 3-D coupled pendulum (Finzi et al.'s CoupledPendulum): the sampler's convention against
the reference's Euler-angle construction, the Cartesian ground truth against an independent
solution of the equations of motion in spherical angles, energy and constraints along the stored
truth, CHNN / CLNN with the true masses and potential plugged in, RATTLE, the stages end to end,
and the one-line refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from scipy.spatial.transform import Rotation

from hnnsym import solve
from hnnsym.compatibility import coordinates_problem
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.models import HNN
from hnnsym.physics.pendulums import chain_parameters, spherical_to_cartesian
from hnnsym.physics.systems import get_system

F64 = torch.float64


def system_and_states(bobs: int, n: int = 3, seed: int = 0, **params):
    system = get_system("coupled_pendulum", bobs=bobs, **params)
    return system, system.sample(n, torch.Generator().manual_seed(seed))


# ---- the system and its sampler ----------------------------------------------------------------


def test_spherical_map_is_the_references_euler_construction():
    """u(φ, θ): the third column of the ZXZ rotation of Euler angles (φ + π/2, θ, 0) with its
    components 0 and 2 swapped and component 0 negated (MagnetPendulum.body2globalCoords), via
    scipy's Rotation; u̇ against central differences along a path of the angles."""
    rng = np.random.default_rng(0)
    angles = rng.normal(size=(5, 4)) + np.array([math.pi, math.pi / 2] * 2)
    rates = rng.normal(size=(5, 4))
    u, du = spherical_to_cartesian(torch.as_tensor(angles), torch.as_tensor(rates))
    for b in range(5):
        for i in range(2):
            phi, theta = angles[b, 2 * i], angles[b, 2 * i + 1]
            z = Rotation.from_euler("ZXZ", [phi + math.pi / 2, theta, 0.0]).as_matrix()[:, 2]
            want = np.array([-z[2], z[1], z[0]])
            assert np.allclose(u[b, i].numpy(), want, atol=1e-15)
    eps = 1e-6
    up, _ = spherical_to_cartesian(torch.as_tensor(angles + eps * rates), torch.as_tensor(rates))
    dn, _ = spherical_to_cartesian(torch.as_tensor(angles - eps * rates), torch.as_tensor(rates))
    assert torch.allclose(du, (up - dn) / (2 * eps), atol=1e-9)
    # the offsets (π, π/2) hang the bob straight down
    down, _ = spherical_to_cartesian(
        torch.tensor([math.pi, math.pi / 2], dtype=F64), torch.zeros(2, dtype=F64)
    )
    assert torch.allclose(down[0], torch.tensor([0.0, 0.0, -1.0], dtype=F64), atol=1e-15)


def test_sampler_draws_the_references_initial_conditions_from_the_generator():
    """Each state is a_i + u(φ, θ) with angles π + 0.3 N(0, 1), π/2 + 0.3 N(0, 1) and rates
    0.3 N(0, 1), drawn as one (n, 2, 2N) normal array from the generator; on the manifold;
    p = m v; the same generator seed gives the same states."""
    masses = [0.7, 1.3]
    system, y = system_and_states(2, n=4, seed=5, masses=masses)
    draw = 0.3 * torch.randn((4, 2, 4), generator=torch.Generator().manual_seed(5), dtype=F64)
    draw[:, 0, 0::2] += math.pi
    draw[:, 0, 1::2] += math.pi / 2
    u, du = spherical_to_cartesian(draw[:, 0], draw[:, 1])
    anchors = torch.tensor([[0.0, 0, 0], [1.0, 0, 0]], dtype=F64)
    m = torch.tensor(masses, dtype=F64).repeat_interleave(3)
    assert torch.allclose(y[:, :6], (anchors + u).flatten(-2), atol=1e-13)
    assert torch.allclose(y[:, 6:], du.flatten(-2) * m, atol=1e-13)
    assert max(system.constraint_violation(y)) < 1e-13
    assert torch.equal(y, system.sample(4, torch.Generator().manual_seed(5)))
    assert not torch.equal(y, system.sample(4, torch.Generator().manual_seed(6)))


def test_parameters_masses_and_energy():
    system = get_system("coupled_pendulum")
    assert system.dim == 6 and system.spatial == 3 and system.masses == (1.0, 1.0)
    assert system.params == {"bobs": 2, "g": 9.81, "k": 10.0, "length": 1.0, "masses": [1.0, 1.0]}
    drawn = get_system("coupled_pendulum", bobs=3, parameter_seed=0)
    assert list(drawn.masses) == chain_parameters(3, 0)[0]  # the reference's m=None (seed 0)
    assert drawn.params["parameter_seed"] == 0
    # H at a hand-made state: bob 1 at (0, 0, -1), bob 2 at (1, sin a, -cos a), momenta (1, 2, 3)
    a = 0.4
    x = torch.tensor([0.0, 0, -1, 1, math.sin(a), -math.cos(a)], dtype=F64)
    p = torch.tensor([1.0, 2, 3, 0, 0, 0], dtype=F64)
    stretch = math.sqrt(1 + math.sin(a) ** 2 + (1 - math.cos(a)) ** 2) - 1
    want = 14 / 2 + 9.81 * (-1 - math.cos(a)) + 0.5 * 10 * stretch**2
    assert float(system(torch.cat([x, p])[None])) == pytest.approx(want, rel=1e-14)


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan")])
def test_bad_bobs_are_one_line_errors(bad):
    with pytest.raises(ValueError, match="bobs must be a whole number >= 1"):
        get_system("coupled_pendulum", bobs=bad)


def test_generate_refuses_bad_bobs(compose_config):
    from hnnsym.data.simulate import generate

    for bad in ("0", "2.5"):
        cfg = compose_config("generate", ["system=coupled_pendulum", f"system.params.bobs={bad}"])
        with pytest.raises(UserError, match="bobs must be a whole number >= 1") as err:
            generate(cfg)
        assert "\n" not in str(err.value)


# ---- the ground truth against the equations of motion in spherical angles ----------------------


def _u(phi, theta):
    """u and its first and second partial derivatives in (φ, θ), written out (numpy)."""
    sp, cp, st, ct = np.sin(phi), np.cos(phi), np.sin(theta), np.cos(theta)
    u = np.array([-ct, st * sp, st * cp])
    u_p = np.array([0.0, st * cp, -st * sp])
    u_t = np.array([st, ct * sp, ct * cp])
    u_pp = np.array([0.0, -st * sp, -st * cp])
    u_pt = np.array([0.0, ct * cp, -ct * sp])
    u_tt = np.array([ct, -st * sp, -st * cp])
    return u, u_p, u_t, u_pp, u_pt, u_tt


def angle_rhs(m: np.ndarray, g: float, k: float):
    """The coupled pendulums' equations of motion in spherical angles s = [φ_i, θ_i, φ̇_i, θ̇_i]
    per bob (l = 1, anchors (i, 0, 0)): Newton's law projected on the sphere's tangent vectors
    u_φ, u_θ (the rod's force is along u; the Euler–Lagrange equations of L(φ, θ, φ̇, θ̇)):
    m_i (u_φ · ẍ_i) = u_φ · F_i, likewise for u_θ, with ẍ_i = u_φ φ̈ + u_θ θ̈ + u_φφ φ̇²
    + 2 u_φθ φ̇θ̇ + u_θθ θ̇², |u_φ|² = sin²θ, |u_θ|² = 1, u_φ · u_θ = 0, and
    F = −g m ẑ + the springs k(|x_{i+1} − x_i| − 1) along x_{i+1} − x_i."""
    N = len(m)

    def rhs(t, s):
        ang, rate = s[: 2 * N].reshape(N, 2), s[2 * N :].reshape(N, 2)
        parts = [_u(*ang[i]) for i in range(N)]
        x = np.array([[i, 0.0, 0.0] for i in range(N)]) + np.array([q[0] for q in parts])
        F = np.zeros((N, 3))
        F[:, 2] = -g * m
        for i in range(N - 1):
            d = x[i + 1] - x[i]
            f = k * (np.linalg.norm(d) - 1) * d / np.linalg.norm(d)
            F[i] += f
            F[i + 1] -= f
        acc = []
        for i, (_, u_p, u_t, u_pp, u_pt, u_tt) in enumerate(parts):
            dp, dt = rate[i]
            c = u_pp * dp**2 + 2 * u_pt * dp * dt + u_tt * dt**2
            acc += [(u_p @ F[i] / m[i] - u_p @ c) / (u_p @ u_p), u_t @ F[i] / m[i] - u_t @ c]
        return np.concatenate([rate.ravel(), acc])

    return rhs


def to_spherical(y: np.ndarray, m: np.ndarray) -> np.ndarray:
    """A Cartesian state (6N,) on the manifold -> [φ_i, θ_i, φ̇_i, θ̇_i]."""
    N = len(m)
    u = y[: 3 * N].reshape(N, 3) - np.array([[i, 0.0, 0.0] for i in range(N)])
    du = y[3 * N :].reshape(N, 3) / m[:, None]
    phi, theta = np.arctan2(u[:, 1], u[:, 2]), np.arccos(-u[:, 0])
    ang = np.stack([phi, theta], -1)
    rates = np.array(
        [[_u(*ang[i])[1] @ du[i] / np.sin(theta[i]) ** 2, _u(*ang[i])[2] @ du[i]] for i in range(N)]
    )
    return np.concatenate([ang.ravel(), rates.ravel()])


def from_spherical(s: np.ndarray, m: np.ndarray) -> np.ndarray:
    N = len(m)
    ang, rate = s[: 2 * N].reshape(N, 2), s[2 * N :].reshape(N, 2)
    x, p = [], []
    for i in range(N):
        u, u_p, u_t, *_ = _u(*ang[i])
        x.append(u + np.array([i, 0.0, 0.0]))
        p.append(m[i] * (u_p * rate[i, 0] + u_t * rate[i, 1]))
    return np.concatenate([np.ravel(x), np.ravel(p)])


@pytest.mark.parametrize(("bobs", "params"), [(1, {}), (2, {"parameter_seed": 0})])
def test_ground_truth_matches_an_independent_solution_in_spherical_angles(bobs, params):
    """Gauss–Legendre 6 on the projected Cartesian field (generate's ground truth, h = 0.005)
    against scipy's DOP853 (rtol = atol = 1e-12) on the angle equations of motion, over 0.6 s;
    bobs = 2 with the spring and unequal masses."""
    system, y0 = system_and_states(bobs, n=3, seed=3, **params)
    steps, h = 120, 0.005
    with torch.no_grad():
        ys = solve(system, y0, h, steps, get_integrator("gauss_legendre6", tol=1e-14),
                   "backprop").ys  # fmt: skip
    m = np.array(system.masses)
    rhs = angle_rhs(m, system.params["g"], system.params["k"])
    for b in range(3):
        s0 = to_spherical(y0[b].numpy(), m)
        assert np.allclose(from_spherical(s0, m), y0[b].numpy(), atol=1e-13)
        sol = solve_ivp(rhs, (0, steps * h), s0, method="DOP853", rtol=1e-12, atol=1e-12)
        expect = torch.as_tensor(from_spherical(sol.y[:, -1], m))
        moved = (expect - y0[b]).abs().max()
        assert moved > 0.05  # the bobs moved well beyond the tolerance below
        assert torch.allclose(ys[-1, b], expect, rtol=1e-10, atol=1e-10 * expect.abs().max())
    phi, phidot = system.constraint_violation(ys)
    assert phi < 1e-12 and phidot < 1e-12


# ---- models with the true parameters ------------------------------------------------------------


def true_potential_model(cls, system):
    """``cls`` on the system's constraints with the true masses and V (with its gradient) in
    place of the network."""
    model = cls(system.dim, hidden=(8,), system="coupled_pendulum",
                system_params=system.params).double()  # fmt: skip
    n = system.dim
    with torch.no_grad():
        model.log_mass.copy_(torch.tensor(system.masses, dtype=F64).log())

    def V(x):
        return system(torch.cat([x, torch.zeros_like(x)], -1))

    model.potential = V
    model.potential_gradient = lambda x: system.vector_field.gradient(
        torch.cat([x, torch.zeros_like(x)], -1)
    )[..., :n]
    return model


@pytest.mark.parametrize("cls", [CHNN, CLNN])
def test_models_with_the_true_masses_and_potential_give_the_true_field(cls):
    system, y = system_and_states(2, n=6, seed=1, parameter_seed=0)
    model = true_potential_model(cls, system)
    assert model.spatial == 3 and model.bodies == 2 and model.constraints.count == 2
    assert torch.allclose(model.masses(), torch.tensor(system.masses, dtype=F64))
    with torch.no_grad():
        want = system.vector_field(y)
        got = model.vector_field(y)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12 * want.abs().max())
    assert torch.allclose(model(y), system(y), rtol=1e-13)
    assert model.position_constraints(y[:, :6]).abs().max() < 1e-13  # the system's lengths


def test_rattle_steps_the_system_and_chnn_alike():
    """integrator=rattle (multiplier form) on the true system and on CHNN with the true
    parameters: the same states to the Newton tolerance, Φ at rounding, and order 2 against the
    Gauss–Legendre ground truth (h = 0.01 and 0.005 over 0.3 s)."""
    system, y0 = system_and_states(2, n=4, seed=2)
    model = true_potential_model(CHNN, system)
    h, steps = 0.01, 30
    rattle = get_integrator("rattle", tol=1e-13)
    with torch.no_grad():
        truth = solve(system, y0, h, steps, get_integrator("gauss_legendre6", tol=1e-14),
                      "backprop").ys  # fmt: skip
        ys = solve(system, y0, h, steps, rattle, "backprop").ys
        ym = solve(model, y0, h, steps, rattle, "backprop").ys
        half = solve(system, y0, h / 2, 2 * steps, rattle, "backprop").ys
    assert rattle.multipliers(system) and rattle.multipliers(model)
    assert (ys - ym).abs().max() < 1e-10
    assert max(system.constraint_violation(ys)) < 1e-11
    err, err_half = ((y[-1] - truth[-1]).abs().max() for y in (ys, half))
    assert 1e-7 < err < 5e-3 and 3.5 < err / err_half < 4.5  # second order


# ---- the stages -------------------------------------------------------------------------------


def test_coordinates_problem_refuses_an_unconstrained_h():
    hnn = coordinates_problem("coupled_pendulum", HNN(6, hidden=(8,)))
    assert "no angle-coordinate version of system=coupled_pendulum is built" in hnn
    assert "\n" not in hnn and "model=chnn" in hnn
    chnn = CHNN(6, hidden=(8,), system="coupled_pendulum", system_params={"bobs": 2})
    assert coordinates_problem("coupled_pendulum", chnn) is None
    with pytest.raises(ValueError, match="Cartesian coordinates.*not 9"):
        CHNN(9, hidden=(8,), system="coupled_pendulum", system_params={"bobs": 2})
    with pytest.raises(ValueError, match="not 2"):
        CHNN(6, hidden=(8,), system="coupled_pendulum", system_params={"bobs": 2}, spatial=2)


def test_generate_train_evaluate(compose_config, tmp_path):
    """generate (the config's dt and steps; energy and constraints along the stored truth),
    train CHNN (2 epochs) and NODE (1 epoch), evaluate with figures; refusals of another bobs'
    file and of method=hnn, before anything is written."""
    from hnnsym.data.hdf5 import read_dataset
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=coupled_pendulum", "noise=none", f"data_dir={tmp_path}/data",
              "+system.params.parameter_seed=0"]  # fmt: skip
    gen = ["generate.n_train=6", "generate.n_val=3", "generate.n_test=2", "generate.train_steps=10",
           "generate.test_steps=6"]  # fmt: skip
    cfg = compose_config("generate", common + gen)
    assert (cfg.generate.obs_dt, cfg.generate.fine_dt, cfg.system.params.bobs) == (0.03, 0.005, 2)
    data = read_dataset(generate(cfg))
    assert data.attrs["system_params"]["masses"] == chain_parameters(2)[0]
    system = get_system("coupled_pendulum", **data.attrs["system_params"])
    clean = torch.as_tensor(data.splits["train"].clean)
    assert clean.shape == (6, 11, 12)
    assert max(system.constraint_violation(clean)) < 1e-8
    energy = system(clean)
    assert (energy - energy[:, :1]).abs().max() < 1e-9 * energy.abs().max()

    run = common + ["method=chnn", "model.hidden=[16]", f"run_dir={tmp_path}/run",
                    "train.epochs=2", "train.progress=false"]  # fmt: skip
    train(compose_config("train", run))
    metrics = evaluate(compose_config("evaluate", run))
    assert 0 < metrics["rel_err_gmean"] < 1 and metrics["rollout_steps"] == 6
    assert metrics["floor_rel_err_gmean"] < 1e-2
    assert len(metrics["mass_learned"]) == 2 and metrics["mass_true"] == chain_parameters(2)[0]
    assert metrics["constraint_phi_max"] < 1e-2
    assert (tmp_path / "run" / "eval" / "chain.png").stat().st_size > 0  # the x–z projection

    node = common + ["method=node", "model.hidden=[8]", f"run_dir={tmp_path}/node",
                     "train.epochs=1", "train.progress=false"]  # fmt: skip
    train(compose_config("train", node))
    assert evaluate(compose_config("evaluate", node + ["eval.figures=false"]))["rel_err_gmean"] > 0

    other = [c for c in run if not c.startswith("run_dir")] + [
        f"run_dir={tmp_path}/b3",
        "system.params.bobs=3",
    ]
    with pytest.raises(UserError, match="dim=6 states, not dim=9"):
        train(compose_config("train", other))
    default_masses = [c for c in run if "parameter_seed" not in c]  # masses 1: not this file's
    with pytest.raises(UserError, match="holds another coupled_pendulum system: its system.masses"):
        train(compose_config("train", default_masses))
    hnn = common + ["method=hnn", "model.hidden=[8]", f"run_dir={tmp_path}/hnn", "train.epochs=1"]
    with pytest.raises(UserError, match="no angle-coordinate version") as err:
        train(compose_config("train", hnn))
    assert "\n" not in str(err.value) and not any((tmp_path / "hnn").glob("*"))


def test_a_chain_run_of_the_earlier_model_keys_still_evaluates_and_resumes(
    compose_config, tmp_path, capsys
):
    """A CHNN checkpoint whose model config has the chain's earlier keys (spatial, graph,
    parameter_seed; no system_params, as runs made before this system) evaluates and resumes under
    the current model=chnn config (``same_model``); another architecture is still refused."""
    from hnnsym.config.build import same_model
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=chain_pendulum", "system.params.links=1", "noise=none",
              f"data_dir={tmp_path}/data"]  # fmt: skip
    gen = ["generate.n_train=4", "generate.n_val=2", "generate.n_test=2", "generate.train_steps=6",
           "generate.test_steps=4"]  # fmt: skip
    generate(compose_config("generate", common + gen))
    current = common + ["method=chnn", "model.hidden=[8]", f"run_dir={tmp_path}/run",
                        "train.progress=false"]  # fmt: skip
    legacy = current + ["train.epochs=1", "~model.system_params", "+model.spatial=2",
                        "+model.graph=chain", "+model.parameter_seed=0"]  # fmt: skip
    train(compose_config("train", legacy))
    payload = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)
    assert "system_params" not in payload["model_config"]
    metrics = evaluate(compose_config("evaluate", current + ["eval.figures=false"]))
    assert 0 < metrics["rel_err_gmean"] < 1
    capsys.readouterr()
    train(compose_config("train", current + ["train.epochs=1", "train.resume=true"]))
    assert "resuming" in capsys.readouterr().out  # not refused as another model
    with pytest.raises(UserError, match="holds model"):
        evaluate(compose_config("evaluate", [*current, "model.hidden=[16]", "eval.figures=false"]))
    assert not same_model({**payload["model_config"], "hidden": [16]}, payload["model_config"])
