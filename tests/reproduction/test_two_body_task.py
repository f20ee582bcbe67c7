"""The 2-body task of Aoshima et al. / DGNet / HNN: the initial-condition sampler is HNN's construction,
and the ground truth of ``experiment=ddlm_two_body`` agrees with an independent solver."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scipy.integrate import solve_ivp

from hnnsym.config import CONF_DIR
from hnnsym.data.simulate import observation_ratio, simulate, split_generator
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.systems import get_system

F64 = torch.float64
EXPERIMENT = CONF_DIR / "experiment" / "ddlm_two_body.yaml"


def _kepler(y: torch.Tensor, gravity: float, mass: float):
    """Speed factor s = |v₁| / (circular speed at the start) and the relative orbit's
    eccentricity e = √(1 + 2εh²/(GM)²) (ε specific energy, h specific angular momentum,
    M = 2m), computed from the states (n, 8) alone."""
    q1, q2, p1, p2 = y[:, :2], y[:, 2:4], y[:, 4:6], y[:, 6:]
    r_vec, v_rel = q1 - q2, (p1 - p2) / mass
    sep = r_vec.norm(dim=-1)
    energy = 0.5 * (v_rel**2).sum(-1) - 2 * gravity * mass / sep
    h = r_vec[:, 0] * v_rel[:, 1] - r_vec[:, 1] * v_rel[:, 0]
    e = torch.sqrt((1 + 2 * energy * h**2 / (2 * gravity * mass) ** 2).clamp_min(0))
    s = (p1 / mass).norm(dim=-1) / torch.sqrt(gravity * mass / (4 * sep / 2))
    return s, e, energy, h


@pytest.mark.parametrize("gravity,mass", [(1.0, 1.0), (2.0, 0.5)])
def test_sampler_is_hnns_construction(gravity, mass):
    """Body 1 uniform on the box [0.5, 1.5]², body 2 opposite, zero total momentum, velocities
    perpendicular and counter-clockwise; without noise the orbits are exactly circular (e = 0),
    with it the speed factor is the generator's 1 + 0.05 N(0, 1) after the 2n uniforms, and e =
    |s² − 1| (a perpendicular start is an apsis)."""
    n = 2000
    system = get_system("two_body", gravity=gravity, mass=mass)
    y = system.sample(n, torch.Generator().manual_seed(5))
    q1, q2, p1, p2 = y[:, :2], y[:, 2:4], y[:, 4:6], y[:, 6:]
    assert ((q1 >= 0.5) & (q1 <= 1.5)).all() and q1.min() < 0.51 and q1.max() > 1.49
    torch.testing.assert_close(q2, -q1, rtol=0, atol=0)
    torch.testing.assert_close(p2, -p1, rtol=0, atol=0)
    cross = q1[:, 0] * p1[:, 1] - q1[:, 1] * p1[:, 0]
    assert (cross > 0).all()  # counter-clockwise
    torch.testing.assert_close((q1 * p1).sum(-1), torch.zeros(n, dtype=F64), rtol=0, atol=1e-15)

    g = torch.Generator().manual_seed(5)
    torch.rand((n, 2), generator=g, dtype=F64)  # the positions
    expected = 1 + 0.05 * torch.randn(n, generator=g, dtype=F64)
    s, e, energy, _ = _kepler(y, gravity, mass)
    torch.testing.assert_close(s, expected, rtol=1e-14, atol=0)
    torch.testing.assert_close(e, (s**2 - 1).abs(), rtol=0, atol=1e-7)
    assert (energy < 0).all()  # bound: s < √2

    circular = get_system("two_body", gravity=gravity, mass=mass, orbit_noise=0.0)
    y0 = circular.sample(n, torch.Generator().manual_seed(5))
    torch.testing.assert_close(y0[:, :4], y[:, :4], rtol=0, atol=0)  # same positions
    s0, e0, _, _ = _kepler(y0, gravity, mass)
    torch.testing.assert_close(s0, torch.ones(n, dtype=F64), rtol=1e-14, atol=0)
    assert e0.max() < 1e-7  # √ of rounding


def test_sampler_statistics_and_bad_parameters():
    """The speed factor's spread is orbit_noise (Gaussian, as HNN's ``orbit_noise * randn``):
    its sample std over 20,000 draws within 3 % of 0.05, and the distance from the centre of
    mass spans √2 · [0.5, 1.5]; bad parameters raise."""
    system = get_system("two_body")
    y = system.sample(20_000, split_generator(0, "train", "initial"))
    s, e, _, _ = _kepler(y, 1.0, 1.0)
    assert abs(float(s.mean()) - 1) < 3 * 0.05 / math.sqrt(20_000) + 1e-12
    assert abs(float(s.std()) / 0.05 - 1) < 0.03
    r = y[:, :2].norm(dim=-1)
    assert math.sqrt(2) * 0.5 <= r.min() < 0.75 and 2.08 < r.max() <= math.sqrt(2) * 1.5
    with pytest.raises(ValueError, match="coord_min"):
        get_system("two_body", coord_min=1.5, coord_max=0.5)
    with pytest.raises(ValueError, match="orbit_noise"):
        get_system("two_body", orbit_noise=-0.1)


def _two_body_field(t, y):
    """G = m = 1: q̇ = p, ṗ₁ = −(q₁ − q₂)/|q₁ − q₂|³ = −ṗ₂ (written out, not from H)."""
    d = y[:2] - y[2:4]
    a = -d / (d @ d) ** 1.5
    return np.concatenate([y[4:], a, -a])


def test_ground_truth_matches_dop853_and_conserves_energy():
    """The experiment's ground truth (Gauss–Legendre 6 at its generate.fine_dt, kept every
    obs_dt) for 3 test orbits over 60 observations (t = 3) agrees with scipy's DOP853 at rtol =
    atol = 1e-13 to 1e-10, and H(t) − H(0) stays below 1e-13."""
    g = OmegaConf.load(EXPERIMENT).generate
    every = observation_ratio(g.obs_dt, g.fine_dt)
    system = get_system("two_body")
    y0 = system.sample(3, split_generator(0, "test", "initial"))
    steps = 60
    integrator = get_integrator("gauss_legendre6", tol=1e-14, max_iter=100)
    ys = simulate(system, y0, g.fine_dt, every, steps, integrator).transpose(0, 1)
    t = g.obs_dt * np.arange(steps + 1)
    for i in range(3):
        ref = solve_ivp(_two_body_field, (0, t[-1]), y0[i].numpy(), method="DOP853",
                        rtol=1e-13, atol=1e-13, t_eval=t)  # fmt: skip
        assert np.abs(ref.y.T - ys[i].numpy()).max() < 1e-10
    energy = system(ys.reshape(-1, 8)).reshape(3, steps + 1)
    assert (energy - energy[:, :1]).abs().max() < 1e-13
