"""RATTLE's multiplier form (``formulation=multipliers``, chosen by ``auto`` for an H with a
constant ``mass_matrix()``): Newton on the m impulses alone and a linear velocity step. In float64
it gives the general form's steps and gradients to rounding (CHNN with its closed-form DΦ, and a
separable pendulum whose constraint has a parameter and no closed-form DΦ); its exact adjoint
equals finite differences and autograd through the Newton iterations; a step costs one ∇V
evaluation; refusals are one line."""

from __future__ import annotations

import pytest
import torch
from test_rattle import PlanarPendulum, _loss, planar_state

from hnnsym import integrate, solve
from hnnsym.errors import IncompatibleError
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.integrators.rattle import constraint_jacobian
from hnnsym.physics.constrained_models import CHNN
from hnnsym.physics.constraints import onto_manifold
from hnnsym.physics.systems import get_system

F64 = torch.float64


class SeparablePendulum(PlanarPendulum):
    """PlanarPendulum (H = |p|²/2m + m g q_y + V(q), g(q) = |q|² − l², log m and log l learned)
    declaring its constant mass matrix m I, so RATTLE's auto formulation takes the multiplier
    form; DΦ by autograd (no closed form)."""

    capabilities = PlanarPendulum.capabilities | {Capability.MASS_MATRIX}

    def mass_matrix(self):
        return self.log_m.exp() * torch.eye(2, dtype=F64)


class CoupledPendulum(SeparablePendulum):
    """Declares a mass matrix but its kinetic energy depends on q: not H = ½pᵀM⁻¹p + V(q)."""

    def forward(self, z):
        return super().forward(z) + 0.1 * (z[..., :2] ** 2).sum(-1) * (z[..., 2:] ** 2).sum(-1)


def chnn_case(links: int = 3, n: int = 5):
    torch.manual_seed(0)
    model = CHNN(2 * links, hidden=(16, 16)).double()
    with torch.no_grad():
        model.log_mass.copy_(torch.linspace(-0.2, 0.3, links, dtype=F64))
    system = get_system("chain_pendulum", links=links)
    z = system.sample(n, torch.Generator().manual_seed(1))
    return model, onto_manifold(model, z).detach()


def pendulum_case():
    H = SeparablePendulum(mlp=True)
    y0 = planar_state(H, torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.0])).detach()
    return H, y0


def rattle(formulation: str, **options):
    return get_integrator("rattle", tol=1e-13, formulation=formulation, **options)


def grads(H, y0, integ, gradient="backprop", h=0.02, steps=12):
    params = list(H.parameters())
    y = y0.clone().requires_grad_(True)
    out = torch.autograd.grad(
        _loss(integrate(H, y, h, steps, integ, gradient)), [y, *params], allow_unused=True
    )
    return [torch.zeros_like(x) if g is None else g for g, x in zip(out, [y, *params])]


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor], rtol: float) -> None:
    scale = max(float(x.abs().max()) for x in b)
    assert scale > 0
    for x, y in zip(a, b):
        assert float((x - y).abs().max()) <= rtol * scale


@pytest.mark.parametrize("case", ["chnn", "pendulum"])
def test_multiplier_form_equals_the_general_form(case):
    """Same states (20 steps) and the same gradients (dL/dy0, dL/dθ: masses, the constraint's
    length, the potential's weights) in float64; auto picks the multiplier form."""
    H, y0 = chnn_case() if case == "chnn" else pendulum_case()
    h = 0.015 if case == "chnn" else 0.05
    assert get_integrator("rattle").multipliers(H)
    with torch.no_grad():
        fast = solve(H, y0, h, 20, rattle("auto"), "backprop")
        general = solve(H, y0, h, 20, rattle("general"), "backprop")
    assert float((fast.ys[-1] - fast.ys[0]).abs().max()) > 0.1  # a real motion
    assert float((fast.ys - general.ys).abs().max()) <= 1e-12 * float(general.ys.abs().max())
    # one Newton solve per step instead of two, and no more iterations per step in all
    assert fast.stats.steps == 20 and general.stats.steps == 40
    assert fast.stats.iterations <= general.stats.iterations
    fast_grads, general_grads = (grads(H, y0, rattle(f), h=h, steps=6) for f in ("auto", "general"))
    assert_same(fast_grads, general_grads, 1e-10)


