"""Tracked points of a planar chain (a pendulum filmed from the front) read as a chain: which
points are rigidly linked, which one is fixed, the link lengths, and the joint angles.

A recording of n + 1 tracked points (``ingest.points``: name -> its x and y columns) whose
chain ``ingest.chain`` = [fixed, p₁, …, pₙ] is given or detected (``detect_chain``):

- a **link** joins two points whose distance is constant: its relative spread std/mean over
  the recording is below ``LINK_SPREAD``;
- the **fixed point** is the one whose track stays within ``FIXED_SPREAD`` × the shortest link
  of its mean (its RMS distance from its mean);
- the **origin** is the fixed point with its tracking jitter averaged out: the centre of the
  least-squares circle through p₁'s positions (``fit_circle``, Kåsa's algebraic fit), the
  point p₁'s link turns about. The fixed point's mean track is logged beside it as a check;
- the **lengths** are the circle's radius and the mean distances of the other links;
- the **joint angles** θ_k = atan2(y_k − y_{k−1}, x_k − x_{k−1}) (rad, from the image's x
  axis towards its y axis, whichever way those point: no direction of gravity is assumed),
  with (x₀, y₀) the origin. They are new columns ``theta_<p_k>``, ingested as angles
  (``coordinates=angles``); or
- the **points** relative to the origin (``coordinates=points``): the moving points' columns
  minus the origin, all scaled alike (``Mapping.isotropic``), so the chain's constraints are
  |x₁| = l₁, |x_k − x_{k−1}| = l_k in the stored units (``chain_system_params``).

``Chain.as_attr`` is the file's ``chain`` attribute (JSON): the points in order, the fixed
one, the origin and lengths in the recording's units, the angle columns; so evaluation can map
angles back to points: x_k = origin + Σ_{j≤k} l_j (cos θ_j, sin θ_j).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from hnnsym.data.settings import Mapping
from hnnsym.errors import DataError, UserError

LINK_SPREAD = 0.05  # a link's length varies by less than this fraction of its mean (std/mean)
FIXED_SPREAD = 0.05  # a fixed point stays within this fraction of the shortest link (RMS)
DETECT = "detect"
COORDINATES = ("points", "angles")


@dataclass
class Chain:
    """A chain of tracked points from a fixed one; origin and lengths in the recording's units."""

    points: list[str]  # [fixed, p1, ..., pn]
    columns: dict[str, tuple[str, str]]  # point -> (x column, y column)
    origin: tuple[float, float]
    lengths: list[float]
    spreads: list[float]  # std/mean of each link's length
    fixed_mean: tuple[float, float]  # the fixed point's mean track

    @property
    def moving(self) -> list[str]:
        return self.points[1:]

    @property
    def angle_columns(self) -> list[str]:
        return [f"theta_{p}" for p in self.moving]

    @property
    def point_columns(self) -> list[str]:
        """The moving points' x, y columns, in chain order."""
        return [c for p in self.moving for c in self.columns[p]]

    def angles(self, table: pd.DataFrame) -> np.ndarray:
        """(rows, n) joint angles θ_k of the table's rows (NaN where a point is missing)."""
        prev = np.broadcast_to(np.asarray(self.origin), (len(table), 2))
        out = []
        for p in self.moving:
            xy = table[list(self.columns[p])].to_numpy(dtype=np.float64)
            d = xy - prev
            out.append(np.arctan2(d[:, 1], d[:, 0]))
            prev = xy
        return np.stack(out, 1)

    def as_attr(self, coordinates: str, unit: str | None) -> str:
        return json.dumps({
            "points": self.points, "fixed": self.points[0],
            "columns": {p: list(c) for p, c in self.columns.items()},
            "origin": list(self.origin), "lengths": self.lengths, "link_spread": self.spreads,
            "fixed_mean": list(self.fixed_mean), "coordinates": coordinates,
            "angles": self.angle_columns, "units": unit,
            "relative_to_origin": coordinates == "points",
        })  # fmt: skip


def points_from_config(value: Any) -> dict[str, tuple[str, str]]:
    """``ingest.points`` as {name: (x column, y column)}."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if not isinstance(value, dict) or len(value) < 2:
        raise UserError(f"ingest.points must name two or more tracked points with their x and y "
                        f"columns, e.g. {{pivot: [x0, y0], bob: [x1, y1]}}, got {value!r}")  # fmt: skip
    out = {}
    for name, cols in value.items():
        if not isinstance(cols, (list, tuple)) or len(cols) != 2:
            raise UserError(f"ingest.points.{name} must be its two columns [x, y], got {cols!r}")
        out[str(name)] = (str(cols[0]), str(cols[1]))
    return out


def _xy(table: pd.DataFrame, columns: tuple[str, str]) -> np.ndarray:
    return table[list(columns)].to_numpy(dtype=np.float64)


def _spread(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(mean, std/mean) of the distance |a − b| over the rows where both are finite."""
    d = np.linalg.norm(a - b, axis=1)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan"), float("inf")
    mean = float(d.mean())
    return mean, float(d.std() / mean) if mean > 0 else float("inf")


