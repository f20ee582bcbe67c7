"""How small the H error of a one-degree-of-freedom separable system can be, given its data file.

    python benchmarks/potential_floor.py data/double_well/low/seed0.h5 [more files] [--degrees 4 8 16 24]

For H = p²/(2m) + V(q) with the system's mass m known, V is fitted to a file's noisy training
trajectories by linear least squares, as a Legendre series of degree K on [−R, R] (R = max |q|
observed): the implicit-midpoint step p_{k+1} = p_k − h V'(q̄_k), q̄_k = (q_k + q_{k+1})/2, summed
from each trajectory's start gives p_k = p₀ − h Σ_{i<k} V'(q̄_i), linear in the series'
coefficients, with each trajectory's p₀ a free intercept (so no observation is taken as exact).
The noisy q̄ enter V' as observed (errors in variables: a bias of about σ²/2 · V''' in V').
The fit's H error on the evaluation's grid (``hnnsym.evaluation.metrics.grid_errors``' h_l1) is
what a smooth K-parameter V reaches from the same data without an optimiser's scatter: K = 4
holds the true form of the double well's V, larger K a generic smooth V. Only the momenta's
equation is used; the positions carry little more information about V over windows this short.

Writes ``potential_floor.{csv,md}`` into ``--out`` (default outputs/bench/potential_floor).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from numpy.polynomial import legendre

from hnnsym.artifacts import write_text
from hnnsym.data.hdf5 import read_dataset
from hnnsym.errors import UserError
from hnnsym.evaluation.metrics import default_grid_points, hamiltonian_error
from hnnsym.physics.systems import get_system

ROOT = Path(__file__).resolve().parents[1]


def legendre_derivatives(x: np.ndarray, degree: int) -> np.ndarray:
    """d/dx P_j(x) for j = 1..degree: (..., degree)."""
    eye = np.eye(degree + 1)
    return np.stack([legendre.legval(x, legendre.legder(eye[j])) for j in range(1, degree + 1)], -1)


def fit_potentials(
    observed: np.ndarray, h: float, degrees: list[int]
) -> tuple[float, list[np.ndarray]]:
    """(R, [c per degree]): V(q) = Σ_j c_j P_j(q/R), fitted to trajectories ``observed``
    (N, T+1, 2). The design's column j does not depend on the degree, so it is built once, for
    the largest, and each fit takes its first K columns."""
    q, p = observed[..., 0], observed[..., 1]  # ṗ = −V'(q) whatever the mass
    radius = float(np.abs(q).max())
    mid = 0.5 * (q[:, :-1] + q[:, 1:])
    slopes = legendre_derivatives(mid / radius, max(degrees)) / radius  # (N, T, K): ∂V'/∂c_j at q̄
    design = np.concatenate([np.zeros_like(slopes[:, :1]), -h * np.cumsum(slopes, 1)], 1)
    design -= design.mean(1, keepdims=True)  # each trajectory's own intercept p₀
    design = design.reshape(-1, design.shape[-1])
    target = (p - p.mean(1, keepdims=True)).reshape(-1)
    return radius, [np.linalg.lstsq(design[:, :k], target, rcond=None)[0] for k in degrees]


def potential(q: np.ndarray, radius: float, coef: np.ndarray) -> np.ndarray:
    return legendre.legval(q / radius, np.concatenate([[0.0], coef]))


def floor_rows(path: Path, degrees: list[int]) -> list[dict]:
    data = read_dataset(path, splits=("train",))
    system = get_system(data.attrs["system"], **(data.attrs.get("system_params") or {}))
    if system.dim != 1 or not system.separable or system.mass is None:
        raise UserError(f"{path}: {system.name} is not a separable system of one degree of "
                        "freedom with a known mass")  # fmt: skip
    if system.vector_field is not None:
        raise UserError(f"{path}: {system.name} is damped (ṗ = −V'(q) − γ ∂H/∂p); the floor "
                        "fits a conservative V")  # fmt: skip
    train = data.splits["train"]
    h = float(data.attrs["obs_dt"])
    grid = system.grid(default_grid_points(system.dim))
    h_true = system(grid)
    q, p = grid[:, 0].numpy(), grid[:, 1].numpy()
    rows = []
    radius, fits = fit_potentials(train.observed, h, degrees)
    for degree, coef in zip(degrees, fits):
        h_fit = torch.from_numpy(0.5 * p**2 / system.mass + potential(q, radius, coef))
        rows.append({
            "file": str(path), "system": system.name, "noise_std": data.attrs.get("noise_std"),
            "trajectories": train.observed.shape[0], "steps": train.observed.shape[1] - 1,
            "degree": degree, **hamiltonian_error(h_true, h_fit),
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--degrees", nargs="+", type=int, default=[4, 8, 16, 24])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs/bench/potential_floor")
    args = parser.parse_args()
    table = pd.DataFrame([row for path in args.files for row in floor_rows(path, args.degrees)])
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "potential_floor.csv", table.to_csv(index=False))
    shown = table[["file", "noise_std", "degree", "h_l1"]]
    lines = ["| file | noise | degree K | h_l1 |", "|---|---|---|---|"]
    lines += [
        f"| {r.file} | {r.noise_std} | {r.degree} | {r.h_l1:.3g} |" for r in shown.itertuples()
    ]
    write_text(args.out / "potential_floor.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    try:
        main()
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
