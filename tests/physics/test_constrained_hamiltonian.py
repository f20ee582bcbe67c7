"""CHNN through RATTLE: rollouts of a constrained model start from states projected onto
its own manifold (``project_state``), CHNN gives RATTLE what it needs, the gradient of a window loss
through RATTLE is the same by symplectic adjoint and backprop, and the stages run with
integrator=rattle."""

from __future__ import annotations

import pytest
import torch

from hnnsym.errors import UserError
from hnnsym.ode.dynamics import hamiltonian_gradient, has_hamiltonian
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.problem import Problem
from hnnsym.physics.constrained_models import CHNN
from hnnsym.physics.constraints import onto_manifold, project_state
from hnnsym.physics.systems import get_system
from hnnsym.training.losses import WindowLoss

F64 = torch.float64


def chnn(links: int = 2, log_mass=None) -> CHNN:
    torch.manual_seed(0)
    model = CHNN(2 * links, hidden=(16, 16)).double()
    if log_mass is not None:
        with torch.no_grad():
            model.log_mass.copy_(torch.as_tensor(log_mass, dtype=F64))
    return model


def states(links: int = 2, n: int = 6, seed: int = 0) -> tuple[object, torch.Tensor]:
    system = get_system("chain_pendulum", links=links)
    return system, system.sample(n, torch.Generator().manual_seed(seed))


def violation(model, z: torch.Tensor) -> tuple[float, float]:
    """(max |Φ|, max |DΦ M⁻¹ p|) of states z under the model's own mass."""
    n = z.shape[-1] // 2
    x, p = z[:, :n], z[:, n:]
    phi = model.position_constraints(x)
    phidot = model.constraints.velocity(x, p * model.inverse_mass())
    return float(phi.detach().abs().max()), float(phidot.detach().abs().max())


def test_projection_is_the_identity_on_the_manifold():
    system, z = states(3)
    true_log_mass = torch.tensor(system.params["masses"], dtype=F64).log()
    for H in (system, chnn(3, true_log_mass)):  # the data's own manifold
        out, ok = project_state(H, z)
        assert bool(ok.all())
        assert (out - z).abs().max() < 1e-13 * z.abs().max()
    # another mass: the same positions, momenta corrected so that DΦ M⁻¹ p = 0
    model = chnn(3, [0.4, -0.3, 0.1])
    assert violation(model, z)[1] > 1e-2
    out = onto_manifold(model, z)
    assert torch.equal(out[:, :6], z[:, :6])
    assert max(violation(model, out)) < 1e-12
    assert onto_manifold(get_system("pendulum"), z) is z  # not constrained: untouched


def test_projection_lands_on_the_manifold_from_perturbed_states():
    _, z = states(3, n=20, seed=1)
    model = chnn(3, [0.2, -0.1, 0.3])
    g = torch.Generator().manual_seed(2)
    noisy = z + 0.05 * torch.randn(z.shape, generator=g, dtype=F64)
    assert violation(model, noisy)[0] > 1e-3
    out, ok = project_state(model, noisy)
    assert bool(ok.all()) and max(violation(model, out)) < 1e-12
    # a small correction: positions move by about the noise, the state stays near the projection
    # of the clean one (the momenta also change because the model's masses are not the data's)
    assert (out[:, :6] - noisy[:, :6]).abs().max() < 0.3
    assert (out - onto_manifold(model, z)).abs().max() < 0.5
    # RATTLE accepts the projected states and refuses the noisy ones
    rattle = get_integrator("rattle")
    rattle.check(Problem(model, out, 0.03, 1), out)
    with pytest.raises(UserError, match="off the constraint manifold"):
        rattle.check(Problem(model, noisy, 0.03, 1), noisy)
    # float32 (training): to 64 ε relative, well inside RATTLE's float32 manifold_tol (1e-3)
    out32, ok32 = project_state(model.float(), noisy.float())
    assert bool(ok32.all()) and max(violation(model, out32)) < 1e-4
    rattle.check(Problem(model, out32, 0.03, 1), out32)
    # hopeless input: one line, not NaN
    with pytest.raises(UserError, match="could not be projected"):
        onto_manifold(model.double(), torch.full_like(z, float("nan")))


