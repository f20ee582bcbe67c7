"""The discrete-gradient integrator for a Hamiltonian H(q, p) (DGNet's form; Aoshima et al., Eq. 6):

    y_{n+1} = y_n + h J⁻¹ ∇̄H(y_{n+1}, y_n),

with ∇̄H a discrete gradient of H (``hnnsym.ode.discrete_gradient_formulas``: Gonzalez's midpoint form, or
the average vector field by Gauss–Legendre quadrature). Because H(u) − H(v) = ∇̄H(u, v)·(u − v)
and J⁻¹ is skew, H(y_{n+1}) − H(y_n) = h ∇̄Hᵀ J⁻¹ ∇̄H = 0: the energy is conserved exactly, to the
solver tolerance and rounding, for any H (a network included). Symmetric and of order 2; not
symplectic in general (implicit midpoint is symplectic and conserves H only to O(h²)).

Solved by fixed-point iteration on y_{n+1} (the project's ``FixedPoint``: tol, max_iter, on_fail),
started from the explicit midpoint predictor y + h f(y + h f(y)/2). No Runge–Kutta stages: rollouts
(``evaluate``), and training with ``gradient=backprop`` or ``checkpoint`` (autograd through the
iterations); the adjoint methods refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from hnnsym.errors import IncompatibleError
from hnnsym.ode.discrete_gradient_formulas import DISCRETE_GRADIENTS, discrete_gradient
from hnnsym.ode.dynamics import hamiltonian_flow, symplectic_gradient
from hnnsym.ode.integrators.stage_solver import FixedPoint
from hnnsym.ode.problem import Problem


@dataclass
class DiscreteGradientIntegrator:
    """y⁺ = y + h J⁻¹ ∇̄H(y⁺, y) with ∇̄ of ``kind`` (gonzalez | avf, ``nodes`` for avf)."""

    solver: FixedPoint
    kind: str = "gonzalez"
    nodes: int = 4

    name = "discrete_gradient"
    order = 2
    symplectic = False  # energy-preserving instead
    has_stages = False  # backprop or checkpoint (step_of), no adjoint
    reversible = False

    def __post_init__(self):
        if self.kind not in DISCRETE_GRADIENTS:
            raise ValueError(f"kind must be one of {DISCRETE_GRADIENTS}, got {self.kind!r}")
        if isinstance(self.nodes, bool) or int(self.nodes) != self.nodes or self.nodes < 1:
            raise ValueError(f"nodes must be a whole number >= 1, got {self.nodes!r}")
        self.nodes = int(self.nodes)

    def strict(self) -> DiscreteGradientIntegrator:
        return replace(self, solver=replace(self.solver, on_fail="raise"))

    def check(self, problem: Problem, y0: Tensor) -> None:
        if not hamiltonian_flow(problem.H):
            name = getattr(problem.H, "name", type(problem.H).__name__)
            raise IncompatibleError(
                f"integrator=discrete_gradient conserves the energy of f = J⁻¹∇H, but {name} has "
                f"a vector field of its own (no energy, or dissipative); use implicit_midpoint, "
                f"gauss_legendre4 or rk4"
            )

    def step_of(self, problem: Problem, y: Tensor, n: int) -> Tensor:
        """y_{n+1} from y_n (differentiable when grad mode is on)."""
        H, h = problem.H, problem.h
        guess = y + h * problem.f(y + 0.5 * h * problem.f(y))

        def update(x: Tensor) -> Tensor:
            grad = discrete_gradient(H, x, y, self.kind, self.nodes)
            return y + h * symplectic_gradient(grad)

        return self.solver.iterate(update, guess, 1.0, problem.stats, f"at step {n}")

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d), with a graph if grad mode is on."""
        return torch.stack([y0, *problem.step_by_step(y0, 0, problem.steps)])
