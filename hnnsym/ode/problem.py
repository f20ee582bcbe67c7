"""What one call of ``integrate`` solves (``Problem``) and what its solvers count (``SolverStats``).

Both sit below integrators and gradient methods: an integrator steps a Problem, a gradient method
differentiates one, and the statistics of every fixed-point iteration (forward stages, adjoint
stages in backward) go into the Problem's ``stats``, which ``solve`` hands back in its Solution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import hamiltonian_flow, vector_field


@dataclass
class SolverStats:
    """Counts accumulated over calls of the stage solver (forward and adjoint iterations)."""

    steps: int = 0
    iterations: int = 0
    max_iterations: int = 0
    unconverged: int = 0
    max_residual: float = 0.0
    first_failure: str = ""

    def record(self, iterations: int, residual: float, converged: bool, where: str) -> None:
        self.steps += 1
        self.iterations += iterations
        self.max_iterations = max(self.max_iterations, iterations)
        self.max_residual = max(self.max_residual, residual)
        if not converged:
            self.unconverged += 1
            self.first_failure = self.first_failure or where

    def merge(self, other: SolverStats | None) -> None:
        """Add another call's counts to these."""
        if other is None:
            return
        self.steps += other.steps
        self.iterations += other.iterations
        self.max_iterations = max(self.max_iterations, other.max_iterations)
        self.max_residual = max(self.max_residual, other.max_residual)
        self.unconverged += other.unconverged
        self.first_failure = self.first_failure or other.first_failure

    @property
    def mean_iterations(self) -> float:
        return self.iterations / max(self.steps, 1)


@dataclass
class Problem:
    """One call of ``integrate``: H, the integrator, step h, number of steps, and the observed
    states ``guess`` (steps+1, B, 2d) that seed each step's stage iteration (the "observed"
    predictor of Choudhary et al.), if any."""

    H: Callable[[Tensor], Tensor]
    integrator: Any  # an hnnsym.ode.integrators.Integrator
    h: float
    steps: int
    guess: Tensor | None = None
    stats: SolverStats = field(default_factory=SolverStats)

    @property
    def separable(self) -> bool:
        """Whether f splits as q' = f_q(p), p' = f_p(q) (the explicit evaluation order): a separable
        H whose flow is J⁻¹∇H; a damped separable H is not (p' depends on p)."""
        return has(self.H, Capability.SEPARABLE) and hamiltonian_flow(self.H)

    def params(self) -> list[Tensor]:
        """H's trainable parameters (empty for an analytic H)."""
        if isinstance(self.H, nn.Module):
            return [p for p in self.H.parameters() if p.requires_grad]
        return []

    def f(self, y: Tensor, create_graph: bool | None = None) -> Tensor:
        return vector_field(self.H, y, create_graph)

    def trajectory(self, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d), with a graph if grad mode is on."""
        return self.integrator.trajectory(self, y0)

    def step_by_step(self, y: Tensor, start: int, end: int) -> list[Tensor]:
        """[y_{start+1}, …, y_end] from y = y_start, each step by the integrator's ``step_of``
        from its state alone (no history carried between steps)."""
        out: list[Tensor] = []
        for n in range(start, end):
            out.append(self.integrator.step_of(self, out[-1] if out else y, n))
        return out
