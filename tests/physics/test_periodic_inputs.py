"""Angles as periodic inputs: models with ``periodic`` see (cos q_i, sin q_i) in place of q_i, so
H (or f, V, R) is exactly 2π-periodic in them; their closed forms (∇H, ∇²H, the parameter VJP
of the symplectic adjoint) follow the embedding exactly, checked against autograd in float64."""

from __future__ import annotations

import math

import pytest
import torch

from hnnsym import integrate
from hnnsym.config.build import build_model, same_model
from hnnsym.ode.dynamics import FieldLinearization, vector_field
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.dissipative import DissipativeHNN
from hnnsym.physics.models import (
    ACTIVATIONS,
    HNN,
    NODE,
    PeriodicLinearization,
    Potential,
    SeparableHNN,
)

F64 = torch.float64
TWO_PI = 2 * math.pi


def models(dim: int, periodic: list[int]) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "hnn": HNN(dim, (8, 8), periodic=periodic),
        "separable_hnn": SeparableHNN(dim, (8, 8), periodic=periodic),
        "separable_mass": SeparableHNN(dim, (8,), kinetic="mass", periodic=periodic),
        "node": NODE(dim, (8, 8), periodic=periodic),
        "dissipative_state": DissipativeHNN(dim, (8, 8), damping="state", periodic=periodic),
        "potential": Potential(dim, (8, 8), periodic=periodic),
    }


def states(model, n: int, dim: int, scale: float = 3.0) -> torch.Tensor:
    width = dim if isinstance(model, Potential) else 2 * dim
    return scale * torch.randn(n, width, dtype=F64, generator=torch.Generator().manual_seed(1))


def outputs(model, y):
    if isinstance(model, DissipativeHNN):  # H and the damping R(z)
        return torch.cat([model(y).unsqueeze(-1), model.damping_matrix(y).flatten(-2)], -1)
    return model(y)


@pytest.mark.parametrize("name", list(models(2, [0])))
def test_a_model_is_2pi_periodic_in_its_angles_only(name):
    """H(q + 2πk e_i) == H(q) to rounding for a periodic i, also k = ±16 (q ~ ±100 rad); a
    coordinate that is not periodic changes H."""
    model = models(2, [0])[name].double()
    y = states(model, 32, 2)
    base = outputs(model, y)
    for k in (1, -1, 16, -17):
        shifted = y.clone()
        shifted[:, 0] += TWO_PI * k
        torch.testing.assert_close(outputs(model, shifted), base, rtol=1e-12, atol=1e-12)
    other = y.clone()
    other[:, 1] += TWO_PI
    assert (outputs(model, other) - base).abs().max() > 1e-6


def test_every_angle_of_several_and_an_empty_list_is_the_plain_model():
    torch.manual_seed(3)
    model = HNN(3, (8,), periodic=[2, 0]).double()
    assert model.periodic == (0, 2) and model.net[0].in_features == 8
    y = states(model, 16, 3)
    shifted = y + TWO_PI * torch.tensor([3.0, 0.0, -5.0, 0.0, 0.0, 0.0], dtype=F64)
    torch.testing.assert_close(model(shifted), model(y), rtol=1e-12, atol=1e-12)
    torch.manual_seed(3)
    plain, empty = HNN(2, (8,)).double(), None
    torch.manual_seed(3)
    empty = HNN(2, (8,), periodic=None).double()
    y = states(plain, 8, 2)
    assert torch.equal(plain(y), empty(y)) and plain.net[0].in_features == 4


@pytest.mark.parametrize("periodic", [[3], [-1], [0.5]])
def test_a_periodic_index_that_is_no_position_is_refused(periodic):
    with pytest.raises(ValueError, match="periodic"):
        HNN(2, periodic=periodic)


@pytest.mark.parametrize("name", ["hnn", "separable_hnn", "separable_mass", "potential"])
def test_closed_form_gradient_through_the_embedding_is_autograds(name):
    """∇H in closed form (the chain rule through cos/sin) against autograd and against central
    finite differences, float64, large angles included."""
    model = models(2, [1])[name].double()
    y = states(model, 24, 2)
    y[:, :2] *= 15.0  # angles of several turns
    got = model.energy_gradient(y)
    y_ = y.clone().requires_grad_(True)
    expected = torch.autograd.grad(model(y_).sum(), y_)[0]
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)
    h = 1e-6
    eye = torch.eye(y.shape[-1], dtype=F64)
    fd = torch.stack([(model(y + h * e) - model(y - h * e)) / (2 * h) for e in eye], -1)
    torch.testing.assert_close(got, fd, rtol=1e-6, atol=1e-7)


