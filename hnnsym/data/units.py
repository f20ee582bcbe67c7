"""The units of a recording against the scaled ones a model learns in.

ingest may nondimensionalise a recording: with a time scale τ and, per coordinate, scales a_i
for positions and b_i for momenta, the file stores t̃ = t/τ, q̃_i = q_i/a_i, p̃_i = p_i/b_i.
Hamilton's equations keep their form in the scaled variables when every a_i b_i equals one
action c: then H̃(q̃, p̃) = (τ/c) H(a q̃, b p̃), and dq̃_i/dt̃ = ∂H̃/∂p̃_i, dp̃_i/dt̃ = −∂H̃/∂q̃_i.
So ``Units`` takes a_i and c, and b_i = c/a_i. Angle coordinates (``periodic``) are never
scaled (a_i = 1: they stay radians, period 2π). Scales that are powers of two make every
conversion exact in floating point (the round trip of a state is bitwise).

The scales are stored in the data file's root attribute ``units`` (a JSON object); a file
without it is in its recording's units (``Units.identity``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hnnsym.errors import DataError


@dataclass(frozen=True)
class Units:
    """t = time·t̃, q_i = q[i]·q̃_i, p_i = (action/q[i])·p̃_i, H = (action/time)·H̃.

    ``names`` and ``labels`` (optional) are the coordinates' column names and their units as
    the recording gives them (e.g. "px", "rad"), for figures and logs."""

    time: float
    q: tuple[float, ...]
    action: float
    periodic: tuple[int, ...] = ()
    names: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scales = [self.time, self.action, *self.q]
        if not all(math.isfinite(s) and s > 0 for s in scales):
            raise DataError(f"units: every scale must be finite and > 0, got {self.as_attr()}")
        if any(not 0 <= i < len(self.q) for i in self.periodic):
            raise DataError(f"units: periodic {self.periodic} names no coordinate of {self.q}")
        if any(self.q[i] != 1.0 for i in self.periodic):
            raise DataError("units: an angle coordinate is never scaled (its q scale must be 1)")

    @classmethod
    def identity(cls, dim: int, periodic: Sequence[int] = ()) -> Units:
        return cls(1.0, (1.0,) * dim, 1.0, tuple(periodic))

    @property
    def dim(self) -> int:
        return len(self.q)

    @property
    def p(self) -> tuple[float, ...]:
        """b_i = action / a_i."""
        return tuple(self.action / a for a in self.q)

    @property
    def energy(self) -> float:
        """H = energy · H̃."""
        return self.action / self.time

    def state_scales(self, width: int) -> np.ndarray:
        """The scale of each component of a stored row: (a) for positions only, (a, b) for
        states; ``width`` is d or 2d."""
        if width == self.dim:
            return np.asarray(self.q, dtype=np.float64)
        if width == 2 * self.dim:
            return np.asarray(self.q + self.p, dtype=np.float64)
        raise DataError(f"units: rows of width {width} for {self.dim} coordinates")

    def to_scaled(self, states: np.ndarray) -> np.ndarray:
        """Recording units -> stored units, states (..., d or 2d)."""
        return np.asarray(states, dtype=np.float64) / self.state_scales(states.shape[-1])

    def to_recording(self, states: np.ndarray) -> np.ndarray:
        """Stored units -> recording units, states (..., d or 2d)."""
        return np.asarray(states, dtype=np.float64) * self.state_scales(states.shape[-1])

    def as_attr(self) -> dict[str, Any]:
        return {
            "time": self.time, "q": list(self.q), "action": self.action,
            "periodic": list(self.periodic), "names": list(self.names),
            "labels": dict(self.labels),
        }  # fmt: skip

    @classmethod
    def from_attrs(cls, attrs: dict, dim: int) -> Units:
        """The units of a data file's attributes (identity when it has none)."""
        value = attrs.get("units")
        if value is None:
            return cls.identity(dim)
        try:
            units = cls(
                float(value["time"]), tuple(float(a) for a in value["q"]),
                float(value["action"]), tuple(int(i) for i in value.get("periodic", ())),
                tuple(str(n) for n in value.get("names", ())),
                {str(k): str(v) for k, v in (value.get("labels") or {}).items()},
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(
                f"attribute units must hold time, q (one per coordinate) and action, got {value!r}"
            ) from err
        if units.dim != dim:
            raise DataError(f"attribute units has {units.dim} position scales for dim {dim}")
        return units
