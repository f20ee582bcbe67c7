"""hnnsym: learning Hamiltonians through fully symplectic, implicit integrators."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hnnsym.version import __version__

if TYPE_CHECKING:
    from hnnsym.api import Run, load_run
    from hnnsym.ode.fixed_grid import odeint
    from hnnsym.ode.running import RunningLoss, StepLoss
    from hnnsym.ode.solve import LossSolution, Solution, integrate, solve, solve_loss

# each public name and the module that defines it
_PUBLIC = {
    "LossSolution": "hnnsym.ode.solve",
    "Run": "hnnsym.api",
    "RunningLoss": "hnnsym.ode.running",
    "Solution": "hnnsym.ode.solve",
    "StepLoss": "hnnsym.ode.running",
    "integrate": "hnnsym.ode.solve",
    "load_run": "hnnsym.api",
    "odeint": "hnnsym.ode.fixed_grid",
    "solve": "hnnsym.ode.solve",
    "solve_loss": "hnnsym.ode.solve",
}

__all__ = [
    "LossSolution",
    "Run",
    "RunningLoss",
    "Solution",
    "StepLoss",
    "__version__",
    "integrate",
    "load_run",
    "odeint",
    "solve",
    "solve_loss",
]


def __getattr__(name: str):
    """The public names, imported from their modules when first used: ``import hnnsym``, which
    every stage's start runs, does not import torch (a stage imports it only once Hydra has
    composed its config, so a bad override, ``--help`` and ``--cfg`` answer without it)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'hnnsym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
