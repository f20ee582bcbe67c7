"""Wall time of one sweep (train + evaluate multiruns) per Hydra launcher on this machine.

The sweep: systems × gradients × seeds (default 3 × 2 × 2 = 12 jobs per stage), tiny or small
sizes. The data are generated once (basic launcher, not timed); then, for each launcher, ``train -m``
and ``evaluate -m`` run from scratch into ``<out>/<size>/<launcher>/`` and are timed (wall, and CPU
of the whole process tree), and ``report`` aggregates the runs. The runs of every launcher must
agree to the bit (same seeds, one torch thread per job): the script checks it. On a shared machine
the numbers depend on the others' load, so each launcher's row also has the load average and the
cores this session could use at its start (a CPU-bound loop alone vs two at once).

    .venv/bin/python benchmarks/sweep_walltime.py                  # tiny; basic, parallel, local
    .venv/bin/python benchmarks/sweep_walltime.py --size small --launchers basic parallel

Writes ``<out>/sweep_walltime_<size>.json`` (atomically) and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from hnnsym.artifacts import now_utc, versions, write_text

LAUNCHERS = {
    "basic": ["hydra/launcher=basic"],
    "parallel": ["hydra/launcher=parallel"],  # joblib; n_jobs from --n-jobs
    "local": ["hydra/launcher=local"],  # submitit, one process per job
}
# tiny: the jobs are mostly start-up (imports, config composition); small: a few seconds of work
# per job. (generate overrides, train overrides)
SIZES = {
    "tiny": (["generate.n_train=64", "generate.n_val=16", "generate.n_test=4",
              "generate.test_steps=20"], ["train.epochs=1", "train.batch_size=32"]),
    "small": (["generate.n_train=1024", "generate.n_val=256", "generate.n_test=16",
               "generate.test_steps=200"], ["train.epochs=5", "train.batch_size=64"]),
}  # fmt: skip


def run(args: list[str], log: Path) -> tuple[float, float]:
    """Run ``python -m <args>``, output to ``log``: (wall seconds, CPU seconds of the process tree:
    user + system of every descendant reaped). Exits with its log on failure."""
    command = [sys.executable, "-m", *args]
    print("$", shlex.join(command), flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "a") as fh:
        fh.write("$ " + shlex.join(command) + "\n")
        fh.flush()
        proc = subprocess.run(command, stdout=fh, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}) after {seconds:.1f}s: see {log}")
    return seconds, cpu


SPIN = (
    "import time; t = time.perf_counter(); sum(range(30_000_000)); print(time.perf_counter() - t)"
)


def parallel_capacity() -> float:
    """How many cores this session gets right now: a CPU-bound loop alone, then two copies at
    once; 2 * alone / together (2.0 on two idle cores, 1.0 when a second process gains nothing,
    e.g. when other users' load or a cgroup quota caps this session's CPU share)."""

    def spin(n: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
                 for _ in range(n)]  # fmt: skip
        return max(float(p.communicate()[0]) for p in procs)

    return round(2 * spin(1) / spin(2), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("outputs/bench/sweep_walltime"))
    parser.add_argument("--launchers", nargs="+", default=list(LAUNCHERS), choices=list(LAUNCHERS))
    parser.add_argument("--systems", default="double_well,pendulum,henon_heiles")
    parser.add_argument("--gradients", default="symplectic_adjoint,backprop")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (parallel launcher)")
    parser.add_argument("--size", choices=list(SIZES), default="tiny")
    parser.add_argument("--figures", action="store_true", help="let evaluate draw its figures")
    a = parser.parse_args()

    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / "sweep_walltime.log"
    gen_sizes, train_sizes = SIZES[a.size]
    data = f"data_dir={out / 'data' / a.size}"
    sweep = [f"system={a.systems}", f"gradient={a.gradients}", f"seed={a.seeds}", data]
    n = len(a.systems.split(",")) * len(a.gradients.split(",")) * len(a.seeds.split(","))
    gen = ["hnnsym.generate", "-m", f"system={a.systems}", f"seed={a.seeds}", data,
           *gen_sizes, f"hydra.sweep.dir={out / 'generate'}"]  # fmt: skip
    missing = [
        s for s in a.systems.split(",") for k in a.seeds.split(",")
        if not (out / "data" / a.size / s / "low" / f"seed{k}.h5").exists()
    ]  # fmt: skip
    generate_s = run(gen, log)[0] if missing else None

    results = {}
    for name in a.launchers:
        root = out / a.size / name
        subprocess.run(["rm", "-rf", str(root)], check=True)
        launcher = LAUNCHERS[name] + (
            [f"hydra.launcher.n_jobs={a.n_jobs}"] if name == "parallel" else []
        )
        where = [f"run_dir={root}/${{run_name}}", f"hydra.sweep.dir={root}"]
        load_before, capacity = os.getloadavg(), parallel_capacity()
        train = ["hnnsym.train", "-m", *launcher, *sweep, *where, *train_sizes,
                 "train.progress=false"]  # fmt: skip
        evaluate = ["hnnsym.evaluate", "-m", *launcher, *sweep, *where,
                    f"eval.figures={str(a.figures).lower()}"]  # fmt: skip
        train_s, train_cpu = run(train, log)
        eval_s, eval_cpu = run(evaluate, log)
        load_after = os.getloadavg()
        run(["hnnsym.report", f"report.runs={root}", f"report.out_dir={root}/results",
             f"report.name={name}"], log)  # fmt: skip
        results[name] = {
            "train_s": round(train_s, 1),
            "evaluate_s": round(eval_s, 1),
            "total_s": round(train_s + eval_s, 1),
            "cpu_s": round(train_cpu + eval_cpu, 1),
            "parallel_capacity": capacity,
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "commands": ["python -m " + shlex.join(train), "python -m " + shlex.join(evaluate)],
        }

    # every launcher's runs must be the same numbers (deterministic per job)
    tables = {
        name: pd.read_csv(out / a.size / name / "results" / f"{name}_runs.csv")
        .set_index(["system", "gradient", "seed"])
        .sort_index()
        for name in a.launchers
    }
    columns = ["best_val_loss", "h_l1", "vf_l1", "traj_mse"]
    first = tables[a.launchers[0]][columns]
    identical = {name: bool(t[columns].equals(first)) for name, t in tables.items()}
    cores = len(os.sched_getaffinity(0))
    summary = {
        "jobs_per_stage": n,
        "cores": cores,
        "n_jobs": a.n_jobs,
        "size": a.size,
        "generate": gen_sizes,
        "train": train_sizes,
        "generate_s": None if generate_s is None else round(generate_s, 1),
        "launchers": results,
        "identical_results": identical,
        "created": now_utc(),
        "versions": versions(),
    }
    path = out / f"sweep_walltime_{a.size}.json"
    write_text(path, json.dumps(summary, indent=2) + "\n")
    print(f"\n{n} jobs per stage (train, evaluate), size {a.size}, {cores} cores, "
          f"joblib n_jobs={a.n_jobs}\n")  # fmt: skip
    print(
        "| launcher | train [s] | evaluate [s] | total [s] | CPU [s] | load avg before → after "
        "| cores free | same numbers |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for name, r in results.items():
        before, after = r["loadavg_before"][0], r["loadavg_after"][0]
        print(f"| {name} | {r['train_s']} | {r['evaluate_s']} | {r['total_s']} | {r['cpu_s']} | "
              f"{before} → {after} | {r['parallel_capacity']} | {identical[name]} |")  # fmt: skip
    print(f"\nwrote {path}; reports in {out / a.size}/<launcher>/results/")


if __name__ == "__main__":
    main()
