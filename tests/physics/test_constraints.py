"""Constrained mechanics (Finzi et al.): the projection, the chain pendulum's ground truth against an
independent solution in angles, the angle coordinates, and the configs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from hnnsym import solve
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.constraints import constraint_gradient, project, projection_matrix
from hnnsym.physics.pendulums import angle_mass_matrix, chain_parameters, from_angles, to_angles
from hnnsym.physics.systems import get_system

F64 = torch.float64


def chain(links: int):
    system = get_system("chain_pendulum", links=links)
    m = torch.tensor(system.params["masses"], dtype=F64)
    l_ = torch.tensor(system.params["lengths"], dtype=F64)
    return system, m, l_


def test_parameters_are_the_references_draws():
    # numpy RandomState(0): 0.6 + 0.8 u for u = 0.5488, 0.7152, 0.6028 (masses), 0.5449, 0.4237,
    # 0.6459 (lengths), popped from the end
    masses, lengths = chain_parameters(3)
    u = np.random.RandomState(0).rand(6)
    assert masses == pytest.approx(list(0.6 + 0.8 * u[2::-1]), abs=0)
    assert lengths == pytest.approx(list(0.6 + 0.8 * u[:2:-1]), abs=0)
    assert all(0.6 <= v <= 1.4 for v in masses + lengths)


@pytest.mark.parametrize("links", [1, 3])
def test_projection_is_a_projection_onto_the_tangent_space(links):
    system, m, l_ = chain(links)
    y = system.sample(7, torch.Generator().manual_seed(1))
    n = 2 * links
    phi, phidot = system.constraint_violation(y)
    assert phi < 1e-12 and phidot < 1e-12  # the sampler's Newton projection
    G = constraint_gradient(system.constraints, y[:, :n], y[:, n:], system.inverse_mass)
    P = projection_matrix(G)
    assert torch.allclose(P @ P, P, atol=1e-12)
    f = system.vector_field(y)
    scale = f.abs().max()
    assert (G.transpose(-1, -2) @ f[..., None]).abs().max() < 1e-13 * scale  # DΨᵀ ż = 0
    w = torch.randn(7, 2 * n, dtype=F64)
    assert torch.allclose(project(G, project(G, w)), project(G, w), atol=1e-12)
    # G is ∇Ψ: against autograd of Ψ = [Φ(x), DΦ(x) M⁻¹p]
    z = y[0].clone().requires_grad_(True)
    c = system.constraints
    psi = torch.cat([c.phi(z[:n]), c.velocity(z[:n], z[n:] * system.inverse_mass)])
    auto = torch.stack([torch.autograd.grad(psi[k], z, retain_graph=True)[0]
                        for k in range(len(psi))], -1)  # fmt: skip
    assert torch.allclose(auto, G[0], atol=1e-12)


def test_angles_round_trip_and_same_energy():
    system, m, l_ = chain(3)
    angles_system = get_system("chain_pendulum_angles", links=3)
    y = system.sample(9, torch.Generator().manual_seed(2))
    a = to_angles(y, m, l_)
    assert torch.allclose(from_angles(a, m, l_), y, atol=1e-12)
    assert torch.allclose(angles_system(a), system(y), rtol=1e-12, atol=1e-12)
    # both samplers draw the same initial conditions from the same generator
    a2 = angles_system.sample(9, torch.Generator().manual_seed(2))
    assert torch.allclose(a2, a, atol=1e-12)


def lagrangian_rhs(m: np.ndarray, l_: np.ndarray, g: float):
    """The N-pendulum's Euler–Lagrange equations in angles, written out independently:
    Σ_j c_ij l_i l_j [cos(θ_i − θ_j) θ̈_j + sin(θ_i − θ_j) θ̇_j²] + g c_ii l_i sin θ_i = 0."""
    N = len(m)
    c = np.array([[m[max(i, j) :].sum() for j in range(N)] for i in range(N)])

    def rhs(t, s):
        th, om = s[:N], s[N:]
        d = th[:, None] - th[None, :]
        A = c * np.outer(l_, l_) * np.cos(d)
        b = -(c * np.outer(l_, l_) * np.sin(d)) @ (om**2) - g * np.diag(c) * l_ * np.sin(th)
        return np.concatenate([om, np.linalg.solve(A, b)])

    return rhs


@pytest.mark.parametrize("links", [2])
def test_ground_truth_matches_an_independent_solution_in_angles(links):
    """Gauss–Legendre 6 on the projected Cartesian field (generate's ground truth, h = 0.005)
    against scipy's DOP853 on the Lagrangian in angles at rtol 1e-13, over 0.6 s."""
    system, m, l_ = chain(links)
    y0 = system.sample(3, torch.Generator().manual_seed(3))
    steps, h = 120, 0.005
    with torch.no_grad():
        ys = solve(system, y0, h, steps, get_integrator("gauss_legendre6", tol=1e-14),
                   "backprop").ys  # fmt: skip
    a0 = to_angles(y0, m, l_)
    omega0 = torch.linalg.solve(angle_mass_matrix(a0[:, :links], m, l_), a0[:, links:, None])
    rhs = lagrangian_rhs(m.numpy(), l_.numpy(), system.params["g"])
    for b in range(3):
        s0 = np.concatenate([a0[b, :links].numpy(), omega0[b, :, 0].numpy()])
        sol = solve_ivp(rhs, (0, steps * h), s0, method="DOP853", rtol=1e-13, atol=1e-13)
        th, om = sol.y[:links, -1], sol.y[links:, -1]
        M = angle_mass_matrix(torch.as_tensor(th), m, l_)
        expect = from_angles(torch.cat([torch.as_tensor(th), M @ torch.as_tensor(om)]), m, l_)
        got = ys[-1, b]
        assert torch.allclose(got, expect, rtol=1e-10, atol=1e-10 * expect.abs().max())
    phi, phidot = system.constraint_violation(ys)
    assert phi < 1e-11 and phidot < 1e-11


def test_small_angle_limit_of_one_link():
    """N = 1, θ₀ = 1e-4, at rest: x(t) ≈ l θ₀ cos(√(g/l) t) (relative error O(θ₀²))."""
    system, m, l_ = chain(1)
    th0 = 1e-4
    y0 = torch.tensor([[l_[0] * math.sin(th0), -l_[0] * math.cos(th0), 0.0, 0.0]], dtype=F64)
    with torch.no_grad():
        ys = solve(system, y0, 0.01, 100, get_integrator("gauss_legendre6", tol=1e-15),
                   "backprop").ys  # fmt: skip
    t = torch.arange(101, dtype=F64) * 0.01
    expect = l_[0] * th0 * torch.cos(torch.sqrt(system.params["g"] / l_[0]) * t)
    assert torch.allclose(ys[:, 0, 0], expect, atol=1e-8 * float(l_[0] * th0) * 1e3)


def test_bad_links_are_one_line_errors():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="links must be a whole number >= 1"):
            get_system("chain_pendulum", links=bad)


