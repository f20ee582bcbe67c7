"""Joint friction of CHNN and CLNN (``friction=joint``): a PSD dissipation in the tangent space
of the constraints. RATTLE (split with the exact friction flow) and the projected field keep Φ and
Φ̇ at rounding while the learned energy decreases; the force is tangent and dissipative; without
friction the models are today's, bit for bit; exact gradients through the damped models; no
direction of space is assumed (a rotated chain is the same model rotated)."""

from __future__ import annotations

import math

import pytest
import torch

from hnnsym import solve
from hnnsym.errors import UserError
from hnnsym.ode.dynamics import dissipative_field
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.constraints import (
    constrained_vector_field,
    constraint_gradient,
    multiplier_acceleration,
    project,
)
from hnnsym.physics.models import mlp_gradient
from hnnsym.physics.systems import get_system

F64 = torch.float64


def damped(cls, links: int = 3, mass: str = "body", seed: int = 0, scale: float = 1.0):
    """A float64 ``cls`` with joint friction (C_f = L Lᵀ random, ``scale`` its size), unequal
    masses (or a random SPD M_θ) and a random MLP potential."""
    torch.manual_seed(seed)
    model = cls(2 * links, hidden=(16, 16), mass=mass, friction="joint").double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        if mass == "body":
            model.log_mass.copy_(0.3 * torch.randn(links, generator=g, dtype=F64))
        else:
            model.mass_factor.add_(0.2 * torch.randn(2 * links, 2 * links, generator=g, dtype=F64))
        L = 0.5 * torch.eye(links, dtype=F64) + 0.2 * torch.randn(
            links, links, generator=g, dtype=F64
        )
        model.friction_factor.copy_(math.sqrt(scale) * L)
    return model


def chain_states(model, links: int = 3, n: int = 4, seed: int = 2) -> torch.Tensor:
    """Chain states with Φ = 0 and DΦ M_θ⁻¹ p = 0 under the model's own mass."""
    from hnnsym.physics.constraints import onto_manifold

    system = get_system("chain_pendulum", links=links)
    return onto_manifold(model, system.sample(n, torch.Generator().manual_seed(seed))).detach()


def violation(model, ys: torch.Tensor) -> tuple[float, float]:
    """(max |Φ|, max |DΦ M_θ⁻¹ p|) along states (..., 2n)."""
    n, inverse_mass = model.dim, model.inverse_mass().detach()
    x, p = ys[..., :n], ys[..., n:]
    v = p @ inverse_mass if model.mass_kind == "full" else p * inverse_mass
    return float(model.position_constraints(x).abs().max()), float(
        model.constraints.velocity(x, v).abs().max()
    )


@pytest.mark.parametrize("mass", ["body", "full"])
def test_friction_force_is_tangent_psd_and_unchanged_by_the_projection(mass):
    """R_pp = Pᵀ Wᵀ C_f W P is PSD and DΦ M⁻¹ R_pp = 0; CHNN's damped field is the projection of
    the dissipative field (J⁻¹ − R)∇H (the friction part passes it unchanged) and
    dH/dt = −ẋᵀ R_pp ẋ < 0; CLNN's multipliers do not see the friction."""
    model = damped(CHNN, mass=mass)
    y = chain_states(model, n=5)
    n = model.dim
    with torch.no_grad():
        x, p = y[:, :n], y[:, n:]
        Minv = model.inverse_mass()
        R_pp = model.friction_matrix(x)
        assert torch.linalg.eigvalsh(R_pp).min() > -1e-12 and torch.allclose(R_pp, R_pp.mT)
        assert torch.linalg.eigvalsh(R_pp).max() > 1e-2  # not zero
        D = model.constraints.jacobian(x)
        DMinv = D @ Minv if mass == "full" else D * Minv
        assert (DMinv @ R_pp).abs().max() < 1e-13 * R_pp.abs().max()
        grad = model.energy_gradient(y)
        G = constraint_gradient(model.constraints, x, p, Minv)
        expect = project(G, dissipative_field(grad, model.damping_matrix(y)))
        f = model.vector_field(y)
        assert torch.allclose(f, expect, rtol=1e-12, atol=1e-12 * f.abs().max())
        v = grad[:, n:]
        rate = (grad * f).sum(-1)  # dH/dt along the field
        assert torch.allclose(rate, -(v[:, None, :] @ R_pp @ v[:, :, None])[:, 0, 0], atol=1e-11)
        assert rate.max() < 0
        clnn = damped(CLNN, mass=mass)
        clnn.load_state_dict(model.state_dict())
        _, lam = clnn.acceleration(x, v)
        _, lam0 = multiplier_acceleration(
            clnn.constraints, Minv, -clnn.potential_gradient(x).expand_as(v), x, v
        )
        assert torch.allclose(lam, lam0, rtol=1e-10, atol=1e-10 * lam0.abs().max())
        assert torch.allclose(clnn.vector_field(y), f, rtol=1e-10, atol=1e-10 * f.abs().max())


