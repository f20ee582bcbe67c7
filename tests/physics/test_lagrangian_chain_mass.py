"""The chain mass matrix of the Lagrangian model (``LagrangianModel(mass="chain")``,
M(θ) = J(θ)ᵀ A J(θ) of the unit-link embedding): exact for a compound double pendulum of rods,
checked against the rods' kinetic energy computed independently (a closed form and quadrature
over the rods' mass); SPD; and it trains, with backprop and the symplectic adjoint giving the
same gradients. float64 throughout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hnnsym.physics.lagrangian_models import LagrangianModel, chain_jacobian, observed_rollout

# two rods: masses, lengths, centres of mass (from the rod's pivot end), moments of inertia
# about the centre (a rod with a bob: not uniform)
MASSES, LENGTHS, CENTRES, INERTIAS = (1.3, 0.6), (0.9, 0.7), (0.5, 0.4), (0.11, 0.05)


def rod_mass_matrix(theta: np.ndarray) -> np.ndarray:
    """M(θ) (B, 2, 2) of two rigid rods hinged in a chain, from the rods' kinetic energy
    ½ m |v_centre|² + ½ I ω²: rod 1 turns about the pivot, rod 2's centre moves with the elbow
    (l₁ θ̇₁ along arm 1's normal) plus a₂ θ̇₂ along arm 2's normal."""
    (m1, m2), (l1, _), (a1, a2), (i1, i2) = MASSES, LENGTHS, CENTRES, INERTIAS
    c = np.cos(theta[:, 0] - theta[:, 1])
    m11 = np.full_like(c, m1 * a1**2 + i1 + m2 * l1**2)
    m22 = np.full_like(c, m2 * a2**2 + i2)
    m12 = m2 * l1 * a2 * c
    return np.stack([np.stack([m11, m12], -1), np.stack([m12, m22], -1)], -2)


def embedding_form() -> np.ndarray:
    """A (4, 4) over the unit-link points' velocities (ẋ₁, ẏ₁, ẋ₂, ẏ₂) giving the rods' kinetic
    energy. With w₁ = ẋ₁ and w₂ = ẋ₂ − ẋ₁ the unit links' velocities, T = ½ (α|w₁|² + 2β w₁·w₂ +
    γ|w₂|²), w₁·w₂ = θ̇₁θ̇₂ cos(θ₁ − θ₂): α, β, γ the entries of ``rod_mass_matrix``."""
    (m1, m2), (l1, _), (a1, a2), (i1, i2) = MASSES, LENGTHS, CENTRES, INERTIAS
    alpha, beta, gamma = m1 * a1**2 + i1 + m2 * l1**2, m2 * l1 * a2, m2 * a2**2 + i2
    over_w = np.kron(np.array([[alpha, beta], [beta, gamma]]), np.eye(2))
    w_of_x = np.kron(np.array([[1.0, 0.0], [-1.0, 1.0]]), np.eye(2))
    return w_of_x.T @ over_w @ w_of_x


def chain_model(A: np.ndarray, **kw) -> LagrangianModel:
    """A mass=chain model whose A is the given SPD matrix (C = cholesky(A) set in its
    parameters: softplus⁻¹ of the diagonal less mass_eps)."""
    model = LagrangianModel(2, mass="chain", periodic=(0, 1), **kw).double()
    C = torch.linalg.cholesky(torch.as_tensor(A))
    with torch.no_grad():
        raw = C.tril(-1) + torch.diag(torch.log(torch.expm1(C.diagonal() - model.mass_eps)))
        model.chain_factor.copy_(raw)
    torch.testing.assert_close(model.chain_mass(), torch.as_tensor(A))
    return model


def rods_kinetic_energy_by_quadrature(theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """T of two uniform rods (I = m l²/12, centre at l/2): ½ ∫ (m/l) |v(s)|² ds along each rod,
    by 3-point Gauss–Legendre (exact for the quadratic |v(s)|²). Shapes (B, 2) -> (B,)."""
    nodes, weights = np.polynomial.legendre.leggauss(3)
    s01, w01 = (nodes + 1) / 2, weights / 2  # on [0, 1]
    (m1, m2), (l1, l2) = MASSES, LENGTHS
    n1 = np.stack([-np.sin(theta[:, 0]), np.cos(theta[:, 0])], -1)
    n2 = np.stack([-np.sin(theta[:, 1]), np.cos(theta[:, 1])], -1)
    total = np.zeros(theta.shape[0])
    for s, w in zip(s01, w01, strict=True):
        v1 = s * l1 * omega[:, :1] * n1
        v2 = l1 * omega[:, :1] * n1 + s * l2 * omega[:, 1:] * n2
        total += w * (0.5 * m1 * (v1**2).sum(-1) + 0.5 * m2 * (v2**2).sum(-1))
    return total


def test_the_jacobian_is_the_embeddings_derivative() -> None:
    theta = torch.randn(5, 3, dtype=torch.float64)

    def points(t):
        u = torch.stack([torch.cos(t), torch.sin(t)], -1)  # (3, 2)
        return torch.cumsum(u, 0).reshape(-1)

    for b in range(5):
        jac = torch.autograd.functional.jacobian(points, theta[b])
        torch.testing.assert_close(chain_jacobian(theta[b]), jac)


def test_some_A_gives_a_compound_pendulums_mass_matrix_exactly() -> None:
    A = embedding_form()
    assert np.linalg.eigvalsh(A).min() > 0  # SPD: rods with inertia
    model = chain_model(A)
    rng = np.random.default_rng(0)
    theta = rng.uniform(-4, 4, (64, 2))
    M = model.mass_matrix(torch.as_tensor(theta)).detach().numpy()
    np.testing.assert_allclose(M, rod_mass_matrix(theta), rtol=1e-12, atol=1e-12)
    L = model.mass_cholesky(torch.as_tensor(theta)).detach().numpy()
    np.testing.assert_allclose(L @ L.transpose(0, 2, 1), M, rtol=1e-12, atol=1e-12)


def test_uniform_rods_kinetic_energy_by_quadrature() -> None:
    """The same for uniform rods, the kinetic energy integrated over the rods' mass: an
    independent check of the closed form the other test uses."""
    global CENTRES, INERTIAS
    saved = CENTRES, INERTIAS
    CENTRES = tuple(ell / 2 for ell in LENGTHS)
    INERTIAS = tuple(m * ell**2 / 12 for m, ell in zip(MASSES, LENGTHS, strict=True))
    try:
        model = chain_model(embedding_form())
        rng = np.random.default_rng(1)
        theta, omega = rng.uniform(-4, 4, (32, 2)), rng.normal(0, 2, (32, 2))
        M = model.mass_matrix(torch.as_tensor(theta)).detach().numpy()
        kinetic = 0.5 * np.einsum("bi,bij,bj->b", omega, M, omega)
        np.testing.assert_allclose(kinetic, rods_kinetic_energy_by_quadrature(theta, omega),
                                   rtol=1e-12)  # fmt: skip
    finally:
        CENTRES, INERTIAS = saved


def test_the_chain_mass_is_spd_for_any_parameters_and_needs_angles() -> None:
    torch.manual_seed(0)
    model = LagrangianModel(3, mass="chain", periodic=(0, 1, 2)).double()
    with torch.no_grad():
        model.chain_factor.normal_(0, 2.0)
    M = model.mass_matrix(torch.randn(256, 3, dtype=torch.float64) * 4)
    assert torch.allclose(M, M.mT) and torch.linalg.eigvalsh(M).min() > 0
    with pytest.raises(ValueError, match="every coordinate to be a link angle"):
        LagrangianModel(2, mass="chain", periodic=(0,))
    with pytest.raises(ValueError, match="mass must be one of"):
        LagrangianModel(2, mass="diagonal", periodic=(0, 1))


GRAVITY = (9.0, 2.5)  # V = −Σ g_k cos θ_k (the gravity torques), R = friction at both joints
FRICTION = np.array([[0.08 + 0.03, -0.03], [-0.03, 0.03]])


def compound_windows(n=12, steps=10, h=0.02):
    """(q, q̇) windows (steps+1, n, 2) each of the damped compound double pendulum of
    ``rod_mass_matrix`` (scipy, tight tolerances), from random starts."""
    from scipy.integrate import solve_ivp

    def rhs(_t, y):
        th, w = y[:2], y[2:]
        M = rod_mass_matrix(th[None])[0]
        (_, m2), (l1, _), (_, a2), _ = MASSES, LENGTHS, CENTRES, INERTIAS
        s = math.sin(th[0] - th[1])
        coriolis = m2 * l1 * a2 * s * np.array([-(w[1] ** 2), w[0] ** 2])
        force = coriolis - np.array(GRAVITY) * np.sin(th) - FRICTION @ w
        return [*w, *np.linalg.solve(M, force)]

    rng = np.random.default_rng(2)
    t = np.arange(steps + 1) * h
    runs = [solve_ivp(rhs, (0, t[-1]), [*rng.uniform(-1.5, 1.5, 2), *rng.normal(0, 1.5, 2)],
                      t_eval=t, method="DOP853", rtol=1e-11, atol=1e-11).y.T for _ in range(n)]  # fmt: skip
    obs = torch.as_tensor(np.stack(runs, 1))
    return obs[..., :2], obs[..., 2:], h


def rods_field(obs: np.ndarray) -> np.ndarray:
    """(q̇, ṗ) (B, 4) of the damped rods at observations (θ, θ̇) (B, 4), from Lagrange's
    equations written out with ``rod_mass_matrix``: ṗ = d(M θ̇)/dt = ∂L/∂θ − R θ̇."""
    th, w = obs[:, :2], obs[:, 2:]
    (_, m2), (l1, _), (_, a2), _ = MASSES, LENGTHS, CENTRES, INERTIAS
    s = np.sin(th[:, 0] - th[:, 1])
    dT = -m2 * l1 * a2 * s * w[:, 0] * w[:, 1]  # ∂T/∂θ₁ = −∂T/∂θ₂
    dL = np.stack([dT, -dT], -1) - np.array(GRAVITY) * np.sin(th)
    return np.concatenate([w, dL - w @ FRICTION.T], -1)


def test_with_the_rods_A_V_and_R_its_field_is_the_compound_pendulums() -> None:
    model = chain_model(embedding_form(), damping="constant")
    model.potential = lambda th: -(torch.as_tensor(GRAVITY).to(th) * torch.cos(th)).sum(-1)
    with torch.no_grad():
        model.damping_factor.copy_(torch.linalg.cholesky(torch.as_tensor(FRICTION)))
    rng = np.random.default_rng(3)
    obs = np.concatenate([rng.uniform(-4, 4, (64, 2)), rng.normal(0, 2, (64, 2))], -1)
    y = model.to_state(torch.as_tensor(obs[:, :2]), torch.as_tensor(obs[:, 2:]))
    got = model.vector_field(y).detach().numpy()
    np.testing.assert_allclose(got, rods_field(obs), rtol=1e-10, atol=1e-10)


def test_it_trains_with_exact_gradients() -> None:
    q, qdot, h = compound_windows()
    torch.manual_seed(0)
    model = LagrangianModel(2, hidden=(16, 16), periodic=(0, 1), mass="chain").double()

    def loss(gradient: str) -> torch.Tensor:
        pq, pv = observed_rollout(model, q[0], qdot[0], h, q.shape[0] - 1, gradient=gradient)
        return ((pq - q) ** 2).mean() + ((pv - qdot) ** 2).mean()

    params = list(model.parameters())
    exact = torch.autograd.grad(loss("backprop"), params, allow_unused=True)
    adjoint = torch.autograd.grad(loss("symplectic_adjoint"), params, allow_unused=True)
    assert [g is None for g in exact] == [g is None for g in adjoint]
    for a, b in zip(adjoint, exact):
        if b is not None:
            assert float((a - b).abs().max()) < 1e-10
    assert exact[0].abs().max() > 1e-6  # A's parameters get a gradient

    opt = torch.optim.Adam(params, lr=0.03)
    with torch.no_grad():
        first = float(loss("symplectic_adjoint"))
    for _ in range(80):
        opt.zero_grad()
        value = loss("symplectic_adjoint")
        value.backward()
        opt.step()
    # measured: 1.00 -> 0.0048
    assert float(value.detach()) < 0.05 * first, (first, float(value))


@pytest.mark.parametrize(
    "integrator, gradient",
    [("gauss_legendre4", "symplectic_adjoint"), ("gauss_legendre4", "checkpoint"),
     ("rk4", "symplectic_adjoint"), ("implicit_midpoint", "checkpoint")],
)  # fmt: skip
def test_other_integrators_and_exact_gradient_methods(integrator, gradient) -> None:
    q, qdot, h = compound_windows(n=4, steps=4)
    torch.manual_seed(1)
    model = LagrangianModel(2, hidden=(8,), periodic=(0, 1), mass="chain").double()
    with torch.no_grad():
        model.chain_factor.add_(0.3 * torch.randn_like(model.chain_factor))
        model.potential_linear.weight.normal_(0, 1.0)

    def grads(method: str):
        pq, pv = observed_rollout(model, q[0], qdot[0], h, 4, integrator, method)
        value = ((pq - q) ** 2).mean() + ((pv - qdot) ** 2).mean()
        return torch.autograd.grad(value, list(model.parameters()), allow_unused=True)

    for a, b in zip(grads(gradient), grads("backprop"), strict=True):
        assert (a is None) == (b is None)
        if b is not None:
            assert float((a - b).abs().max()) < 1e-10


def test_without_hidden_layers_the_potential_is_a_uniform_fields_and_exact_for_the_rods() -> None:
    """``hidden=[]`` (experiment=recording_chain): V is linear in (cos θ, sin θ), i.e. in the
    chain's points; with the weights of the rods' gravity the field is the compound pendulum's."""
    model = chain_model(embedding_form(), damping="constant", hidden=())
    assert len(model.potential_net) == 1  # one linear layer
    rng = np.random.default_rng(4)
    th = torch.as_tensor(rng.uniform(-4, 4, (64, 2)))
    features = model.inputs(th)
    target = -(torch.as_tensor(GRAVITY).to(th) * torch.cos(th)).sum(-1)
    w = torch.linalg.lstsq(features, target[:, None]).solution[:, 0]
    with torch.no_grad():
        model.potential_net[0].weight.copy_(w[None])
        model.potential_net[0].bias.zero_()
        model.potential_linear.weight.zero_()
        model.damping_factor.copy_(torch.linalg.cholesky(torch.as_tensor(FRICTION)))
    torch.testing.assert_close(model.potential(th), target, rtol=0, atol=1e-12)
    obs = np.concatenate([rng.uniform(-4, 4, (64, 2)), rng.normal(0, 2, (64, 2))], -1)
    y = model.to_state(torch.as_tensor(obs[:, :2]), torch.as_tensor(obs[:, 2:]))
    np.testing.assert_allclose(model.vector_field(y).detach().numpy(), rods_field(obs),
                               rtol=1e-10, atol=1e-10)  # fmt: skip
