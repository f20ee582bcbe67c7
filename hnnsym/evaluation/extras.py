"""What a model reports beyond its part's metrics, by what it declares: its learned damping beside
the true rate (``ModelCapability.DAMPING``), its learned body masses (``MASSES``). A new kind of
report adds an ``Extra`` here; a model that declares the capability gets it in every part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hnnsym.evaluation.damping import damping_metrics
from hnnsym.evaluation.problem import Problem, Rolled
from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability


@dataclass(frozen=True)
class Extra:
    """Metrics a model reports beyond its part's: applies when the model declares ``capability``
    (or ``also(p, r)`` holds), computed by ``compute(p, r)``."""

    capability: str
    compute: Callable[[Problem, Rolled], dict]
    also: Callable[[Problem, Rolled], bool] = lambda p, r: False


def _damping(p: Problem, r: Rolled) -> dict:
    found = damping_metrics(r.model, r.states, r.known_damping, p.e.chunk)
    if not p.system.known:  # a recording: no true rate to compare with
        found = {k: v for k, v in found.items() if k not in ("damping_true", "damping_rel_err")}
    return found


def _masses(p: Problem, r: Rolled) -> dict:
    return {"mass_learned": p.model.masses().detach().cpu().tolist()}


EXTRAS: tuple[Extra, ...] = (
    # the learned damping beside the true rate; for damped data also that of a model without any
    Extra(ModelCapability.DAMPING, _damping, also=lambda p, r: bool(r.known_damping)),
    Extra(ModelCapability.MASSES, _masses),  # the learned body masses
)


def extras(p: Problem, r: Rolled) -> dict:
    """The metrics of the ``EXTRAS`` that apply to ``p.model``."""
    out: dict = {}
    for extra in EXTRAS:
        if has(p.model, extra.capability) or extra.also(p, r):
            out |= extra.compute(p, r)
    return out