def test_generate_refuses_bad_links(compose_config):
    from hnnsym.data.simulate import generate

    cfg = compose_config("generate", ["system=chain_pendulum", "system.params.links=0"])
    with pytest.raises(UserError, match="links must be"):
        generate(cfg)


# ---- CHNN -------------------------------------------------------------------------------------


def small_chnn(links: int = 2):
    from hnnsym.physics.constrained_models import CHNN

    torch.manual_seed(0)
    return CHNN(2 * links, hidden=(16, 16)).double()


@pytest.mark.parametrize("integrator", ["rk4", "implicit_midpoint", "gauss_legendre4"])
def test_chnn_gradients_backprop_equal_symplectic_adjoint(integrator):
    system, _, _ = chain(2)
    y0 = system.sample(4, torch.Generator().manual_seed(0))
    model = small_chnn()
    options = {} if integrator == "rk4" else {"tol": 1e-13, "max_iter": 100}
    grads = {}
    for method in ("backprop", "symplectic_adjoint"):
        model.zero_grad()
        ys = solve(model, y0, 0.03, 5, get_integrator(integrator, **options), method).ys
        (ys**2).sum().backward()
        grads[method] = torch.cat(
            [(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
             for p in model.parameters()]
        )  # fmt: skip
    scale = grads["backprop"].abs().max()
    assert scale > 0
    assert (grads["backprop"] - grads["symplectic_adjoint"]).abs().max() < 1e-10 * scale


def test_chnn_field_is_tangent_and_gauss_legendre_keeps_its_constraints():
    system, _, _ = chain(2)
    y0 = system.sample(5, torch.Generator().manual_seed(4))
    model = small_chnn()
    with torch.no_grad():
        model.log_mass.copy_(torch.tensor([0.3, -0.2]))
        f = model.vector_field(y0)
        G = constraint_gradient(model.constraints, y0[:, :4], y0[:, 4:], model.inverse_mass())
        assert (G.transpose(-1, -2) @ f[..., None]).abs().max() < 1e-12 * f.abs().max()
        ys = solve(model, y0, 0.03, 50, get_integrator("gauss_legendre4", tol=1e-14), "backprop").ys
    assert model.position_constraints(ys[..., :4]).abs().max() < 1e-11  # the data's lengths
    assert torch.allclose(model.mass_matrix().diagonal()[::2], torch.exp(model.log_mass))


def test_chnn_refuses_angle_data():
    from hnnsym.physics.constrained_models import CHNN

    with pytest.raises(ValueError, match="Cartesian coordinates"):
        CHNN(2, system="chain_pendulum_angles")


def test_generate_train_evaluate_chnn(compose_config, tmp_path):
    """The three stages with model=chnn (tiny budget), and the one-line errors of another N."""
    from hnnsym.data.hdf5 import read_dataset
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=chain_pendulum", "system.params.links=2", "noise=none",
              f"data_dir={tmp_path}/data"]  # fmt: skip
    gen = ["generate.n_train=8", "generate.n_val=4", "generate.n_test=3", "generate.train_steps=8",
           "generate.test_steps=6"]  # fmt: skip
    cfg = compose_config("generate", common + gen)
    assert cfg.generate.obs_dt == 0.03 and cfg.generate.fine_dt == 0.005
    data = read_dataset(generate(cfg))
    assert data.attrs["system_params"]["links"] == 2
    assert data.attrs["system_params"]["masses"] == chain_parameters(2)[0]
    clean = torch.as_tensor(data.splits["train"].clean)
    assert clean.shape == (8, 9, 8)
    assert max(chain(2)[0].constraint_violation(clean)) < 1e-8
    run = common + ["method=chnn", "model.hidden=[16]", f"run_dir={tmp_path}/run",
                    "train.epochs=2", "train.progress=false"]  # fmt: skip
    train(compose_config("train", run))
    metrics = evaluate(compose_config("evaluate", run + ["eval.figures=false"]))
    assert 0 < metrics["rel_err_gmean"] < 1 and metrics["rollout_steps"] == 6
    assert metrics["floor_rel_err_gmean"] < 1e-2
    assert len(metrics["mass_learned"]) == 2 and metrics["constraint_phi_max"] < 1e-2
    other = [c.replace("links=2", "links=3") for c in run] + ["train.overwrite=true"]
    with pytest.raises(UserError, match="dim=4 states, not dim=6"):
        train(compose_config("train", other))


