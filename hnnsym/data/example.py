"""A small file of "measurements" the project makes itself, to try ``python -m hnnsym.ingest``.

``write_pendulum_csv`` simulates a built-in pendulum (H = p²/(2ml²) + mgl(1 − cos θ)) and writes
what a lab recording looks like: a header, a trial column, the time, the angle wrapped to
(−π, π], the angular velocity ω = θ̇ = p/(ml²) (so ``ingest.mass`` = m l²), measurement noise,
dropped frames (rows missing: gaps in t) and CRLF line ends. Most trials librate; a few rotate
(their angle wraps).

    python -m hnnsym.data.example [path] [--overwrite]     # default data/examples/pendulum.csv
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from hnnsym.artifacts import write_text
from hnnsym.data.simulate import simulate
from hnnsym.errors import DataError, exit_with_error
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.systems import pendulum

DEFAULT_PATH = Path("data/examples/pendulum.csv")


def wrap_angle(theta: np.ndarray) -> np.ndarray:
    """θ mapped to (−π, π]."""
    return math.pi - np.mod(math.pi - theta, 2 * math.pi)


def pendulum_recording(
    trials: int = 16,
    frames: int = 250,
    dt: float = 0.05,
    drop: float = 0.01,
    noise: float = 0.01,
    rotating: int = 1,
    mass: float = 0.5,
    length: float = 1.0,
    g: float = 1.0,
    seed: int = 0,
) -> pd.DataFrame:
    """Columns trial, t, theta (wrapped), omega: ``trials`` runs of ``frames`` frames every ``dt``
    (ground truth: Gauss–Legendre 6 at step dt, float64), noise std ``noise`` on θ and ω, each frame
    dropped with probability ``drop``. The first ``trials - rotating`` trials start at rest at
    amplitudes in [0.5, 2.5] rad; the last ``rotating`` at θ = 0 with 1.1–1.3× the separatrix
    speed (they rotate)."""
    rng = np.random.default_rng(seed)
    system = pendulum(g=g, length=length, mass=mass)
    inertia = mass * length**2
    n_lib = trials - rotating
    theta0 = np.concatenate([rng.uniform(0.5, 2.5, n_lib) * rng.choice([-1, 1], n_lib),
                             np.zeros(rotating)])  # fmt: skip
    omega_sep = 2 * math.sqrt(g / length)  # θ̇ at θ = 0 on the separatrix
    omega0 = np.concatenate([np.zeros(n_lib), rng.uniform(1.1, 1.3, rotating) * omega_sep])
    y0 = torch.tensor(np.stack([theta0, inertia * omega0], 1))
    integ = get_integrator("gauss_legendre6", tol=1e-13)
    ys = simulate(system, y0, dt, 1, frames - 1, integ).numpy()  # (frames, trials, 2)
    theta = ys[..., 0] + noise * rng.standard_normal(ys.shape[:2])
    omega = ys[..., 1] / inertia + noise * rng.standard_normal(ys.shape[:2])
    rows = []
    for k in range(trials):
        keep = rng.random(frames) >= drop
        t = dt * np.arange(frames)
        columns = {"trial": k + 1, "t": np.round(t[keep], 6),
                   "theta": wrap_angle(theta[keep, k]), "omega": omega[keep, k]}  # fmt: skip
        rows.append(pd.DataFrame(columns))
    return pd.concat(rows, ignore_index=True)


def write_pendulum_csv(
    path: str | Path = DEFAULT_PATH, overwrite: bool = False, crlf: bool = True, **options
) -> Path:
    """Write ``pendulum_recording(**options)`` as CSV with a header (CRLF line ends by default);
    refuses to replace an existing file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise DataError(f"{path} already exists; pass --overwrite to replace it")
    table = pendulum_recording(**options)
    text = table.to_csv(index=False, float_format="%.6f", lineterminator="\r\n" if crlf else "\n")
    write_text(path, text)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m hnnsym.data.example", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", nargs="?", default=str(DEFAULT_PATH))
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        path = write_pendulum_csv(args.path, overwrite=args.overwrite)
    except DataError as err:
        exit_with_error(err)
    print(
        f"wrote {path}: pendulum (m = 0.5, l = 1, g = 1) angles and angular velocities, 16 trials "
        "with dropped frames; ingest it with ingest.mass=0.5"
    )


if __name__ == "__main__":
    main()
