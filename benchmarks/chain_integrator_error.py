"""The integrator's own share of a chain-pendulum rollout error: the TRUE chain rolled
out by each integrator, against the file's Gauss–Legendre ground truth.

    python benchmarks/chain_integrator_error.py --data data/chain30s_2/chain_pendulum/none/seed0.h5 \
        --steps 100 rk4 rattle:2 rattle:1:suzuki

Each spec is ``name[:substeps[:composition]]`` (h = obs_dt / substeps). A learned model rolled out
by that integrator cannot do better than this row, whatever its training; the metrics are those of
``make chain-pendulum``'s evaluation (hnnsym.evaluation.constrained): rel_err_gmean, the mean over
trajectories of the geometric mean over t_1..T of ‖ẑ−z‖/(‖ẑ‖+‖z‖), and its pooled form (the
reference code's). Writes ``chain_integrator_error.{csv,md}`` into ``--out``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from hnnsym import integrate
from hnnsym.artifacts import write_text
from hnnsym.data.hdf5 import read_dataset
from hnnsym.evaluation.metrics import geometric_mean_over_time, relative_error
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.systems import get_system

ROOT = Path(__file__).resolve().parents[1]


def row(system, truth: torch.Tensor, t: torch.Tensor, dt: float, spec: str) -> dict:
    """Rollout error of ``system`` by the integrator ``spec`` from truth[0]: truth (T+1, B, 2n)."""
    name, *rest = spec.split(":")
    substeps = int(rest[0]) if rest else 1
    options = {"composition": rest[1]} if len(rest) > 1 else {}
    integ = get_integrator(name, **options)
    steps = truth.shape[0] - 1
    start = time.process_time()
    with torch.no_grad():
        pred = integrate(system, truth[0], dt / substeps, steps * substeps, integ, "backprop")
    cpu = time.process_time() - start
    rel = relative_error(pred[::substeps], truth)
    return {
        "integrator": spec,
        "h": dt / substeps,
        "horizon_s": float(t[-1] - t[0]),
        "rel_err_gmean": float(geometric_mean_over_time(rel, t).mean()),
        "rel_err_gmean_pooled": float(rel[1:].clamp_min(1e-300).log().mean().exp()),
        "cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a chain_pendulum data file (Cartesian)")
    parser.add_argument("--steps", type=int, default=100, help="observation steps to roll out")
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument("specs", nargs="+", help="name[:substeps[:composition]]")
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = read_dataset(args.data, system="chain_pendulum", splits=("test",))
    system = get_system("chain_pendulum", **data.attrs["system_params"])
    test = data.splits["test"]
    if test.clean is None or test.clean.shape[1] <= args.steps:
        raise SystemExit(f"{args.data}: the test trajectories have no {args.steps} steps")
    truth = torch.tensor(test.clean[:, : args.steps + 1]).transpose(0, 1)
    t = torch.tensor(test.t[: args.steps + 1])
    dt = float(t[1] - t[0])
    table = pd.DataFrame([row(system, truth, t, dt, spec) for spec in args.specs])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "chain_integrator_error.csv", table.to_csv(index=False))
    write_text(out / "chain_integrator_error.md", table.to_markdown(index=False, floatfmt=".3g"))
    print(table.to_markdown(index=False, floatfmt=".3g"))


if __name__ == "__main__":
    main()
