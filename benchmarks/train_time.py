"""Training time of `make table1`'s paper-budget runs, this tree against an earlier commit.

    python benchmarks/train_time.py --before 52db500            # = make bench-train-time
    python benchmarks/train_time.py --before 52db500 --experiments table1 --systems double_well

As `make table1` trains them: one Hydra multirun process per side, ``python -m hnnsym.train -m
experiment=<the paper-budget methods> system=<the three systems> seed=0`` on the noise-0.01 data of
``--data-dir`` (generated first if missing), first in a git worktree of ``--before``, then in this
tree, ``--runs`` times alternately. Measured: each process's CPU time (user + sys, ``getrusage`` of
the child) and wall time, and per run the training loop's wall time (the sum of metrics.csv's
``epoch_time``) and best validation loss (the same numbers to the printed digits is part of the
target). Writes ``train_time.csv`` (one row per run), ``train_time_processes.csv`` and
``train_time.md`` (per process, per method and per system, with the ratios before / this) into
``--out``. The earlier commit's make table1 ran the runs one by one (Hydra's basic launcher); this
tree's runs them in one worker process per core (``--launcher parallel``, as make table1 now
does; ``basic`` to compare one by one), so its wall time is the one to compare, and the training
loops' seconds are per run as before. Methods the earlier commit does not have are left out. On a
shared machine compare CPU times.
"""

from __future__ import annotations

import argparse
import contextlib
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
# the paper-budget methods of make table1 (table1_long trains 4x the epochs; table1_ema is newer)
METHODS = ("table1", "table1_smoothed", "table1_shnn", "table1_nssnn", "table1_hnn_derivative",
           "table1_node")  # fmt: skip


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _sweep(
    tree: Path, methods: list[str], systems: list[str], data_dir: Path, out: Path, launcher: str,
    seeds: str = "0", overrides: tuple[str, ...] = (), extra_env: dict[str, str] | None = None,
) -> dict:  # fmt: skip
    """One multirun process in ``tree`` with Hydra's ``launcher`` (runs in
    ``out/<experiment>/<system>/seed<seed>``, ``seeds`` a comma-separated sweep, ``overrides``
    added, ``extra_env`` added to the environment); its CPU and wall seconds (CPU: the process and
    the worker processes it waited for)."""
    cmd = [sys.executable, "-m", "hnnsym.train", "-m", f"experiment={','.join(methods)}",
           f"system={','.join(systems)}", f"seed={seeds}", "noise=low", f"data_dir={data_dir}",
           f"run_dir={out}/${{hydra:runtime.choices.experiment}}/${{system.name}}/seed${{seed}}",
           "train.progress=false", "train.resume=false", f"hydra.sweep.dir={out}-hydra",
           f"hydra/launcher={launcher}", *overrides]  # fmt: skip
    env = {**os.environ, **(extra_env or {}), "PYTHONPATH": str(tree)}
    cpu, wall = _child_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - wall, _child_cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"error: training in {tree} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return {"cpu_s": cpu, "wall_s": wall}


@contextlib.contextmanager
def worktree(commit: str, path: Path):
    """A detached git worktree of ``commit`` at ``path``, removed on exit."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), commit],
                   check=True)  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       check=False)  # fmt: skip


def _generate_missing(data_dir: Path, systems: list[str], seeds: str = "0") -> None:
    """The noise-0.01 data files of ``systems`` × ``seeds`` (comma-separated) that
    ``data_dir`` lacks, generated."""
    for system in systems:
        for seed in seeds.split(","):
            if not (data_dir / system / "low" / f"seed{seed}.h5").exists():
                subprocess.run([sys.executable, "-m", "hnnsym.generate", f"system={system}",
                                "noise=low", f"seed={seed}", f"data_dir={data_dir}"],
                               cwd=ROOT, check=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--experiments", nargs="+", default=list(METHODS))
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--launcher", default="parallel", choices=("parallel", "basic"),
                        help="this tree's Hydra launcher, as make table1 runs it (the earlier "
                        "commit's make table1 ran its runs one by one: basic)")  # fmt: skip
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench" / "train_time")
    args = parser.parse_args()
    data_dir = args.data_dir.resolve()
    _generate_missing(data_dir, args.systems)
    processes, rows = [], []
    with tempfile.TemporaryDirectory(prefix="train_time_") as tmp:
        with worktree(args.before, Path(tmp) / "before") as before:
            methods = [m for m in args.experiments
                       if any((before / conf / "experiment" / f"{m}.yaml").exists()
                              for conf in ("hnnsym/conf", "conf"))]  # fmt: skip
            for run in range(1, args.runs + 1):
                for side, tree, launcher in (("before", before, "basic"),
                                             ("this", ROOT, args.launcher)):  # fmt: skip
                    out = Path(tmp) / f"{side}{run}"
                    timing = _sweep(tree, methods, args.systems, data_dir, out, launcher)
                    processes.append({"side": side, "run": run, "launcher": launcher, **timing})
                    print(processes[-1], flush=True)
                    for metrics in sorted(out.glob("*/*/seed0/metrics.csv")):
                        m = pd.read_csv(metrics)
                        rows.append({"side": side, "run": run, "experiment": metrics.parts[-4],
                                     "system": metrics.parts[-3], "loop_s": m["epoch_time"].sum(),
                                     "best_val_loss": m["val_loss"].min(), "epochs": len(m)})  # fmt: skip
    runs, procs = pd.DataFrame(rows), pd.DataFrame(processes)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "train_time.csv", runs.to_csv(index=False))
    write_text(args.out / "train_time_processes.csv", procs.to_csv(index=False))

    def ratios(table: pd.DataFrame) -> pd.DataFrame:
        table = table.unstack("side")
        for col in {c for c, _ in table.columns} - {"best_val_loss"}:
            table[(col, "before / this")] = table[(col, "before")] / table[(col, "this")]
        return table.sort_index(axis=1)

    whole = procs.groupby("side")[["cpu_s", "wall_s"]].median().T  # the launchers: in the CSV
    whole["before / this"] = whole["before"] / whole["this"]
    loops = runs.groupby(["side", "run"])["loop_s"].sum().groupby("side").median()
    parts = [
        f"# Training time of make table1's paper-budget runs: {args.before} (before) vs this tree",
        f"Methods: {', '.join(methods)}; systems: {', '.join(args.systems)}; seed 0, noise 0.01; "
        f"medians of {args.runs} multirun process(es) per side; launcher: before basic (one by "
        f"one), this {args.launcher}.",
        "## Whole multirun process (CPU and wall seconds)",
        whole.to_markdown(floatfmt=".4g"),
        f"Training loops summed over the runs: before {loops['before']:.4g} s, this "
        f"{loops['this']:.4g} s, ratio {loops['before'] / loops['this']:.3g}.",
        "## Per method (loop seconds summed over the systems)",
        ratios(
            runs.groupby(["experiment", "side", "run"])["loop_s"]
            .sum()
            .groupby(["experiment", "side"])
            .median()
            .to_frame()
        ).to_markdown(floatfmt=".4g"),  # fmt: skip
        "## Per run (medians over the processes)",
        ratios(
            runs.groupby(["experiment", "system", "side"])[["loop_s", "best_val_loss"]].median()
        ).to_markdown(floatfmt=".4g"),  # fmt: skip
    ]
    write_text(args.out / "train_time.md", "\n\n".join(parts) + "\n")
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
