"""The kernel: ``integrate(H, y0, h, steps, integrator, gradient)`` -> trajectory (steps+1, B, 2d)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from torch import Tensor

from hnnsym.gradients import GradientMethod, Rollout, get_gradient
from hnnsym.integrators import (
    Integrator,
    ReversibleLeapfrog,
    SolverStats,
    Tableau,
    TaoSplitting,
    get_integrator,
)


def integrate(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    h: float,
    steps: int,
    integrator: str
    | Integrator
    | Tableau
    | ReversibleLeapfrog
    | TaoSplitting = "implicit_midpoint",
    gradient: str | GradientMethod = "symplectic_adjoint",
    *,
    tol: float | None = None,
    max_iter: int = 50,
    predictor: str = "rk2",
    on_fail: str = "raise",
    guess: Tensor | None = None,
    stats: SolverStats | None = None,
) -> Tensor:
    """Integrate y' = J^-1 ∇H(y) from y0 (B, 2d), ordered [q, p], for ``steps`` steps of size h.

    Returns every state, (steps+1, B, 2d), differentiable with respect to y0 and H's parameters by
    ``gradient``; a loss may use any time point. ``tol``/``max_iter``/``predictor``/``on_fail`` set
    the stage solver when ``integrator`` is given by name. ``guess`` (steps+1, B, 2d) seeds the
    stage iteration with observed states (with ``predictor="observed"``). ``stats`` collects
    iteration counts and residuals. A step whose iteration does not converge raises
    ``ConvergenceError`` (or warns, with ``on_fail="warn"``).
    """
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
    steps = n_steps
    if guess is not None and guess.shape != (steps + 1, *y0.shape):
        raise ValueError(
            f"guess must have shape {(steps + 1, *y0.shape)}, got {tuple(guess.shape)}"
        )
    integ = get_integrator(integrator, tol, max_iter, predictor, on_fail)
    method = get_gradient(gradient)
    rollout = Rollout(H, integ, float(h), int(steps), guess, stats)
    if not isinstance(integ, Integrator):  # reversible_leapfrog, tao: not tableaux on the stage
        return integ.integrate(rollout, y0, method)  # solver; they check the gradient method
    method.check(rollout)
    return method.integrate(rollout, y0)
