"""Dealing segments to train/val/test (``ingest.split.{val,test}``): fractions by a seeded
permutation, segment indices, trials, time ranges or every k-th segment (``choose_splits``)."""

from __future__ import annotations

import math

import numpy as np

from hnnsym.data.hdf5 import SPLITS
from hnnsym.data.readers import is_number_text
from hnnsym.data.segments import Segment, segment_part
from hnnsym.errors import DataError, UserError


def cut_at_times(segments: list[Segment], times: list[float], dt: float) -> list[Segment]:
    """Cut segments so that a state at a time in ``times`` starts a new segment (a range's start)
    and one past a range's end does too: no segment straddles a boundary."""
    if not times:
        return segments
    out = []
    for s in segments:
        starts = set()
        for a, b in times:
            starts.add(math.ceil((a - s.t0) / dt - 1e-9))  # first state at or after a
            starts.add(math.floor((b - s.t0) / dt + 1e-9) + 1)  # first state after b
        edges = [0, *sorted(k for k in starts if 0 < k <= s.steps), s.steps + 1]
        for a, b in zip(edges[:-1], edges[1:]):
            out.append(segment_part(s, a, b - 1, dt))
    return out


def _meets(s: Segment, index: int, rule: dict, dt: float, labels: list[str] | None) -> bool:
    if "segments" in rule and index not in rule["segments"]:
        return False
    if "every" in rule and index % rule["every"] != rule["offset"]:
        return False
    if "trials" in rule:
        ids = {str(t) for t in rule["trials"]}
        trial = s.label(labels)
        numeric = isinstance(trial, float) and any(
            is_number_text(str(t)) and float(t) == trial for t in rule["trials"]
        )
        if not numeric and str(trial) not in ids:
            return False
    if "time" in rule:
        t1, eps = s.t0 + s.steps * dt, 1e-6 * dt
        if not any(a - eps <= s.t0 and t1 <= b + eps for a, b in rule["time"]):
            return False
    return True


def choose_splits(
    segments: list[Segment], rules: dict[str, float | dict], seed: int, dt: float,
    labels: list[str] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Indices of the segments per split. Rules (``split_rule``) pick test, then val; a fraction
    takes round(fraction · n) (at least 1) of the segments not yet picked, by a permutation from
    ``seed``; train is the rest. Each split must get at least one segment."""
    n = len(segments)
    picked: dict[str, list[int]] = {}
    for name in ("test", "val"):
        rule = rules[name]
        if isinstance(rule, dict):
            picked[name] = [k for k, s in enumerate(segments) if _meets(s, k, rule, dt, labels)]
            if "segments" in rule and (bad := [k for k in rule["segments"] if k >= n]):
                raise UserError(f"ingest.split.{name}: no segment {bad[0]}; there are {n} "
                                f"(0..{n - 1}, in file order)")  # fmt: skip
            if not picked[name]:
                raise DataError(f"ingest.split.{name}={rule} picks none of the {n} segments; see "
                                "the segments in the log (index, trial, time)")  # fmt: skip
    if "test" in picked and "val" in picked and (both := set(picked["test"]) & set(picked["val"])):
        raise UserError(f"ingest.split: segment {min(both)} is picked for both val and test")
    if n < 3:
        raise DataError(
            f"{n} usable segment{'s' if n != 1 else ''}: train, val and test need one each "
            "(segments are never split between them); cut long segments into blocks with "
            "ingest.max_segment=<steps>, split by time (ingest.split={test: {time: [t0, t1]}, "
            "...}), or lower ingest.min_segment"
        )
    order = np.random.default_rng(np.random.SeedSequence(seed)).permutation(n)
    for name in ("test", "val"):
        rule = rules[name]
        if isinstance(rule, float):
            taken = {k for v in picked.values() for k in v}
            free = [int(k) for k in order if k not in taken]
            left = 1 + (0 if "val" in picked or name == "val" else 1)  # train (and val) keep one
            count = min(max(1, round(rule * n)), len(free) - left)
            if count < 1:
                raise DataError(f"ingest.split.{name}={rule}: no segment is left for it ({n} "
                                "segments); lower the other split or cut more segments")  # fmt: skip
            picked[name] = free[:count]
    taken = {k for v in picked.values() for k in v}
    picked["train"] = [k for k in range(n) if k not in taken]
    if not picked["train"]:
        raise DataError(f"ingest.split leaves no segment for train (of {n}); pick fewer for val "
                        "and test")  # fmt: skip
    return {name: np.array(sorted(picked[name]), dtype=int) for name in SPLITS}


def split_segments(n: int, val: float, test: float, seed: int) -> dict[str, np.ndarray]:
    """Fractions of n segments per split (``choose_splits`` with fractions)."""
    dummy = [Segment(None, k, k, 0.0, np.zeros((1, 1))) for k in range(n)]
    return choose_splits(dummy, {"val": val, "test": test}, seed, 1.0)
