"""Which model can learn which constrained system (``coordinates_problem``): a rule that returns
its reason as one sentence. The systems and their registry are in ``hnnsym.physics.pendulums``,
the geometry in ``hnnsym.physics.constraints``.
"""

from __future__ import annotations

from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.physics.constraints import is_constrained_model, onto_manifold, project_onto_manifold
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS, CONSTRAINED_SYSTEMS, from_angles

# Imported from here by hnnsym.evaluation.constrained: to import from their modules instead.
__all__ = [
    "CARTESIAN_SYSTEMS",
    "CONSTRAINED_SYSTEMS",
    "coordinates_problem",
    "from_angles",
    "onto_manifold",
    "project_onto_manifold",
]


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
