"""The units of an ingested recording (``ingest.scale``): given scales, or ``auto`` (powers of
two that bring time steps, positions and the action to order one)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from hnnsym.data.segments import Segment
from hnnsym.data.settings import Mapping, Options, as_list
from hnnsym.data.units import Units
from hnnsym.errors import UserError


def _pow2(x: float) -> float:
    return float(2.0 ** round(math.log2(x))) if math.isfinite(x) and x > 0 else 1.0


def _geomean(values: np.ndarray) -> float:
    values = values[np.isfinite(values) & (values > 0)]
    return float(np.exp(np.log(values).mean())) if values.size else 1.0


def auto_scales(segments: list[Segment], dim: int, periodic: Sequence[int], dt: float,
                mass: Any) -> tuple[float, list[float], float]:  # fmt: skip
    """(τ, a, c) from the data, each a power of two: a_i ~ std(q_i) (1 for an angle), τ the
    geometric mean over coordinates of std(q_i)/rms(q̇_i) (1/rms(θ̇) for an angle; q̇ by central
    differences), c the geometric mean of rms(p_i)·a_i so that p̃_i = p_i a_i / c is O(1) (p
    from the data, or mass · q̇ for positions only). A constant coordinate has a_i = 1 and no
    say in τ."""
    q = np.concatenate([s.states[:, :dim] for s in segments])
    qdot = np.concatenate([np.gradient(s.states[:, :dim], dt, axis=0) for s in segments
                           if s.steps >= 2] or [np.zeros((0, dim))])  # fmt: skip
    if segments[0].states.shape[1] == 2 * dim:
        p = np.concatenate([s.states[:, dim:] for s in segments])
    else:
        p = qdot * np.broadcast_to(np.asarray(mass, dtype=np.float64), (dim,))
    spread = q.std(0)
    spread[list(periodic)] = 1.0
    speed = np.sqrt((qdot**2).mean(0)) if qdot.shape[0] else np.zeros(dim)  # rms
    ok = (spread > 0) & (speed > 0)
    tau = _pow2(_geomean(spread[ok] / speed[ok])) if ok.any() else 1.0
    a = [1.0 if i in periodic else _pow2(float(spread[i])) for i in range(dim)]
    c = _pow2(_geomean(np.sqrt((p**2).mean(0)) * np.asarray(a))) if p.shape[0] else 1.0
    return tau, a, c


def choose_units(segments: list[Segment], m: Mapping, o: Options, dt: float,
                 labels: dict[str, str] | None = None) -> Units:  # fmt: skip
    """``ingest.scale``: auto, none, or {time, q, action} (what is not given is auto)."""
    periodic = tuple(j for j, n in enumerate(m.positions) if n in m.angles)
    scale = OmegaConf.to_container(o.scale) if OmegaConf.is_config(o.scale) else o.scale
    common = dict(periodic=periodic, names=tuple(m.positions), labels=dict(labels or {}))
    if scale == "none" or scale is None:
        return Units(1.0, (1.0,) * m.dim, 1.0, **common)
    if scale != "auto" and not isinstance(scale, dict):
        raise UserError(f"ingest.scale must be auto, none or {{time: τ, q: [...], action: c}}, "
                        f"got {scale!r}")  # fmt: skip
    given = {} if scale == "auto" else scale
    if unknown := [k for k in given if k not in ("time", "q", "action")]:
        raise UserError(f"ingest.scale has no key {unknown[0]!r}; it takes time, q, action")
    tau, a, c = auto_scales(segments, m.dim, periodic, dt, o.mass)
    if m.isotropic:  # distances must keep their ratios: one scale for every coordinate
        a = [_pow2(_geomean(np.asarray(a)))] * m.dim
    try:
        tau = float(given.get("time", tau))
        c = float(given.get("action", c))
        if "q" in given:
            q = as_list(given["q"])
            if m.isotropic and len(set(map(float, q))) > 1:
                raise ValueError
            if len(q) == 1:
                q = [1.0 if j in periodic else float(q[0]) for j in range(m.dim)]
            if len(q) != m.dim:
                raise ValueError
            a = [float(v) for v in q]
    except (TypeError, ValueError) as err:
        raise UserError(f"ingest.scale={scale!r}: time and action are numbers, q one number or "
                        f"one per position ({m.dim}; one for tracked points)") from err  # fmt: skip
    if bad := [m.positions[j] for j in periodic if a[j] != 1.0]:
        raise UserError(f"ingest.scale.q: angle column {bad[0]} is never scaled; give 1 for it")
    if not all(math.isfinite(v) and v > 0 for v in (tau, c, *a)):
        raise UserError(f"ingest.scale: every scale must be a number > 0, got time {tau}, q {a}, "
                        f"action {c}")  # fmt: skip
    return Units(tau, tuple(a), c, **common)
