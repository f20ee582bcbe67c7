"""The Lagrangian model (hnnsym.physics.lagrangian_models) against an analytic double pendulum of
point masses: its field, implicit-midpoint trajectories against scipy, SPD mass matrices and
dissipation. float64 throughout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hnnsym.ode.solve import integrate
from hnnsym.physics.lagrangian_models import LagrangianModel, observed_rollout

M1, M2, L1, L2, G = 1.0, 0.7, 1.0, 0.8, 9.81


def analytic_accel(th1, th2, w1, w2):
    """θ̈ of the frictionless point-mass double pendulum, written out as in the textbooks (angles
    from the downward vertical): an independent check of the model's Legendre route."""
    d = th1 - th2
    den = 2 * M1 + M2 - M2 * np.cos(2 * th1 - 2 * th2)
    a1 = (-G * (2 * M1 + M2) * np.sin(th1) - M2 * G * np.sin(th1 - 2 * th2)
          - 2 * np.sin(d) * M2 * (w2**2 * L2 + w1**2 * L1 * np.cos(d))) / (L1 * den)  # fmt: skip
    a2 = (2 * np.sin(d) * (w1**2 * L1 * (M1 + M2) + G * (M1 + M2) * np.cos(th1)
          + w2**2 * L2 * M2 * np.cos(d))) / (L2 * den)  # fmt: skip
    return a1, a2


def pendulum_model(friction=None) -> LagrangianModel:
    """A LagrangianModel whose M and V are the point-mass double pendulum's (and R, if given, a
    constant friction matrix): the networks replaced by the closed forms."""
    model = LagrangianModel(2, damping="none" if friction is None else "constant").double()

    def mass_cholesky(q):
        c = torch.cos(q[..., 0] - q[..., 1])
        m = torch.stack([torch.stack([(M1 + M2) * L1**2 + 0 * c, M2 * L1 * L2 * c], -1),
                         torch.stack([M2 * L1 * L2 * c, M2 * L2**2 + 0 * c], -1)], -2)  # fmt: skip
        return torch.linalg.cholesky(m)

    def potential(q):
        return -(M1 + M2) * G * L1 * torch.cos(q[..., 0]) - M2 * G * L2 * torch.cos(q[..., 1])

    model.mass_cholesky, model.potential = mass_cholesky, potential
    if friction is not None:
        with torch.no_grad():
            model.damping_factor.copy_(
                torch.linalg.cholesky(torch.tensor(friction, dtype=torch.float64))
            )
    return model


def analytic_field(y: np.ndarray, friction=None) -> np.ndarray:
    """(q̇, ṗ) of the analytic pendulum at states (q, q̇): ṗ = Ṁ q̇ + M q̈, M q̈ gaining −R q̇."""
    th1, th2, w1, w2 = y.T
    c, s = np.cos(th1 - th2), np.sin(th1 - th2)
    k = M2 * L1 * L2
    a1, a2 = analytic_accel(th1, th2, w1, w2)
    m = np.array([[(M1 + M2) * L1**2 + 0 * c, k * c], [k * c, M2 * L2**2 + 0 * c]])  # (2,2,B)
    acc = np.stack([a1, a2])
    force = np.einsum("ijb,jb->ib", m, acc)
    if friction is not None:
        force = force - np.asarray(friction) @ np.stack([w1, w2])
        acc = np.linalg.solve(m.transpose(2, 0, 1), force.T[..., None])[..., 0].T
    mdot = -k * s * (w1 - w2)  # d/dt of the off-diagonal entry
    pdot = np.stack([force[0] + mdot * w2, force[1] + mdot * w1])
    return np.concatenate([np.stack([w1, w2]), pdot]).T


@pytest.mark.parametrize("friction", [None, [[0.3, 0.05], [0.05, 0.1]]])
def test_the_field_is_the_double_pendulums(friction) -> None:
    rng = np.random.default_rng(0)
    obs = np.concatenate([rng.uniform(-3, 3, (64, 2)), rng.normal(0, 2, (64, 2))], -1)
    model = pendulum_model(friction)
    q, qdot = torch.as_tensor(obs[:, :2]), torch.as_tensor(obs[:, 2:])
    y = model.to_state(q, qdot)
    back = model.to_observation(y)
    assert torch.allclose(back[0], q) and torch.allclose(back[1], qdot, atol=1e-12)
    got = model.vector_field(y).detach().numpy()
    np.testing.assert_allclose(got, analytic_field(obs, friction), rtol=1e-9, atol=1e-9)


def rollout_error(h: float, t_end: float = 1.0) -> float:
    from scipy.integrate import solve_ivp

    obs0 = np.array([1.2, -0.5, 0.0, 0.8])

    def rhs(_t, y):
        return [y[2], y[3], *analytic_accel(*y)]

    ref = solve_ivp(rhs, (0, t_end), obs0, method="DOP853", rtol=1e-12, atol=1e-12).y[:, -1]
    model = pendulum_model()
    y0 = model.to_state(torch.as_tensor(obs0[None, :2]), torch.as_tensor(obs0[None, 2:]))
    steps = round(t_end / h)
    with torch.no_grad():
        ys = integrate(model, y0, h, steps, "implicit_midpoint", "backprop")
    q, qdot = model.to_observation(ys[-1])
    return float(np.abs(torch.cat([q, qdot], -1)[0].numpy() - ref).max())


