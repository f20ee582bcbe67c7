"""integrator=discrete_gradient (DGNet's Hamiltonian form): y⁺ = y + h J⁻¹∇̄H(y⁺, y)
conserves H exactly for any H, has order 2, equals implicit midpoint for a quadratic H (Gonzalez),
differentiates by backprop, and refuses fields without an energy in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

from hnnsym.config.build import build_integrator
from hnnsym.errors import IncompatibleError
from hnnsym.ode import solve
from hnnsym.ode.dynamics import vector_field
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.models import HNN, NODE
from hnnsym.physics.systems import get_system

F64 = torch.float64


def network(seed: int = 0) -> HNN:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return HNN(1).double()


@pytest.mark.parametrize("kind", ["gonzalez", "avf"])
def test_energy_of_a_network_is_conserved_to_rounding_where_implicit_midpoint_drifts(kind):
    H = network()
    y0 = torch.tensor([[0.5, -0.3], [1.5, 0.8], [-2.0, 0.1]], dtype=F64)
    nodes = (
        8 if kind == "avf" else 4
    )  # AVF: exact only up to its quadrature (tests/reproduction/test_position_only_learning.py)
    dg = get_integrator("discrete_gradient", tol=1e-14, kind=kind, nodes=nodes)
    with torch.no_grad():
        ys = solve(H, y0, 0.1, 2000, dg, "backprop").ys
        ref = solve(H, y0, 0.1, 2000, get_integrator("implicit_midpoint", tol=1e-14), "backprop").ys
        drift = (H(ys.reshape(-1, 2)).reshape(ys.shape[:2]) - H(y0)).abs().max()
        drift_mid = (H(ref.reshape(-1, 2)).reshape(ref.shape[:2]) - H(y0)).abs().max()
    bound = 1e-13 if kind == "gonzalez" else 1e-11
    assert float(drift) < bound, float(drift)
    assert float(drift_mid) > 1e3 * float(drift), (float(drift_mid), float(drift))


def test_second_order_against_scipy_on_the_pendulum():
    system = get_system("pendulum")
    y0 = torch.tensor([[1.0, 0.5]], dtype=F64)
    T = 2.0

    def rhs(t, y):
        return vector_field(system, torch.tensor(y[None], dtype=F64), False)[0].numpy()

    exact = solve_ivp(rhs, (0, T), y0[0].numpy(), method="DOP853", rtol=1e-12, atol=1e-12)
    errors = []
    for steps in (20, 40, 80):
        with torch.no_grad():
            ys = solve(system, y0, T / steps, steps, "discrete_gradient", "backprop").ys
        errors.append(float(np.abs(ys[-1, 0].numpy() - exact.y[:, -1]).max()))
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(orders - 2) < 0.1), (errors, orders)


def test_gonzalez_is_implicit_midpoint_for_a_quadratic_hamiltonian():
    system = get_system("mass_spring", mass=0.5, k=2.0)
    y0 = torch.tensor([[0.3, -0.7], [1.0, 0.0]], dtype=F64)
    with torch.no_grad():
        dg = solve(system, y0, 0.2, 100, get_integrator("discrete_gradient", tol=1e-14),
                   "backprop").ys  # fmt: skip
        mid = solve(system, y0, 0.2, 100, get_integrator("implicit_midpoint", tol=1e-14),
                    "backprop").ys  # fmt: skip
    assert float((dg - mid).abs().max()) < 1e-12  # 100 steps, each solved to 1e-14


def test_backprop_gradient_matches_finite_differences():
    H = network(1)
    y0 = torch.tensor([[0.4, 0.2], [-0.6, 1.1]], dtype=F64)
    integ = get_integrator("discrete_gradient", tol=1e-14)
    weight = next(H.parameters())

    def loss() -> torch.Tensor:
        return (solve(H, y0, 0.1, 10, integ, "backprop").ys[-1] ** 2).sum()

    (grad,) = torch.autograd.grad(loss(), weight)
    eps, index = 1e-6, (0, 0)
    with torch.no_grad():
        weight[index] += eps
        up = loss()
        weight[index] -= 2 * eps
        down = loss()
        weight[index] += eps
    assert float(grad[index]) == pytest.approx(float((up - down) / (2 * eps)), rel=1e-6)


def test_checkpoint_gives_backprops_gradient():
    H = network(2)
    y0 = torch.tensor([[0.4, 0.2], [-0.6, 1.1], [1.0, -1.0]], dtype=F64)
    integ = get_integrator("discrete_gradient", tol=1e-14)
    grads = []
    for method in ("backprop", "checkpoint"):
        loss = (solve(H, y0, 0.1, 12, integ, method).ys ** 2).sum()
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, H.parameters())]))
    assert float((grads[0] - grads[1]).abs().max()) < 1e-10 * float(grads[0].abs().max())


def test_refuses_a_field_without_energy_and_other_gradient_methods_in_one_line():
    y0 = torch.zeros(2, 2, dtype=F64)
    with pytest.raises(IncompatibleError) as err:
        solve(NODE(1).double(), y0, 0.1, 3, "discrete_gradient", "backprop")
    assert "\n" not in str(err.value) and "no energy" in str(err.value)
    with pytest.raises(IncompatibleError) as err:
        solve(network(), y0, 0.1, 3, "discrete_gradient", "symplectic_adjoint")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="kind must be one of"):
        get_integrator("discrete_gradient", kind="secant")


def test_the_config_group_builds_it(compose_config):
    cfg = compose_config("evaluate", ["integrator=discrete_gradient"])
    integ = build_integrator(cfg.integrator)
    assert integ.name == "discrete_gradient" and integ.kind == "gonzalez"
