"""The compiled stage solve against the eager one in `make table1`'s runs, with a fresh compile
cache and a warm one.

    python benchmarks/compile_time.py                                   # = make bench-compile-time
    python benchmarks/compile_time.py --experiments table1_paper_time --systems double_well --seeds 0
    python benchmarks/compile_time.py --before c005219     # and eager in that commit's tree

As `make table1` trains them: one Hydra multirun process per measurement, ``python -m hnnsym.train
-m experiment=<experiments> system=<systems> seed=<seeds> noise=low hydra/launcher=parallel`` on
the noise-0.01 data of ``--data-dir`` (generated first if missing). First compiled
(``integrator.compile=true integrator.compile_steps=6``) into an empty compile cache (a temporary
``$HNNSYM_COMPILE_CACHE``), then ``--rounds`` rounds of eager and compiled, interleaved, the
compiled ones with the cache that the first filled; with ``--before``, each round also trains
eagerly in a git worktree of that commit (c005219: the tree before the compiled solve). Measured:
each process's wall and CPU time, and per run the training loop's seconds (metrics.csv's
``epoch_time`` summed), its first epoch (where a process loads or compiles its programs) and its
best validation loss (its spread over the processes is part of the result). Writes
``compile_time.csv`` (one row per run), ``compile_time_processes.csv`` and ``compile_time.md``
into ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from hnnsym.artifacts import write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_time import ROOT, SYSTEMS, _generate_missing, _sweep, worktree  # noqa: E402

COMPILED = ("integrator.compile=true", "integrator.compile_steps=6")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", nargs="+", default=["table1"])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--seeds", default="0,1,2", help="a comma-separated sweep")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--launcher", default="parallel", choices=("parallel", "basic"))
    parser.add_argument("--before", help="a commit to train eagerly as well, each round")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "compile_time")
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    _generate_missing(data_dir, args.systems, args.seeds)
    before = f"eager at {args.before}"
    plan = [("compiled, fresh cache", COMPILED)]
    for _ in range(args.rounds):
        plan += [(before, ())] if args.before else []
        plan += [("eager", ()), ("compiled, warm cache", COMPILED)]
    processes, rows = [], []
    with (
        tempfile.TemporaryDirectory(prefix="compile_time_") as tmp,
        contextlib.ExitStack() as stack,
    ):
        env = {"HNNSYM_COMPILE_CACHE": str(Path(tmp) / "cache")}
        trees = {}  # mode -> the tree it trains in (else this one)
        if args.before:
            trees[before] = stack.enter_context(worktree(args.before, Path(tmp) / "before"))
        for i, (label, overrides) in enumerate(plan):
            out = Path(tmp) / f"process{i}"
            timing = _sweep(trees.get(label, ROOT), args.experiments, args.systems, data_dir, out,
                            args.launcher, args.seeds, overrides, env)  # fmt: skip
            processes.append({"process": i, "mode": label, **timing})
            print(processes[-1], flush=True)
            for metrics in sorted(out.glob("*/*/seed*/metrics.csv")):
                m = pd.read_csv(metrics)
                rows.append({"process": i, "mode": label, "experiment": metrics.parts[-4],
                             "system": metrics.parts[-3], "seed": metrics.parts[-2],
                             "loop_s": m["epoch_time"].sum(), "first_epoch_s": m["epoch_time"][0],
                             "median_epoch_s": m["epoch_time"].median(),
                             "best_val_loss": m["val_loss"].min()})  # fmt: skip
    runs, procs = pd.DataFrame(rows), pd.DataFrame(processes)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "compile_time.csv", runs.to_csv(index=False))
    write_text(args.out / "compile_time_processes.csv", procs.to_csv(index=False))
    per_process = runs.groupby("process").agg(
        loops_s=("loop_s", "sum"), first_epochs_max_s=("first_epoch_s", "max"),
        median_epoch_s=("median_epoch_s", "median"),
    )  # fmt: skip
    table = procs.set_index("process").join(per_process)
    eager = table[table["mode"] == "eager"]["wall_s"].to_numpy()
    warm = table[table["mode"] == "compiled, warm cache"]["wall_s"].to_numpy()
    earlier = table[table["mode"] == before]["wall_s"].to_numpy()

    def spread(frame: pd.DataFrame) -> float:
        """The largest relative spread of a run's best validation loss over the processes."""
        losses = frame.groupby(["experiment", "system", "seed"])["best_val_loss"]
        return float((losses.max() / losses.min() - 1).max())

    def ratios(times: np.ndarray, bases: np.ndarray) -> str:
        return ", ".join(f"{t / b:.3g}" for t, b in zip(times, bases))

    compiled = runs[runs["mode"].str.startswith("compiled")]
    eagers = runs[runs["mode"].str.startswith("eager")]
    parts = [
        "# Compiled against eager training, fresh and warm compile cache",
        f"Experiments: {', '.join(args.experiments)}; systems: {', '.join(args.systems)}; seeds "
        f"{args.seeds}; noise 0.01; launcher {args.launcher}; compiled: {' '.join(COMPILED)}.",
        table.to_markdown(floatfmt=".4g"),
        f"Compiled (warm) wall over eager wall, per round: {ratios(warm, eager)}.",
        *(
            [f"Compiled (warm) wall over the wall of {before}, per round: {ratios(warm, earlier)}."]
            if args.before
            else []
        ),
        "A run's best validation loss, largest relative spread: over the compiled processes "
        f"{spread(compiled):.2g}, over the eager ones {spread(eagers):.2g}, "
        f"over all {spread(runs):.2g} (float32: the compiled solve equals the eager one to "
        "rounding, not bit for bit).",
    ]
    write_text(args.out / "compile_time.md", "\n\n".join(parts) + "\n")
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
