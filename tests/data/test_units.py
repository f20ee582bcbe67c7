"""Scaled units keep Hamiltonian structure exactly: H̃(q̃, p̃) = (τ/c) H(a q̃, b p̃) with a_i b_i = c,
and the states round-trip through the stored units (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hnnsym.data.hdf5 import read_dataset, write_dataset
from hnnsym.data.units import Units
from hnnsym.errors import DataError
from hnnsym.ode import integrate


def double_pendulum_like(y: torch.Tensor) -> torch.Tensor:
    """A non-separable H in 2 degrees of freedom (mass matrix depending on q1 − q2)."""
    q1, q2, p1, p2 = y.unbind(-1)
    c = torch.cos(q1 - q2)
    kinetic = (p1**2 + 2 * p2**2 - 2 * p1 * p2 * c) / (2 * (1 + torch.sin(q1 - q2) ** 2))
    return kinetic - 2 * 9.81 * torch.cos(q1) - 9.81 * torch.cos(q2)


UNITS = Units(time=0.25, q=(1.0, 256.0), action=32.0, periodic=(0,))  # powers of two: exact


def scaled(H, units: Units):
    """H̃(ỹ) = (1 / energy) H(scales · ỹ)."""
    scales = torch.as_tensor(units.state_scales(4))
    return lambda y: H(y * scales) / units.energy


def test_the_scaled_vector_field_is_the_scaled_one_of_h():
    y = torch.randn(64, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scales = torch.as_tensor(UNITS.state_scales(4))
    y_tilde = (y / scales).requires_grad_(True)
    y = y.requires_grad_(True)
    (g,) = torch.autograd.grad(double_pendulum_like(y).sum(), y)
    (g_tilde,) = torch.autograd.grad(scaled(double_pendulum_like, UNITS)(y_tilde).sum(), y_tilde)
    field = torch.cat([g[:, 2:], -g[:, :2]], -1)  # dy/dt
    field_tilde = torch.cat([g_tilde[:, 2:], -g_tilde[:, :2]], -1)  # dỹ/dt̃
    torch.testing.assert_close(field_tilde, field * UNITS.time / scales, rtol=1e-13, atol=0)


def test_a_trajectory_in_scaled_units_is_the_scaled_trajectory():
    y0 = torch.tensor([[0.3, 120.0, 50.0, -30.0]], dtype=torch.float64)
    h, steps = 0.002, 50
    ys = integrate(double_pendulum_like, y0, h, steps, integrator="gauss_legendre4")
    scales = torch.as_tensor(UNITS.state_scales(4))
    ys_tilde = integrate(scaled(double_pendulum_like, UNITS), y0 / scales, h / UNITS.time, steps,
                         integrator="gauss_legendre4")  # fmt: skip
    torch.testing.assert_close(ys_tilde * scales, ys, rtol=1e-10, atol=1e-10)


def test_states_and_the_file_attribute_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    states = rng.standard_normal((5, 7, 4)) * [1.0, 300.0, 40.0, 0.2]
    assert np.array_equal(UNITS.to_recording(UNITS.to_scaled(states)), states)
    positions = states[..., :2]
    np.testing.assert_allclose(UNITS.to_recording(UNITS.to_scaled(positions)), positions,
                               rtol=1e-15)  # fmt: skip
    assert UNITS.p == (32.0, 0.125) and UNITS.energy == 128.0
    from conftest import random_splits

    attrs = {"system": "measured", "system_params": {}, "dim": 2, "obs_dt": 0.1, "fine_dt": None,
             "integrator": None, "noise": None, "noise_std": None, "seed": 0, "config": None,
             "units": UNITS.as_attr()}  # fmt: skip
    write_dataset(tmp_path / "m.h5", random_splits(dim=2), attrs)
    read = read_dataset(tmp_path / "m.h5")
    assert Units.from_attrs(read.attrs, 2) == UNITS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time": 0.0, "q": (1.0,), "action": 1.0},
        {"time": 1.0, "q": (float("nan"),), "action": 1.0},
        {"time": 1.0, "q": (2.0,), "action": 1.0, "periodic": (0,)},
        {"time": 1.0, "q": (1.0,), "action": 1.0, "periodic": (3,)},
    ],  # fmt: skip
)
def test_bad_scales_are_refused(kwargs):
    with pytest.raises(DataError):
        Units(**kwargs)


def test_a_file_without_units_is_in_its_recordings_units():
    assert Units.from_attrs({}, 3) == Units.identity(3)
