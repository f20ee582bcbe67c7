"""Scoring a recording of a chain in joint angles in its tracked points.

A film of a chain ingested as joint angles (``ingest.chain``, ``ingest.coordinates=angles``;
``hnnsym.data.chains``) keeps the chain's geometry in the file's ``chain`` attribute: the origin
(the fixed point) and the link lengths l_k in the recording's units, the angles θ_k from the
image's x axis. The moving points are

    x_k = origin + Σ_{j≤k} l_j (cos θ_j, sin θ_j)        k = 1..n

so predictions and baselines of the angles can be compared where the tracker measured them:
``mse_points_h<h>`` (units², e.g. px²) beside ``mse_angles_h<h>`` (rad², wrapped), over the
same windows, steps 1..h, and the points' x, y (or the angles) as components.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from hnnsym.evaluation import horizons


def angle_chain(attrs: Mapping) -> dict | None:
    """The file's chain attribute (decoded) when its positions are the chain's joint angles;
    None for any other file (no chain, or a chain stored as points)."""
    raw = attrs.get("chain")
    if raw is None:
        return None
    chain = json.loads(raw) if isinstance(raw, str) else dict(raw)
    return chain if chain.get("coordinates") == "angles" else None


def chain_points(chain: Mapping, theta: np.ndarray) -> np.ndarray:
    """Joint angles (…, n) → the moving points (…, 2n) (x₁, y₁, …, x_n, y_n) in the
    recording's units: x_k = origin + Σ_{j≤k} l_j (cos θ_j, sin θ_j)."""
    lengths = np.asarray(chain["lengths"], dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64)
    steps = lengths[:, None] * np.stack([np.cos(theta), np.sin(theta)], -1)  # (…, n, 2)
    points = np.asarray(chain["origin"], dtype=np.float64) + np.cumsum(steps, -2)
    return points.reshape(*theta.shape[:-1], 2 * len(lengths))


def chain_horizon_metrics(
    chain: Mapping,
    pred: np.ndarray,
    observed: np.ndarray,
    base: Mapping[str, np.ndarray],
    hs: Sequence[int],
) -> dict[str, float]:
    """``mse_points_h<h>`` and ``mse_angles_h<h>`` of the model's predictions (B, H, w) and, with
    the suffix ``_<b>``, of each baseline's, against the observed windows (B, H, w), all in the
    recording's units; the first n components of a state are the joint angles."""
    n = len(chain["lengths"])
    angles = list(range(n))
    truth_points = chain_points(chain, observed[..., :n])
    out: dict[str, float] = {}
    for suffix, p in [("", pred), *((f"_{b}", q) for b, q in base.items())]:
        pts = horizons.horizon_mse(chain_points(chain, p[..., :n]), truth_points, hs, [],
                                   model=pred)  # fmt: skip
        ang = horizons.horizon_mse(p[..., :n], observed[..., :n], hs, angles, model=pred)
        for h in hs:
            out[f"mse_points_h{h}{suffix}"] = pts[h]
            out[f"mse_angles_h{h}{suffix}"] = ang[h]
    return out
