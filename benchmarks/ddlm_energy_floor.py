"""The mass–spring energy MSE that no Eq. 12 model can beat, beside the learned runs.

    python benchmarks/ddlm_energy_floor.py            # the last step of make table-ddlm

Aoshima et al.'s Table 2 "Energy" is the true H at the predicted positions with the scheme's own
velocity (Eq. 11). For the harmonic oscillator H = q² + p² (q̈ = −ω²q, ω = 2, Δt = 0.2) the best
Eq. 12 model is the quadratic V = ½k*q² with k* = (2/Δt)²tan²(ωΔt/2)
(``hnnsym.ode.lagrangian.eq12_harmonic_stiffness``): it predicts every position exactly, yet its
Eq. 11 velocity is not the true one, so the true energy along its prediction oscillates by
O((ωΔt)²) relative. Its energy MSE on a test set is the column's floor for a model that predicts
the positions exactly; a model can go below it only by predicting them worse (the true V, k = ω²,
is reported beside it: its positions drift in phase).

Writes ``ddlm_energy_floor.{csv,md}`` into ``--out``: per seed, the floor on the seed's 25 test
orbits (``data/ddlm/mass_spring/none/seed<k>_q.h5``, generated if missing) and the learned
``method=ddlm`` run's energy MSE (``outputs/ddlm/mass_spring/ddlm/none/seed<k>/eval``, if
evaluated); and the floor's expectation and spread over the sampler's distribution (radius
U(0.1, 1), uniform phase), from ``--orbits`` analytic orbits cut into test sets of 25.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor, nn

from hnnsym.artifacts import write_text
from hnnsym.data.hdf5 import read_dataset
from hnnsym.evaluation.positions import position_metrics, rollout_positions
from hnnsym.ode.lagrangian import eq12_harmonic_stiffness
from hnnsym.physics.systems import get_system

ROOT = Path(__file__).resolve().parents[1]
PAPER_ENERGY_MSE = 4.52e-5  # Aoshima et al., Table 2, proposed, mass–spring
TEST_SET = 25


class Harmonic(nn.Module):
    """V(q) = ½ k|q|² as a position model (M = I, Gonzalez ∇̄V)."""

    discrete_gradient, avf_nodes = "gonzalez", 4

    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, q: Tensor) -> Tensor:
        return 0.5 * self.k * (q**2).sum(-1)

    def energy_gradient(self, q: Tensor) -> Tensor:
        return self.k * q

    def mass_matrix(self) -> Tensor:
        return torch.eye(1, dtype=torch.float64)


def predict(clean: Tensor, t: Tensor, dt: float, system, k: float) -> tuple[Tensor, float]:
    """Eq. 12 with V = ½kq² predicting ``clean`` (T+1, B, 2) from its q_0, q_1: the squared
    energy errors (H(q̂_n, m v̂_n) − H(q_n, p_n))² (T+1, B), NaN where Table 2's energy column does
    not count, and the position MSE."""
    model = Harmonic(k)
    roll = rollout_positions(model, clean[0, :, :1], clean[1, :, :1], dt, clean.shape[0] - 1)
    result = position_metrics(roll, clean, t, dt, system, model, "eq12", 0.1)
    errors = (result.series["energy_true"] - result.series["energy_data"]) ** 2
    return errors, result.metrics["q_mse"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data/ddlm/mass_spring/none")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs/ddlm/mass_spring/ddlm/none")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--orbits", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)

    rows = []
    for seed in args.seeds:
        path = args.data_dir / f"seed{seed}_q.h5"
        if not path.exists():
            cmd = [sys.executable, "-m", "hnnsym.generate", "experiment=ddlm_mass_spring",
                   "noise=none", f"seed={seed}", f"data_dir={args.data_dir.parents[1]}"]  # fmt: skip
            subprocess.run(cmd, cwd=ROOT, check=True)
        data = read_dataset(path, arrays=("clean",))
        params = data.attrs["system_params"]
        system = get_system("mass_spring", **params)
        omega, dt = math.sqrt(params["k"] / params["mass"]), float(data.attrs["obs_dt"])
        test = data.splits["test"]
        clean = torch.as_tensor(test.clean, dtype=torch.float64).transpose(0, 1)
        t = torch.as_tensor(test.t, dtype=torch.float64)
        floor, _ = predict(clean, t, dt, system, eq12_harmonic_stiffness(omega, dt))
        true_v, true_v_q = predict(clean, t, dt, system, omega**2)
        metrics = args.runs / f"seed{seed}" / "eval" / "metrics.json"
        learned = json.loads(metrics.read_text())["energy_mse"] if metrics.exists() else math.nan
        rows.append({"seed": seed, "test_orbits": clean.shape[1],
                     "floor_energy_mse": float(floor.nanmean()), "learned_energy_mse": learned,
                     "learned_over_floor": learned / float(floor.nanmean()),
                     "true_V_energy_mse": float(true_v.nanmean()), "true_V_q_mse": true_v_q})  # fmt: skip
    table = pd.DataFrame(rows)

    # the floor's distribution over test sets of 25 analytic orbits: q = r cos(ωt + φ)
    generator = torch.Generator().manual_seed(0)
    radius = 0.1 + 0.9 * torch.rand(args.orbits, generator=generator)
    phase = 2 * math.pi * torch.rand(args.orbits, generator=generator)
    wt = omega * t[:, None] + phase
    orbits = torch.stack([radius * torch.cos(wt), -radius * torch.sin(wt)], -1)  # H = r²
    k_star = eq12_harmonic_stiffness(omega, dt)
    errors, _ = predict(orbits, t, dt, system, k_star)  # (T+1, orbits)
    usable = errors.shape[1] // TEST_SET * TEST_SET
    sets = errors[:, :usable].reshape(errors.shape[0], -1, TEST_SET).transpose(0, 1)
    sets = sets.reshape(sets.shape[0], -1).nanmean(-1)  # the floor of each test set of 25

    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "ddlm_energy_floor.csv", table.to_csv(index=False))
    lines = [
        f"Mass–spring (ω = {omega:g}, Δt = {dt:g}): energy MSE of the exact Eq. 12 model "
        f"V = ½k*q², k* = {k_star:.6g} (true k = {omega**2:g})",
        "",
        table.to_markdown(index=False, floatfmt=".3g"),
        "",
        f"mean over seeds: floor {table.floor_energy_mse.mean():.3g} ± "
        f"{table.floor_energy_mse.std():.2g}, learned {table.learned_energy_mse.mean():.3g} ± "
        f"{table.learned_energy_mse.std():.2g}, learned / floor "
        f"{table.learned_over_floor.mean():.3f} ± {table.learned_over_floor.std():.2g}; the true "
        f"V (k = ω²): energy {table.true_V_energy_mse.mean():.3g}, position "
        f"{table.true_V_q_mse.mean():.3g}",
        f"the floor over {len(sets)} test sets of {TEST_SET} orbits (radius U(0.1, 1)): "
        f"{sets.mean():.3g} ± {sets.std():.2g}; below the paper's {PAPER_ENERGY_MSE:g}: "
        f"{(sets < PAPER_ENERGY_MSE).double().mean():.1%} of them",
    ]
    write_text(args.out / "ddlm_energy_floor.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