@pytest.mark.parametrize(
    "integrator, composition",
    [("rattle", "none"), ("rattle", "triple_jump"), ("gauss_legendre4", None)],  # fmt: skip
)
@pytest.mark.parametrize("mass", ["body", "full"])
def test_damped_rollouts_stay_on_the_manifold_while_the_energy_decreases(mass, integrator,
                                                                         composition):  # fmt: skip
    """A long rollout (1000 steps of h = 0.01) of the damped CHNN: |Φ| and |DΦ M_θ⁻¹ p| stay at
    rounding and solver tolerance, H_θ decreases at every step and loses most of its excess."""
    model = damped(CHNN, mass=mass)
    y0 = chain_states(model)
    options = {"tol": 1e-13} | ({} if composition is None else {"composition": composition})
    with torch.no_grad():
        ys = solve(model, y0, 0.01, 1000, get_integrator(integrator, **options), "backprop").ys
        energy = model(ys)  # (T, B)
    phi, phidot = violation(model, ys)
    assert phi < 1e-12 and phidot < 1e-11, (phi, phidot)
    steps = energy[1:] - energy[:-1]
    assert steps.max() < 0, float(steps.max())
    lost = (energy[0] - energy[-1]) / (energy[0] - energy.min(0).values.min())
    assert lost.min() > 0.5


@pytest.mark.parametrize("composition, order", [("none", 2), ("triple_jump", 4)])
def test_rattle_with_friction_converges_to_the_damped_field(composition, order):
    """The split RATTLE step converges at its order to the damped field's solution (Gauss–Legendre
    6 at a quarter of the step): the friction flow is the field's friction, not another."""
    model = damped(CHNN, mass="full")
    y0 = chain_states(model, n=2)
    with torch.no_grad():
        ref = solve(model, y0, 0.005, 100, get_integrator("gauss_legendre6", tol=1e-14),
                    "backprop").ys[-1]  # fmt: skip
        err = []
        for h, steps in ((0.05, 10), (0.025, 20)):
            integrator = get_integrator("rattle", tol=1e-14, composition=composition)
            err.append(float((solve(model, y0, h, steps, integrator, "backprop").ys[-1] - ref)
                             .abs().max()))  # fmt: skip
    assert 0.75 * 2**order < err[0] / err[1] < 1.3 * 2**order, err


def test_rattle_friction_split_conserves_without_friction():
    """RATTLE steps a damped model with C_f = 0 exactly as the conservative model with the same
    parameters (the friction flow is then the identity)."""
    model = damped(CHNN)
    plain = CHNN(6, hidden=(16, 16)).double()
    with torch.no_grad():
        model.friction_factor.zero_()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if k != "friction_factor"})
    y0 = chain_states(model)
    with torch.no_grad():
        a = solve(model, y0, 0.01, 20, get_integrator("rattle"), "backprop").ys
        b = solve(plain, y0, 0.01, 20, get_integrator("rattle"), "backprop").ys
    assert torch.equal(a, b)


@pytest.mark.parametrize("cls", [CHNN, CLNN])
def test_without_friction_the_models_are_the_conservative_ones_bit_for_bit(cls):
    """friction=none, mass=body (the defaults): the field, the energy and their gradients are those
    of the per-body model written out (the projected field, the multipliers), bit for bit; the
    parameters (checkpoint keys) are the same as before the options existed."""
    torch.manual_seed(0)
    model = cls(6, hidden=(16, 16)).double()
    assert set(model.state_dict()) == {"log_mass", "potential_net.0.weight",
        "potential_net.0.bias", "potential_net.2.weight", "potential_net.2.bias",
        "potential_net.4.weight", "potential_net.4.bias"}  # fmt: skip
    assert ModelCapability.DAMPING not in model.capabilities
    with torch.no_grad():
        model.log_mass.copy_(torch.tensor([0.3, -0.2, 0.1]))
    y = get_system("chain_pendulum", links=3).sample(5, torch.Generator().manual_seed(1))
    inverse_mass = torch.exp(-model.log_mass).repeat_interleave(2)
    x, p = y[:, :6], y[:, 6:]
    if cls is CHNN:
        grad = torch.cat([mlp_gradient(model.potential_net, x), p * inverse_mass], -1)
        expect = constrained_vector_field(model.constraints, inverse_mass, grad, y)
    else:
        v = p * inverse_mass
        a, _ = multiplier_acceleration(
            model.constraints, inverse_mass, -mlp_gradient(model.potential_net, x), x, v
        )
        expect = torch.cat([v, a / inverse_mass], -1)
    energy = 0.5 * (p * p * inverse_mass).sum(-1) + model.potential_net(x).squeeze(-1)
    assert torch.equal(model.vector_field(y), expect)
    assert torch.equal(model(y), energy)


def integrators():
    return [("rk4", {}), ("implicit_midpoint", {"tol": 1e-13, "max_iter": 100}),
            ("gauss_legendre4", {"tol": 1e-13, "max_iter": 100}),
            ("rattle", {"tol": 1e-13}), ("rattle", {"tol": 1e-13, "composition": "triple_jump"}),
            ("rattle", {"tol": 1e-13, "formulation": "general"})]  # fmt: skip


