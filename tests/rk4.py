"""The tests' own classical Runge–Kutta reference, independent of hnnsym's integrators, for the
recordings they simulate."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def rk4_trajectory(
    f: Callable[[np.ndarray], np.ndarray], y: np.ndarray, h: float, steps: int, substeps: int
) -> np.ndarray:
    """The states y_0 … y_steps of ẏ = f(y) from ``y`` (n, w), ``substeps`` RK4 steps of ``h``
    between two of them: (n, steps+1, w)."""
    out = [y]
    for _ in range(steps):
        for _ in range(substeps):
            k1 = f(y)
            k2 = f(y + h / 2 * k1)
            k3 = f(y + h / 2 * k2)
            k4 = f(y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y)
    return np.stack(out, 1)
