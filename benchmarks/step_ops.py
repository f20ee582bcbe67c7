"""Top-level aten ops per implicit step of the headline training iteration, forward and backward.

    python benchmarks/step_ops.py                      # backprop and symplectic_adjoint, 32 steps
    python benchmarks/step_ops.py --methods backprop --steps 64
    python benchmarks/step_ops.py --compiled           # the stage solve compiled (integrator.compile)
    python benchmarks/step_ops.py --compiled --compile-steps 8   # eight steps per compiled program

The workload is the headline of ``python -m hnnsym.profile`` (as ``benchmarks/peer_jax.py`` builds
it): HNN 2 -> 16 -> 32 -> 16 -> 1 tanh, coupled oscillator, batch 512, h = 0.01, float32, implicit
midpoint, loss on every step. One warm-up iteration, then one iteration under ``torch.profiler``:
an aten op is top-level when no aten op encloses it (the ops a dispatcher call costs, not the
kernels inside them; with ``--compiled`` the calls of compiled graphs count as one op each,
``compiled_graph``, besides the aten ops they call). Forward is ``solve_loss``, backward ``autograd.grad`` of its loss; counts are
divided by the number of steps (the first step's extras and the loss are spread over them). Prints
a table and writes ``step_ops.csv`` (method, phase, ops, ops_per_step, the ten most frequent ops)
into ``--out`` (default outputs/bench; ``step_ops_compiled_x<m>.csv`` with ``--compiled``).
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from peer_jax import H, _setup  # noqa: E402  (the same workload as the peer benchmark)


def _top_level(events) -> collections.Counter:
    """Names of the aten ops no other aten op encloses."""
    counts: collections.Counter = collections.Counter()
    for ev in events:
        if ev.name.startswith("## Call CompiledFxGraph"):
            counts["compiled_graph"] += 1
        if not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            counts[ev.name] += 1
    return counts


def count(
    method: str, steps: int, compiled: bool = False, compile_steps: int = 1
) -> dict[str, collections.Counter]:
    """{"forward", "backward"}: top-level aten ops of one iteration."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from hnnsym.ode.gradients import get_gradient
    from hnnsym.ode.integrators import get_integrator
    from hnnsym.ode.running import StepLoss
    from hnnsym.ode.solve import solve_loss

    model, y0, target = _setup(steps)
    integrator = get_integrator(
        "implicit_midpoint", compile=compiled, compile_steps=compile_steps if compiled else 1
    )
    gradient = get_gradient(method)
    params = [p for p in model.parameters() if p.requires_grad]

    def iteration():
        with record_function("forward"):
            loss = StepLoss(target, scale=1.0 / target.numel())
            value = solve_loss(model, y0, H, steps, loss, integrator, gradient).value
        with record_function("backward"):
            torch.autograd.grad(value, params, allow_unused=True)

    iteration()  # warm-up: caches and allocator
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        iteration()
    events = prof.events()
    out = {}
    for phase in ("forward", "backward"):
        (span,) = [e for e in events if e.name == phase]
        inside = [
            e
            for e in events
            if e.time_range.start >= span.time_range.start
            and e.time_range.end <= span.time_range.end
        ]
        out[phase] = _top_level(inside)
    return out


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=["backprop", "symplectic_adjoint"])
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    parser.add_argument("--compiled", action="store_true", help="the stage solve compiled")
    parser.add_argument(
        "--compile-steps", type=int, default=1, help="with --compiled: steps per program"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for method in args.methods:
        for phase, counts in count(method, args.steps, args.compiled, args.compile_steps).items():
            total = sum(counts.values())
            top = " ".join(f"{n.removeprefix('aten::')}:{c}" for n, c in counts.most_common(10))
            rows.append(
                {
                    "method": method
                    + (f" compiled x{args.compile_steps}" if args.compiled else ""),
                    "phase": phase,
                    "ops": total,
                    "ops_per_step": round(total / args.steps, 1),
                    "most_frequent": top,
                }
            )
            print(f"{method:20s} {phase:9s} {total / args.steps:7.1f} ops/step   {top}")
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"step_ops_compiled_x{args.compile_steps}.csv" if args.compiled else "step_ops.csv"
    with open(args.out / name, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
