"""Training time of `make table1`'s paper-budget runs, this tree against an earlier commit (issue 16).

    python benchmarks/train_time.py --before 52db500            # = make bench-train-time
    python benchmarks/train_time.py --before 52db500 --systems double_well --runs 1

For each run and system, alternately in a git worktree of ``--before`` and in this tree: ``python -m
hnnsym.train experiment=table1 system=<s> seed=0 data_file=<data-dir>/<s>/low/seed0.h5`` (the data
are generated first if missing). Measured per run: the process's CPU time (user + sys, from
``getrusage`` of the child), its wall time, the training loop's wall time (the sum of metrics.csv's
``epoch_time``, what start-up and imports do not count in) and the best validation loss (the same
numbers to the printed digits is part of the target). Writes ``train_time.csv`` and
``train_time.md`` (medians per system and side, and the ratios before / this) into ``--out``.
On a shared machine compare CPU times; alternating the sides spreads the load over both.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from hnnsym.artifacts import write_text

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("double_well", "coupled_oscillator", "henon_heiles")


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _train(tree: Path, system: str, data_file: Path, run_dir: Path) -> dict:
    """One training run in ``tree``; its CPU, wall and loop seconds and best validation loss."""
    cmd = [sys.executable, "-m", "hnnsym.train", "experiment=table1", f"system={system}",
           "seed=0", f"data_file={data_file}", f"run_dir={run_dir}", "train.progress=false",
           f"hydra.run.dir={run_dir}-hydra"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu, wall = _child_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - wall, _child_cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"error: training in {tree} failed: {proc.stderr.strip().splitlines()[-1:]}")
    metrics = pd.read_csv(run_dir / "metrics.csv")
    return {"cpu_s": cpu, "wall_s": wall, "loop_s": metrics["epoch_time"].sum(),
            "best_val_loss": metrics["val_loss"].min(), "epochs": len(metrics)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "train_time")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="train_time_") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(before),
                        args.before], check=True)  # fmt: skip
        try:
            for system in args.systems:
                data = (args.data_dir / system / "low" / "seed0.h5").resolve()
                if not data.exists():
                    subprocess.run([sys.executable, "-m", "hnnsym.generate", f"system={system}",
                                    "noise=low", "seed=0", f"data_dir={args.data_dir}"],
                                   cwd=ROOT, check=True)  # fmt: skip
                for run in range(1, args.runs + 1):
                    for side, tree in (("before", before), ("this", ROOT)):
                        run_dir = Path(tmp) / f"{side}-{system}-{run}"
                        rows.append({"system": system, "side": side, "run": run,
                                     **_train(tree, system, data, run_dir)})  # fmt: skip
                        print(rows[-1], flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                           check=False)  # fmt: skip
    df = pd.DataFrame(rows)
    med = df.groupby(["system", "side"])[["cpu_s", "wall_s", "loop_s", "best_val_loss"]].median()
    table = med.unstack("side")
    for col in ("cpu_s", "wall_s", "loop_s"):
        table[(col, "before / this")] = table[(col, "before")] / table[(col, "this")]
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "train_time.csv", df.to_csv(index=False))
    write_text(
        args.out / "train_time.md",
        f"# Training time: {args.before} (before) vs this tree, medians of {args.runs} runs\n\n"
        + table.sort_index(axis=1).to_markdown(floatfmt=".4g")
        + "\n",
    )
    print(table.sort_index(axis=1).to_string())


if __name__ == "__main__":
    main()
