"""The physicist's yardstick for a recording: a small physical model of the right
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
match the ones in a run's ``eval/metrics.json``).

Positions-only files of two tracked bobs (observe = q, positions x₁, y₁, x₂, y₂ in the image,
the IBM double pendulum): the damped compound double pendulum in the arm angles θ (``Chain``:
the pivot is the centre of the least-squares circle through bob 1's training positions, the
arms its radius and the mean bob distance; no direction of gravity assumed),

    M(θ) θ̈ = f(θ, θ̇),  M = [[1, β cos(θ₁−θ₂)], [β cos(θ₁−θ₂), γ]]       (``pend_accel``)
    V = δ (1 − cos(θ₁ − φ)) + ε (1 − cos(θ₂ − φ)),  Rayleigh ½ c₁ θ̇₁² + ½ c₂ (θ̇₂ − θ̇₁)²

(7 parameters: the compound pendulum's inertias, gravity torques over the first arm's inertia,
the direction φ of gravity in the image, viscous friction at the pivot and at the elbow).
physical_fd: two linear least-squares problems in Savitzky–Golay angles, rates and
accelerations of the training trajectories (7 frames, cubic); physical: from there, the
rollout error in angles over windows of the longest horizon, each started from its smoothed
state (RK4, 4 steps per frame). Scored like ``evaluate`` scores a positions model: each test
window predicted from its first two frames (the rates at the first one by shooting: the fitted
flow must reach the second), in the recording's pixels (``mse_h<h>``) and in wrapped angles
(``mse_angles_h<h>``), beside the baselines in both; ``physical_sg_start`` starts from the
smoothed state instead (3 frames into the window: not information a model gets, a reference
for how much of the error is the two-frame start). Default horizons 10 and 25 frames.

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
from omegaconf import OmegaConf

from hnnsym.artifacts import now_utc, versions, write_text
from hnnsym.data.chains import fit_circle, recorded_chain, tracked_points
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.units import Units
from hnnsym.evaluation import horizons
from hnnsym.evaluation.chains import tracked_points_of

try:
    from scipy.linalg import expm
    from scipy.optimize import least_squares
    from scipy.signal import savgol_filter
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


# ---- The damped compound double pendulum (positions-only tracked points) ----------------------

PEND_PARAMS = ("beta", "gamma", "delta", "epsilon", "phi", "c1", "c2")
PEND_HORIZONS = (10, 25)  # the test windows at 100 frames/s
SG_WINDOW, SG_ORDER = 7, 3  # Savitzky–Golay over 7 frames (0.07 s at 100 frames/s), cubic
SUBSTEPS = 4  # RK4 steps per observation interval


def pend_accel(theta: np.ndarray, th: np.ndarray, w: np.ndarray) -> np.ndarray:
    """θ̈ (…, 2) of the damped compound double pendulum at angles ``th`` and rates ``w`` (…, 2):
    M(θ) θ̈ = f with M = [[1, β c], [β c], γ]], c = cos(θ₁ − θ₂), s = sin(θ₁ − θ₂),

        f₁ = −β s θ̇₂² − δ sin(θ₁ − φ) − c₁ θ̇₁ + c₂ (θ̇₂ − θ̇₁)
        f₂ =  β s θ̇₁² − ε sin(θ₂ − φ) − c₂ (θ̇₂ − θ̇₁)

    (Lagrange's equations of L = ½ θ̇ᵀ M θ̇ + δ cos(θ₁ − φ) + ε cos(θ₂ − φ) with the Rayleigh
    function ½ c₁ θ̇₁² + ½ c₂ (θ̇₂ − θ̇₁)²: viscous friction at the pivot and at the elbow)."""
    beta, gamma, delta, eps, phi, c1, c2 = theta
    d = th[..., 0] - th[..., 1]
    c, s = np.cos(d), np.sin(d)
    w1, w2 = w[..., 0], w[..., 1]
    rel = w2 - w1
    f1 = -beta * s * w2**2 - delta * np.sin(th[..., 0] - phi) - c1 * w1 + c2 * rel
    f2 = beta * s * w1**2 - eps * np.sin(th[..., 1] - phi) - c2 * rel
    det = gamma - (beta * c) ** 2
    return np.stack([(gamma * f1 - beta * c * f2) / det, (f2 - beta * c * f1) / det], -1)


def pend_roll(theta: np.ndarray, start: np.ndarray, dt: float, steps: int) -> np.ndarray:
    """States (B, steps, 4) = (θ₁, θ₂, θ̇₁, θ̇₂) after each of ``steps`` intervals ``dt`` from
    ``start`` (B, 4): classical RK4, ``SUBSTEPS`` steps per interval."""
    h = dt / SUBSTEPS

    def f(y: np.ndarray) -> np.ndarray:
        return np.concatenate([y[..., 2:], pend_accel(theta, y[..., :2], y[..., 2:])], -1)

    y, out = start, []
    for _ in range(steps):
        for _ in range(SUBSTEPS):
            k1 = f(y)
            k2 = f(y + h / 2 * k1)
            k3 = f(y + h / 2 * k2)
            k4 = f(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y)
    return np.stack(out, 1)


class Chain:
    """The geometry of a two-arm chain from its tracked bobs (x₁, y₁, x₂, y₂), image pixels: the
    fixed pivot and the arm lengths, fitted once on the training data. The pivot is the centre
    of the least-squares circle through all training positions of bob 1 (the ingested file holds
    the bobs only; the fit averages the tracking jitter of pivot and bob over every frame), arm 1
    its radius, arm 2 the mean bob-to-bob distance. Angles are those of the arms in the image
    frame, θ = atan2(Δy, Δx) (no direction of gravity assumed: φ is fitted)."""

    def __init__(self, train: np.ndarray):
        flat = train.reshape(-1, 4)
        self.pivot, self.l1 = fit_circle(flat[:, :2])
        self.l2 = float(np.linalg.norm(flat[:, 2:] - flat[:, :2], axis=1).mean())

    def angles(self, points: np.ndarray) -> np.ndarray:
        """(…, 4) px → (…, 2) rad, unwrapped along axis −2 (time)."""
        a1 = points[..., :2] - self.pivot
        a2 = points[..., 2:] - points[..., :2]
        th = np.stack([np.arctan2(a1[..., 1], a1[..., 0]), np.arctan2(a2[..., 1], a2[..., 0])], -1)
        return np.unwrap(th, axis=-2)

    def points(self, th: np.ndarray) -> np.ndarray:
        """(…, 2) rad → (…, 4) px."""
        b1 = self.pivot + self.l1 * np.stack([np.cos(th[..., 0]), np.sin(th[..., 0])], -1)
        b2 = b1 + self.l2 * np.stack([np.cos(th[..., 1]), np.sin(th[..., 1])], -1)
        return np.concatenate([b1, b2], -1)


def smoothed(th: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Savitzky–Golay angles, rates and accelerations of trajectories (N, T+1, 2) along time
    (``SG_WINDOW`` frames, polynomial order ``SG_ORDER``; the ends from the polynomial fitted
    to the first or last window, scipy's mode="interp")."""
    kw = {"window_length": SG_WINDOW, "polyorder": SG_ORDER, "axis": 1, "mode": "interp"}
    return (savgol_filter(th, **kw), savgol_filter(th, deriv=1, delta=dt, **kw),
            savgol_filter(th, deriv=2, delta=dt, **kw))  # fmt: skip