def test_chnn_gives_rattle_its_energy_gradient_not_the_projected_field():
    _, z = states(2)
    model = chnn(2, [0.3, -0.2])
    assert has_hamiltonian(model) and callable(model.position_constraints)
    zr = z.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(model(zr).sum(), zr)
    grad = hamiltonian_gradient(model, z, False)
    assert torch.allclose(grad, auto, rtol=1e-12, atol=1e-12)
    J_grad = torch.cat([grad[:, 4:], -grad[:, :4]], -1)
    assert (model.vector_field(z) - J_grad).abs().max() > 1e-3  # the field is projected
    assert model.position_constraints(z[:, :4]).shape == (6, 2)


def test_window_loss_gradient_through_rattle_symplectic_adjoint_equals_backprop():
    """Noisy windows (off the manifold, projected in the loss), float64: dL/dθ, the learned
    masses included, by the exact per-step adjoint replayed backwards = backprop through it."""
    system, z = states(2, n=4, seed=3)
    truth = solve_truth(system, z, 4)
    g = torch.Generator().manual_seed(5)
    windows = truth + 0.01 * torch.randn(truth.shape, generator=g, dtype=F64)
    model = chnn(2, [0.2, -0.1])
    integ = get_integrator("rattle", tol=1e-13)
    grads = {}
    for method in ("backprop", "symplectic_adjoint"):
        loss = WindowLoss(integrator=integ, gradient=method, obs_dt=0.03)
        model.zero_grad()
        loss(model, windows).backward()
        grads[method] = torch.cat(  # V's output bias has no effect on the motion: no grad
            [(torch.zeros_like(p) if p.grad is None else p.grad).flatten()
             for p in model.parameters()]
        )  # fmt: skip
    assert model.log_mass.grad.abs().min() > 0
    scale = grads["backprop"].abs().max()
    assert scale > 0
    assert (grads["backprop"] - grads["symplectic_adjoint"]).abs().max() < 1e-9 * scale


def solve_truth(system, z: torch.Tensor, steps: int) -> torch.Tensor:
    from hnnsym import solve

    integ = get_integrator("gauss_legendre4", tol=1e-14)
    with torch.no_grad():
        return solve(system, z, 0.03, steps, integ, "backprop").ys


def test_generate_train_evaluate_chnn_with_rattle(compose_config, tmp_path):
    """model=chnn, integrator=rattle, gradient=symplectic_adjoint through the stages (tiny), on
    noisy data (the window starts are off the manifold), and RATTLE's refusal as a UserError."""
    from hnnsym.data.simulate import generate
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training.stage import train

    common = ["system=chain_pendulum", "system.params.links=2", f"data_dir={tmp_path}/data"]
    gen = ["generate.n_train=6", "generate.n_val=3", "generate.n_test=2", "generate.train_steps=6",
           "generate.test_steps=4", "generate.fine_dt=0.01"]  # fmt: skip
    generate(compose_config("generate", common + gen))
    run = common + ["method=chnn", "model.hidden=[8]", "integrator=rattle",
                    "gradient=symplectic_adjoint", f"run_dir={tmp_path}/run", "train.epochs=1",
                    "train.progress=false"]  # fmt: skip
    train(compose_config("train", run))
    metrics = evaluate(compose_config("evaluate", run + ["eval.figures=false"]))
    assert metrics["rollout_integrator"] == "rattle" and metrics["rollout_failed"] == 0
    assert 0 < metrics["rel_err_gmean"] < 1 and metrics["constraint_phi_max"] < 1e-6
    strict = run + ["integrator.manifold_tol=1e-30", "train.overwrite=true"]
    with pytest.raises(UserError, match="off the constraint manifold"):
        train(compose_config("train", strict))
