"""The settings of ``ingest`` (hnnsym/conf/ingest.yaml): which columns of a measurement table are
time, trial, positions, momenta or velocities (``Mapping``), the split rules
(``ingest.split.{val,test}``, ``split_rule``), and the numeric settings (``Options``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from hnnsym.errors import UserError

FINITE_DIFFERENCE = "finite_difference"
SMOOTHING = "smoothing"
DERIVED = (FINITE_DIFFERENCE, SMOOTHING)  # velocities estimated from the positions


@dataclass
class Mapping:
    """Which columns hold what. ``velocities`` is a list of columns, or how to estimate them from
    the positions (``DERIVED``: ``finite_difference``, ``smoothing``)."""

    time: str | None
    trial: str | None
    positions: list[str]
    momenta: list[str] | None = None
    velocities: list[str] | str | None = None
    angles: list[str] = field(default_factory=list)
    isotropic: bool = False  # the positions are points in a plane: one scale for all of them

    @property
    def dim(self) -> int:
        return len(self.positions)

    @property
    def observe(self) -> str:
        """ "qp" when momenta come out (given, from velocities or differences), else "q"."""
        return "qp" if self.momenta or self.velocities else "q"

    def used(self) -> list[str]:
        """The columns read from the file."""
        names = [self.time, self.trial, *self.positions, *(self.momenta or [])]
        if isinstance(self.velocities, list):
            names += self.velocities
        return [n for n in names if n is not None]

    def check(self, available: Sequence[str], path: Path) -> None:
        """One-line errors for a mapping that does not fit the file."""
        if not self.positions:
            raise UserError("ingest.positions must name at least one position column")
        if self.momenta and self.velocities:
            raise UserError("give ingest.momenta or ingest.velocities, not both")
        if isinstance(self.velocities, str) and self.velocities not in DERIVED:
            raise UserError(f"ingest.velocities must be a list of columns, {' or '.join(DERIVED)}; "
                            f"got {self.velocities!r}")  # fmt: skip
        for key, cols in (("momenta", self.momenta), ("velocities", self.velocities)):
            if isinstance(cols, list) and len(cols) != self.dim:
                raise UserError(f"ingest.{key} has {len(cols)} columns, ingest.positions "
                                f"{self.dim}: give one per position")  # fmt: skip
        unknown = [n for n in dict.fromkeys([*self.used(), *self.angles]) if n not in available]
        if unknown:
            raise UserError(f"{path} has no column {', '.join(map(repr, unknown))}; its columns: "
                            f"{', '.join(map(str, available))}")  # fmt: skip
        if not_q := [a for a in self.angles if a not in self.positions]:
            raise UserError(f"ingest.angles {not_q} must be position columns (ingest.positions)")
        if len(set(self.used())) != len(self.used()):
            raise UserError(f"a column is mapped twice: {self.used()}")

    def as_dict(self) -> dict:
        keys = ("time", "trial", "positions", "momenta", "velocities", "angles")
        return {key: getattr(self, key) for key in keys}


def column_names(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, int)):
        return [str(value)]
    return [str(v) for v in value]


def mapping_from_config(i: DictConfig) -> Mapping:
    velocities = i.velocities
    if velocities is not None and not (isinstance(velocities, str) and velocities in DERIVED):
        velocities = column_names(velocities)
    return Mapping(
        time=None if i.time is None else str(i.time),
        trial=None if i.trial is None else str(i.trial),
        positions=column_names(i.positions) or [],
        momenta=column_names(i.momenta),
        velocities=velocities,
        angles=column_names(i.angles) or [],
    )


RULE_KEYS = ("segments", "trials", "time", "every", "offset")


def split_rule(name: str, value: Any) -> float | dict:
    """``ingest.split.<name>`` as a fraction, or a dict of criteria (``RULE_KEYS``) that a chosen
    segment meets all of: ``segments`` (indices), ``trials`` (ids or labels), ``time`` (one
    [start, end] or a list of them, recording units: segments are cut at the ends), ``every`` /
    ``offset`` (index % every == offset). A list is ``{segments: list}``."""
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    where = f"ingest.split.{name}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not 0 < value < 1:
            raise UserError(f"{where} must be a fraction in (0, 1), a list of segment indices or "
                            f"a rule such as {{trials: [2]}}, got {value}")  # fmt: skip
        return float(value)
    if isinstance(value, (list, tuple)):
        value = {"segments": list(value)}
    if not isinstance(value, dict) or not value:
        raise UserError(f"{where} must be a fraction, a list of segment indices, or a rule with "
                        f"one or more of {', '.join(RULE_KEYS)}; got {value!r}")  # fmt: skip
    unknown = [k for k in value if k not in RULE_KEYS]
    if unknown:
        raise UserError(f"{where} has no key {', '.join(map(repr, unknown))}; a rule takes "
                        f"{', '.join(RULE_KEYS)}")  # fmt: skip
    rule: dict[str, Any] = {}
    try:
        if "segments" in value:
            rule["segments"] = sorted({int(k) for k in as_list(value["segments"])})
        if "trials" in value:
            rule["trials"] = as_list(value["trials"])
        if "time" in value:
            ranges = as_list(value["time"])
            if ranges and not isinstance(ranges[0], (list, tuple)):
                ranges = [ranges]
            rule["time"] = [[float(a), float(b)] for a, b in ranges]
            if not rule["time"] or any(not a < b for a, b in rule["time"]):
                raise ValueError
        if "offset" in value and "every" not in value:
            raise ValueError
        if "every" in value:
            rule["every"], rule["offset"] = int(value["every"]), int(value.get("offset", 0))
            if not 0 <= rule["offset"] < rule["every"]:
                raise ValueError
    except (TypeError, ValueError) as err:
        raise UserError(
            f"{where}={value!r}: segments is a list of indices, trials a list, time [start, end] "
            "with start < end (or a list of such), every k >= 1 with offset in 0..k-1"
        ) from err
    return rule


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


@dataclass
class Options:
    """The numeric settings of ``ingest`` (hnnsym/conf/ingest.yaml). ``scale`` defaults to none
    here (``ingest_table`` keeps the recording's units); the CLI's default is auto."""

    dt: float | None = None
    gap_tolerance: float = 0.5
    jitter: float = 0.02
    irregular: str = "refuse"
    wrapped: str | bool = "auto"
    mass: float | list[float] = 1.0
    min_segment: int = 16
    steps: int | None = None
    test_steps: int | None = None
    max_segment: int | None = None
    val: Any = 0.15
    test: Any = 0.15
    seed: int = 0
    every: int = 1
    scale: Any = "none"
    smoothing_window: int = 7  # frames after ``every``
    smoothing_order: int = 3

    def check(self) -> None:
        problems = {
            "gap_tolerance": self.gap_tolerance > 0,
            "jitter": 0 <= self.jitter < self.gap_tolerance,
            "irregular": self.irregular in ("refuse", "resample"),
            "wrapped": self.wrapped in ("auto", True, False),
            "min_segment": self.min_segment >= 1,
            "steps": self.steps is None or self.steps >= 1,
            "test_steps": self.test_steps is None or self.test_steps >= 1,
            "max_segment": self.max_segment is None or self.max_segment >= 1,
            "dt": self.dt is None or self.dt > 0,
            "mass": all(m > 0 for m in np.atleast_1d(self.mass)),
            "every": isinstance(self.every, int) and self.every >= 1,
            "smoothing.window": self.smoothing_window % 2 == 1
            and self.smoothing_window > self.smoothing_order,
            "smoothing.order": 1 <= self.smoothing_order <= 5,
        }  # fmt: skip
        rules = {
            "gap_tolerance": "> 0", "jitter": ">= 0 and < ingest.gap_tolerance",
            "irregular": "refuse or resample", "wrapped": "auto, true or false",
            "min_segment": ">= 1", "steps": ">= 1 or null", "test_steps": ">= 1 or null",
            "max_segment": ">= 1 or null", "dt": "> 0 or null", "mass": "> 0",
            "every": "an integer >= 1",
            "smoothing.window": "odd and > ingest.smoothing.order",
            "smoothing.order": "in 1..5",
        }  # fmt: skip
        for key, ok in problems.items():
            if not ok:
                value = getattr(self, key.replace(".", "_"))
                raise UserError(f"ingest.{key} must be {rules[key]}, got {value}")
        val, test = split_rule("val", self.val), split_rule("test", self.test)
        if isinstance(val, float) and isinstance(test, float) and val + test >= 1:
            raise UserError(f"ingest.split: fractions val + test must be < 1, got {val}, {test}")
