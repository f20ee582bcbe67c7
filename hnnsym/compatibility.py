"""Which model fits which data and system: the rules train and evaluate check before any work.
Each returns a reason (one sentence, naming the overrides that would fit) or None; the stages
turn a reason into a ``UserError`` line."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hnnsym.config.build import model_class
from hnnsym.data.chains import chain_system_params, tracked_points
from hnnsym.data.units import Units
from hnnsym.data.velocities import check_quadratic, velocity_map, velocity_problem
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.constraints import is_constrained_model
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS
from hnnsym.physics.systems import MEASURED, System


def data_problem(
    observes: str, width: int, dim: int, model: object, method: str, source: str
) -> str | None:
    """What is wrong (one sentence) with training or evaluating ``method``, whose loss learns from
    ``observes`` ("qp" | "q"), with ``model`` on the observations in ``source`` (a data file), of
    ``width`` components (2d: states, d: positions); None when they fit."""
    if width not in (dim, 2 * dim):
        return (
            f"{source} holds observations of {width} components, neither d={dim} nor 2d={2 * dim}"
        )
    if observes == "q" and width == 2 * dim:
        return (
            f"{source} holds (q, p) states, but method {method} learns from positions only; "
            "generate them with generate.observe=q (written beside it as seed<k>_q.h5, the "
            "file the method reads)"
        )
    if observes == "qp" and width == dim:
        return (
            f"{source} holds positions only (generate.observe=q), but method {method} needs "
            "momenta too; use a position method (method=ddlm, ddlm_leapfrog, ...) or data "
            "generated without generate.observe=q"
        )
    position_model = has(model, ModelCapability.POSITION_ONLY)
    if observes == "q" and not position_model:
        return (f"method {method} needs a potential network (model=potential), not "
                f"{type(model).__name__}")  # fmt: skip
    if observes == "qp" and position_model:
        return (f"model {type(model).__name__} is a potential V(q) for the position methods "
                f"(method=ddlm, ...), not for method {method}")  # fmt: skip
    return None


def recording_model_config(model_cfg: dict, system: str, attrs: dict) -> dict:
    """A constrained model's config (``Capability.CONSTRAINTS`` declared by its class: CHNN,
    CLNN) on a recording of tracked points (``ingest.chain``, ``coordinates=points``): its
    constraints are the recorded chain's (``chain_system_params``), and it observes (x, ẋ)
    (``own_momenta``: the file's p = mass · ẋ is not the model's M_θ ẋ). Any other config, or
    any other file, is returned as it is (the same object)."""
    if system != MEASURED or not has(model_class(model_cfg), Capability.CONSTRAINTS):
        return model_cfg
    if not tracked_points(attrs):
        return model_cfg
    params = chain_system_params(attrs, Units.from_attrs(attrs, int(attrs["dim"])).q)
    return {**model_cfg, "system": "chain_pendulum", "system_params": params, "own_momenta": True}


def coordinates_problem(system: str, model: object, tracked: bool = False) -> str | None:
    """What is wrong (one sentence) with learning ``system`` (a registered name) with ``model``,
    or None. A Cartesian constrained system (``CARTESIAN_SYSTEMS``) needs a model that knows its
    constraints (``is_constrained_model``: CHNN, CLNN) or one with no energy at all (NODE, the
    baseline: a free field); an unconstrained H (HNN, ...) would move the bodies off their links,
    so it belongs on the system's angle coordinates. A constrained model needs such a system, or
    a recording of tracked points (``tracked``: the file's chain, ``recording_model_config``)."""
    who = type(model).__name__
    if system in CARTESIAN_SYSTEMS:
        if is_constrained_model(model) or not has_hamiltonian(model):
            return None
        angles = CARTESIAN_SYSTEMS[system]
        elsewhere = (
            f", or train {who} on the same motion in angle coordinates (system={angles})"
            if angles
            else f" (no angle-coordinate version of system={system} is built)"
        )
        return (
            f"system={system} is in Cartesian coordinates with rigid constraints, which model "
            f"{who} does not know; use model=chnn or clnn (method=chnn / clnn) or the baseline "
            f"model=node there{elsewhere}"
        )
    if is_constrained_model(model) and not (system == MEASURED and tracked):
        return (
            f"model {who} learns in Cartesian coordinates with constraints, but system={system} "
            f"is not one of {sorted(CARTESIAN_SYSTEMS)} (nor a recording of tracked points "
            "ingested with ingest.chain); for angle coordinates use model=hnn"
        )
    return None


def momenta_problem(
    model: object, system: System, attrs: dict, states: Tensor | np.ndarray, source: str
) -> str | None:
    """What is wrong (one sentence) with a model that has momenta of its own
    (``ModelCapability.OWN_MOMENTA``: it observes (q, q̇)) on ``source``'s states (..., 2d), or
    None: the file must give q̇, and q̇ must be linear in p at (up to 256 of) the states
    (``hnnsym.data.velocities``). None for any other model."""
    if not has(model, ModelCapability.OWN_MOMENTA):
        return None
    states = torch.as_tensor(states)
    width = states.shape[-1]
    problem = velocity_problem(system, attrs, width, source)
    if problem is None:
        sample = states.reshape(-1, width)[:256].to(torch.float64)
        problem = check_quadratic(velocity_map(system, attrs), system, sample, source)
    return f"model {type(model).__name__}: {problem}" if problem else None
