"""CLNN (Finzi et al.): Lagrange multipliers on the chain pendulum in Cartesian coordinates. The
multipliers against the saddle system of L by autograd and against Φ̈ = 0, the field against the
true chain's and against CHNN's, exact gradients through the kernel, and the three stages."""

from __future__ import annotations

import pytest
import torch

from hnnsym import solve
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.constraints import GRAVITY, constraint_gradient
from hnnsym.physics.systems import get_system

F64 = torch.float64
LOG_MASS = {2: [0.3, -0.2], 3: [0.3, -0.2, 0.1]}


def models(links: int, hidden=(16, 16)) -> tuple[CLNN, CHNN]:
    """A CLNN with non-trivial masses and a CHNN with the same parameters (float64)."""
    torch.manual_seed(0)
    clnn = CLNN(2 * links, hidden=hidden).double()
    with torch.no_grad():
        clnn.log_mass.copy_(torch.tensor(LOG_MASS[links]))
    chnn = CHNN(2 * links, hidden=hidden).double()
    chnn.load_state_dict(clnn.state_dict())
    return clnn, chnn


def states(links: int, n: int, seed: int, masses=None) -> torch.Tensor:
    """Chain states on Φ = 0, Φ̇ = DΦ M⁻¹p = 0 for the given masses (default: the true ones)."""
    system = get_system("chain_pendulum", links=links, masses=masses)
    return system.sample(n, torch.Generator().manual_seed(seed))


def test_multipliers_solve_the_saddle_system_of_L_and_give_zero_phi_ddot():
    """ẍ, λ of the Schur complement against the (n+m) saddle system built by autograd of L_θ:
    [∂²L/∂ẋ², DΦᵀ; DΦ, 0] [ẍ; λ] = [∂L/∂x − ∂²L/∂ẋ∂x ẋ; −(d/dt DΦ) ẋ]; and Φ̈ = 0 along the
    field, by a jvp of Φ̇(x, ẋ) = DΦ(x) ẋ in the direction (ẋ, ẍ), at states off the learned
    manifold (data with the true masses: DΦ M_θ⁻¹p ≠ 0) where Φ̇ itself is not 0."""
    clnn, _ = models(3)
    y = states(3, 5, 1)
    n, c = 6, clnn.constraints
    x, v = y[:, :n], y[:, n:] * clnn.inverse_mass().detach()
    with torch.no_grad():
        a, lam = clnn.acceleration(x, v)
    for b in range(5):
        xb, vb = x[b], v[b]
        hess = torch.autograd.functional.hessian(clnn.lagrangian, (xb, vb))
        dLdx = torch.func.grad(clnn.lagrangian, argnums=0)(xb, vb)
        D = c.jacobian(xb)
        ddot_v = torch.func.jvp(lambda s, w=vb: c.jacobian(s) @ w, (xb,), (vb,))[1]  # (d/dt DΦ) ẋ
        K = torch.cat([torch.cat([hess[1][1], D.T], 1),
                       torch.cat([D, torch.zeros(3, 3, dtype=F64)], 1)])  # fmt: skip
        rhs = torch.cat([dLdx - hess[1][0] @ vb, -ddot_v])
        sol = torch.linalg.solve(K, rhs)
        assert torch.allclose(sol[:n], a[b], rtol=1e-12, atol=1e-12 * a[b].abs().max())
        assert torch.allclose(sol[n:], lam[b], rtol=1e-10, atol=1e-12 * lam[b].abs().max())
    phidot, phiddot = torch.func.jvp(lambda s, w: c.velocity(s, w), (x, v), (v, a))
    assert phidot.abs().amax(-1).min() > 1e-3  # off the learned manifold (links, not the tether)
    assert phiddot.abs().max() < 1e-12 * a.abs().max()
    # the same through the field on [x, p] and the constraint gradient ∇Ψ of the learned mass
    with torch.no_grad():
        f = clnn.vector_field(y)
        G = constraint_gradient(c, y[:, :n], y[:, n:], clnn.inverse_mass())
    dpsi = (G.transpose(-1, -2) @ f[..., None])[..., 0]  # [Φ̇, Φ̈]
    assert torch.allclose(dpsi[:, :3], phidot, atol=1e-12 * phidot.abs().max())
    assert dpsi[:, 3:].abs().max() < 1e-12 * f.abs().max()


def test_clnn_keeps_phidot_along_gauss_legendre_and_phi_to_its_order():
    """From states with DΦ M_θ⁻¹p = 0, under Gauss–Legendre 4: Φ̇ (quadratic, a first integral of
    the CLNN field everywhere) stays 0 to rounding; Φ is a first integral only on Φ̇ = 0, so it
    drifts at the method's order, O(h⁴) (ratio 16 when h halves) — where CHNN, whose field keeps
    Φ everywhere, keeps it to rounding."""
    clnn, chnn = models(2)
    y0 = states(2, 4, 2, masses=clnn.masses().tolist())
    drift = {}
    for model in (clnn, chnn):
        for h, steps in ((0.03, 50), (0.015, 100)):
            integrator = get_integrator("gauss_legendre4", tol=1e-14)
            with torch.no_grad():
                ys = solve(model, y0, h, steps, integrator, "backprop").ys
                x, p = ys[..., :4], ys[..., 4:]
                phidot = model.constraints.velocity(x, p * model.inverse_mass())
            assert phidot.abs().max() < 1e-11 * p.abs().max()
            drift[type(model).__name__, h] = float(model.position_constraints(x[-1]).abs().max())
    assert drift["CHNN", 0.03] < 1e-13 and drift["CHNN", 0.015] < 1e-13
    assert 1e-7 < drift["CLNN", 0.03] < 1e-4
    assert 12 < drift["CLNN", 0.03] / drift["CLNN", 0.015] < 20


