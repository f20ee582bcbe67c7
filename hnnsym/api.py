"""A trained run from Python, in the recording's units: ``hnnsym.load_run(run_dir)``.

    run = hnnsym.load_run("outputs/measured/pendulum/hnn/seed0")
    ys = run.predict(states, times)   # states (B, 2d) at t = 0, times (K,) -> (K, B, 2d)

The model comes from the run's checkpoint (``hnnsym.checkpoints.run_checkpoint``), the
scales from its data file's ``units`` attribute (``hnnsym.data.units``); the prediction is the
one ``python -m hnnsym.evaluate`` makes (``hnnsym.evaluation.measured.Predictor``): the learned
H through the integrator the run was trained with, or, for a model of positions (method=ddlm),
its scheme from two positions.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import nn

from hnnsym.checkpoints import run_checkpoint, trained_options
from hnnsym.compatibility import momenta_problem
from hnnsym.config.build import build_integrator, model_from_checkpoint
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.units import Units
from hnnsym.data.velocities import velocity_map
from hnnsym.errors import UserError
from hnnsym.evaluation.measured import Predictor
from hnnsym.evaluation.positions import prediction_scheme
from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.systems import system_from_config


@dataclass
class Run:
    """A trained model with its data file's units: ``predict`` in the recording's units."""

    run_dir: Path
    model: nn.Module
    units: Units
    obs_dt: float  # the observation interval in the recording's time unit
    predictor: Predictor
    payload: dict

    @property
    def positions_only(self) -> bool:
        return has(self.model, ModelCapability.POSITION_ONLY)

    def predict(self, states: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The states (K, B, w) at ``times`` (K,), in the recording's units, from ``states`` at
        time 0: (B, 2d) states for a model of (q, p), or (2, B, d) positions at times 0 and
        obs_dt for a model of positions. Times are multiples of ``obs_dt`` (>= 0)."""
        d = self.units.dim
        given = np.asarray(states, dtype=np.float64)
        if self.positions_only:
            if given.ndim != 3 or given.shape[0] != 2 or given.shape[-1] != d:
                raise UserError(f"a model of positions predicts from the positions at times 0 "
                                f"and obs_dt: states (2, B, {d}), got {given.shape}")  # fmt: skip
        else:
            if given.ndim != 2 or given.shape[-1] != 2 * d:
                raise UserError(f"states must be (B, {2 * d}), got {given.shape}")
            given = given[None]
        t = np.asarray(times, dtype=np.float64).reshape(-1)
        k = t / self.obs_dt
        steps = np.rint(k).astype(np.int64)
        if not (
            np.all(np.abs(k - steps) <= 1e-6 * np.maximum(1, np.abs(k))) and np.all(steps >= 0)
        ):
            raise UserError(f"times must be multiples >= 0 of obs_dt = {self.obs_dt:g}, got {t}")
        g = given.shape[0]
        last = max(int(steps.max(initial=0)), g - 1)
        start = torch.as_tensor(self.units.to_scaled(given))
        with torch.no_grad():
            pred, _ = self.predictor.predict(start, last + 1 - g) if last >= g else (start[:0], [])
        path = torch.cat([start, pred]).cpu().numpy()
        return self.units.to_recording(path[steps])


def load_run(
    run_dir: str | os.PathLike, checkpoint: str = "best", data_file: str | os.PathLike | None = None
) -> Run:
    """The run in ``run_dir`` (its ``checkpoints/<checkpoint>.pt``), with the units of the data
    file it was trained on (or ``data_file``), in float64 on the CPU."""
    run_dir = Path(run_dir)
    _, payload = run_checkpoint(run_dir, checkpoint, f"is {run_dir} a run dir of hnnsym.train?")
    model = model_from_checkpoint(payload).to(torch.float64).eval()
    model.requires_grad_(False)
    config = payload.get("config") or {}
    source = Path(data_file or payload["data_file"])
    data = read_dataset(source, dim=int(payload["dim"]), splits=("test",))
    attrs = data.attrs
    units = Units.from_attrs(attrs, int(payload["dim"]))
    obs_dt = float(attrs["obs_dt"])
    substeps = int(trained_options(payload).get("substeps") or 1)
    if has(model, ModelCapability.POSITION_ONLY):
        scheme = prediction_scheme(OmegaConf.create(config))
        predictor = Predictor(model, obs_dt, None, 1, 100, scheme)
    else:
        integ = build_integrator(config["integrator"])
        velocities = None
        if has(model, ModelCapability.OWN_MOMENTA):  # it observes (q, q̇): the file's q̇
            system = system_from_config(payload["system"])
            states = data.splits["test"].observed
            if problem := momenta_problem(model, system, attrs, states, str(source)):
                raise UserError(problem)
            velocities = velocity_map(system, attrs)
        predictor = Predictor(model, obs_dt, integ, substeps, velocities=velocities)
    if not math.isfinite(obs_dt) or obs_dt <= 0:
        raise UserError(f"{source}: obs_dt {obs_dt} is not a positive number")
    return Run(run_dir, model, units, obs_dt * units.time, predictor, payload)