def test_multiplier_form_gradient_equals_finite_differences_and_autograd_through_newton():
    """dL/dy0 along a direction and dL/dθ (log m, log l, a weight of V) by the multiplier form's
    implicit adjoint = central differences (ε = 1e-4, rel 1e-6) = backprop through its Newton
    iterations = symplectic adjoint (stepwise re-solve), in float64."""
    H, y0 = pendulum_case()
    exact = rattle("multipliers", manifold_tol=1e-3)  # a changed length moves y0 off g = 0
    g = grads(H, y0, exact)
    assert_same(grads(H, y0, rattle("multipliers", implicit_gradient=False)), g, 1e-9)
    assert_same(grads(H, y0, exact, "symplectic_adjoint"), g, 1e-12)

    def loss():
        with torch.no_grad():
            return float(_loss(integrate(H, y0, 0.02, 12, exact, "backprop")))

    eps = 1e-4
    direction = torch.randn(y0.shape, generator=torch.Generator().manual_seed(0), dtype=F64)
    base = y0.clone()
    fd = []
    for sign in (1, -1):
        y0.copy_(base + sign * eps * direction)
        fd.append(loss())
    y0.copy_(base)
    assert float((g[0] * direction).sum()) == pytest.approx((fd[0] - fd[1]) / (2 * eps), rel=1e-6)
    checks = [(H.log_m, ()), (H.log_l, ()), (H.V[0].weight, (3, 1))]
    index = {id(p): i for i, p in enumerate(H.parameters())}
    for p, idx in checks:
        values = []
        for sign in (1, -1):
            with torch.no_grad():
                old = p[idx].item()
                p[idx] = old + sign * eps
            values.append(loss())
            with torch.no_grad():
                p[idx] = old
        analytic = float(g[1 + index[id(p)]][idx])
        assert analytic == pytest.approx((values[0] - values[1]) / (2 * eps), rel=1e-6, abs=1e-9)
        assert abs(analytic) > 1e-3  # each parameter matters


@pytest.mark.parametrize("composition", ["triple_jump", "suzuki"])
def test_composed_multiplier_form_gives_one_gradient_by_every_method(composition):
    """RATTLE of order 4 in the multiplier form (CHNN): the per-substep implicit adjoint
    (backprop), checkpoint, and the symplectic adjoint (inner substeps re-solved from y_n in
    backward, also with keep_every=sqrt) equal autograd through the Newton iterations."""
    from hnnsym.ode.gradients import get_gradient

    H, y0 = chnn_case(links=2, n=4)
    reference = grads(
        H, y0, rattle("multipliers", implicit_gradient=False, composition=composition)
    )
    exact = rattle("multipliers", composition=composition)
    for gradient in ("backprop", "checkpoint", "symplectic_adjoint",
                     get_gradient("symplectic_adjoint", keep_every="sqrt")):  # fmt: skip
        assert_same(grads(H, y0, exact, gradient), reference, 1e-12)


def test_multiplier_form_costs_one_potential_gradient_per_step():
    """A forward without a graph evaluates ∇V once per step (the next step reuses ∇V(q_{n+1}))
    and never builds a Jacobian of H; the stepwise backward two per step."""
    model, z = chnn_case(n=3)
    calls = []
    original = model.potential_gradient

    def counted(x):
        calls.append(x.shape[0])
        return original(x)

    model.potential_gradient = counted
    steps = 8
    with torch.no_grad():
        integrate(model, z, 0.015, steps, rattle("auto"), "backprop")
    # + 2 for the initial-state check (separability: ∇H at y0 and ∇V at y0)
    assert len(calls) == steps + 1 + 2 and set(calls) == {z.shape[0]}
    calls.clear()
    y = z.clone().requires_grad_(True)
    _loss(integrate(model, y, 0.015, steps, rattle("auto"), "symplectic_adjoint")).backward()
    assert len(calls) == (steps + 1 + 2) + 2 * steps and set(calls) == {z.shape[0]}


def test_closed_form_constraint_jacobian_equals_autograd():
    model, z = chnn_case()
    system = get_system("chain_pendulum", links=3)
    x = z[:, :6]
    for H in (model, system):
        auto = constraint_jacobian(H.position_constraints, x, 3, False)
        assert torch.allclose(H.position_constraints_jacobian(x), auto, rtol=0, atol=1e-14)


def test_the_chain_pendulum_system_steps_by_the_multiplier_form():
    """The ground-truth system (constant mass, gravity) through RATTLE: the multiplier form
    matches the general form and stays on the manifold."""
    system = get_system("chain_pendulum", links=3)
    z = system.sample(4, torch.Generator().manual_seed(2))
    with torch.no_grad():
        fast = solve(system, z, 0.01, 50, rattle("auto"), "backprop").ys
        general = solve(system, z, 0.01, 50, rattle("general"), "backprop").ys
    assert float((fast - general).abs().max()) <= 1e-12 * float(general.abs().max())
    phi, phidot = system.constraint_violation(fast)
    assert phi <= 1e-12 and phidot <= 1e-11


def test_one_line_refusals():
    H, y0 = pendulum_case()
    plain = PlanarPendulum()
    y_plain = planar_state(plain, torch.tensor([1.0]), torch.tensor([0.5])).detach()
    assert not get_integrator("rattle").multipliers(plain)
    with pytest.raises(IncompatibleError, match="needs an H with a constant mass_matrix") as e:
        integrate(plain, y_plain, 0.05, 2, rattle("multipliers"), "backprop")
    assert "\n" not in str(e.value)
    coupled = CoupledPendulum()
    yc = planar_state(coupled, torch.tensor([1.0]), torch.tensor([0.5])).detach()
    with pytest.raises(IncompatibleError, match="formulation=general") as e:
        integrate(coupled, yc, 0.05, 2, rattle("auto"), "backprop")
    assert "\n" not in str(e.value)
    with torch.no_grad():  # the general form steps it
        ys = integrate(coupled, yc, 0.05, 2, rattle("general"), "backprop")
    assert torch.isfinite(ys).all()
    with pytest.raises(ValueError, match="formulation must be one of"):
        get_integrator("rattle", formulation="fast")