def test_figures_of_a_diverging_rollout_are_drawn(tmp_path):
    """A learned rollout that blows up (|Φ| ~ 1e279, then NaN: CLNN at N = 4 did) still gets its
    three figures: |Φ| is drawn clipped, the chain framed by its reach."""
    import pandas as pd

    from hnnsym.evaluation.constrained import draw

    cart = get_system("chain_pendulum", links=2)
    T = 6
    t = 0.03 * np.arange(T + 1)
    curves = pd.DataFrame({
        "t": t, "rel_err_mean": np.linspace(1e-6, 1, T + 1),
        "rel_err_median": np.linspace(1e-6, 0.5, T + 1), "floor_rel_err_mean": 1e-5 + 0 * t,
        # (unclipped, matplotlib's log ticks overflowed on this range, not on 1e250 or 1e300)
        "constraint_phi_max": [1e-13, 1e-3, 1.0, 1e40, 1e259, 1e279, 0.0],
    })  # fmt: skip
    truth = torch.randn(T + 1, 3, 8, dtype=torch.float64)
    pred = truth.clone()
    pred[3:, 0] = 1e200
    pred[5:, 0] = math.nan
    draw(tmp_path, curves, pred, truth, cart, 1)
    for name in ("rollout_error", "constraints", "chain"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_relative_error_of_a_finite_state_too_large_for_its_norm():
    """CLNN at N = 5 (300 epochs) rolled out to |x| ~ 1e296: its norm overflows; e is still ≈ 1."""
    from hnnsym.evaluation.metrics import relative_error

    true = torch.randn(3, 20, dtype=torch.float64)
    pred = true.clone()
    pred[0] = 1e296
    pred[1] = true[1] * (1 + 1e-3)
    e = relative_error(pred, true)
    assert torch.isfinite(e).all()
    assert abs(e[0] - 1) < 1e-12 and e[2] == 0
    assert abs(e[1] - 1e-3 / (2 + 1e-3)) < 1e-15  # ‖1e-3 y‖ / ((2 + 1e-3)‖y‖), unchanged
    tiny = relative_error(true[None, 0] * 1e-300, 2 * true[None, 0] * 1e-300)
    assert abs(tiny - 1 / 3).item() < 1e-15