def pend_fit_fd(th: np.ndarray, w: np.ndarray, a: np.ndarray) -> np.ndarray:
    """The 7 parameters from smoothed angles, rates and accelerations (n, 2), by two linear
    least-squares problems: the first equation of motion is linear in (β, δ cos φ, δ sin φ,
    c₁, c₂), the second divided by γ in (β/γ, ε cos φ/γ, ε sin φ/γ, c₂/γ). φ is the mean of
    the two equations' directions weighted by δ and ε, c₂ the mean of their two estimates."""
    d = th[:, 0] - th[:, 1]
    c, s = np.cos(d), np.sin(d)
    rel = w[:, 1] - w[:, 0]
    x1 = np.column_stack([-(c * a[:, 1] + s * w[:, 1] ** 2), -np.sin(th[:, 0]),
                          np.cos(th[:, 0]), -w[:, 0], rel])  # fmt: skip
    k1, *_ = np.linalg.lstsq(x1, a[:, 0], rcond=None)
    x2 = np.column_stack([-(c * a[:, 0] - s * w[:, 0] ** 2), -np.sin(th[:, 1]),
                          np.cos(th[:, 1]), -rel])  # fmt: skip
    k2, *_ = np.linalg.lstsq(x2, a[:, 1], rcond=None)
    beta = k1[0]
    gamma = beta / k2[0]
    delta, eps = np.hypot(k1[1], k1[2]), gamma * np.hypot(k2[1], k2[2])
    phi = np.angle(delta * np.exp(1j * np.arctan2(k1[2], k1[1]))
                   + eps * np.exp(1j * np.arctan2(k2[2], k2[1])))  # fmt: skip
    return np.array([beta, gamma, delta, eps, phi, k1[3], (k1[4] + gamma * k2[3]) / 2])


