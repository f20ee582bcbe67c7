"""What the ODE layer asks of the objects it is handed, declared as ``typing.Protocol``s.

These state, in one place, the structural types that ``hnnsym.odeint`` (and the kernel,
``hnnsym.ode.solve``) work with. They are declarations for type hints and ``isinstance`` checks
(``runtime_checkable``: attribute *presence* only, not signatures). What an energy or field
offers beyond them (closed-form ∇H, constraints, a mass matrix, ...) it declares in its
``capabilities`` (``hnnsym.ode.capabilities``); the kernel asks ``has(H, ...)`` and probes no
attribute. ``PROBED`` lists the few attribute reads with a default that remain, and why.

- ``TimeVectorField``: ``func(t, y) -> dy/dt``, the torchdiffeq signature that ``odeint`` takes.
- ``VectorField``: a field with no Hamiltonian: ``vector_field(y)``, declaring ``OWN_FIELD`` and
  not ``HAMILTONIAN`` (``hnnsym.physics.models.NODE``, odeint's wrapper).
- ``Hamiltonian``: an energy ``H(y) -> (B,)``, y = [q, p]; the kernel's field is J⁻¹∇H.
- ``Integrator``: re-exported from ``hnnsym.ode.integrators`` (where it was declared first).
- ``StagedIntegrator``: an integrator with Runge–Kutta stages (``has_stages``), what the stepwise
  gradient methods (checkpoint, symplectic_adjoint, adjoint) differentiate.
- ``GradientMethod``: a way to differentiate one rollout (``hnnsym.ode.gradients``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from torch import Tensor

from hnnsym.ode.integrators import Integrator

if TYPE_CHECKING:
    from hnnsym.ode.integrators.tableaux import Tableau
    from hnnsym.ode.problem import Problem, SolverStats
    from hnnsym.ode.running import RunningLoss


@runtime_checkable
class TimeVectorField(Protocol):
    """dy/dt = func(t, y): t a 0-dim tensor, y and the result of y0's shape (torchdiffeq's)."""

    def __call__(self, t: Tensor, y: Tensor, /) -> Tensor: ...


@runtime_checkable
class VectorField(Protocol):
    """An autonomous field without an energy, as the kernel steps it: y (M, n) -> f(y) (M, n)."""

    capabilities: frozenset[str]  # {Capability.OWN_FIELD}

    def vector_field(self, y: Tensor) -> Tensor: ...


@runtime_checkable
class Hamiltonian(Protocol):
    """An energy H(y) (B, 2d) -> (B,), y = [q, p]; the kernel integrates y' = J⁻¹∇H(y)."""

    def __call__(self, y: Tensor, /) -> Tensor: ...


@runtime_checkable
class StagedIntegrator(Integrator, Protocol):
    """A Runge–Kutta integrator (``hnnsym.ode.integrators.RungeKutta``): a tableau over the one
    stage solver, with the pieces the stepwise adjoints recompute and differentiate."""

    tableau: Tableau

    def solve_stages(
        self,
        f,
        y: Tensor,
        h: float,
        n_q: int,
        separable: bool = False,
        guess: Tensor | None = None,
        stats: SolverStats | None = None,
        where: str = "",
        previous: Sequence[Tensor] = (),
    ) -> Tensor: ...

    def stage_states(self, y: Tensor, K: Tensor, h: float, n_q: int) -> Tensor: ...

    def update(self, y: Tensor, K: Tensor, h: float, n_q: int) -> Tensor: ...


@runtime_checkable
class GradientMethod(Protocol):
    """How one rollout is differentiated: ``needs`` lists the integrator capabilities it checks
    (e.g. ``"has_stages"``); ``integrate`` returns the trajectory (steps+1, B, n) with gradients."""

    name: str
    needs: tuple[str, ...]

    def check(self, problem: Problem) -> None: ...

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor: ...

    def integrate_loss(
        self, problem: Problem, y0: Tensor, loss: RunningLoss
    ) -> tuple[Tensor, Tensor]: ...


# The attribute reads with a default that remain in the kernel (module: what is read), and why
# each is not a declared capability.
PROBED: dict[str, str] = {
    "hnnsym.ode.gradients.base.GradientMethod.check": "integrator.<needs>: its declared "
    "has_stages / reversible flags and step_of (part of the Integrator protocol, True/False on "
    "every integrator class)",
    "hnnsym.ode.gradients.symplectic_adjoint._own_step_vjp": "integrator.has_stages and "
    "step_vjp: RATTLE's exact step adjoint, optional in the Integrator protocol",
    "hnnsym.ode.integrators.advance": "integrator.steps: an optional multi-step predictor",
    "error messages (tao, discrete_gradient, rattle, reversible)": "H.name, for the message only",
}
# Read without getattr, i.e. assumed of a StagedIntegrator: ``integrator.tableau``, ``.solver``
# (symplectic_adjoint), ``.partitioned`` (adjoint), ``.step`` (adjoint's backward sweep).

__all__ = [
    "PROBED",
    "GradientMethod",
    "Hamiltonian",
    "Integrator",
    "StagedIntegrator",
    "TimeVectorField",
    "VectorField",
]
