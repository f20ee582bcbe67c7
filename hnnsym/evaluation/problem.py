"""What evaluation does for a kind of problem, chosen by what the data and the model *are*.

``evaluate(cfg)`` (``hnnsym.evaluation.stage``) always runs the same steps: load the run, build
the ``Problem``, then through the ``Part`` that ``registry.part_for`` picks: ``roll_out`` on the
test trajectories, ``metrics``, the extras the model declares, ``baselines``, ``figures``; it
writes what they return. A part is chosen by a ``Kind``:

    coordinates  "cartesian": a constrained mechanism, compared in Cartesian coordinates (Finzi
                 et al.; the angle-coordinate chain too, mapped by ``from_angles``); "own": the
                 system's own (q, p)
    observes     "qp": the model learns (q, p) states; "q": positions only (declares
                 ``ModelCapability.POSITION_ONLY``, Aoshima et al.)
    truth        "known": a system with a true H (ground truth to compare with); "measured": a
                 recording (``python -m hnnsym.ingest``), compared with its observations

The parts are registered in ``hnnsym.evaluation.registry.PARTS``, the extras a model declares in
``hnnsym.evaluation.extras.EXTRAS``. A new kind of problem adds a part and its ``PARTS`` entries; a
new model family adds nothing to evaluation when it declares its capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd
from omegaconf import DictConfig
from torch import Tensor, nn

from hnnsym.data.hdf5 import Dataset
from hnnsym.data.velocities import VelocityMap
from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.pendulums import CONSTRAINED_SYSTEMS
from hnnsym.physics.systems import System


@dataclass(frozen=True)
class Kind:
    """What the data and model are; the key of ``hnnsym.evaluation.registry.PARTS``."""

    coordinates: Literal["cartesian", "own"]
    observes: Literal["qp", "q"]
    truth: Literal["known", "measured"]


@dataclass
class Problem:
    """A trained model and the test trajectories to roll it out on (``stage.build_problem``).

    truth: (T+1, B, w) the reference test trajectories (clean when the file has them, else
    observed), time-major; t: (T+1,) their times; w = 2d states (or d positions of a recording)."""

    cfg: DictConfig
    out: Path
    model: nn.Module
    system: System
    data: Dataset
    payload: dict
    truth: Tensor
    t: Tensor
    obs_dt: float
    steps: int
    substeps: int
    reference: Literal["clean", "observed"]
    # what q̇ is for the file's states, for a model with momenta of its own (else None)
    velocities: VelocityMap | None = None

    @property
    def e(self) -> DictConfig:
        return self.cfg.eval

    @property
    def data_file(self) -> Path:
        return Path(self.cfg.data_file)

    @property
    def kind(self) -> Kind:
        return Kind(
            "cartesian" if self.system.name in CONSTRAINED_SYSTEMS else "own",
            "q" if has(self.model, ModelCapability.POSITION_ONLY) else "qp",
            "known" if self.system.known else "measured",
        )


@dataclass
class Rolled:
    """A part's rollout. ``states`` (T+1, B, w) and ``model`` are what the extras read, in the
    part's units (a recording's: ``model`` in them too); ``known_damping``: the data's true damping
    rate (None: unknown); ``detail``: the part's own intermediate results, for its later steps."""

    states: Tensor
    model: Any
    known_damping: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Part(Protocol):
    """The steps of evaluation for one kind of problem."""

    starts: bool  # whether eval.init=observed|fitted applies (a rollout from one (q, p) state)

    def roll_out(self, p: Problem) -> Rolled: ...

    def metrics(self, p: Problem, r: Rolled) -> tuple[dict, pd.DataFrame]:
        """The metrics (with ``notes``) and the per-step curves (rollout.csv)."""
        ...

    def baselines(self, p: Problem, r: Rolled, metrics: dict) -> tuple[dict, dict]:
        """The baselines' metrics beside the model's (``metrics``: the model's and its extras',
        computed before), and their curves' columns."""
        ...

    def figures(self, p: Problem, r: Rolled, curves: pd.DataFrame) -> list[str]:
        """Draw into ``p.out``; the names drawn (without .png)."""
        ...

    def wrote(self, m: dict) -> bool:
        """Whether the metrics ``m`` are this part's (for ``summary``)."""
        ...

    def summary(self, m: dict, out: Path) -> str: ...