def _rms_about_mean(xy: np.ndarray) -> float:
    xy = xy[np.isfinite(xy).all(1)]
    return float(np.sqrt(((xy - xy.mean(0)) ** 2).sum(1).mean())) if len(xy) else float("inf")


def fit_circle(xy: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre (2,) and radius of the least-squares circle through points (n, 2) (Kåsa: the
    linear fit of x² + y² = 2 c·x + (r² − |c|²))."""
    xy = xy[np.isfinite(xy).all(1)]
    shift = xy.mean(0)
    z = xy - shift  # conditioning
    A = np.column_stack([2 * z, np.ones(len(z))])
    sol, *_ = np.linalg.lstsq(A, (z**2).sum(1), rcond=None)
    centre = sol[:2]
    radius = float(np.sqrt(sol[2] + centre @ centre))
    return centre + shift, radius


def links_of(
    table: pd.DataFrame, points: dict[str, tuple[str, str]]
) -> dict[tuple[str, str], tuple[float, float]]:
    """(mean length, std/mean) of the distance of every pair of points."""
    names = list(points)
    xy = {p: _xy(table, points[p]) for p in names}
    return {(a, b): _spread(xy[a], xy[b]) for i, a in enumerate(names) for b in names[i + 1 :]}


def detect_chain(table: pd.DataFrame, points: dict[str, tuple[str, str]]) -> list[str]:
    """[fixed, p1, ..., pn]: the points as a chain of links (distances with spread below
    LINK_SPREAD) from the one fixed point (``FIXED_SPREAD``). A one-line error when they are not
    one chain."""
    pairs = links_of(table, points)
    links = {pair for pair, (_, spread) in pairs.items() if spread < LINK_SPREAD}
    found = ", ".join(
        f"{a}-{b} ({s:.1%})" for (a, b), (_, s) in sorted(pairs.items(), key=lambda kv: kv[1][1])
    )
    if not links:
        raise DataError(f"ingest.chain=detect: no two tracked points keep a constant distance (std/mean "
                        f"below {LINK_SPREAD:.0%}); the distances' spreads: {found}")  # fmt: skip
    shortest = min(pairs[link][0] for link in links)
    still = [p for p in points if _rms_about_mean(_xy(table, points[p])) < FIXED_SPREAD * shortest]
    if len(still) != 1:
        raise DataError(f"ingest.chain=detect: {'no' if not still else len(still)} tracked points stay "
                        f"within {FIXED_SPREAD:.0%} of the shortest link ({shortest:.4g}) of their mean; a "
                        f"chain hangs from exactly one fixed point (give ingest.chain=[fixed, ...])")  # fmt: skip
    chain = [still[0]]
    while True:
        nxt = [b if a == chain[-1] else a for a, b in links if chain[-1] in (a, b)]
        nxt = [p for p in nxt if p not in chain]
        if len(nxt) > 1:
            raise DataError(f"ingest.chain=detect: point {chain[-1]} is linked to {nxt}: not a single "
                            "chain (branched chains are not supported); give ingest.chain")  # fmt: skip
        if not nxt:
            break
        chain.append(nxt[0])
    if len(chain) < 2:
        raise DataError(f"ingest.chain=detect: the fixed point {chain[0]} is linked to no tracked point; "
                        f"the distances' spreads: {found}")  # fmt: skip
    if len(chain) < len(points):
        left = [p for p in points if p not in chain]
        raise DataError(f"ingest.chain=detect: points {left} are not on the chain {chain} (spreads: "
                        f"{found}); leave them out of ingest.points or give ingest.chain")  # fmt: skip
    return chain


def build_chain(table: pd.DataFrame, points: dict[str, tuple[str, str]], chain: Any) -> Chain:
    """The chain ``chain`` (names, or ``detect``) of ``points`` checked against the data: every
    link keeps its length (spread < LINK_SPREAD) and the first point stays put (FIXED_SPREAD)."""
    missing = [c for cols in points.values() for c in cols if c not in table.columns]
    if missing:
        raise UserError(f"ingest.points names no column {', '.join(map(repr, missing))}; the "
                        f"columns: {', '.join(map(str, table.columns))}")  # fmt: skip
    if OmegaConf.is_config(chain):
        chain = OmegaConf.to_container(chain)
    if chain == DETECT or chain is None:
        order = detect_chain(table, points)
    elif isinstance(chain, (list, tuple)) and len(chain) >= 2:
        order = [str(p) for p in chain]
        if unknown := [p for p in order if p not in points]:
            raise UserError(
                f"ingest.chain names {unknown}, not points of ingest.points {list(points)}"
            )
        if len(set(order)) != len(order):
            raise UserError(f"ingest.chain {order} names a point twice")
    else:
        raise UserError(f"ingest.chain must be the points in order from the fixed one, e.g. "
                        f"[pivot, bob1, bob2], or {DETECT}; got {chain!r}")  # fmt: skip
    xy = {p: _xy(table, points[p]) for p in order}
    lengths, spreads = [], []
    for a, b in zip(order[:-1], order[1:]):
        mean, spread = _spread(xy[a], xy[b])
        if not spread < LINK_SPREAD:
            raise DataError(f"ingest.chain: {a} and {b} are not rigidly linked: their distance "
                            f"{mean:.4g} varies by {spread:.1%} (std/mean; a link varies by less than "
                            f"{LINK_SPREAD:.0%}); check ingest.points or use ingest.chain=detect")  # fmt: skip
        lengths.append(mean)
        spreads.append(spread)
    wander = _rms_about_mean(xy[order[0]])
    if not wander < FIXED_SPREAD * min(lengths):
        raise DataError(f"ingest.chain: the first point {order[0]} is not fixed: it moves {wander:.4g} "
                        f"(RMS about its mean), {wander / min(lengths):.0%} of the shortest link; a chain "
                        "starts at its fixed point")  # fmt: skip
    centre, radius = fit_circle(xy[order[1]])
    lengths[0] = radius
    fixed = xy[order[0]][np.isfinite(xy[order[0]]).all(1)].mean(0)
    return Chain(order, {p: points[p] for p in order}, (float(centre[0]), float(centre[1])),
                 [float(v) for v in lengths], spreads, (float(fixed[0]), float(fixed[1])))  # fmt: skip


def chain_mapping(
    table: pd.DataFrame, m: Mapping, points: Any, chain: Any, coordinates: str
) -> tuple[pd.DataFrame, Mapping, Chain]:
    """The table (with the angle columns added for ``coordinates=angles``) and the mapping of a
    tracked chain: positions are the moving points' columns, or their joint angles."""
    if m.positions:
        raise UserError("give the positions as ingest.positions or as tracked points "
                        "(ingest.points, ingest.chain), not both")  # fmt: skip
    if coordinates not in COORDINATES:
        raise UserError(f"ingest.coordinates must be one of {COORDINATES}, got {coordinates!r}")
    if isinstance(m.velocities, list) or m.momenta:
        raise UserError("a tracked chain takes its velocities from its positions "
                        "(ingest.velocities=smoothing or finite_difference), not from columns")  # fmt: skip
    c = build_chain(table, points_from_config(points), chain)
    if coordinates == "points":  # relative to the origin: the constraints' anchor is 0
        table = table.copy()
        for p in c.points:
            for column, o in zip(c.columns[p], c.origin):
                table[column] = table[column] - o
        return table, replace(m, positions=c.point_columns, isotropic=True), c
    if clash := [n for n in c.angle_columns if n in table.columns]:
        raise UserError(f"the file already has columns {clash}; rename them (ingest.names) so the "
                        "chain's angles can be added")  # fmt: skip
    table = table.copy()
    table[c.angle_columns] = c.angles(table)
    return table, replace(m, positions=c.angle_columns, angles=c.angle_columns), c


def recorded_chain(attrs: dict) -> dict | None:
    """A data file's chain attribute (``Chain.as_attr``) decoded, or None for a file without
    one: its positions are the chain's joint angles (``coordinates`` angles) or its moving
    points relative to the origin (points)."""
    raw = attrs.get("chain")
    if raw is None:
        return None
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def tracked_points(attrs: dict) -> bool:
    """Whether a data file holds the points of a tracked chain (``coordinates=points``)."""
    chain = recorded_chain(attrs)
    return chain is not None and chain.get("coordinates") == "points"


def chain_system_params(attrs: dict, units_q: tuple[float, ...]) -> dict | None:
    """The ``chain_pendulum`` parameters (links, lengths in the stored units, unit masses) whose
    constraints are those of a recording of tracked points (``coordinates=points``; ``units_q``:
    its position scales, one for the plane), or None when the file has no such chain. Only the
    constraints are used: the masses and gravity of ``chain_pendulum`` are not."""
    if not tracked_points(attrs):
        return None
    chain = recorded_chain(attrs)
    a = float(units_q[0])
    n = len(chain["lengths"])
    return {"links": n, "lengths": [float(v) / a for v in chain["lengths"]], "masses": [1.0] * n}
