"""benchmarks/potential_floor.py: the least-squares potential of a 1-dof separable system's file."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

from hnnsym.data.simulate import generate
from hnnsym.errors import UserError


def double_well_file(compose_config, tmp_path: Path, noise: str) -> Path:
    return generate(compose_config("generate", [
        "system=double_well", f"noise={noise}", f"data_dir={tmp_path / 'data'}",
        "generate.n_train=128", "generate.n_val=2", "generate.n_test=1", "generate.test_steps=4",
    ]))  # fmt: skip


def test_clean_trajectories_give_the_double_well_to_the_integrators_bias(compose_config, tmp_path):
    """Noise-free data: the fitted V is the true one up to learning it through implicit midpoint
    at h = 0.01 (about 4e-5 on Table 1's data); a wrong sign or step would be O(1)."""
    rows = load_benchmark("potential_floor").floor_rows(
        double_well_file(compose_config, tmp_path, "none"), [4, 12]
    )
    assert [r["degree"] for r in rows] == [4, 12]
    assert all(r["trajectories"] == 128 and r["steps"] == 32 for r in rows)
    assert all(r["h_l1"] < 1e-4 for r in rows), rows
    noisy = load_benchmark("potential_floor").floor_rows(
        double_well_file(compose_config, tmp_path, "high"), [4]
    )
    assert noisy[0]["noise_std"] > 0 and noisy[0]["h_l1"] > 10 * rows[0]["h_l1"]


def test_a_system_of_two_degrees_of_freedom_is_refused(tiny_dataset):
    path = tiny_dataset(system="henon_heiles", dim=2)
    with pytest.raises(UserError, match="one degree"):
        load_benchmark("potential_floor").floor_rows(path, [4])


def test_a_damped_double_well_is_refused(tiny_dataset):
    path = tiny_dataset(system_params={"damping": 0.1})
    with pytest.raises(UserError, match="damped"):
        load_benchmark("potential_floor").floor_rows(path, [4])