def pend_fit_rollout(theta0: np.ndarray, starts: np.ndarray, truth: np.ndarray, dt: float):
    """θ minimising the squared wrapped angle error of rollouts against the observed angles
    ``truth`` (B, H+1, 2) of windows, jointly with each window's start state (B, 4), first the
    smoothed ``starts`` (the start's own error would otherwise bend the parameters): 7 + 4B
    unknowns, each window's residuals depending on its own start only (a sparse Jacobian);
    c₁, c₂ ≥ 0."""
    n, steps = truth.shape[0], truth.shape[1] - 1

    def residuals(x: np.ndarray) -> np.ndarray:
        y0 = x[7:].reshape(n, 4)
        with np.errstate(all="ignore"):
            pred = np.concatenate([y0[:, None, :2],
                                   pend_roll(x[:7], y0, dt, steps)[..., :2]], 1)  # fmt: skip
        r = horizons.wrap(pred - truth).ravel()
        return np.where(np.isfinite(r), r, 1e3)

    rows = np.arange(n * (steps + 1) * 2) // ((steps + 1) * 2)  # the window of each residual
    sparsity = np.zeros((rows.size, 7 + 4 * n), dtype=bool)
    sparsity[:, :7] = True
    for k in range(4):
        sparsity[np.arange(rows.size), 7 + 4 * rows + k] = True
    # friction dissipates: c₁, c₂ ≥ 0 (free, the first frames of a run, where the pendulum is
    # let go, drove c₁ of the IBM run 1 below zero)
    lower = np.full(7 + 4 * n, -np.inf)
    lower[5:7] = 0.0
    theta0 = np.concatenate([theta0[:5], np.maximum(theta0[5:], 1e-6)])
    x0 = np.concatenate([theta0, starts.ravel()])
    sol = least_squares(residuals, x0, method="trf", x_scale="jac", jac_sparsity=sparsity,
                        tr_solver="lsmr", max_nfev=100, bounds=(lower, np.inf))  # fmt: skip
    return sol.x[:7], sol


def pend_shoot(theta: np.ndarray, q0: np.ndarray, q1: np.ndarray, dt: float, iters: int = 6):
    """The rates w₀ (B, 2) at the first of two given angle pairs such that the fitted flow from
    (q₀, w₀) reaches q₁ after dt (Newton, finite-difference Jacobian): the start of a prediction
    from two positions, as ``evaluate`` gives a positions model."""
    w = horizons.wrap(q1 - q0) / dt
    target = q0 + horizons.wrap(q1 - q0)
    eps = 1e-6
    for _ in range(iters):
        base = pend_roll(theta, np.concatenate([q0, w], -1), dt, 1)[:, 0, :2] - target
        jac = np.stack([(pend_roll(theta, np.concatenate([q0, w + eps * e], -1), dt, 1)[:, 0, :2]
                         - target - base) / eps for e in np.eye(2)], -1)  # fmt: skip
        w = w - np.linalg.solve(jac, base[..., None])[..., 0]
    return w


