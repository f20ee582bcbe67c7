"""Integrators: how one rollout is stepped. Tableaux (data) over one stage solver, plus four that
are not tableaux: Tao's explicit splitting, the bitwise-reversible fixed-point leapfrog, RATTLE
for holonomically constrained H (Newton-solved, with an exact per-step adjoint), and the
energy-conserving discrete-gradient integrator.

Every integrator follows the ``Integrator`` protocol: a name, an order, whether it is symplectic,
and two capabilities that gradient methods ask for (``has_stages``: Runge–Kutta stage equations
that the stepwise adjoints can recompute and differentiate; ``reversible``: a step that -h undoes
bit for bit); a one-step map ``step_of`` (checkpoint needs it) and an exact one-step adjoint
``step_vjp`` (symplectic_adjoint uses it when there are no stages) are optional, and so is
``steps(problem, y, start, end, previous)``: a run of steps that returns what its next step reuses
(the stage predictor's history; ``advance`` below continues runs with it). Integrators never
name gradient methods; a gradient method checks the capabilities it needs
(``hnnsym.ode.gradients``). Solver options (tol, max_iter, predictor, on_fail; omega; frac_bits,
rounding; manifold_tol, implicit_gradient; kind, nodes) belong to the integrator object: built
by name with ``get_integrator``, or from a config node's ``_target_`` (``runge_kutta``,
``discrete_gradient_integrator`` or one of the classes) by ``hnnsym.config.build.build_integrator``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from hnnsym.ode.integrators.discrete_gradient import DiscreteGradientIntegrator
from hnnsym.ode.integrators.rattle import Rattle
from hnnsym.ode.integrators.reversible import ReversibleLeapfrog, Separable, as_separable
from hnnsym.ode.integrators.stage_solver import DEFAULT_TOL, FixedPoint, RungeKutta
from hnnsym.ode.integrators.tableaux import TABLEAUX, Tableau
from hnnsym.ode.integrators.tao import TaoSplitting
from hnnsym.ode.problem import Problem

Previous = tuple[Tensor, ...]  # what a run's next step reuses (RungeKutta.steps, Rattle.steps)


@runtime_checkable
class Integrator(Protocol):
    """What ``integrate`` needs of an integrator."""

    name: str
    order: int
    symplectic: bool
    has_stages: bool
    reversible: bool

    def check(self, problem: Problem, y0: Tensor) -> None:
        """Raise IncompatibleError when this integrator cannot step this problem."""

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d) from y0 (B, 2d); differentiable when grad mode is on."""

    def strict(self) -> Integrator:
        """The same integrator, raising ConvergenceError on non-convergence whatever on_fail."""


def discrete_gradient_integrator(
    kind: str = "gonzalez",
    nodes: int = 4,
    tol: float | None = None,
    max_iter: int = 50,
    on_fail: str = "raise",
) -> DiscreteGradientIntegrator:
    """The discrete-gradient integrator with its fixed-point solver's options."""
    return DiscreteGradientIntegrator(FixedPoint(tol, max_iter, on_fail), kind, nodes)


def runge_kutta(
    tableau: str | Tableau,
    tol: float | None = None,
    max_iter: int = 50,
    predictor: str = "extrapolate",
    on_fail: str = "raise",
    compile: bool = False,
    compile_sweeps: int = 1,
    compile_steps: int = 1,
) -> RungeKutta:
    """The Runge–Kutta integrator of a tableau (a name in TABLEAUX, or a Tableau) with its stage
    solver's options (``compile``: the stage solve as a compiled program, see ``RungeKutta``)."""
    if isinstance(tableau, str):
        if tableau not in TABLEAUX:
            raise ValueError(f"unknown tableau {tableau!r}; choose one of {sorted(TABLEAUX)}")
        tableau = TABLEAUX[tableau]
    return RungeKutta(
        tableau,
        FixedPoint(tol, max_iter, on_fail),
        predictor,
        compile,
        compile_sweeps,
        compile_steps,
    )


def _tableau(name: str) -> Callable[..., RungeKutta]:
    return lambda **options: runge_kutta(name, **options)


# the options of a Runge–Kutta tableau's stage solver (RungeKutta's fields besides the tableau)
STAGE_OPTIONS = (
    "tol",
    "max_iter",
    "predictor",
    "on_fail",
    "compile",
    "compile_sweeps",
    "compile_steps",
)
# name -> (factory, the options it takes)
INTEGRATORS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    **{name: (_tableau(name), STAGE_OPTIONS) for name in TABLEAUX},
    TaoSplitting.name: (TaoSplitting, ("omega",)),
    ReversibleLeapfrog.name: (ReversibleLeapfrog, ("frac_bits", "rounding")),
    DiscreteGradientIntegrator.name: (
        discrete_gradient_integrator,
        ("kind", "nodes", "tol", "max_iter", "on_fail"),
    ),
    Rattle.name: (
        Rattle,
        (
            "tol",
            "max_iter",
            "on_fail",
            "manifold_tol",
            "implicit_gradient",
            "formulation",
            "composition",
        ),
    ),
}


def get_integrator(integrator: str | Tableau | Integrator, **options) -> Integrator:
    """An integrator from a name in INTEGRATORS (with its options), a Tableau (a RungeKutta with
    these stage-solver options), or an integrator object (returned as is; no options)."""
    if isinstance(integrator, Tableau):
        return runge_kutta(integrator, **options)
    if not isinstance(integrator, str):
        if options:
            raise ValueError(f"options {sorted(options)} given with a built integrator")
        if not isinstance(integrator, Integrator):
            raise ValueError(f"not an integrator: {integrator!r}")
        return integrator
    if integrator not in INTEGRATORS:
        raise ValueError(f"unknown integrator {integrator!r}; choose one of {sorted(INTEGRATORS)}")
    factory, known = INTEGRATORS[integrator]
    unknown = sorted(set(options) - set(known))
    if unknown:
        owners = [n for n, (_, k) in INTEGRATORS.items() if set(unknown) <= set(k)]
        owners = sorted({"the Runge–Kutta tableaux" if n in TABLEAUX else n for n in owners})
        raise ValueError(
            f"options {unknown} do not apply to {integrator}; they apply to "
            f"{' or '.join(owners) or 'no integrator'} only"
        )
    return factory(**options)


def advance(
    problem: Problem, y: Tensor, start: int, end: int, previous: Previous = ()
) -> tuple[list[Tensor], Previous]:
    """[y_{start+1}, …, y_end] from y = y_start, and the predictor history after y_end: the
    integrator's own ``steps`` when it has them (a stage predictor that draws on the earlier
    steps of the run, ``previous`` being those before ``start``), else ``step_of`` per step."""
    steps = getattr(problem.integrator, "steps", None)
    if callable(steps):
        return steps(problem, y, start, end, previous)
    return problem.step_by_step(y, start, end), ()


__all__ = [
    "DEFAULT_TOL",
    "DiscreteGradientIntegrator",
    "INTEGRATORS",
    "Previous",
    "STAGE_OPTIONS",
    "TABLEAUX",
    "FixedPoint",
    "Integrator",
    "Rattle",
    "ReversibleLeapfrog",
    "RungeKutta",
    "Separable",
    "Tableau",
    "TaoSplitting",
    "advance",
    "as_separable",
    "get_integrator",
    "discrete_gradient_integrator",
    "runge_kutta",
]
