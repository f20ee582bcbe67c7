"""The constrained systems by name: they register in ``hnnsym.physics.systems.SYSTEMS`` here, with
the Cartesian ones' angle-coordinate counterparts, and the rule for which models can learn them.

The geometry is in ``hnnsym.physics.constraints``, the systems in ``hnnsym.physics.pendulums``.
"""

from __future__ import annotations

from collections.abc import Mapping

from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.physics.constraints import (
    ConstrainedSystem,
    is_constrained_model,
    onto_manifold,
    project_onto_manifold,
)
from hnnsym.physics.pendulums import (
    chain_pendulum,
    chain_pendulum_angles,
    coupled_pendulum,
    from_angles,
)
from hnnsym.physics.systems import SYSTEMS, get_system

__all__ = [
    "CARTESIAN_SYSTEMS",
    "CONSTRAINED_SYSTEMS",
    "constrained_system_of",
    "coordinates_problem",
    # re-exported for hnnsym.evaluation.constrained, which imports them from here
    "from_angles",
    "onto_manifold",
    "project_onto_manifold",
]

SYSTEMS.update(
    chain_pendulum=chain_pendulum,
    chain_pendulum_angles=chain_pendulum_angles,
    coupled_pendulum=coupled_pendulum,
)

# Systems in Cartesian coordinates with holonomic constraints -> the same motion in angle
# coordinates, where one is built (None: not built).
CARTESIAN_SYSTEMS: dict[str, str | None] = {
    "chain_pendulum": "chain_pendulum_angles",
    "coupled_pendulum": None,
}
# Every constrained system, in Cartesian coordinates or (where built) in angles.
CONSTRAINED_SYSTEMS = frozenset({*CARTESIAN_SYSTEMS, *CARTESIAN_SYSTEMS.values()} - {None})


def constrained_system_of(
    name: str, dim: int, params: Mapping | None = None, parameter_seed: int | None = None
) -> ConstrainedSystem:
    """The registered Cartesian constrained system ``name`` (``CARTESIAN_SYSTEMS``) whose states
    have ``dim`` degrees of freedom, for a model that takes its constraints (tethers, links,
    lengths, spatial dimension) from it: built from ``params`` (a config's ``system.params``);
    without them (a model config or checkpoint of the planar chain from before ``system_params``
    was passed) the chain of dim/2 links drawn from ``parameter_seed`` (default 0).
    ValueError (one line) for another system or a dim the system does not have."""
    if name not in CARTESIAN_SYSTEMS:
        raise ValueError(f"system {name!r} is not one of {sorted(CARTESIAN_SYSTEMS)}")
    if params is None:
        if name != "chain_pendulum" or dim % 2:
            raise ValueError(
                f"without system_params only the planar chain_pendulum (dim a multiple of 2) is "
                f"known, got system {name!r} and dim {dim}"
            )
        params = {
            "links": dim // 2,
            "parameter_seed": 0 if parameter_seed is None else parameter_seed,
        }
    system = get_system(name, **dict(params))
    if system.dim != dim:
        raise ValueError(
            f"system {name} with {dict(params)} has states of dim {system.dim} in Cartesian "
            f"coordinates, not {dim}"
        )
    return system


def coordinates_problem(system: str, model: object) -> str | None:
    """What is wrong (one sentence) with learning ``system`` (a registered name) with ``model``,
    or None. A Cartesian constrained system (``CARTESIAN_SYSTEMS``) needs a model that knows its
    constraints (``is_constrained_model``: CHNN, CLNN) or one with no energy at all (NODE, the
    baseline: a free field); an unconstrained H (HNN, ...) would move the bodies off their links,
    so it belongs on the system's angle coordinates. A constrained model needs such a system."""
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
    if is_constrained_model(model):
        return (
            f"model {who} learns in Cartesian coordinates with constraints, but system={system} "
            f"is not one of {sorted(CARTESIAN_SYSTEMS)}; for angle coordinates use model=hnn"
        )
    return None
