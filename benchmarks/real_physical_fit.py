"""The physicist's yardstick for a recording of oscillators: a small physical model of the right
form, fitted by least squares on the training split, scored on the same test windows and
horizons as ``python -m hnnsym.evaluate`` (``hnnsym.evaluation.horizons``), in the recording's
units.

Model (d coordinates, states y = (x, v), velocities as the file gives them):

    ẍ = −K (x − x0) − C ẋ        K, C (d × d), x0 (d): 1 + 1 + 1 parameters for d = 1
                                  (a damped oscillator), 4 + 4 + 2 for d = 2 (coupled ones)

a linear ODE ẏ = A y + b, rolled out exactly (matrix exponential of the augmented
[[A, b], [0, 0]] · Δt) at the observation interval. Two fits:

    physical_fd       least squares of finite-difference accelerations (central differences
                      of the recorded velocities) on the training trajectories: a linear problem
    physical          from there, the rollout error minimised (scipy.optimize.least_squares):
                      every training trajectory is cut into windows of the longest horizon
                      (``tile_windows``, as the test ones), each rolled out from its first
                      observed state, residuals = predicted − observed states in recording
                      units (the quantity ``mse_h<h>`` averages)

Reported beside them on the same windows: the baselines of ``evaluate`` (no_motion,
constant_velocity, linear), recomputed here with the same functions (a check that the windows
match the ones in a run's ``eval/metrics.json``). Positions-only files (observe = q, e.g. the IBM
double pendulum) are skipped with a note: a damped double pendulum fit is not implemented.

    PYTHONPATH=. .venv/bin/python benchmarks/real_physical_fit.py data/measured/*.h5
    -> outputs/bench/real/physical_fit.{json,md}
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from hnnsym.artifacts import now_utc, versions, write_text
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.units import Units
from hnnsym.evaluation import horizons

try:
    from scipy.linalg import expm
    from scipy.optimize import least_squares
except ImportError as err:  # scipy comes with the dev extras
    raise SystemExit(
        f"benchmarks/real_physical_fit.py needs scipy: pip install scipy ({err})"
    ) from err


def unpack(theta: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ = (K row-major, C row-major, f) with ẍ = −K x − C v + f (f = K x0)."""
    K = theta[: d * d].reshape(d, d)
    C = theta[d * d : 2 * d * d].reshape(d, d)
    return K, C, theta[2 * d * d :]


