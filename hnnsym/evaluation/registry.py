"""The evaluation parts by the ``Kind`` of problem they evaluate (``hnnsym.evaluation.problem``)."""

from __future__ import annotations

from hnnsym.errors import UserError
from hnnsym.evaluation.constrained import ConstrainedPart
from hnnsym.evaluation.hamiltonian import HamiltonianPart
from hnnsym.evaluation.measured import MeasuredPart
from hnnsym.evaluation.positions import PositionPart
from hnnsym.evaluation.problem import Kind, Part, Problem

_hamiltonian, _measured = HamiltonianPart(), MeasuredPart()
PARTS: dict[Kind, Part] = {
    Kind("cartesian", "qp", "known"): ConstrainedPart(),
    Kind("own", "qp", "known"): _hamiltonian,
    Kind("own", "q", "known"): PositionPart(),
    Kind("own", "qp", "measured"): _measured,  # a model of (q, p) or of positions: the
    Kind("own", "q", "measured"): _measured,  # predictor tells them apart
}


def part_for(p: Problem) -> Part:
    """The part for ``p``'s kind; UserError when there is none."""
    kind = p.kind
    if kind not in PARTS:
        raise UserError(
            f"no evaluation for a model observing {kind.observes} of {p.system.name} "
            f"({kind.coordinates} coordinates, {kind.truth} truth)"
        )
    return PARTS[kind]


def summary_part(m: dict) -> Part:
    """The part whose metrics ``m`` are (the first in registry order that says so; the (q, p)
    part for metrics that no part claims)."""
    parts = dict.fromkeys(PARTS.values())
    return next((part for part in parts if part.wrote(m)), _hamiltonian)