def test_closed_form_gradient_is_differentiable_like_autograds():
    """Its VJPs (what the gradient methods take) equal double backward through autograd."""
    torch.manual_seed(4)
    H = HNN(2, (8, 8), periodic=[0]).double()
    y = (5 * torch.randn(6, 4, dtype=F64)).requires_grad_(True)
    v = torch.randn(6, 4, dtype=F64)
    params = [y, *H.parameters()]
    closed = torch.autograd.grad((H.energy_gradient(y) * v).sum(), params, allow_unused=True)
    g = torch.autograd.grad(H(y).sum(), y, create_graph=True)[0]
    double = torch.autograd.grad((g * v).sum(), params, allow_unused=True)
    for a, b in zip(closed, double, strict=True):
        if b is None:
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize(("d", "periodic"), [(1, [0]), (2, [1]), (2, [0, 1]), (3, [0, 2])])
def test_closed_form_hessian_and_parameter_vjp_are_autograds(activation, d, periodic):
    """``PeriodicLinearization``: ∇²H = Eᵀ∇ₑ²net E + diag(Σ g_k ∇²e_k) and ∂/∂θ Σ ν·∇H against
    autograd's double backward, to rounding in float64."""
    torch.manual_seed(d)
    H = HNN(d, hidden=(8, 16, 8), activation=activation, periodic=periodic).double()
    y = 3 * torch.randn(40, 2 * d, dtype=F64)
    nu = torch.randn(40, 2 * d, dtype=F64)
    closed = H.energy_linearization(y)
    assert isinstance(closed, PeriodicLinearization)
    y_ = y.clone().requires_grad_(True)
    grad = torch.autograd.grad(H(y_).sum(), y_, create_graph=True)[0]
    hessian = torch.stack(
        [torch.autograd.grad(grad[:, k].sum(), y_, retain_graph=True)[0] for k in range(2 * d)], 1
    )
    torch.testing.assert_close(closed.hessian, hessian, rtol=1e-12, atol=1e-13)
    params = list(H.parameters())
    expected = torch.autograd.grad((grad * nu).sum(), params, allow_unused=True)
    got = closed.directional_gradient_vjp(nu)
    assert len(got) == len(params)
    for a, b in zip(got, expected, strict=True):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_field_linearization_closed_form_equals_the_full_jacobian():
    torch.manual_seed(5)
    H = HNN(2, (8, 8), periodic=[0]).double()
    y = 4 * torch.randn(20, 4, dtype=F64)
    lin = FieldLinearization(H, y, list(H.parameters()))
    assert lin._closed is not None
    full = torch.autograd.functional.jacobian(lambda z: vector_field(H, z, True), y)
    jac = torch.stack([full[m, :, m, :] for m in range(len(y))])
    torch.testing.assert_close(lin.jacobian, jac, rtol=1e-12, atol=1e-13)


def _loss(traj: torch.Tensor) -> torch.Tensor:
    w = torch.linspace(0.5, 1.5, traj.numel(), dtype=traj.dtype).reshape(traj.shape)
    return (w * traj**2).sum() + torch.sin(traj).sum()


@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4"])
@pytest.mark.parametrize(("d", "periodic"), [(1, [0]), (2, [0, 1])])
def test_symplectic_adjoint_equals_backprop_for_a_periodic_hnn(integrator, d, periodic):
    """The adjoint's direct solve through the closed-form periodic linearisation, with a
    parameter frozen and angles of many turns: equal to backprop to <= 1e-10 relative."""
    with torch.random.fork_rng():
        torch.manual_seed(7)
        H = HNN(d, hidden=(16, 16), periodic=periodic).to(F64)
    with torch.no_grad():
        H.net[-1].weight.mul_(5.0)
    H.net[2].bias.requires_grad_(False)
    y0 = torch.randn(5, 2 * d, generator=torch.Generator().manual_seed(1), dtype=F64)
    y0[:, 0] += 100.0
    y0.requires_grad_(True)
    trainable = [y0, *(p for p in H.parameters() if p.requires_grad)]
    run = dict(h=0.1, steps=3, integrator=get_integrator(integrator, tol=1e-14))

    def grads(method: str) -> list[torch.Tensor]:
        loss = _loss(integrate(H, y0, gradient=method, **run))
        return torch.autograd.grad(loss, trainable, allow_unused=True)

    for g, r in zip(grads("symplectic_adjoint"), grads("backprop"), strict=True):
        if r is None:
            assert g is None
        else:
            rel = float((g - r).abs().max() / r.abs().max())
            assert r.abs().max() > 0 and rel <= 1e-10, rel


def test_the_config_default_null_matches_any_trained_periodic():
    """``periodic: null`` (the model configs' default: the data's angles) matches a checkpoint's
    resolved list; a list asked explicitly must equal it; a config without the key has none."""
    ckpt = {"_target_": "hnnsym.physics.models.HNN", "hidden": [8], "periodic": [0]}
    assert same_model(ckpt, {**ckpt, "periodic": None})
    assert same_model(ckpt, {**ckpt, "periodic": [0]})
    assert not same_model(ckpt, {**ckpt, "periodic": []})
    old = {"_target_": "hnnsym.physics.models.HNN", "hidden": [8]}
    assert same_model(old, {**old, "periodic": []}) and same_model(old, {**old, "periodic": None})
    assert not same_model(old, {**old, "periodic": [0]})
    assert build_model({**ckpt, "periodic": None}, 1).periodic == ()


def test_train_shifts_each_trajectorys_angles_by_whole_turns_to_start_near_zero():
    import numpy as np

    from hnnsym.training.stage import near_zero

    rng = np.random.default_rng(0)
    observed = rng.standard_normal((5, 7, 4))
    observed[:, :, 1] += 2 * np.pi * np.array([16, -17, 0, 3, -1])[:, None]
    observed[:, :, 0] += 100.0
    out = near_zero(observed, [1])
    assert np.abs(out[:, 0, 1]).max() <= np.pi
    turns = (observed[..., 1] - out[..., 1]) / (2 * np.pi)
    np.testing.assert_allclose(turns, np.broadcast_to(turns[:, :1], turns.shape), atol=1e-12)
    np.testing.assert_allclose(turns[:, 0], [16, -17, 0, 3, -1], atol=1e-12)  # whole turns
    assert np.array_equal(out[..., [0, 2, 3]], observed[..., [0, 2, 3]])
    assert near_zero(observed, []) is observed
