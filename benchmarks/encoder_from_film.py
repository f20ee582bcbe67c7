"""A filmed double pendulum rewritten as an angle-encoder log: the joint angles and their rates
at a lower frame rate, angles wrapped to (−π, π], with frames dropped at random.

It stands in for a recording made with encoders, for which no public file is at hand. The motion
is the film's own (real friction, real tracking noise), so what a model learns from the log
can be scored against the physical fit on the same windows, as for the film. The film is a
headerless CSV of six pixel columns (x, y of the pivot, bob 1, bob 2), as the IBM files:

    θ₁ = atan2(y₁ − o_y, x₁ − o_x),  θ₂ = atan2(y₂ − y₁, x₂ − x₁)

with o the centre of the least-squares circle through bob 1 (the pivot, its jitter averaged
out: ``hnnsym.data.chains.fit_circle``), frame by frame, with the film's tracking noise. The rates are the derivative of a Savitzky–Golay fit
(a cubic over ``--window`` film frames) of the unwrapped angles; then every ``--every``-th frame
is kept, and of those a fraction ``--drop`` (not the first or last 20) is removed, drawn from
``--seed``. Written: ``t,theta1,theta2,omega1,omega2`` (s, rad, rad/s).

    python benchmarks/encoder_from_film.py ../shared/data/real/ibm_double_pendulum_run1.csv \
        data/measured/ibm_double_pendulum_run1_encoder.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.signal import savgol_filter

from hnnsym.data.chains import fit_circle


def encoder_log(
    film: np.ndarray, dt: float, every: int, window: int, drop: float, seed: int
) -> np.ndarray:
    """Rows (t, θ₁, θ₂, ω₁, ω₂) of the encoder log of ``film`` (n, 6) sampled every ``dt`` s."""
    pivot, bob1, bob2 = film[:, 0:2], film[:, 2:4], film[:, 4:6]
    del pivot  # its jitter is averaged out by the circle through bob 1
    origin, _ = fit_circle(bob1)
    arm1, arm2 = bob1 - origin, bob2 - bob1
    theta = np.unwrap(np.column_stack([np.arctan2(arm1[:, 1], arm1[:, 0]),
                                       np.arctan2(arm2[:, 1], arm2[:, 0])]), axis=0)  # fmt: skip
    omega = savgol_filter(theta, window, 3, deriv=1, delta=dt, axis=0)
    t = np.arange(len(film)) * dt
    rows = np.column_stack([t, np.angle(np.exp(1j * theta)), omega])[::every]
    rng = np.random.default_rng(seed)
    keep = np.ones(len(rows), dtype=bool)
    n_drop = int(round(drop * len(rows)))
    keep[rng.choice(np.arange(20, len(rows) - 20), n_drop, replace=False)] = False
    return rows[keep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("film", type=Path, help="headerless CSV: x0,y0,x1,y1,x2,y2 in pixels")
    parser.add_argument("out", type=Path, help="the encoder log to write (CSV)")
    parser.add_argument("--dt", type=float, default=0.0025, help="the film's frame interval, s")
    parser.add_argument("--every", type=int, default=4, help="keep every k-th frame")
    parser.add_argument("--window", type=int, default=29, help="Savitzky–Golay frames (odd)")
    parser.add_argument("--drop", type=float, default=0.01, help="fraction of frames dropped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    a = parser.parse_args(argv)
    if a.out.exists() and not a.overwrite:
        print(f"error: {a.out} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    try:
        film = np.loadtxt(a.film, delimiter=",", ndmin=2)
    except (OSError, ValueError) as err:
        print(f"error: cannot read {a.film} as a CSV of numbers: {err}", file=sys.stderr)
        return 2
    if film.shape[1] != 6 or not np.isfinite(film).all():
        what = f"{film.shape[1]} columns" if film.shape[1] != 6 else "a value that is not finite"
        print(f"error: {a.film} must hold 6 finite columns; it has {what}", file=sys.stderr)
        return 2
    rows = encoder_log(film, a.dt, a.every, a.window, a.drop, a.seed)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_name(a.out.name + ".tmp")
    np.savetxt(tmp, rows, delimiter=",", fmt="%.9g", header="t,theta1,theta2,omega1,omega2",
               comments="")  # fmt: skip
    tmp.replace(a.out)
    print(f"wrote {a.out}: {len(rows)} frames at {a.dt * a.every:g} s, "
          f"{int(round(a.drop * len(film[:: a.every])))} dropped")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
