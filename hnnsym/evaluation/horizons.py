"""Rollout errors of a model of a recording at several horizons, beside the trivial predictors
and a linear fit on the same windows: pure numpy (float64), in the recording's units.

Windows: each test trajectory (N, T+1, w) is cut into non-overlapping windows of ``length``
intervals (``tile_windows``: starts 0, length, 2·length, … while a whole window fits; adjacent
windows share their end point). A states window (w = 2d) is predicted from its first state y_0
for k = 1..H steps; a positions window (w = d) from its first two positions q_0, q_1 for
k = 1..H steps after q_1 (the positions methods need two).

The error at horizon h, ``mse_h<h>``: the mean over windows, over the predicted steps k = 1..h
and over the components of (ŷ_k − y_k)², with the difference of an angle coordinate wrapped to
(−π, π] (``differences``: atan2(sin Δ, cos Δ)), so a full turn costs nothing.

Predictors on the same windows (``baselines``):
    no_motion           ŷ_k = y_0 (positions: q_1)
    constant_velocity   q advanced by the velocity of the first two observations,
                        v = wrap(q_1 − q_0)/Δt (q̂_k = q_0 + k v Δt; positions: q_1 + k v Δt),
                        p held (p̂_k = p_0; the mass of a recording is in general unknown)
    linear              y_{n+1} = A y_n + b (positions: q_{n+1} = A q_n + B q_{n−1} + b) fitted
                        by least squares on every consecutive pair (triple) of the training
                        trajectories, rolled out; angles unwrapped along each trajectory, and
                        each step taken with the newest angle shifted into (−π, π] (the map
                        acts on the circle, so a start many turns away is no extrapolation)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_HORIZONS = (1, 4, 12)
BASELINES = ("no_motion", "constant_velocity", "linear")
TRIVIAL = ("no_motion", "constant_velocity")


def wrap(x: np.ndarray) -> np.ndarray:
    """Angles to (−π, π]: atan2(sin x, cos x)."""
    return np.arctan2(np.sin(x), np.cos(x))


def differences(pred: np.ndarray, truth: np.ndarray, periodic: Sequence[int]) -> np.ndarray:
    """pred − truth (…, w), the components ``periodic`` (angle coordinates, < d) wrapped."""
    diff = np.asarray(pred, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    if len(periodic):
        idx = list(periodic)
        diff[..., idx] = wrap(diff[..., idx])
    return diff


def choose_horizons(asked: Sequence[int] | None, available: int) -> list[int]:
    """The horizons (steps) asked for (default ``DEFAULT_HORIZONS``), each clipped to the
    ``available`` steps, sorted and without repeats. ValueError for a horizon < 1."""
    asked = list(DEFAULT_HORIZONS if asked is None else asked)
    if not asked or any(int(h) != h or h < 1 for h in asked):
        raise ValueError(f"eval.horizons must be whole numbers >= 1, got {asked}")
    if available < 1:
        raise ValueError("the test trajectories have no step to predict")
    return sorted({min(int(h), available) for h in asked})


def tile_windows(trajectories: np.ndarray, length: int) -> np.ndarray:
    """Non-overlapping windows (B, length+1, w) of ``length`` intervals tiling each trajectory of
    (N, T+1, w), in trajectory order (B = N · ⌊T/length⌋)."""
    n, points, width = trajectories.shape
    per = (points - 1) // length
    if per < 1:
        raise ValueError(f"trajectories of {points - 1} steps hold no window of {length}")
    starts = np.arange(per) * length
    idx = starts[:, None] + np.arange(length + 1)[None, :]  # (per, length+1)
    return trajectories[:, idx].reshape(n * per, length + 1, width)


def _shift(newest: np.ndarray, periodic: Sequence[int]) -> np.ndarray:
    """The whole turns (…, w) to take off a group of states so that the newest one's angles lie
    in (−π, π] (0 for the other components)."""
    shift = np.zeros_like(newest)
    if len(periodic):
        idx = list(periodic)
        shift[..., idx] = newest[..., idx] - wrap(newest[..., idx])
    return shift


def fit_linear(train: np.ndarray, periodic: Sequence[int], order: int = 1) -> np.ndarray:
    """Least-squares W ((order·w + 1), w) of y_{n+1} = [y_n, …, y_{n−order+1}, 1] W over every
    consecutive run of ``order`` + 1 states of the training trajectories (N, T+1, w). Angles:
    each trajectory is unwrapped along time, and each run is shifted by the whole turns that put
    the angles of its y_n in (−π, π] (the map acts on the circle: ``roll_linear`` does the same)."""
    y = np.asarray(train, dtype=np.float64).copy()
    if len(periodic):
        idx = list(periodic)
        y[..., idx] = np.unwrap(y[..., idx], axis=1)
    steps = y.shape[1] - order
    if steps < 1:
        raise ValueError(f"training trajectories of {y.shape[1] - 1} steps are too short")
    newest = y[:, order - 1 : order - 1 + steps]
    shift = _shift(newest, periodic)
    past = [y[:, order - 1 - j : order - 1 - j + steps] - shift for j in range(order)]
    ones = np.ones((*newest.shape[:2], 1))
    x = np.concatenate([*past, ones], -1).reshape(-1, order * y.shape[-1] + 1)
    target = (y[:, order:] - shift).reshape(-1, y.shape[-1])
    coef, *_ = np.linalg.lstsq(x, target, rcond=None)
    return coef


def roll_linear(
    coef: np.ndarray, given: np.ndarray, steps: int, periodic: Sequence[int] = ()
) -> np.ndarray:
    """Roll the linear model out ``steps`` times from the ``order`` given states (B, order, w),
    oldest first (angles: each step shifted as in ``fit_linear``): the predictions (B, steps, w)."""
    order = given.shape[1]
    history = [given[:, i] for i in range(order)]
    out = []
    for _ in range(steps):
        shift = _shift(history[-1], periodic)
        x = np.concatenate([*(h - shift for h in history[::-1][:order]),
                            np.ones((given.shape[0], 1))], -1)  # fmt: skip
        nxt = x @ coef + shift
        out.append(nxt)
        history = [*history[1:], nxt]
    return np.stack(out, 1)


def baselines(
    windows: np.ndarray, dim: int, obs_dt: float, coef: np.ndarray, periodic: Sequence[int]
) -> dict[str, np.ndarray]:
    """The predictions (B, H, w) of each baseline for the windows (B, H+1, w) of states (w = 2d,
    from y_0) or (B, H+2, d) of positions (from q_0, q_1); ``coef`` from ``fit_linear``
    (order 1 for states, 2 for positions)."""
    w = windows.shape[-1]
    positions = w == dim
    given = 2 if positions else 1
    steps = windows.shape[1] - given
    k = np.arange(1, steps + 1, dtype=np.float64)[None, :, None]
    q0, q1 = windows[:, 0, :dim], windows[:, 1, :dim]
    velocity = differences(q1, q0, periodic) / obs_dt  # (B, d)
    last = windows[:, given - 1]
    still = np.repeat(last[:, None], steps, 1)
    moving = still.copy()
    moving[..., :dim] = last[:, None, :dim] + k * obs_dt * velocity[:, None]
    linear = roll_linear(coef, windows[:, :given], steps, periodic)
    return {"no_motion": still, "constant_velocity": moving, "linear": linear}


def horizon_mse(
    pred: np.ndarray,
    truth: np.ndarray,
    horizons: Sequence[int],
    periodic: Sequence[int],
    model: np.ndarray | None = None,
) -> dict[int, float]:
    """{h: mean over windows, steps 1..h and components of the squared (wrapped) error} for
    predictions and observations (B, H, w) of the steps after the given ones. Windows with a
    non-finite prediction up to h (of ``model``'s predictions when given: a baseline is scored
    on the windows the model got through) are left out (NaN when none is left)."""
    sq = differences(pred, truth, periodic) ** 2  # (B, H, w)
    ref = sq if model is None else np.asarray(model)
    out = {}
    for h in horizons:
        part = sq[:, :h]
        ok = np.isfinite(ref[:, :h]).all(axis=(1, 2))
        out[h] = float(part[ok].mean()) if ok.any() else float("nan")
    return out


def per_coordinate_mse(
    pred: np.ndarray, truth: np.ndarray, h: int, periodic: Sequence[int]
) -> np.ndarray:
    """The mean squared (wrapped) error per component (w,) over windows and steps 1..h."""
    part = differences(pred[:, :h], truth[:, :h], periodic) ** 2
    ok = np.isfinite(part).all(axis=(1, 2))
    return part[ok].mean(axis=(0, 1)) if ok.any() else np.full(part.shape[-1], np.nan)