def test_implicit_midpoint_matches_scipy_to_second_order() -> None:
    coarse, fine = rollout_error(0.02), rollout_error(0.01)
    assert fine < 5e-3
    assert math.log2(coarse / fine) == pytest.approx(2.0, abs=0.25)  # the midpoint rule's order


@pytest.mark.parametrize("periodic", [(), (0, 1)])
def test_the_mass_matrix_is_spd_and_dissipation_never_adds_energy(periodic) -> None:
    torch.manual_seed(0)
    model = LagrangianModel(3, damping="state", periodic=periodic, damping_init=0.5).double()
    with torch.no_grad():  # a damping net that varies over q
        model.damping_net[-1].weight.normal_(0, 1.0)
    y = torch.randn(512, 6, dtype=torch.float64) * 3
    M = model.mass_matrix(y[:, :3])
    assert torch.allclose(M, M.mT)
    assert torch.linalg.eigvalsh(M).min() > 0
    assert torch.linalg.eigvalsh(model.rayleigh_matrix(y[:, :3])).min() > -1e-12
    grad = torch.func.vmap(torch.func.grad(model))(y)
    dH = (grad * model.vector_field(y)).sum(-1)  # dH/dt = −q̇ᵀ R q̇
    qdot = model.velocities(y)
    R = model.rayleigh_matrix(y[:, :3])
    torch.testing.assert_close(dH, -torch.einsum("bi,bij,bj->b", qdot, R, qdot))
    assert dH.max() <= 1e-12 and dH.min() < -1e-3
    if periodic:  # angles: the model is 2π-periodic in them
        shifted = y.clone()
        shifted[:, :2] += 2 * math.pi
        torch.testing.assert_close(model(shifted), model(y))


def test_refusals() -> None:
    with pytest.raises(ValueError, match="damping must be one of"):
        LagrangianModel(2, damping="viscous")
    with pytest.raises(ValueError, match="mass_eps"):
        LagrangianModel(2, mass_eps=0.0)


def damped_windows(n=16, steps=10, h=0.05):
    """(q, q̇) windows (steps+1, n, 2) each of the point-mass double pendulum with friction
    R = diag(0.2, 0.1), from scipy (solve_ivp, tight tolerances) at random starts."""
    from scipy.integrate import solve_ivp

    friction = np.diag([0.2, 0.1])

    def rhs(_t, y):
        qdot = y[2:]
        m = np.array([[(M1 + M2) * L1**2, M2 * L1 * L2 * math.cos(y[0] - y[1])],
                      [M2 * L1 * L2 * math.cos(y[0] - y[1]), M2 * L2**2]])  # fmt: skip
        acc = analytic_accel(*y)
        acc = np.linalg.solve(m, m @ np.array(acc) - friction @ qdot)
        return [*qdot, *acc]

    rng = np.random.default_rng(1)
    t = np.arange(steps + 1) * h
    runs = [solve_ivp(rhs, (0, t[-1]), [*rng.uniform(-1.5, 1.5, 2), *rng.normal(0, 1, 2)],
                      t_eval=t, method="DOP853", rtol=1e-11, atol=1e-11).y.T for _ in range(n)]  # fmt: skip
    obs = torch.as_tensor(np.stack(runs, 1))  # (steps+1, n, 4)
    return obs[..., :2], obs[..., 2:], h


def test_it_trains_on_observed_windows_with_exact_gradients() -> None:
    q, qdot, h = damped_windows()
    torch.manual_seed(0)
    model = LagrangianModel(2, hidden=(16, 16), periodic=(0, 1)).double()

    def loss(gradient: str) -> torch.Tensor:
        pq, pv = observed_rollout(model, q[0], qdot[0], h, q.shape[0] - 1, gradient=gradient)
        return ((pq - q) ** 2).mean() + ((pv - qdot) ** 2).mean()

    # the symplectic adjoint's gradient through to_state, the solve and to_observation is
    # backprop's to rounding (V's output bias moves nothing: no gradient for it in either)
    params = list(model.parameters())
    exact = torch.autograd.grad(loss("backprop"), params, allow_unused=True)
    adjoint = torch.autograd.grad(loss("symplectic_adjoint"), params, allow_unused=True)
    assert [g is None for g in exact] == [g is None for g in adjoint]
    assert sum(g is None for g in exact) == 1
    for a, b in zip(adjoint, exact):
        if b is not None:
            torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-10)

    opt = torch.optim.Adam(params, lr=0.01)
    with torch.no_grad():
        first = float(loss("symplectic_adjoint"))
    for _ in range(60):
        opt.zero_grad()
        value = loss("symplectic_adjoint")
        value.backward()
        opt.step()
    assert float(value.detach()) < 0.05 * first  # measured: 4.8 -> 0.08 after 60 steps
