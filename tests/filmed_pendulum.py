"""A filmed compound double pendulum for the tests: two uniform rods simulated by scipy in
angle coordinates, tracked as pixel positions of pivot and bobs with jitter."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.integrate import solve_ivp

DT = 0.0025  # 400 frames/s
ORIGIN = np.array([1000.0, 900.0])  # px
LENGTHS = (300.0, 200.0)  # px
POINTS = {"pivot": ["x0", "y0"], "bob1": ["x1", "y1"], "bob2": ["x2", "y2"]}


def rods(t_end: float = 8.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times, angles and rates (n, 2) of a compound double pendulum of two uniform rods
    (masses 1, 0.5; lengths 0.3, 0.2 m) in the image plane, gravity along +y (image down)."""
    m1, m2, l1, l2, g = 1.0, 0.5, 0.3, 0.2, 9.81

    def f(_t, y):
        a, b, wa, wb = y
        c, s = np.cos(a - b), np.sin(a - b)
        M = np.array([[(m1 / 3 + m2) * l1**2, m2 * l1 * l2 / 2 * c],
                      [m2 * l1 * l2 / 2 * c, m2 * l2**2 / 3]])  # fmt: skip
        # V = −g (m1 l1/2 + m2 l1) sin a − g m2 l2/2 sin b  (angles from +x, y down)
        rhs = np.array([-m2 * l1 * l2 / 2 * s * wb**2 + g * (m1 / 2 + m2) * l1 * np.cos(a),
                        m2 * l1 * l2 / 2 * s * wa**2 + g * m2 * l2 / 2 * np.cos(b)])  # fmt: skip
        return [wa, wb, *np.linalg.solve(M, rhs)]

    t = DT * np.arange(int(round(t_end / DT)) + 1)
    sol = solve_ivp(f, (0, t[-1]), [0.3, -0.4, 0.0, 0.0], t_eval=t, rtol=1e-10, atol=1e-10)
    return t, sol.y[:2].T, sol.y[2:].T


def tracked(theta: np.ndarray, jitter: float, seed: int = 0) -> pd.DataFrame:
    """Pixel tracks of pivot, bob1, bob2 with Gaussian jitter (px) on every coordinate."""
    rng = np.random.default_rng(seed)
    b1 = ORIGIN + LENGTHS[0] * np.stack([np.cos(theta[:, 0]), np.sin(theta[:, 0])], 1)
    b2 = b1 + LENGTHS[1] * np.stack([np.cos(theta[:, 1]), np.sin(theta[:, 1])], 1)
    xy = np.concatenate([np.broadcast_to(ORIGIN, b1.shape), b1, b2], 1)
    xy = xy + jitter * rng.standard_normal(xy.shape)
    return pd.DataFrame(xy, columns=["x0", "y0", "x1", "y1", "x2", "y2"])
