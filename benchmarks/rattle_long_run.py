"""RATTLE over 10⁵ steps of the planar pendulum in Cartesian coordinates.

q ∈ R², H = |p|²/2m + m g q_y, g(q) = |q|² − l² (m = 1.3, l = 0.9, g = 9.81), two initial states
(θ, ω) = (1.0, 0.5) and (−2.0, 1.0), step h = 0.1 (≈ 19 steps per small-amplitude period). Reports
max |g(q_n)| and max |G(q_n) ∇_p H| over all steps (they should stay at the Newton tolerance), the
energy error's maximum over the first and the last tenth of the run (bounded: no drift), Newton
iteration counts and the wall time. Writes a small JSON atomically.

    .venv/bin/python benchmarks/rattle_long_run.py                 # 10^5 steps
    .venv/bin/python benchmarks/rattle_long_run.py --steps 10000
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from hnnsym import solve
from hnnsym.artifacts import now_utc, versions, write_text
from hnnsym.ode.integrators import get_integrator

F64 = torch.float64
M, L, GRAVITY = 1.3, 0.9, 9.81


class PlanarPendulum(torch.nn.Module):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        q, p = z[..., :2], z[..., 2:]
        return (p**2).sum(-1) / (2 * M) + M * GRAVITY * q[..., 1]

    def position_constraints(self, q: torch.Tensor) -> torch.Tensor:
        return (q**2).sum(-1, keepdim=True) - L**2


def residuals(H, ys: torch.Tensor) -> tuple[float, float]:
    """max |g(q)| and max |G(q) ∇_p H| over states ys (..., 4)."""
    q, p = ys[..., :2], ys[..., 2:]
    g = H.position_constraints(q)
    velocity = 2 * (q * p / M).sum(-1)  # G = 2qᵀ, ∇_p H = p/m
    return float(g.abs().max()), float(velocity.abs().max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--h", type=float, default=0.1)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--out", default="outputs/benchmarks/rattle_long_run.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    H = PlanarPendulum()
    theta, omega = torch.tensor([1.0, -2.0], dtype=F64), torch.tensor([0.5, 1.0], dtype=F64)
    c, s = torch.cos(theta), torch.sin(theta)
    y = torch.stack([L * s, -L * c, M * L * omega * c, M * L * omega * s], -1)
    integ = get_integrator("rattle")
    with torch.no_grad():
        E0 = H(y)
    tenth = max(1, args.steps // 10)
    g_max = v_max = 0.0
    e_first = e_last = torch.zeros_like(E0)
    iterations = steps_solved = max_iterations = 0
    done, start = 0, time.perf_counter()
    with tqdm(total=args.steps, desc="rattle", mininterval=5) as bar:
        while done < args.steps:
            n = min(args.chunk, args.steps - done)
            with torch.no_grad():
                sol = solve(H, y, args.h, n, integ, "backprop")
                ys = sol.ys[1:]
                err = (H(ys) - E0).abs()  # (n, B)
            g, v = residuals(H, ys)
            g_max, v_max = max(g_max, g), max(v_max, v)
            idx = torch.arange(done + 1, done + n + 1)
            if bool((idx <= tenth).any()):
                e_first = torch.maximum(e_first, err[idx <= tenth].max(0).values)
            if bool((idx > args.steps - tenth).any()):
                e_last = torch.maximum(e_last, err[idx > args.steps - tenth].max(0).values)
            iterations += sol.stats.iterations
            steps_solved += sol.stats.steps
            max_iterations = max(max_iterations, sol.stats.max_iterations)
            y, done = ys[-1], done + n
            bar.update(n)
    seconds = time.perf_counter() - start
    result = {
        "created": now_utc(),
        "versions": versions(),
        "system": f"planar pendulum, m={M}, l={L}, g={GRAVITY}",
        "initial_angles": theta.tolist(),
        "initial_angular_velocities": omega.tolist(),
        "h": args.h,
        "steps": args.steps,
        "t_end": args.steps * args.h,
        "max_abs_g": g_max,
        "max_abs_G_dHdp": v_max,
        "energy_E0": E0.tolist(),
        "energy_error_first_tenth": e_first.tolist(),
        "energy_error_last_tenth": e_last.tolist(),
        "newton_mean_iterations": iterations / max(steps_solved, 1),
        "newton_max_iterations": max_iterations,
        "seconds": seconds,
        "ms_per_step": 1e3 * seconds / args.steps,
    }
    assert math.isfinite(g_max)
    text = json.dumps(result, indent=2)
    write_text(Path(args.out), text + "\n")
    print(text)


if __name__ == "__main__":
    main()
