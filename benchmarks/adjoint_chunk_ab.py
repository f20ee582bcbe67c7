"""The eager symplectic adjoint with this tree's chunk against a commit's, swapped in one process.

    python benchmarks/adjoint_chunk_ab.py --before 493052f --steps 32 256

For changes confined to ``hnnsym/ode/gradients/symplectic_adjoint.py`` whose effect is smaller
than the spread between two processes (``benchmarks/peer_jax.py --before`` runs each tree in
its own process, and measures a few per cent apart even where nothing changed). The commit's
version of that file runs as a module beside this tree's, over this tree's other modules, and
the backward of the symplectic adjoint calls one or the other ``chunk_adjoint``. The workload is
the headline iteration of ``benchmarks/peer_jax.py``, eager. Per round: eager backprop, then the
adjoint with each version, in alternating order; each the median CPU time of ``--repeats``
iterations on one thread (pin the process: ``taskset -c 1``). Reports the largest difference
between the two versions' gradients (0 where the change keeps every bit). Prints the ratios
(median [min–max] over rounds) and writes
``adjoint_chunk_ab.csv`` (one row per round and step count) and ``adjoint_chunk_ab.md`` into
``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd

from hnnsym.artifacts import write_text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
MODULE = "hnnsym/ode/gradients/symplectic_adjoint.py"


def _module_at(commit: str) -> types.ModuleType:
    """``MODULE`` as it is at ``commit``, executed as a module of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{MODULE}"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    module = types.ModuleType(f"symplectic_adjoint_at_{commit}")
    exec(compile(source, f"{commit}:{MODULE}", "exec"), module.__dict__)
    return module


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}–{max(values):.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit whose chunk to run")
    parser.add_argument("--steps", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench")
    args = parser.parse_args()

    import torch
    from peer_jax import _hnnsym_iteration, median_cpu_s

    import hnnsym.ode.gradients.symplectic_adjoint as current
    from hnnsym.config.runtime import keep_freed_memory

    keep_freed_memory()  # as the stages run
    torch.set_num_threads(1)
    chunks = {"this tree": current.chunk_adjoint,
              args.before: _module_at(args.before).chunk_adjoint}  # fmt: skip
    rows = []
    for steps in args.steps:
        backprop = _hnnsym_iteration("backprop", steps)
        adjoint = _hnnsym_iteration("symplectic_adjoint", steps)
        grads = {}
        for name, chunk in chunks.items():
            current.chunk_adjoint = chunk
            grads[name] = adjoint()
        difference = max(float((a - b).abs().max()) for a, b in zip(*grads.values()))
        for _ in range(3):  # warm-up
            backprop()
            adjoint()
        for r in range(args.rounds):
            row = {"steps": steps, "round": r, "gradient_max_difference": difference,
                   "backprop_s": median_cpu_s(backprop, args.repeats)}  # fmt: skip
            for name in list(chunks)[:: 1 if r % 2 else -1]:
                current.chunk_adjoint = chunks[name]
                row[f"adjoint_s, {name}"] = median_cpu_s(adjoint, args.repeats)
            rows.append(row)
        current.chunk_adjoint = chunks["this tree"]
    df = pd.DataFrame(rows)
    new, old = (f"adjoint_s, {name}" for name in chunks)
    lines = [
        f"# The eager symplectic adjoint's chunk: this tree against {args.before}", "",
        f"Headline iteration, eager, one thread; {args.rounds} rounds of the median of "
        f"{args.repeats} iterations (CPU time). Ratios: median [min–max] over the rounds.", "",
        f"| steps | this tree / {args.before} | this tree / backprop | {args.before} / backprop "
        "| gradients, max difference |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for steps, g in df.groupby("steps"):
        lines.append(
            f"| {steps} | {_summary(list(g[new] / g[old]))} | "
            f"{_summary(list(g[new] / g['backprop_s']))} | "
            f"{_summary(list(g[old] / g['backprop_s']))} | {g['gradient_max_difference'].iloc[0]:.1e} |"
        )  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    write_text(args.out / "adjoint_chunk_ab.csv", df.to_csv(index=False))
    write_text(args.out / "adjoint_chunk_ab.md", text)


if __name__ == "__main__":
    main()
