"""The analytic systems: H and its equations of motion against hand-written formulas, samplers, grids.

Every formula below is written out independently of ``hnnsym`` (the paper's equations of motion
q' = ∂H/∂p, p' = -∂H/∂q), so a sign or factor slip in a system or in ``vector_field`` fails here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from hnnsym import integrate
from hnnsym.ode.dynamics import vector_field
from hnnsym.physics.systems import SYSTEMS, get_system

F64 = torch.float64

# name -> (params, H(q, p), (q', p')), on (B, d) tensors q, p; params as passed to get_system.
ALPHA = 0.3


def _dw_h(q, p, **_):
    return (p**2 / 2 + q**4 / 4 - q**2 / 2).sum(-1)


def _dw_f(q, p, **_):
    return p, q - q**3


def _co_h(q, p, alpha):
    return (p**2 / 2 + q**2 / 2 + alpha * q * p).sum(-1)


def _co_f(q, p, alpha):
    return p + alpha * q, -q - alpha * p


def _hh_h(q, p, **_):
    qx, qy = q[:, 0], q[:, 1]
    return (p**2).sum(-1) / 2 + (qx**2 + qy**2) / 2 + qx**2 * qy - qy**3 / 3


def _hh_f(q, p, **_):
    qx, qy = q[:, 0], q[:, 1]
    dp = torch.stack([-qx - 2 * qx * qy, -qy - qx**2 + qy**2], -1)
    return p, dp


def _pend_h(q, p, g, length, mass):
    return (p**2 / (2 * mass * length**2) + mass * g * length * (1 - torch.cos(q))).sum(-1)


def _pend_f(q, p, g, length, mass):
    return p / (mass * length**2), -mass * g * length * torch.sin(q)


def _ms_h(q, p, mass, k):
    return (p**2 / (2 * mass) + k * q**2 / 2).sum(-1)


def _ms_f(q, p, mass, k):
    return p / mass, -k * q


def _tb_h(q, p, gravity, mass):
    r = (q[..., :2] - q[..., 2:]).norm(dim=-1)
    return (p**2).sum(-1) / (2 * mass) - gravity * mass**2 / r


def _tb_f(q, p, gravity, mass):
    diff = q[..., :2] - q[..., 2:]
    force = gravity * mass**2 * diff / diff.norm(dim=-1, keepdim=True) ** 3  # on body 2, from 1
    return p / mass, torch.cat([-force, force], -1)


# The chain pendulum (Finzi et al.), masses and lengths of links=2 as the reference draws them
# (numpy RandomState(0), popped from the end).
_U = np.random.RandomState(0).rand(4)
_CHAIN = {"m": 0.6 + 0.8 * _U[1::-1], "l": 0.6 + 0.8 * _U[:1:-1], "g": 9.81}


def _chain_h(q, p, m, l, g):  # noqa: E741  Cartesian: Σ|p_i|²/2m_i + g Σ m_i y_i
    mm = torch.tensor(np.repeat(m, 2), dtype=F64)
    return (p**2 / (2 * mm)).sum(-1) + g * (torch.tensor(m, dtype=F64) * q[:, 1::2]).sum(-1)


def _chain_f(q, p, m, l, g):  # noqa: E741
    """ż = J∇H − J G λ with Gᵀż = 0: G the autograd Jacobian of Ψ = [Φ, Φ̇] (Φ: |x_1|² − l_1²,
    |x_2 − x_1|² − l_2²), the multipliers λ solved per state with numpy."""
    mm = np.repeat(m, 2)
    out = []
    for qb, pb in zip(q.numpy(), p.numpy()):
        z = torch.tensor(np.concatenate([qb, pb]), requires_grad=True)
        x, v = z[:4].reshape(2, 2), (z[4:] / torch.tensor(mm)).reshape(2, 2)
        r = torch.stack([x[0], x[1] - x[0]])
        u = torch.stack([v[0], v[1] - v[0]])
        psi = torch.cat([(r**2).sum(-1) - torch.tensor(l) ** 2, 2 * (r * u).sum(-1)])
        G = np.stack([torch.autograd.grad(psi[k], z, retain_graph=True)[0].numpy()
                      for k in range(4)], 1)  # fmt: skip
        f = np.concatenate([pb / mm, -g * np.stack([np.zeros(2), m], -1).ravel()])
        JG = np.concatenate([G[4:], -G[:4]])
        lam = np.linalg.solve(G.T @ JG, G.T @ f)
        out.append(f - JG @ lam)
    out = torch.tensor(np.array(out))
    return out[:, :4], out[:, 4:]


def _chain_angles_h(q, p, m, l, g):  # noqa: E741
    c = np.array([[m[max(i, j) :].sum() for j in range(2)] for i in range(2)])
    M = torch.tensor(c * np.outer(l, l)) * torch.cos(q[:, :, None] - q[:, None, :])
    v = torch.linalg.solve(M, p[..., None])[..., 0]
    return 0.5 * (p * v).sum(-1) - g * (torch.tensor(np.diag(c) * l) * torch.cos(q)).sum(-1)


def _chain_angles_f(q, p, m, l, g):  # noqa: E741
    """θ' = M(θ)⁻¹p, p' = −Σ_j c_kj l_k l_j sin(θ_k − θ_j) θ'_k θ'_j − g c_kk l_k sin θ_k."""
    c = torch.tensor([[m[max(i, j) :].sum() for j in range(2)] for i in range(2)])
    L = torch.tensor(np.outer(l, l))
    d = q[:, :, None] - q[:, None, :]
    w = torch.linalg.solve(c * L * torch.cos(d), p[..., None])[..., 0]
    dp = -(c * L * torch.sin(d) * w[:, :, None] * w[:, None, :]).sum(-1)
    return w, dp - g * torch.diagonal(c) * torch.tensor(l) * torch.sin(q)


# The coupled pendulum (Finzi et al., 3-D): bobs=2 tethered to (0, 0, 0) and (1, 0, 0) by unit rods,
# masses 1, gravity along -z, a spring k = 10 of rest length 1 between the bobs.
_COUPLED = {"m": np.array([1.0, 1.0]), "g": 9.81, "k": 10.0}


def _coupled_h(q, p, m, g, k):
    d = (q[:, 3:] - q[:, :3]).norm(dim=-1)
    return (p**2).sum(-1) / 2 + g * (q[:, 2] + q[:, 5]) + 0.5 * k * (d - 1) ** 2


def _coupled_f(q, p, m, g, k):
    """ż = J∇H − J G λ with Gᵀż = 0, G the autograd Jacobian of Ψ = [Φ, Φ̇] (Φ: |x_i − a_i|² − 1),
    ∇H by hand, λ per state with numpy."""
    out = []
    for qb, pb in zip(q.numpy(), p.numpy()):
        z = torch.tensor(np.concatenate([qb, pb]), requires_grad=True)
        r = z[:6].reshape(2, 3) - torch.tensor([[0.0, 0, 0], [1.0, 0, 0]], dtype=F64)
        psi = torch.cat([(r**2).sum(-1) - 1, 2 * (r * z[6:].reshape(2, 3)).sum(-1)])
        G = np.stack([torch.autograd.grad(psi[j], z, retain_graph=True)[0].numpy()
                      for j in range(4)], 1)  # fmt: skip
        dx = qb[3:] - qb[:3]
        spring = k * (np.linalg.norm(dx) - 1) * dx / np.linalg.norm(dx)  # ∂V/∂x_2
        grad_q = np.concatenate([-spring, spring]) + g * np.array([0, 0, 1.0, 0, 0, 1])
        f = np.concatenate([pb, -grad_q])
        JG = np.concatenate([G[6:], -G[:6]])
        lam = np.linalg.solve(G.T @ JG, G.T @ f)
        out.append(f - JG @ lam)
    out = torch.tensor(np.array(out))
    return out[:, :6], out[:, 6:]


ANALYTIC = {
    # name: [(params for get_system, params for the formulas), ...], H, field
    "chain_pendulum": ([({"links": 2}, _CHAIN)], _chain_h, _chain_f),
    "chain_pendulum_angles": ([({"links": 2}, _CHAIN)], _chain_angles_h, _chain_angles_f),
    "coupled_pendulum": ([({}, _COUPLED)], _coupled_h, _coupled_f),
    "double_well": ([({}, {})], _dw_h, _dw_f),
    "custom": ([({}, {})], _dw_h, _dw_f),  # its default expression is the double well
    "coupled_oscillator": (
        [({}, {"alpha": 0.5}), ({"alpha": ALPHA}, {"alpha": ALPHA})],
        _co_h,
        _co_f,
    ),
    "henon_heiles": ([({}, {})], _hh_h, _hh_f),
    "two_body": (
        [
            ({}, {"gravity": 1.0, "mass": 1.0}),
            ({"gravity": 2.0, "mass": 0.5}, {"gravity": 2.0, "mass": 0.5}),
        ],
        _tb_h,
        _tb_f,
    ),
    "pendulum": (
        [
            ({}, {"g": 1.0, "length": 1.0, "mass": 1.0}),
            ({"g": 9.81, "length": 2.0, "mass": 0.5}, {"g": 9.81, "length": 2.0, "mass": 0.5}),
        ],
        _pend_h,
        _pend_f,
    ),
    "mass_spring": (
        [({}, {"mass": 1.0, "k": 1.0}), ({"mass": 2.5, "k": 0.4}, {"mass": 2.5, "k": 0.4})],
        _ms_h,
        _ms_f,
    ),
}

CASES = [
    pytest.param(name, sys_params, f_params, id=f"{name}-{i}")
    for name in sorted(SYSTEMS)
    for i, (sys_params, f_params) in enumerate(ANALYTIC.get(name, ([({}, None)],))[0])
]


def _states(system, n: int, seed: int, spread: float = 1.5) -> torch.Tensor:
    """Random states over (and somewhat beyond) the domain box, not only where sampling goes."""
    g = torch.Generator().manual_seed(seed)
    low = torch.tensor([lo for lo, _ in system.domain], dtype=F64)
    high = torch.tensor([hi for _, hi in system.domain], dtype=F64)
    mid, half = (low + high) / 2, (high - low) / 2
    u = 2 * torch.rand((n, 2 * system.dim), generator=g, dtype=F64) - 1
    return mid + spread * half * u


@pytest.mark.parametrize("name,sys_params,f_params", CASES)
def test_hamiltonian_and_vector_field_match_the_equations_of_motion(name, sys_params, f_params):
    assert name in ANALYTIC, f"system {name!r} has no hand-written equations of motion in this test"
    _, H_formula, f_formula = ANALYTIC[name]
    system = get_system(name, **sys_params)
    y = _states(system, 11, seed=len(name))
    d = system.dim
    q, p = y[:, :d], y[:, d:]

    torch.testing.assert_close(system(y), H_formula(q, p, **f_params), rtol=1e-14, atol=1e-14)
    dq, dp = f_formula(q, p, **f_params)
    expected = torch.cat([dq, dp], -1)
    got = vector_field(system, y)
    assert got.shape == y.shape and got.dtype == F64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-13)
    # also without grad mode (how the integrators call it in no-graph forward passes)
    with torch.no_grad():
        torch.testing.assert_close(vector_field(system, y), expected, rtol=1e-12, atol=1e-13)


def test_vector_field_is_differentiable_when_asked():
    """create_graph=True: the field carries a graph to y (the Jacobian of the coupled oscillator
    field is the constant matrix [[α, 1], [-1, -α]])."""
    system = get_system("coupled_oscillator", alpha=ALPHA)
    y = torch.tensor([[0.3, -0.2]], dtype=F64)
    jac = torch.autograd.functional.jacobian(
        lambda x: vector_field(system, x, create_graph=True), y
    ).reshape(2, 2)
    expected = torch.tensor([[ALPHA, 1.0], [-1.0, -ALPHA]], dtype=F64)
    torch.testing.assert_close(jac, expected, rtol=0, atol=1e-15)


def test_unknown_system_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown system 'nope'.*double_well"):
        get_system("nope")


# ---- samplers -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_sample_is_inside_the_domain_and_seeded(name):
    system = get_system(name)
    n = 500
    y = system.sample(n, torch.Generator().manual_seed(7))
    assert y.shape == (n, 2 * system.dim) and y.dtype == F64
    low = torch.tensor([lo for lo, _ in system.domain], dtype=F64)
    high = torch.tensor([hi for _, hi in system.domain], dtype=F64)
    assert ((y >= low) & (y <= high)).all()
    assert system.in_domain(y).all()
    if system.energy_max is not None:
        assert (system(y) < system.energy_max).all()

    same = system.sample(n, torch.Generator().manual_seed(7))
    other = system.sample(n, torch.Generator().manual_seed(8))
    assert torch.equal(y, same)
    assert not torch.allclose(y, other)
    assert system.sample(n, torch.Generator().manual_seed(7), dtype=torch.float32).dtype == (
        torch.float32
    )


@pytest.mark.parametrize("name", ["double_well", "pendulum", "mass_spring", "coupled_oscillator"])
def test_sample_is_uniform_over_the_box(name):
    """Without an energy filter the draws are uniform on the box: per-coordinate mean and
    variance within 5 standard errors of (mid, width²/12)."""
    system = get_system(name)
    n = 4000
    y = system.sample(n, torch.Generator().manual_seed(3))
    for j, (lo, hi) in enumerate(system.domain):
        w = hi - lo
        mean_se = w / math.sqrt(12 * n)
        assert abs(float(y[:, j].mean()) - (lo + hi) / 2) < 5 * mean_se
        var_se = w**2 * math.sqrt(1 / 80 - 1 / 144) / math.sqrt(n)  # sd of a uniform's x²-moment
        assert abs(float(y[:, j].var()) - w**2 / 12) < 5 * var_se


def test_henon_heiles_samples_lie_below_escape_energy_inside_the_triangle():
    """H < 1/6 and q inside the triangle bounded by the escape lines qy = -1/2, qy = 1 ± √3 qx
    (where V = 1/6), so the orbits cannot leave; the filter really rejects part of the box; a
    short rollout of the samples keeps energy and stays inside the triangle."""
    system = get_system("henon_heiles")
    assert system.energy_max == pytest.approx(1 / 6)
    g = torch.Generator().manual_seed(11)
    box = 2 * torch.rand((4000, 4), generator=g, dtype=F64) - 1
    box = 0.5 * box
    assert (system(box) >= 1 / 6).float().mean() > 0.05  # the filter matters on this box

    y = system.sample(64, torch.Generator().manual_seed(5))
    H = _hh_h(y[:, :2], y[:, 2:])
    assert (H < 1 / 6).all()
    qx, qy = y[:, 0], y[:, 1]
    s3 = math.sqrt(3)
    assert ((qy > -0.5) & (qy < 1 + s3 * qx) & (qy < 1 - s3 * qx)).all()

    with torch.no_grad():
        traj = integrate(system, y[:16], 0.1, 100, "rk4", "backprop")
    qx, qy = traj[..., 0], traj[..., 1]
    assert ((qy > -0.5) & (qy < 1 + s3 * qx) & (qy < 1 - s3 * qx)).all()


# ---- grids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["double_well", "coupled_oscillator", "pendulum", "mass_spring"])
def test_grid_covers_the_box(name):
    system = get_system(name)
    n = 9
    grid = system.grid(n)
    (ql, qh), (pl, ph) = system.domain
    expected = np.array(
        list(itertools.product(np.linspace(ql, qh, n), np.linspace(pl, ph, n))), dtype=np.float64
    )
    assert grid.shape == (n * n, 2) and grid.dtype == F64
    np.testing.assert_allclose(grid.numpy(), expected, rtol=0, atol=1e-15)


def test_henon_heiles_grid_is_the_energy_filtered_box_grid():
    system = get_system("henon_heiles")
    n = 8  # odd n puts grid points exactly on H = 1/6, where rounding decides
    grid = system.grid(n)
    axis = np.linspace(-0.5, 0.5, n)
    full = np.array(list(itertools.product(axis, axis, axis, axis)), dtype=np.float64)
    qx, qy, px, py = full.T
    H = (px**2 + py**2) / 2 + (qx**2 + qy**2) / 2 + qx**2 * qy - qy**3 / 3
    assert np.abs(H - 1 / 6).min() > 1e-6
    expected = full[H < 1 / 6]
    assert 0 < len(expected) < n**4
    assert grid.shape == expected.shape
    np.testing.assert_allclose(grid.numpy(), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name,axes", [("double_well", (0, 1)), ("henon_heiles", (0, 1))])
def test_slice_grid(name, axes):
    system = get_system(name)
    n = 5
    s = system.slice_grid(n, axes)
    assert s.shape == (n, n, 2 * system.dim)
    (lo0, hi0), (lo1, hi1) = system.domain[axes[0]], system.domain[axes[1]]
    a, b = np.linspace(lo0, hi0, n), np.linspace(lo1, hi1, n)
    np.testing.assert_allclose(s[..., axes[0]].numpy(), np.broadcast_to(a, (n, n)), atol=1e-15)
    np.testing.assert_allclose(s[..., axes[1]].numpy(), np.broadcast_to(b[:, None], (n, n)))
    others = [j for j in range(2 * system.dim) if j not in axes]
    assert (s[..., others] == 0).all()