def fit_pendulum_params(th_train: np.ndarray, dt: float, H: int) -> tuple:
    """(θ, θ_fd, the rollout fit's result, its window count) of the 7-parameter pendulum on
    training angles (N, T+1, 2): ``pend_fit_fd`` on the smoothed angles, then
    ``pend_fit_rollout`` over windows of H steps."""
    th_s, w_s, a_s = smoothed(th_train, dt)
    theta_fd = pend_fit_fd(th_s.reshape(-1, 2), w_s.reshape(-1, 2), a_s.reshape(-1, 2))
    idx = horizons.tile_windows(np.arange(th_train.shape[1])[None, :, None], H)[..., 0]
    starts = np.concatenate([th_s[:, idx[:, 0]], w_s[:, idx[:, 0]]], -1).reshape(-1, 4)
    truth = th_train[:, idx].reshape(-1, H + 1, 2)
    theta, sol = pend_fit_rollout(theta_fd, starts, truth, dt)
    return theta, theta_fd, sol, int(starts.shape[0])


def pendulum_record(path: Path, units: Units, d: int, dt: float, hs: list[int],
                    windows: np.ndarray, train: np.ndarray, n_windows: int, seconds: float, sol,
                    theta: np.ndarray, theta_fd: np.ndarray, start: str) -> dict:  # fmt: skip
    """What a pendulum fit writes besides its errors: the file, windows, the fit and its cost,
    and how each window was started (``start``)."""
    return {
        "file": str(path), "name": path.stem, "model": "damped compound double pendulum",
        "dim": d, "obs_dt": dt, "names": list(units.names), "labels": dict(units.labels),
        "horizons": hs, "windows": int(windows.shape[0]),
        "train_trajectories": int(train.shape[0]), "train_windows": n_windows,
        "parameters": len(PEND_PARAMS), "fit_seconds": round(seconds, 3),
        "rollout_fit": {"cost": float(sol.cost), "nfev": int(sol.nfev), "status": int(sol.status)},
        "fit": dict(zip(PEND_PARAMS, map(float, theta))),
        "fit_fd": dict(zip(PEND_PARAMS, map(float, theta_fd))),
        "start": start,
    }  # fmt: skip


def recorded_states(data, units: Units, split: str) -> np.ndarray:
    """A split's states (N, T+1, 2d) in the recording's units with the velocities of the file,
    q̇ = p / mass (``ingest.mass``: the files of ``ingest.velocities``)."""
    config = OmegaConf.create(data.attrs.get("ingest_config") or "{}")
    y = units.to_recording(data.splits[split].observed)
    d = y.shape[-1] // 2
    mass = np.broadcast_to(np.asarray(config.get("mass", 1.0), dtype=np.float64), (d,))
    return np.concatenate([y[..., :d], y[..., d:] / mass], -1)


def from_file_state(path: Path, data, units: Units, asked: list[int] | None, to_angles,
                    from_angles, periodic: list[int]) -> dict:  # fmt: skip
    """The 7-parameter pendulum on a file of states with velocities, each test window started
    from the file's state at its first frame (what ``evaluate`` gives a model of (q, q̇)):
    ``to_angles`` maps states (…, 2d) to the joint angles and rates (…, 4) it is fitted and
    rolled out in, ``from_angles`` maps its predictions back. Scored in the file's state
    (``mse_h<h>``; ``periodic`` its angle components), the angles (``mse_angles_h<h>``) and,
    with a chain attribute, the tracked points (``mse_points_h<h>``)."""
    geometry = recorded_chain(data.attrs)
    dt = float(data.attrs["obs_dt"]) * units.time
    train, test = recorded_states(data, units, "train"), recorded_states(data, units, "test")
    d = train.shape[-1] // 2
    hs = horizons.choose_horizons(PEND_HORIZONS if asked is None else asked, test.shape[1] - 1)
    H = hs[-1]
    start = time.perf_counter()
    theta, theta_fd, sol, n_windows = fit_pendulum_params(to_angles(train)[..., :2], dt, H)
    seconds = time.perf_counter() - start
    windows = horizons.tile_windows(test, H)  # (B, H+1, 2d) from y₀, as evaluate
    start_angles = to_angles(windows[:, :1])[:, 0]
    preds = {k: from_angles(pend_roll(par, start_angles, dt, H)) for k, par in
             (("physical", theta), ("physical_fd", theta_fd))}  # fmt: skip
    preds |= horizons.baselines(windows, d, dt, horizons.fit_linear(train, periodic), periodic)
    truth = windows[:, 1:]
    out = pendulum_record(path, units, d, dt, hs, windows, train, n_windows, seconds, sol,
                          theta, theta_fd, "the file's state")  # fmt: skip
    if geometry is not None:
        out["units"] = geometry.get("units")
        out["chain"] = {"pivot_px": geometry["origin"], "l1_px": geometry["lengths"][0],
                        "l2_px": geometry["lengths"][1]}  # fmt: skip
    truth_angles = to_angles(truth)
    for k, p in preds.items():
        suffix = "" if k == "physical" else f"_{k}"
        found = {"mse": horizons.horizon_mse(p, truth, hs, periodic),
                 "mse_angles": horizons.horizon_mse(to_angles(p)[..., :2], truth_angles[..., :2],
                                                    hs, [0, 1])}  # fmt: skip
        if geometry is not None:
            found["mse_points"] = horizons.horizon_mse(
                tracked_points_of(geometry, p), tracked_points_of(geometry, truth), hs, []
            )
        for key, by_h in found.items():
            for h in hs:
                out[f"{key}_h{h}{suffix}"] = by_h[h]
    return out


