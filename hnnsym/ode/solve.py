"""The kernel: ``solve(H, y0, h, steps, integrator, gradient)`` -> Solution (ys, stats),
``integrate(...)`` -> ys alone, the trajectory (steps+1, B, 2d), and ``solve_loss(H, y0, h, steps,
loss, ...)`` -> LossSolution (value, last, stats): a running loss Σ_n ℓ_n(y_n) without the
trajectory.

One direction of dispatch: solve builds the Problem, asks the gradient method to ``check`` it (the
method checks the integrator capabilities it needs, and the integrator checks H), then calls
``method.integrate(problem, y0)``; the method steps through ``problem.integrator``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from hnnsym.ode.capabilities import check_declared
from hnnsym.ode.gradients import GradientMethod, get_gradient
from hnnsym.ode.integrators import Integrator, Tableau, get_integrator
from hnnsym.ode.problem import Problem, SolverStats
from hnnsym.ode.running import RunningLoss


@dataclass
class Solution:
    """What ``solve`` returns. ys: every state (steps+1, B, 2d), differentiable by the gradient
    method. stats: the fixed-point iteration counts of the forward pass; a backward pass through
    ys adds its own (stage recomputation and adjoint iterations) to the same object."""

    ys: Tensor
    stats: SolverStats


def solve(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    h: float,
    steps: int,
    integrator: str | Integrator | Tableau = "implicit_midpoint",
    gradient: str | GradientMethod = "symplectic_adjoint",
    *,
    guess: Tensor | None = None,
) -> Solution:
    """Integrate y' = J^-1 ∇H(y) from y0 (B, 2d), ordered [q, p], for ``steps`` steps of size h.

    ``integrator``: a name (default options) or an integrator object carrying its solver options,
    e.g. ``get_integrator("gauss_legendre4", tol=1e-10)``. ``guess`` (steps+1, B, 2d) seeds the
    stage iteration with observed states (an integrator built with ``predictor="observed"``). A
    step whose iteration does not converge raises ``ConvergenceError`` (or warns, with
    ``on_fail="warn"``).
    """
    problem, method = _setup(H, y0, h, steps, integrator, gradient, guess)
    return Solution(method.integrate(problem, y0), problem.stats)


def _setup(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    h: float,
    steps: int,
    integrator: str | Integrator | Tableau,
    gradient: str | GradientMethod,
    guess: Tensor | None,
) -> tuple[Problem, GradientMethod]:
    """Check the arguments of ``solve``/``solve_loss`` (H's declared capabilities too: the
    kernel receives H from outside here, from ``odeint`` as well); the Problem and the gradient
    method."""
    check_declared(H)
    if y0.dim() != 2 or y0.shape[-1] % 2:
        raise ValueError(f"y0 must have shape (B, 2d), got {tuple(y0.shape)}")
    if not (isinstance(h, (int, float)) and math.isfinite(h) and h > 0):
        raise ValueError(f"step size h must be a finite number > 0, got {h!r}")
    try:
        n_steps = operator.index(steps)
    except TypeError:
        n_steps = -1
    if n_steps < 0:
        raise ValueError(f"steps must be a whole number >= 0, got {steps!r}")
    if guess is not None and guess.shape != (n_steps + 1, *y0.shape):
        raise ValueError(
            f"guess must have shape {(n_steps + 1, *y0.shape)}, got {tuple(guess.shape)}"
        )
    problem = Problem(H, get_integrator(integrator), float(h), n_steps, guess)
    method = get_gradient(gradient)
    problem.integrator.check(problem, y0)
    method.check(problem)
    return problem, method


def integrate(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    h: float,
    steps: int,
    integrator: str | Integrator | Tableau = "implicit_midpoint",
    gradient: str | GradientMethod = "symplectic_adjoint",
    *,
    guess: Tensor | None = None,
) -> Tensor:
    """``solve(...).ys``: every state (steps+1, B, 2d), differentiable with respect to y0 and H's
    parameters by ``gradient``; a loss may use any time point."""
    return solve(H, y0, h, steps, integrator, gradient, guess=guess).ys


@dataclass
class LossSolution:
    """What ``solve_loss`` returns: the loss L (a scalar) and the final state y_N (B, 2d), both
    differentiable by the gradient method, and the solver statistics (as ``Solution.stats``)."""

    value: Tensor
    last: Tensor
    stats: SolverStats


def solve_loss(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    h: float,
    steps: int,
    loss: RunningLoss,
    integrator: str | Integrator | Tableau = "implicit_midpoint",
    gradient: str | GradientMethod = "symplectic_adjoint",
    *,
    guess: Tensor | None = None,
) -> LossSolution:
    """``solve`` with a running loss L = Σ_n ℓ_n(y_n) (``hnnsym.ode.running``, e.g. ``StepLoss``)
    instead of the trajectory: the same L and gradient as ``loss.value(solve(...).ys)``.

    checkpoint and symplectic_adjoint fold the loss into their sweeps (forward: ℓ_n added as the
    steps go; backward: ∂ℓ_n/∂y_n added to the adjoint at step n, y_n recomputed from the
    ``keep_every`` checkpoints), so memory is that of the checkpoints alone, O(√N) states with
    ``keep_every="sqrt"``; the other methods build the trajectory and evaluate the loss on it.
    """
    problem, method = _setup(H, y0, h, steps, integrator, gradient, guess)
    loss.check(problem.steps, y0)
    value, last = method.integrate_loss(problem, y0, loss)
    return LossSolution(value, last, problem.stats)