def step_map(theta: np.ndarray, d: int, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact one-interval map y ↦ Φ y + φ of ẏ = A y + b."""
    K, C, f = unpack(theta, d)
    m = np.zeros((2 * d + 1, 2 * d + 1))
    m[:d, d : 2 * d] = np.eye(d)
    m[d : 2 * d, :d] = -K
    m[d : 2 * d, d : 2 * d] = -C
    m[d : 2 * d, -1] = f
    e = expm(m * dt)
    return e[: 2 * d, : 2 * d], e[: 2 * d, -1]


def roll(theta: np.ndarray, d: int, dt: float, start: np.ndarray, steps: int) -> np.ndarray:
    """Predictions (B, steps, 2d) from the states (B, 2d)."""
    phi, c = step_map(theta, d, dt)
    out, y = [], start
    for _ in range(steps):
        y = y @ phi.T + c
        out.append(y)
    return np.stack(out, 1)


def fit_fd(train: np.ndarray, d: int, dt: float) -> np.ndarray:
    """θ from central-difference accelerations of the recorded velocities: a = −K x − C v + f."""
    a = (train[:, 2:, d:] - train[:, :-2, d:]) / (2 * dt)
    y = train[:, 1:-1]
    x = np.concatenate([-y[..., :d], -y[..., d:], np.ones((*y.shape[:2], 1))], -1)
    coef, *_ = np.linalg.lstsq(x.reshape(-1, 2 * d + 1), a.reshape(-1, d), rcond=None)
    K, C, f = coef[:d].T, coef[d : 2 * d].T, coef[-1]
    return np.concatenate([K.ravel(), C.ravel(), f])


def fit_rollout(theta0: np.ndarray, windows: np.ndarray, d: int, dt: float) -> tuple:
    """θ minimising the squared rollout error over the windows (B, H+1, 2d) from their starts."""
    steps = windows.shape[1] - 1

    def residuals(theta: np.ndarray) -> np.ndarray:
        pred = roll(theta, d, dt, windows[:, 0], steps)
        r = (pred - windows[:, 1:]).ravel()
        return np.where(np.isfinite(r), r, 1e6)

    sol = least_squares(residuals, theta0, method="trf", x_scale="jac", max_nfev=2000)
    return sol.x, sol


def describe(theta: np.ndarray, d: int) -> dict:
    """K, C, x0 and the normal modes (frequency, damping ratio) of the fit, recording units."""
    K, C, f = unpack(theta, d)
    try:
        x0 = np.linalg.solve(K, f)
    except np.linalg.LinAlgError:
        x0 = np.full(d, math.nan)
    m = np.block([[np.zeros((d, d)), np.eye(d)], [-K, -C]])
    ev = np.linalg.eigvals(m)
    modes = sorted({(round(abs(e.imag), 9), round(-e.real, 9)) for e in ev}, reverse=True)
    return {
        "K": K.tolist(), "C": C.tolist(), "x0": x0.tolist(),
        "eigenvalues": [[float(e.real), float(e.imag)] for e in ev],
        "modes": [{"omega_rad_per_time": w, "decay_per_time": s,
                   "period": 2 * math.pi / w if w > 0 else math.inf} for w, s in modes],
    }  # fmt: skip


def fit_file(path: Path, asked: list[int] | None) -> dict:
    data = read_dataset(path, system="measured")
    attrs = data.attrs
    d = int(attrs["dim"])
    units = Units.from_attrs(attrs, d)
    name = path.stem
    if attrs.get("observe", "qp") != "qp":
        return {"file": str(path), "name": name, "skipped": "positions only (observe = q): a "
                "damped double-pendulum fit is not implemented here"}  # fmt: skip
    if units.periodic:
        return {"file": str(path), "name": name, "skipped": "angle coordinates: an oscillator "
                "model does not apply"}  # fmt: skip
    dt = float(attrs["obs_dt"]) * units.time
    train = units.to_recording(data.splits["train"].observed)
    test = units.to_recording(data.splits["test"].observed)
    hs = horizons.choose_horizons(asked, test.shape[1] - 1)
    H = hs[-1]
    windows = horizons.tile_windows(test, H)
    observed = windows[:, 1:]
    start = time.perf_counter()
    theta_fd = fit_fd(train, d, dt)
    train_windows = horizons.tile_windows(train, H)
    theta, sol = fit_rollout(theta_fd, train_windows, d, dt)
    seconds = time.perf_counter() - start
    preds = {
        "physical": roll(theta, d, dt, windows[:, 0], H),
        "physical_fd": roll(theta_fd, d, dt, windows[:, 0], H),
    }
    coef = horizons.fit_linear(train, [], order=1)
    preds |= horizons.baselines(windows, d, dt, coef, [])
    mse = {k: horizons.horizon_mse(p, observed, hs, []) for k, p in preds.items()}
    out = {
        "file": str(path), "name": name, "dim": d, "obs_dt": dt, "names": list(units.names),
        "labels": dict(units.labels), "horizons": hs, "windows": int(windows.shape[0]),
        "train_trajectories": int(train.shape[0]), "train_windows": int(train_windows.shape[0]),
        "parameters": 2 * d * d + d, "fit_seconds": round(seconds, 3),
        "rollout_fit": {"cost": float(sol.cost), "nfev": int(sol.nfev), "status": int(sol.status)},
        "fit": describe(theta, d), "fit_fd": describe(theta_fd, d),
    }  # fmt: skip
    for k, by_h in mse.items():
        for h, v in by_h.items():
            out[f"mse_h{h}_{k}" if k != "physical" else f"mse_h{h}"] = v
    return out


def markdown(results: list[dict]) -> str:
    lines = [
        "# Physical fits of the recordings",
        "",
        f"Written {now_utc()} by `benchmarks/real_physical_fit.py`: a damped (coupled) oscillator "
        "ẍ = −K (x − x0) − C ẋ fitted on the training split (physical: rollout error over "
        "windows of the longest horizon; physical_fd: finite-difference accelerations), scored "
        "on the test windows of `evaluate`, MSE over steps 1..h and state components in the "
        "recording's units.",
        "",
        "| recording | h | windows | physical | physical_fd | no_motion | constant_velocity "
        "| linear |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "skipped" in r:
            continue
        for h in r["horizons"]:
            cells = [r[f"mse_h{h}"]] + [r[f"mse_h{h}_{b}"] for b in
                                        ("physical_fd", *horizons.BASELINES)]  # fmt: skip
            lines.append(f"| {r['name']} | {h} | {r['windows']} | "
                         + " | ".join(f"{c:.4g}" for c in cells) + " |")  # fmt: skip
    lines.append("")
    for r in results:
        if "skipped" in r:
            lines.append(f"- {r['name']}: skipped ({r['skipped']})")
            continue
        f = r["fit"]
        modes = "; ".join(f"ω = {m['omega_rad_per_time']:.4g} rad/s, decay {m['decay_per_time']:.3g}/s"
                          for m in f["modes"])  # fmt: skip
        lines.append(f"- {r['name']}: K = {np.round(f['K'], 4).tolist()}, "
                     f"C = {np.round(f['C'], 4).tolist()}, x0 = {np.round(f['x0'], 3).tolist()} "
                     f"({modes}); {r['train_trajectories']} training trajectories, "
                     f"fit {r['fit_seconds']} s")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="ingested recordings (.h5)")
    ap.add_argument("--horizons", type=int, nargs="+", default=None,
                    help="steps (default: evaluate's, 1 4 12)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/real"))
    args = ap.parse_args()
    results = [fit_file(p, args.horizons) for p in args.files]
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"written": now_utc(), "versions": versions(), "results": results}
    write_text(args.out / "physical_fit.json", json.dumps(payload, indent=2) + "\n")
    text = markdown(results)
    write_text(args.out / "physical_fit.md", text)
    print(text, end="")


if __name__ == "__main__":
    main()
