"""hnnsym against its peer, the same training iteration in about forty lines of jitted JAX.

    python benchmarks/peer_jax.py                      # = make bench-peer (part of make bench)
    python benchmarks/peer_jax.py --before 1b69471 --rounds 5 --steps 6 32 256

The workload is the headline of ``python -m hnnsym.profile``: HNN 2 -> 16 -> 32 -> 16 -> 1 tanh on
the coupled oscillator, batch 512, h = 0.01, float32, implicit midpoint (predictor: the previous
steps' stages extrapolated, RK2 on the first step; fixed point to h·max|ΔK| <= 1e-6, at most 50
sweeps), loss = the mean squared error over every state of the rollout, gradient with respect to
the network's parameters. The JAX side runs the same predictor and iteration inside
``lax.scan`` with ``jax.checkpoint`` per step and a reverse-differentiable while loop
(``equinox.internal.while_loop``, checkpointed), under ``jit``; the network starts from the same
weights, so trajectories and gradients are compared too (float32). hnnsym runs eagerly and with
its stage solve compiled (``integrator.compile=true``: ``hnnsym.ode.compiled``), one step per
program ("compiled") and eight ("compiled x8", ``integrator.compile_steps=8``); ``--no-compiled``
leaves those out.

Timing: one core (``taskset`` to the first allowed core unless ``--no-pin``), one thread (torch
and XLA), CPU time (``time.process_time``) per iteration, the median of ``--repeats`` iterations;
hnnsym runs in a worker process per tree (this one, and the tree of ``--before`` in a git
worktree when given) and JAX in this process, all interleaved round by round so that the
machine's load hits every side alike. JAX's compile time (its first call less a timed call) is
reported apart, and so is hnnsym's (wall time of the first two calls less two timed calls, since
with ``compile_steps`` > 1 the first runs eagerly and the second compiles): cold, in the
worker that fills a fresh compile cache, and warm, in a second process reading that cache.
Each implementation's rate is also set against one core's float32 matmul peak (``matmul_peak``),
by one FLOP count per step count (``iteration_flops``). Writes ``peer.csv`` (one row per round,
side, method and step count),
``peer.md`` (median ratios) and ``peer.png`` into ``--out`` (default outputs/bench/peer).
Needs the ``peer`` extra: ``pip install -e '.[peer]'`` (jax[cpu], equinox, diffrax).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("backprop", "symplectic_adjoint")
# suffixes of the method labels of hnnsym's compiled runs -> integrator.compile_steps
COMPILED = {" compiled": 1, " compiled x8": 8}
BATCH, H, TOL, MAX_ITER, SEED = 512, 0.01, 1e-6, 50, 0


def _setup(steps: int):
    """The model (seeded), y0 (B, 2) and targets (steps+1, B, 2), float32, as hnnsym builds them."""
    import torch

    from hnnsym.physics.models import HNN
    from hnnsym.physics.systems import coupled_oscillator

    torch.manual_seed(SEED)
    model = HNN(1)
    gen = torch.Generator().manual_seed(SEED)
    y0 = coupled_oscillator().sample(BATCH, gen, dtype=torch.float32)
    target = torch.randn((steps + 1, *y0.shape), generator=gen)
    return model, y0, target


def _hnnsym_iteration(method: str, steps: int):
    """A closure running one iteration (loss + gradient) with hnnsym, returning the gradients;
    ``method`` ending in a suffix of COMPILED: the same with the stage solve compiled (and that
    many steps per compiled program)."""
    import torch

    from hnnsym.ode.gradients import get_gradient
    from hnnsym.ode.integrators import get_integrator
    from hnnsym.ode.running import StepLoss
    from hnnsym.ode.solve import solve_loss

    model, y0, target = _setup(steps)
    base, _, tail = method.partition(" ")
    if tail:
        integrator = get_integrator(
            "implicit_midpoint", compile=True, compile_steps=COMPILED[" " + tail]
        )  # fmt: skip
    else:
        integrator = get_integrator("implicit_midpoint")
    gradient = get_gradient(base)
    params = [p for p in model.parameters() if p.requires_grad]

    def run():
        loss = StepLoss(target, scale=1.0 / target.numel())
        value = solve_loss(model, y0, H, steps, loss, integrator, gradient).value
        grads = torch.autograd.grad(value, params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]

    return run


def worker() -> None:
    """Serve timing requests on stdin, one JSON line each: {"method", "steps", "repeats"} ->
    {"median": CPU seconds per iteration, "first": the first two calls' wall seconds (with
    ``compile_steps`` > 1 the first call runs eagerly and plans the chunks, the second compiles
    them)}. Imports hnnsym from PYTHONPATH (this tree or the one of ``--before``), and sets
    glibc's allocator as hnnsym's stages do (``keep_freed_memory``) where that tree has it."""
    import torch

    torch.set_num_threads(1)
    try:  # as hnnsym's stages run (a --before tree may predate it)
        from hnnsym.config.runtime import keep_freed_memory
    except ImportError:
        pass
    else:
        keep_freed_memory()
    runs = {}
    for line in sys.stdin:
        req = json.loads(line)
        key = (req["method"], req["steps"])
        first = None
        if key not in runs:
            runs[key] = _hnnsym_iteration(*key)
            t = time.perf_counter()  # wall: inductor may compile in worker processes
            runs[key]()
            runs[key]()
            first = time.perf_counter() - t
        median = median_cpu_s(runs[key], req["repeats"])
        print(json.dumps({"median": median, "first": first}), flush=True)


def median_cpu_s(run, repeats: int) -> float:
    """The median CPU time (``time.process_time``) of ``repeats`` calls of ``run``, seconds."""
    times = []
    for _ in range(repeats):
        t = time.process_time()
        run()
        times.append(time.process_time() - t)
    return statistics.median(times)


def jax_iteration(steps: int, weights: list):
    """The peer: (jitted loss-and-gradient function, its arguments). ``weights``: [(W, b)] per
    layer as numpy arrays, float32."""
    import equinox.internal as eqxi
    import jax
    import jax.numpy as jnp

    def energy(params, x):  # H of one state x (2,)
        for W, b in params[:-1]:
            x = jnp.tanh(W @ x + b)
        W, b = params[-1]
        return (W @ x + b)[0]

    grad_H = jax.vmap(jax.grad(energy, argnums=1), (None, 0))

    def field(params, y):  # J⁻¹∇H = [∂H/∂p, −∂H/∂q], y (B, 2)
        g = grad_H(params, y)
        return jnp.concatenate([g[:, 1:], -g[:, :1]], -1)

    def solve(params, y, K):  # K = f(y + h/2 K) from the guess K, to h·max|ΔK| <= TOL
        def body(carry):
            K, _, it = carry
            K_new = field(params, y + 0.5 * H * K)
            return K_new, H * jnp.max(jnp.abs(K_new - K)), it + 1

        init = (K, jnp.asarray(jnp.inf, y.dtype), jnp.asarray(0))
        K, _, _ = eqxi.while_loop(
            lambda c: (c[1] > TOL) & (c[2] < MAX_ITER), body, init, max_steps=MAX_ITER,
            kind="checkpointed",
        )  # fmt: skip
        return K

    @jax.checkpoint
    def step(params, y, K0):
        K = solve(params, y, K0)
        return y + H * K, K

    def trajectory(params, y0):
        # the first three steps as hnnsym's "extrapolate" predictor starts: RK2, constant, linear
        K0 = field(params, y0 + 0.5 * H * field(params, y0))
        ys, Ks, y = [y0], [], y0
        for n in range(min(steps, 3)):
            guess = K0 if n == 0 else Ks[-1] if n == 1 else 2 * Ks[-1] - Ks[-2]
            y, K = step(params, y, guess)
            ys.append(y)
            Ks.append(K)
        if steps > 3:

            def body(carry, _):
                y, K1, K2, K3 = carry  # the last three steps' stages, newest first
                y, K = step(params, y, 3 * (K1 - K2) + K3)
                return (y, K, K1, K2), y

            _, rest = jax.lax.scan(body, (y, Ks[-1], Ks[-2], Ks[-3]), None, length=steps - 3)
            return jnp.concatenate([jnp.stack(ys), rest])
        return jnp.stack(ys)

    def loss(params, y0, target):
        return jnp.mean((trajectory(params, y0) - target) ** 2)

    params = [(jnp.asarray(W), jnp.asarray(b)) for W, b in weights]
    return jax.jit(jax.value_and_grad(loss)), jax.jit(trajectory), params


def _weights(model) -> list:
    linears = [m for m in model.net if hasattr(m, "weight")]
    return [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in linears]


def agreement(steps: int) -> dict:
    """Max relative difference, JAX against hnnsym (backprop and symplectic_adjoint), of the
    trajectory and of the parameter gradient (float32)."""
    import jax
    import numpy as np
    import torch

    from hnnsym.ode.solve import integrate

    model, y0, target = _setup(steps)
    grad_fn, traj_fn, params = jax_iteration(steps, _weights(model))
    _, jgrads = grad_fn(params, y0.numpy(), target.numpy())
    jflat = np.concatenate([np.ravel(g) for g in jax.tree_util.tree_leaves(jgrads)])
    with torch.no_grad():
        ours = integrate(model, y0, H, steps, "implicit_midpoint", "backprop").numpy()
    theirs = np.asarray(traj_fn(params, y0.numpy()))
    out = {"trajectory": float(np.abs(ours - theirs).max() / np.abs(ours).max())}
    for method in METHODS:  # the parameters in the same order, (W, b) per layer
        grads = _hnnsym_iteration(method, steps)()
        tflat = np.concatenate([g.detach().numpy().ravel() for g in grads])
        out[method] = float(np.abs(tflat - jflat).max() / np.abs(jflat).max())
    return out


def iteration_flops(steps: int) -> int:
    """The matrix-product FLOPs of one iteration, counted by ``torch.utils.flop_counter`` on
    hnnsym's eager backprop (mm, addmm, bmm: the network's layers forward and backward, every
    fixed-point sweep included): the one count every implementation's time is set against."""
    from torch.utils.flop_counter import FlopCounterMode

    run = _hnnsym_iteration("backprop", steps)
    with FlopCounterMode(display=False) as counter:
        run()
    return int(counter.get_total_flops())