@pytest.mark.parametrize("links", [1, 3])
def test_clnn_with_the_true_masses_and_potential_is_the_true_chain(links):
    """V_θ linear (hidden=()) with weights g·m_i on y_i and log_mass = log m: the CLNN field equals
    the true chain pendulum's projected field on the true manifold."""
    system = get_system("chain_pendulum", links=links)
    m = torch.tensor(system.masses, dtype=F64)
    clnn = CLNN(2 * links, hidden=()).double()
    with torch.no_grad():
        clnn.log_mass.copy_(m.log())
        weight = torch.stack([torch.zeros_like(m), system.params["g"] * m], -1).flatten()
        clnn.potential_net[0].weight.copy_(weight[None])
        y = states(links, 6, 3)
        got, expect = clnn.vector_field(y), system.vector_field(y)
    assert system.params["g"] == GRAVITY
    assert torch.allclose(got, expect, rtol=1e-12, atol=1e-12 * expect.abs().max())


@pytest.mark.parametrize("links", [2, 3])
def test_clnn_equals_chnn_on_the_learned_manifold_only(links):
    """Same parameters (random V_θ, unequal masses): equal fields to rounding where
    DΦ M_θ⁻¹p = 0 (CHNN's projection leaves ẋ = M_θ⁻¹p, its multiplier is −λ); different off it
    (on data with the true masses), where CHNN also projects ẋ."""
    clnn, chnn = models(links)
    with torch.no_grad():
        on = states(links, 6, 4, masses=clnn.masses().tolist())
        f, g = clnn.vector_field(on), chnn.vector_field(on)
        assert torch.allclose(f, g, rtol=1e-12, atol=1e-12 * g.abs().max())
        off = states(links, 6, 4)
        f, g = clnn.vector_field(off), chnn.vector_field(off)
        assert (f - g).abs().max() > 1e-3 * g.abs().max()
        n = 2 * links
        assert torch.equal(f[:, :n], off[:, n:] * clnn.inverse_mass())  # CLNN: ẋ = M_θ⁻¹p
        assert not torch.allclose(g[:, :n], f[:, :n])


@pytest.mark.parametrize("integrator", ["rk4", "implicit_midpoint", "gauss_legendre4"])
def test_clnn_gradients_backprop_equal_symplectic_adjoint(integrator):
    clnn, _ = models(2)
    y0 = states(2, 4, 0)
    options = {} if integrator == "rk4" else {"tol": 1e-13, "max_iter": 100}
    grads = {}
    for method in ("backprop", "symplectic_adjoint"):
        clnn.zero_grad()
        ys = solve(clnn, y0, 0.03, 5, get_integrator(integrator, **options), method).ys
        (ys**2).sum().backward()
        # V_θ's output bias does not enter the field: no gradient
        grads[method] = torch.cat(
            [p.grad.flatten() for p in clnn.parameters() if p.grad is not None]
        )
    scale = grads["backprop"].abs().max()
    assert scale > 0 and clnn.log_mass.grad.abs().min() > 0
    assert (grads["backprop"] - grads["symplectic_adjoint"]).abs().max() < 1e-10 * scale


def test_rattle_steps_clnn_through_its_energy():
    """integrator=rattle uses H_θ (for CLNN the Legendre transform of L_θ) and Φ, not the field:
    the same steps as CHNN's with the same parameters, on Φ = 0 to solver tolerance."""
    clnn, chnn = models(2)
    y0 = states(2, 3, 2, masses=clnn.masses().tolist())
    with torch.no_grad():
        ys = solve(clnn, y0, 0.03, 10, get_integrator("rattle"), "backprop").ys
        ref = solve(chnn, y0, 0.03, 10, get_integrator("rattle"), "backprop").ys
    assert torch.equal(ys, ref)
    assert clnn.position_constraints(ys[..., :4]).abs().max() < 1e-12


def test_clnn_refuses_angle_data():
    with pytest.raises(ValueError, match="CLNN learns in Cartesian coordinates"):
        CLNN(2, system="chain_pendulum_angles")


def test_generate_train_evaluate_clnn(compose_config, tmp_path):
    """The three stages with method=clnn (tiny budget)."""
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=chain_pendulum", "system.params.links=2", "noise=none",
              f"data_dir={tmp_path}/data"]  # fmt: skip
    gen = ["generate.n_train=8", "generate.n_val=4", "generate.n_test=3", "generate.train_steps=8",
           "generate.test_steps=6"]  # fmt: skip
    generate(compose_config("generate", common + gen))
    run = common + ["method=clnn", "model.hidden=[16]", f"run_dir={tmp_path}/run",
                    "train.epochs=2", "train.progress=false"]  # fmt: skip
    cfg = compose_config("train", run)
    assert cfg.model._target_.endswith(".CLNN") and cfg.integrator.name == "rk4"
    train(cfg)
    metrics = evaluate(compose_config("evaluate", run + ["eval.figures=false"]))
    assert 0 < metrics["rel_err_gmean"] < 1 and metrics["rollout_steps"] == 6
    assert len(metrics["mass_learned"]) == 2 and metrics["mass_learned"] != [1.0, 1.0]
    # untrained masses (≈ 1, not the true ones): ẋ = M_θ⁻¹p leaves the manifold at the rate Φ̇
    assert 0 < metrics["constraint_phi_max"] < 1