@pytest.mark.parametrize("name, options", integrators())
@pytest.mark.parametrize("cls, mass", [(CHNN, "body"), (CHNN, "full"), (CLNN, "full")])
def test_gradients_through_the_damped_models_agree(cls, mass, name, options):
    """dL/dθ (the friction and mass parameters included) by backprop, symplectic adjoint and
    checkpoint agree to 1e-10 in float64 (RATTLE: through the friction flow and the exact adjoint
    of each step)."""
    model = damped(cls, links=2, mass=mass)
    y0 = chain_states(model, links=2, n=3)
    grads = {}
    for method in ("backprop", "symplectic_adjoint", "checkpoint"):
        model.zero_grad()
        ys = solve(model, y0, 0.03, 5, get_integrator(name, **options), method).ys
        (ys[1:] ** 2).sum().backward()
        grads[method] = torch.cat(
            [p.grad.flatten() for p in model.parameters() if p.grad is not None]
        )
    assert model.friction_factor.grad.abs().max() > 0
    scale = grads["backprop"].abs().max()
    for method in ("symplectic_adjoint", "checkpoint"):
        assert (grads[method] - grads["backprop"]).abs().max() < 1e-10 * scale, method


@pytest.mark.parametrize("cls", [CHNN, CLNN])
def test_no_direction_of_space_is_assumed(cls):
    """Rotating a tethered chain about its anchor by Q (every body's position and momentum), with
    V_θ(Qᵀx) as the potential (its first layer times Qᵀ) and M_θ, C_f unchanged (per-body masses
    and link angular velocities are invariant): the damped field is the old field rotated."""
    model = damped(cls)
    turned = damped(cls)
    turned.load_state_dict(model.state_dict())
    angle = 2.1
    Q = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                     dtype=F64)  # fmt: skip
    big = torch.block_diag(Q, Q, Q)
    with torch.no_grad():
        turned.potential_net[0].weight.copy_(model.potential_net[0].weight @ big.T)
        y = chain_states(model, n=5)
        rotate = torch.block_diag(big, big)
        f = model.vector_field(y)
        g = turned.vector_field(y @ rotate.T)
    assert torch.allclose(g, f @ rotate.T, rtol=1e-11, atol=1e-11 * f.abs().max())


def test_friction_in_three_dimensions():
    """The coupled 3-D pendulum: ω_k are vectors (C_f ⊗ I₃); the force is still tangent and PSD."""
    system = get_system("coupled_pendulum")
    torch.manual_seed(0)
    model = CHNN(system.dim, hidden=(8,), system="coupled_pendulum", system_params=system.params,
                 friction="joint").double()  # fmt: skip
    y = system.sample(4, torch.Generator().manual_seed(0))
    n = model.dim
    with torch.no_grad():
        R_pp = model.friction_matrix(y[:, :n])
        D = model.constraints.jacobian(y[:, :n])
        assert (D * model.inverse_mass() @ R_pp).abs().max() < 1e-13 * R_pp.abs().max()
        assert torch.linalg.eigvalsh(R_pp).min() > -1e-13
        # an unrotated tangent velocity of bob k about its anchor: ω = r × ṙ / |r|²
        W = model.constraints.angular_velocity_map(y[:, :n])
        r = model.constraints.relative(y[:, :n])
        v = y[:, n:] * model.inverse_mass()
        omega = (W @ v[..., None])[..., 0].reshape(4, -1, 3)
        rdot = model.constraints.relative(v, anchored=False)
        expect = torch.cross(r, rdot, dim=-1) / (r * r).sum(-1, keepdim=True)
        assert torch.allclose(omega, expect, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("method, integrator", [("chnn", "rattle"), ("clnn", "gauss_legendre4")])
def test_generate_train_evaluate_full_mass_with_joint_friction(compose_config, tmp_path, method,
                                                               integrator):  # fmt: skip
    """model.mass=full model.friction=joint through the stages (tiny): training runs through the
    damped model, evaluation reports the learned damping and no per-body masses."""
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=chain_pendulum", "system.params.links=2", f"data_dir={tmp_path}/data"]
    gen = ["generate.n_train=6", "generate.n_val=3", "generate.n_test=2", "generate.train_steps=6",
           "generate.test_steps=4", "generate.fine_dt=0.01"]  # fmt: skip
    generate(compose_config("generate", common + gen))
    run = common + [f"method={method}", "model.hidden=[8]", "model.mass=full",
                    "model.friction=joint", f"integrator={integrator}",
                    "gradient=symplectic_adjoint", f"run_dir={tmp_path}/run", "train.epochs=1",
                    "train.progress=false"]  # fmt: skip
    train(compose_config("train", run))
    metrics = evaluate(compose_config("evaluate", run + ["eval.figures=false"]))
    assert metrics["rollout_failed"] == 0 and 0 < metrics["rel_err_gmean"] < 1
    assert metrics["damping_learned"] > 0 and not metrics.get("mass_learned")
    bad = [a for a in run if not a.startswith("model.friction")] + ["model.friction=coulomb",
                                                                    "train.overwrite=true"]  # fmt: skip
    with pytest.raises(UserError, match="friction must be one of"):
        train(compose_config("train", bad))