def matmul_peak(n: int = 512, repeats: int = 20) -> float:
    """One thread's float32 matrix-product rate, FLOP/s: the best of ``repeats`` n×n products."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def time_jax(fn, args, repeats: int) -> float:
    import jax

    return median_cpu_s(lambda: jax.block_until_ready(fn(*args)), repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[6, 32, 256])  # 6: Table 1's window
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="timed iterations per round")
    ap.add_argument("--before", help="a commit to time as well (its tree, in a git worktree)")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs/bench/peer")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to one core")
    ap.add_argument("--no-compiled", action="store_true", help="leave out hnnsym compiled")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker()
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # children inherit it
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
    try:
        import equinox  # noqa: F401
        import jax  # noqa: F401
    except ImportError:
        sys.exit("benchmarks/peer_jax.py needs the peer extra: pip install -e '.[peer]'")
    import pandas as pd
    import torch

    from hnnsym.artifacts import write_text

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        trees = {"hnnsym": ROOT}
        if args.before:
            from train_time import worktree  # the benchmarks' one way to an earlier tree

            before = stack.enter_context(worktree(args.before, Path(tmp) / "before"))
            trees[f"hnnsym@{args.before}"] = before
        methods = {side: _methods(tree, args) for side, tree in trees.items()}
        rows, compile_s, agree, hnnsym_compile = _measure(args, trees, methods, Path(tmp) / "cache")
    peak = matmul_peak()
    flops = {steps: iteration_flops(steps) for steps in args.steps}
    args.out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "peer.csv", index=False)
    md = _table(df, compile_s, agree, methods, args, hnnsym_compile)
    md += _peak_share(df, flops, peak, args)
    write_text(args.out / "peer.md", md)
    _plot(df, args.out / "peer.png")
    print(md)


def _methods(tree: Path, args) -> list[str]:
    """The method labels an hnnsym tree runs: eager, and compiled unless ``--no-compiled`` or the
    tree has no compiled solve (a ``--before`` commit older than ``hnnsym/ode/compiled.py``; one
    that has it must know ``integrator.compile_steps``)."""
    if args.no_compiled or not (tree / "hnnsym" / "ode" / "compiled.py").exists():
        return list(METHODS)
    return [*METHODS, *(m + suffix for suffix in COMPILED for m in METHODS)]


def _measure(args, trees: dict, methods: dict, cache: Path) -> tuple[list[dict], dict, dict, dict]:
    import jax

    def start(tree: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1",
               "HNNSYM_COMPILE_CACHE": str(cache)}  # fmt: skip
        return subprocess.Popen(
            [sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env, cwd=tree,
        )  # fmt: skip

    workers = {side: start(tree) for side, tree in trees.items()}

    def ask(side: str, method: str, steps: int, repeats: int) -> dict:
        w = workers[side]
        w.stdin.write(json.dumps({"method": method, "steps": steps, "repeats": repeats}) + "\n")
        w.stdin.flush()
        return json.loads(w.stdout.readline())

    jax_fns, compile_s, agree, firsts = {}, {}, {}, {}
    for steps in args.steps:
        model, y0, target = _setup(steps)
        fn, _, params = jax_iteration(steps, _weights(model))
        fargs = (params, y0.numpy(), target.numpy())
        t = time.process_time()
        jax.block_until_ready(fn(*fargs))
        first = time.process_time() - t
        compile_s[steps] = first - time_jax(fn, fargs, 3)
        jax_fns[steps] = (fn, fargs)
        agree[steps] = agreement(steps)
        for side in trees:  # the first calls (the compiled ones: cold compile cache)
            for method in methods[side]:
                got = ask(side, method, steps, 1)
                firsts[(side, method, steps)] = got["first"] - 2 * got["median"]
    hnnsym_compile = {}
    if "hnnsym" in trees and not args.no_compiled:  # a second process: warm compile cache
        workers["warm"] = start(trees["hnnsym"])
        for steps in args.steps:
            for label in methods["hnnsym"][len(METHODS) :]:
                got = ask("warm", label, steps, 1)
                hnnsym_compile[(label, steps)] = (
                    firsts[("hnnsym", label, steps)], got["first"] - 2 * got["median"]
                )  # fmt: skip
        warm = workers.pop("warm")
        warm.stdin.close()
        warm.wait()
    rows = []
    for r in range(args.rounds):
        for steps in args.steps:
            fn, fargs = jax_fns[steps]
            rows.append({"round": r, "side": "jax", "method": "jit", "steps": steps,
                         "seconds": time_jax(fn, fargs, args.repeats)})  # fmt: skip
            for side in trees:
                for method in methods[side]:
                    sec = ask(side, method, steps, args.repeats)["median"]
                    rows.append({"round": r, "side": side, "method": method, "steps": steps,
                                 "seconds": sec})  # fmt: skip
            print(f"round {r} steps {steps} done", file=sys.stderr, flush=True)
    for w in workers.values():
        w.stdin.close()
        w.wait()
    return rows, compile_s, agree, hnnsym_compile


def _table(df, compile_s: dict, agree: dict, methods: dict, args, hnnsym_compile: dict) -> str:
    """Per round, each side's time over JAX's (same round); the median and range over rounds."""
    jax_t = df[df.side == "jax"].set_index(["round", "steps"]).seconds
    lines = [
        "# hnnsym against jitted JAX, one training iteration",
        "",
        "HNN 2→16→32→16→1 tanh, coupled oscillator, batch 512, h = 0.01, float32, implicit midpoint,",
        f"loss on every step; one pinned core, one thread, CPU time; {args.rounds} interleaved rounds,",
        f"median of {args.repeats} iterations each. Ratio = time / JAX's time in the same round",
        "(median over rounds, [min–max]); below 1: faster than JAX.",
        "",
        "| implementation | " + " | ".join(f"{s} steps" for s in args.steps) + " |",
        "|---|" + "---|" * len(args.steps),
    ]
    for side in methods:
        for method in methods[side]:
            cells = []
            for steps in args.steps:
                sel = df[(df.side == side) & (df.method == method) & (df.steps == steps)]
                ratio = sel.set_index(["round", "steps"]).seconds / jax_t
                cells.append(f"{ratio.median():.2f} [{ratio.min():.2f}–{ratio.max():.2f}]")
            lines.append(f"| {side} {method} | " + " | ".join(cells) + " |")
    if len(methods) > 1:
        now, before = list(methods)
        lines += ["", f"hnnsym now / {before} (same round; over its eager time where that "
                  "tree has no compiled solve):", ""]  # fmt: skip
        for method in methods[now]:
            base = method if method in methods[before] else method.partition(" ")[0]
            cells = []
            for steps in args.steps:
                a = df[(df.side == now) & (df.method == method) & (df.steps == steps)]
                b = df[(df.side == before) & (df.method == base) & (df.steps == steps)]
                ratio = a.set_index("round").seconds / b.set_index("round").seconds
                cells.append(
                    f"{steps} steps {ratio.median():.2f} [{ratio.min():.2f}–{ratio.max():.2f}]"
                )
            lines.append(f"- {method}: " + ", ".join(cells))
    if hnnsym_compile:
        lines += ["", "hnnsym compiled / eager (same round):", ""]
        for label in methods["hnnsym"][len(METHODS) :]:
            method = label.partition(" ")[0]
            cells = []
            for steps in args.steps:
                sel = df[(df.side == "hnnsym") & (df.steps == steps)].set_index("round")
                ratio = (sel[sel.method == label].seconds
                         / sel[sel.method == method].seconds)  # fmt: skip
                cells.append(
                    f"{steps} steps {ratio.median():.2f} [{ratio.min():.2f}–{ratio.max():.2f}]"
                )
            lines.append(f"- {label}: " + ", ".join(cells))
        lines += ["", "hnnsym compile time (the first two calls less two timed calls, wall s; "
                  "cold: fresh cache, warm: a second process with that cache; a step count pays "
                  "only for the graphs that earlier step counts did not compile):", ""]  # fmt: skip
        for (label, steps), (cold, warm) in hnnsym_compile.items():
            lines.append(f"- {label}, {steps} steps: cold {cold:.1f}, warm {warm:.1f}")
    lines += ["", "JAX per iteration (median over rounds, ms): " + ", ".join(
        f"{s} steps {1e3 * jax_t.xs(s, level='steps').median():.1f}" for s in args.steps)]  # fmt: skip
    lines += ["", "JAX compile time (first call less a timed call, s): " + ", ".join(
        f"{s} steps {compile_s[s]:.1f}" for s in args.steps)]  # fmt: skip
    lines += ["", "Agreement with JAX (max |difference| / max |value|, float32):", ""]
    for steps, a in agree.items():
        lines.append(f"- {steps} steps: trajectory {a['trajectory']:.1e}, gradient " + ", ".join(
            f"{m} {a[m]:.1e}" for m in METHODS))  # fmt: skip
    return "\n".join(lines) + "\n"


def _peak_share(df, flops: dict, peak: float, args) -> str:
    """Each implementation's matrix-product FLOPs per second (one count per step count, from
    ``iteration_flops``) as a share of one core's measured float32 matmul rate."""
    lines = [
        "",
        f"Share of one core's float32 matmul peak ({peak / 1e9:.0f} GFLOP/s: the best of 20 "
        "512×512 products, one thread), by one FLOP count per step count (hnnsym's eager "
        "backprop, matrix products only: " + ", ".join(
            f"{s} steps {flops[s] / 1e6:.0f} MFLOP" for s in args.steps) + "), median time over "
        "rounds:",
        "",
        "| implementation | " + " | ".join(f"{s} steps" for s in args.steps) + " |",
        "|---|" + "---|" * len(args.steps),
    ]  # fmt: skip
    for (side, method), sel in df.groupby(["side", "method"], sort=False):
        cells = []
        for steps in args.steps:
            seconds = sel[sel.steps == steps].seconds.median()
            cells.append(f"{100 * flops[steps] / seconds / peak:.0f} %")
        name = "JAX" if side == "jax" else f"{side} {method}"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(df, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jax_t = df[df.side == "jax"].set_index(["round", "steps"]).seconds
    labels, values = [], []
    for (side, method, steps), sel in df[df.side != "jax"].groupby(["side", "method", "steps"]):
        labels.append(f"{side} {method}, {steps} steps")
        values.append((sel.set_index(["round", "steps"]).seconds / jax_t).median())
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(values)))
    ax.barh(range(len(values)), values)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time per iteration / JAX's (median over rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


if __name__ == "__main__":
    main()