def fit_chain_angles(path: Path, data, units: Units, asked: list[int] | None) -> dict:
    """The pendulum on a file of two joint angles and their rates (a recording in angles, or
    tracked points ingested with ``ingest.chain``, ``ingest.coordinates=angles``)."""
    return from_file_state(path, data, units, asked, lambda y: y, lambda a: a, [0, 1])


def points_to_angles(y: np.ndarray) -> np.ndarray:
    """States (…, T+1, 8) of two points relative to the fixed one, (x₁, y₁, x₂, y₂) and their
    velocities → (…, T+1, 4) the links' angles (unwrapped along time) and rates,
    θ̇ = (r × ṙ) / |r|² of each link r."""
    r = np.stack([y[..., 0:2], y[..., 2:4] - y[..., 0:2]], -2)  # (…, 2 links, 2)
    v = np.stack([y[..., 4:6], y[..., 6:8] - y[..., 4:6]], -2)
    th = np.unwrap(np.arctan2(r[..., 1], r[..., 0]), axis=-2)
    w = (r[..., 0] * v[..., 1] - r[..., 1] * v[..., 0]) / (r**2).sum(-1)
    return np.concatenate([th, w], -1)


def angles_to_points(a: np.ndarray, lengths: list[float]) -> np.ndarray:
    """(…, 4) angles and rates → (…, 8) the two points (relative to the fixed one) and their
    velocities, links of the given lengths."""
    l1, l2 = lengths
    c, s = np.cos(a[..., :2]), np.sin(a[..., :2])
    b1 = l1 * np.stack([c[..., 0], s[..., 0]], -1)
    b2 = b1 + l2 * np.stack([c[..., 1], s[..., 1]], -1)
    v1 = l1 * a[..., 2:3] * np.stack([-s[..., 0], c[..., 0]], -1)
    v2 = v1 + l2 * a[..., 3:4] * np.stack([-s[..., 1], c[..., 1]], -1)
    return np.concatenate([b1, b2, v1, v2], -1)


def fit_chain_points(path: Path, data, units: Units, asked: list[int] | None) -> dict:
    """The pendulum on a file of a tracked chain's two points with their velocities
    (``ingest.chain``, ``coordinates=points``, ``velocities=smoothing``): the file's states
    mapped to angles and rates (``points_to_angles``), predictions back to points through the
    chain's lengths (``angles_to_points``)."""
    lengths = recorded_chain(data.attrs)["lengths"]
    return from_file_state(path, data, units, asked, points_to_angles,
                           lambda a: angles_to_points(a, lengths), [])  # fmt: skip


