"""Uniformly spaced pieces of a recording (``Segment``) and the numeric settings that cut them
(``Options``): gaps and irregular steps, unwrapped angles, momenta from velocities or finite
differences, subsampling, the longest segment, and the trajectories of T steps that tile a
segment (``cut``, ``auto_steps``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.signal import savgol_filter

from hnnsym.data.settings import FINITE_DIFFERENCE, SMOOTHING, Mapping, Options
from hnnsym.errors import DataError, UserError


@dataclass
class Segment:
    """Uniformly spaced observations of one trial: rows (first, last) of the table, the time of
    the first (recording units), and the states (n, width) = [q, p] or q (already unwrapped /
    converted, recording units)."""

    trial: float | None
    first_row: int
    last_row: int
    t0: float
    states: np.ndarray

    @property
    def steps(self) -> int:
        return self.states.shape[0] - 1

    def label(self, labels: list[str] | None) -> Any:
        return self.trial if labels is None or self.trial is None else labels[int(self.trial)]

    def record(self, index: int, dt: float, trajectories: int, labels: list[str] | None) -> dict:
        return {"index": index, "trial": self.label(labels), "rows": [self.first_row, self.last_row],
                "t0": self.t0, "t1": self.t0 + self.steps * dt, "steps": self.steps,
                "trajectories": trajectories}  # fmt: skip


def _groups(table: pd.DataFrame, trial: str | None) -> list[tuple[float | None, np.ndarray]]:
    """(trial id, row indices in file order) per trial, in order of first appearance."""
    if trial is None:
        return [(None, np.arange(len(table)))]
    ids = table[trial].to_numpy()
    out = []
    for value in pd.unique(ids[~np.isnan(ids)]):
        out.append((float(value), np.flatnonzero(ids == value)))
    return out


def time_resolution(t: np.ndarray) -> float:
    """The decimal resolution the times were written with (1e-3 for times in whole ms), or 0
    when they are not rounded to one (at most 1e-9 of the largest time off a multiple)."""
    t = t[np.isfinite(t)]
    if t.size == 0:
        return 0.0
    scale = max(float(np.abs(t).max()), 1e-300)
    for k in range(0, 10):
        r = 10.0**-k
        if np.abs(t / r - np.round(t / r)).max() * r <= 1e-9 * max(scale, r):
            return r
    return 0.0


def _median_dt(table: pd.DataFrame, m: Mapping, groups, dt: float | None) -> tuple[float, float]:
    """(obs_dt, resolution of the times). obs_dt: the median positive step; when the times are
    rounded to a resolution r (``time_resolution``) between 1e-4 and 0.05 of it, the mean of the
    steps within r of the median (rounded frame times, e.g. 0.033, 0.034 for 1/29.9 s)."""
    if m.time is None:
        if dt is None:
            raise UserError("with no time column (ingest.time=null) give the spacing ingest.dt")
        return float(dt), 0.0
    steps = np.concatenate([np.diff(table[m.time].to_numpy()[rows]) for _, rows in groups])
    steps = steps[np.isfinite(steps) & (steps > 0)]
    if steps.size == 0:
        raise DataError(f"column {m.time!r} has no increasing times: no time step to measure")
    median = float(np.median(steps))
    r = time_resolution(table[m.time].to_numpy())
    if not 1e-4 * median <= r <= 0.05 * median:  # not rounded, or the steps are whole quanta
        return median, 0.0
    regular = steps[np.abs(steps - median) <= 1.01 * r]
    return float(regular.mean()), r


def _unwrap(q: np.ndarray, names: list[str], angles: list[str], wrapped: str | bool) -> list[str]:
    """Unwrap the angle columns of q (n, d) in place; returns the names unwrapped."""
    done = []
    for j, name in enumerate(names):
        if name not in angles or wrapped is False:
            continue
        jumps = np.abs(np.diff(q[:, j])) > math.pi
        if wrapped is True or jumps.any():
            q[:, j] = np.unwrap(q[:, j])
            done.append(name)
    return done


def segments_of(table: pd.DataFrame, m: Mapping, o: Options) -> tuple[list[Segment], float, dict]:
    """Cut the table into segments of uniformly spaced states. Returns (segments, obs_dt, notes:
    counts of gaps, dropped rows/segments, unwrapped and resampled columns for the log)."""
    groups = _groups(table, m.trial)
    obs_dt, resolution = _median_dt(table, m, groups, o.dt)
    # steps within the jitter, or within the resolution the times were written with, are uniform
    allowed = max(o.jitter, 1.01 * resolution / obs_dt)
    q_all = table[m.positions].to_numpy()
    if m.momenta:
        v_all, factor = table[m.momenta].to_numpy(), 1.0
    elif isinstance(m.velocities, list):
        v_all, factor = table[m.velocities].to_numpy(), np.broadcast_to(
            np.asarray(o.mass, dtype=np.float64), (m.dim,))  # fmt: skip
    else:
        v_all, factor = None, 1.0
    used = table[m.used()].to_numpy()
    if m.trial is not None:  # rows without a trial id belong to none
        notes_missing_trial = int(np.isnan(table[m.trial].to_numpy()).sum())
    else:
        notes_missing_trial = 0
    notes = {"gaps": 0, "restarts": 0, "dropped_rows": 0, "irregular_steps": 0,
             "unwrapped": set(), "resampled": 0, "short": 0}  # fmt: skip
    notes["dropped_rows"] += notes_missing_trial
    segments: list[Segment] = []
    for trial, rows in groups:
        finite = np.isfinite(used[rows]).all(1)
        notes["dropped_rows"] += int((~finite).sum())
        if m.time is None:
            t = rows * obs_dt  # rows equally spaced: a dropped row leaves a gap of 2 dt
        else:
            t = table[m.time].to_numpy()[rows]
        keep = rows[finite]
        t = t[finite]
        dt = np.diff(t)
        gap = dt > (1 + o.gap_tolerance) * obs_dt
        restart = dt <= 0
        notes["gaps"] += int(gap.sum())
        notes["restarts"] += int(restart.sum())
        cuts = np.flatnonzero(gap | restart) + 1
        for piece in np.split(np.arange(len(keep)), cuts):
            if piece.size == 0:
                continue
            r, tp = keep[piece], t[piece]
            q = q_all[r].copy()
            notes["unwrapped"].update(_unwrap(q, m.positions, m.angles, o.wrapped))
            v = None if v_all is None else v_all[r] * factor
            off = np.abs(np.diff(tp) / obs_dt - 1) > allowed
            if off.any():
                notes["irregular_steps"] += int(off.sum())
                if o.irregular == "refuse":
                    i = int(np.flatnonzero(off)[0])
                    raise DataError(
                        f"irregular time spacing: the step from row {r[i]} to {r[i + 1]} (time "
                        f"{tp[i]:g} -> {tp[i + 1]:g}) is {tp[i + 1] - tp[i]:g}, the median step "
                        f"is {obs_dt:g} (allowed: ±{allowed:g} of it, gaps above "
                        f"{1 + o.gap_tolerance:g} times it); pass ingest.irregular=resample to "
                        "interpolate onto a uniform grid, or adjust ingest.jitter / "
                        "ingest.gap_tolerance"
                    )
                grid = tp[0] + obs_dt * np.arange(
                    int(math.floor((tp[-1] - tp[0]) / obs_dt + 1e-9)) + 1
                )
                q = np.stack([np.interp(grid, tp, q[:, j]) for j in range(m.dim)], 1)
                if v is not None:
                    v = np.stack([np.interp(grid, tp, v[:, j]) for j in range(m.dim)], 1)
                notes["resampled"] += 1
            if m.velocities in (FINITE_DIFFERENCE, SMOOTHING):
                v = estimated_velocities(q, obs_dt, m.velocities, o)
                if v is None:
                    notes["short"] += 1
                    continue
                v = v * np.broadcast_to(np.asarray(o.mass, dtype=np.float64), (m.dim,))
            states = q if v is None else np.concatenate([q, v], 1)
            segments.append(Segment(trial, int(r[0]), int(r[-1]), float(tp[0]), states))
    return segments, obs_dt, notes


def estimated_velocities(q: np.ndarray, dt: float, how: str, o: Options) -> np.ndarray | None:
    """dq/dt (n, d) of uniformly spaced positions q (n, d), or None for a segment too short.

    ``finite_difference``: central differences (one-sided, second order, at the ends).
    ``smoothing``: the derivative of a Savitzky–Golay fit (the local least-squares polynomial of
    degree ``smoothing_order`` over a window spanning ``smoothing_window`` frames after
    subsampling, i.e. (window − 1) · ``every`` + 1 frames here; at the ends the fit to the
    first / last window; ``scipy.signal.savgol_filter``). For a polynomial of that degree it is
    exact; the noise it passes on from q falls as window^(−3/2)."""
    if how == FINITE_DIFFERENCE:
        return np.gradient(q, dt, axis=0, edge_order=2) if q.shape[0] >= 3 else None
    window = (o.smoothing_window - 1) * o.every + 1
    if q.shape[0] < window:
        return None
    return savgol_filter(q, window, o.smoothing_order, deriv=1, delta=dt, axis=0, mode="interp")


def limit_segments(
    segments: list[Segment], max_segment: int | None, dt: float = 1.0
) -> list[Segment]:
    """Cut segments longer than ``max_segment`` steps into the fewest equal blocks (steps differ
    by at most one) of at most that many, consecutive blocks sharing their end point (so one long
    recording can be split by blocks, and no tail is lost)."""
    if max_segment is None:
        return segments
    out = []
    for s in segments:
        k = max(1, math.ceil(s.steps / max_segment))
        edges = np.linspace(0, s.steps, k + 1).round().astype(int)
        out += [segment_part(s, int(a), int(b), dt) for a, b in zip(edges[:-1], edges[1:])]
    return out


def subsample(segments: list[Segment], every: int) -> list[Segment]:
    """Every ``every``-th state of each segment (from its first)."""
    if every == 1:
        return segments
    out = []
    for s in segments:
        keep = np.arange(0, s.steps + 1, every)
        rows = np.linspace(s.first_row, s.last_row, s.steps + 1).round().astype(int)
        out.append(Segment(s.trial, s.first_row, int(rows[keep[-1]]), s.t0, s.states[keep]))
    return out


def cut(states: np.ndarray, steps: int) -> np.ndarray:
    """Trajectories of ``steps`` steps tiling one segment (n, w): ceil((n-1)/steps) pieces of
    steps+1 states, piece k = states[k·steps : (k+1)·steps + 1] (neighbours share their end
    point), except the last, which ends at the segment's last state (it overlaps the one before
    when (n-1) is not a multiple of steps): no tail is lost. (0, steps+1, w) when n-1 < steps."""
    n = states.shape[0] - 1
    if n < steps:
        return np.zeros((0, steps + 1, states.shape[1]))
    starts = [min(k * steps, n - steps) for k in range(math.ceil(n / steps))]
    return np.stack([states[a : a + steps + 1] for a in starts])


AUTO_STEPS_MAX = 64  # ingest.steps=null: T is chosen in [shortest usable segment, this]
AUTO_STEPS_KEEP = 0.95  # ... the largest T that keeps this fraction of the usable samples


def auto_steps(lengths: Sequence[int], groups: Sequence[Sequence[int]] = (),
               test_steps: int | None = None, lo: int | None = None) -> int:  # fmt: skip
    """T for segments of these step counts: the largest T in [lo, max(lo, AUTO_STEPS_MAX)] (lo:
    ingest.min_segment, at most the shortest segment)
    whose tiling (``cut``) covers at least AUTO_STEPS_KEEP of the samples (segments shorter than T
    are not used; T = min covers all) and, where such a T exists, gives every split (``groups``:
    the segment indices of each split; the test one tiled by ``test_steps`` when given) at least
    MIN_TRAJECTORIES trajectories."""
    lengths = np.asarray(lengths)
    lo = min(int(lengths.min()), lo or int(lengths.min()))
    total = float((lengths + 1).sum())

    def enough(steps: int) -> bool:
        for k, group in enumerate(groups):
            length = test_steps if k == len(groups) - 1 and test_steps else steps
            n = sum(math.ceil(lengths[i] / length) for i in group if lengths[i] >= length)
            if n < MIN_TRAJECTORIES:
                return False
        return True

    keeping = [
        steps for steps in range(lo, max(lo, min(AUTO_STEPS_MAX, int(lengths.max()))) + 1)
        if (lengths[lengths >= steps] + 1).sum() >= AUTO_STEPS_KEEP * total
    ]  # fmt: skip
    full = [steps for steps in keeping if enough(steps)]
    return max(full or keeping)


MIN_TRAJECTORIES = 5  # a split with fewer trajectories than this is warned about


def segment_part(s: Segment, a: int, b: int, dt: float) -> Segment:
    """States a..b (inclusive) of a segment; rows are interpolated only as labels."""
    rows = np.linspace(s.first_row, s.last_row, s.steps + 1).round().astype(int)
    return Segment(s.trial, int(rows[a]), int(rows[b]), s.t0 + a * dt, s.states[a : b + 1])