def fit_pendulum(path: Path, data, units: Units, asked: list[int] | None) -> dict:
    """The damped compound double pendulum fitted to a positions-only file of two tracked bobs
    (x₁, y₁, x₂, y₂), scored in the recording's pixels and in angles."""
    dt = float(data.attrs["obs_dt"]) * units.time
    train = units.to_recording(data.splits["train"].observed)  # (N, T+1, 4) px
    test = units.to_recording(data.splits["test"].observed)
    hs = horizons.choose_horizons(PEND_HORIZONS if asked is None else asked, test.shape[1] - 2)
    H = hs[-1]
    start = time.perf_counter()
    chain = Chain(train)
    th_train = chain.angles(train)
    theta, theta_fd, sol, n_windows = fit_pendulum_params(th_train, dt, H)
    seconds = time.perf_counter() - start

    windows = horizons.tile_windows(test, H + 1)  # (B, H+2, 4): from q₀, q₁ as evaluate
    ang = chain.angles(windows)
    preds_ang = {}
    for key, par in (("physical", theta), ("physical_fd", theta_fd)):
        w0 = pend_shoot(par, ang[:, 0], ang[:, 1], dt)
        preds_ang[key] = pend_roll(par, np.concatenate([ang[:, 0], w0], -1), dt, H + 1)[:, 1:, :2]
    # a start from the Savitzky–Golay state at q₁ over the whole test trajectory (3 frames into
    # the window): information evaluate does not give a model; it separates the noise of a
    # two-frame start from the model's own error
    th_test = chain.angles(test)
    ts, tw, _ = smoothed(th_test, dt)
    first = horizons.tile_windows(np.arange(test.shape[1])[None, :, None], H + 1)[:, 1, 0]
    sg_start = np.concatenate([ts[:, first], tw[:, first]], -1).reshape(-1, 4)
    preds_ang["physical_sg_start"] = pend_roll(theta, sg_start, dt, H)[..., :2]
    coef = horizons.fit_linear(train, [], order=2)
    preds = {k: chain.points(p) for k, p in preds_ang.items()}
    preds |= horizons.baselines(windows, 4, dt, coef, [])
    coef_ang = horizons.fit_linear(th_train, [0, 1], order=2)
    preds_ang |= horizons.baselines(ang, 2, dt, coef_ang, [0, 1])
    mse = {k: horizons.horizon_mse(p, windows[:, 2:], hs, []) for k, p in preds.items()}
    mse_ang = {k: horizons.horizon_mse(p, ang[:, 2:], hs, [0, 1]) for k, p in preds_ang.items()}
    out = pendulum_record(path, units, 4, dt, hs, windows, train, n_windows, seconds, sol,
                          theta, theta_fd, "two frames")  # fmt: skip
    out["chain"] = {"pivot_px": chain.pivot.tolist(), "l1_px": chain.l1, "l2_px": chain.l2}
    for k in mse:
        for h in hs:
            suffix = "" if k == "physical" else f"_{k}"
            out[f"mse_h{h}{suffix}"] = mse[k][h]
            out[f"mse_angles_h{h}{suffix}"] = mse_ang[k][h]
    return out


def fit_file(path: Path, asked: list[int] | None) -> dict:
    data = read_dataset(path, system="measured")
    attrs = data.attrs
    d = int(attrs["dim"])
    units = Units.from_attrs(attrs, d)
    name = path.stem
    if d == 2 and units.periodic == (0, 1) and attrs.get("observe") == "qp":
        return fit_chain_angles(path, data, units, asked)
    if tracked_points(attrs):
        if d == 4 and attrs.get("observe") == "qp":
            return fit_chain_points(path, data, units, asked)
        if attrs.get("observe") == "qp":
            return {"file": str(path), "name": name, "skipped": "a tracked chain of other than two "
                    "moving points: no physical model here"}  # fmt: skip
    if attrs.get("observe", "qp") != "qp":
        if d == 4 and not units.periodic:
            return fit_pendulum(path, data, units, asked)
        return {"file": str(path), "name": name, "skipped": "positions only (observe = q) but "
                "not two tracked bobs (x1, y1, x2, y2): no physical model here"}  # fmt: skip
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
    oscillators = [r for r in results if "skipped" not in r and "start" not in r]
    pendulums = [r for r in results if r.get("start") == "two frames"]
    chains = [r for r in results if r.get("start") == "the file's state"]
    lines = [
        "# Physical fits of the recordings",
        "",
        f"Written {now_utc()} by `benchmarks/real_physical_fit.py`: a small physical model fitted "
        "on the training split (physical: rollout error over windows of the longest horizon; "
        "physical_fd: finite-difference accelerations), scored on the test windows of "
        "`evaluate`, MSE over steps 1..h and state components in the recording's units.",
    ]
    if oscillators:
        lines += [
            "",
            "**Damped (coupled) oscillators** ẍ = −K (x − x0) − C ẋ, states (x, v).",
            "",
            "| recording | h | windows | physical | physical_fd | no_motion | constant_velocity "
            "| linear |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in oscillators:
        for h in r["horizons"]:
            cells = [r[f"mse_h{h}"]] + [r[f"mse_h{h}_{b}"] for b in
                                        ("physical_fd", *horizons.BASELINES)]  # fmt: skip
            lines.append(f"| {r['name']} | {h} | {r['windows']} | "
                         + " | ".join(f"{c:.4g}" for c in cells) + " |")  # fmt: skip
    if pendulums:
        lines += [
            "",
            "**Damped compound double pendulum** (7 parameters), predicted from each window's "
            "first two tracked frames; MSE in px² of the bobs (x₁, y₁, x₂, y₂) and in rad² of "
            "the arm angles (θ₁, θ₂); sg_start: started from the Savitzky–Golay state (uses 3 "
            "frames of the window, for reference only).",
            "",
            "| recording | h | windows | coordinates | physical | physical_fd | sg_start "
            "| no_motion | constant_velocity | linear | constant_velocity / physical |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for r in pendulums:
        for h in r["horizons"]:
            for coords, key in (("px", f"mse_h{h}"), ("rad", f"mse_angles_h{h}")):
                cells = [r[key]] + [r[f"{key}_{b}"] for b in
                                    ("physical_fd", "physical_sg_start", *horizons.BASELINES)]  # fmt: skip
                ratio = r[f"{key}_constant_velocity"] / r[key]
                lines.append(f"| {r['name']} | {h} | {r['windows']} | {coords} | "
                             + " | ".join(f"{c:.4g}" for c in cells) + f" | {ratio:.0f} |")  # fmt: skip
    if chains:
        lines += [
            "",
            "**The same pendulum on files of joint angles and rates** (recorded so, or tracked "
            "points ingested with `ingest.chain`, `ingest.coordinates=angles`, "
            "`ingest.velocities=smoothing`) **or of a tracked chain's points and velocities** "
            "(`ingest.coordinates=points`), each test window "
            "started from the file's state at its first frame, as `evaluate` starts a model of "
            "(θ, θ̇) or (x, ẋ); MSE over steps 1..h in the tracked points (px², through the file's "
            "chain geometry, where it has one), the angles (rad², wrapped) and the file's state.",
            "",
            "| recording | h | windows | coordinates | physical | physical_fd | no_motion "
            "| constant_velocity | linear | constant_velocity / physical |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
    for r in chains:
        for h in r["horizons"]:
            for coords, key in ((r.get("units") or "points", f"mse_points_h{h}"),
                                ("rad", f"mse_angles_h{h}"), ("state", f"mse_h{h}")):  # fmt: skip
                if key not in r:
                    continue
                cells = [r[key]] + [r[f"{key}_{b}"] for b in ("physical_fd", *horizons.BASELINES)]
                ratio = r[f"{key}_constant_velocity"] / r[key]
                lines.append(f"| {r['name']} | {h} | {r['windows']} | {coords} | "
                             + " | ".join(f"{c:.4g}" for c in cells) + f" | {ratio:.0f} |")  # fmt: skip
    lines.append("")
    for r in results:
        if "skipped" in r:
            lines.append(f"- {r['name']}: skipped ({r['skipped']})")
            continue
        f = r["fit"]
        if "start" in r:
            g = r.get("chain")
            params = ", ".join(f"{k} = {v:.4g}" for k, v in f.items())
            where = "" if g is None else (f"pivot {np.round(g['pivot_px'], 1).tolist()} px, arms "
                                          f"{g['l1_px']:.1f} and {g['l2_px']:.1f} px; ")  # fmt: skip
            lines.append(f"- {r['name']}: {params} (1/s², 1/s; φ in rad from the x axis); "
                         f"{where}{r['train_trajectories']} training trajectories, fit "
                         f"{r['fit_seconds']} s")  # fmt: skip
            continue
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
                    help="steps (default: evaluate's, 1 4 12; a double pendulum: 10 25)")  # fmt: skip
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
