"""The evaluate stage: ``evaluate(cfg)`` computes the metrics and figures of a trained run (same
overrides as ``train``).

Reads ``${run_dir}/checkpoints/<eval.checkpoint>.pt`` and the test split of ``${data_file}``;
writes ``metrics.json``, ``rollout.csv`` and the figures ``*.png`` into ``eval.out_dir`` (null:
``${run_dir}/eval``). An evaluation there of other data (another sha256) is replaced only with
``eval.overwrite=true``.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch import nn

from hnnsym.artifacts import (
    OUTPUT_MARKER,
    claim_output_dir,
    mark_output_dir,
    now_utc,
    sha256,
    versions,
    write_text,
)
from hnnsym.config.build import build_integrator, model_from_checkpoint, model_spec, same_model
from hnnsym.config.runtime import configure, resolve_dtype
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import Dataset, made_by_generate, read_dataset
from hnnsym.errors import UserError
from hnnsym.evaluation import plots
from hnnsym.evaluation.constrained import constrained_summary, evaluate_constrained, is_constrained
from hnnsym.evaluation.measured import evaluate_measured, measured_summary
from hnnsym.evaluation.metrics import (
    RolloutMetrics,
    RolloutResult,
    damping_metrics,
    default_grid_points,
    fit_initial_states,
    grid_errors,
    rollout,
    rollout_metrics,
)
from hnnsym.evaluation.positions import evaluate_positions, position_summary
from hnnsym.evaluation.summary import number, summary_text
from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.physics.constrained import coordinates_problem
from hnnsym.physics.dissipative import is_dissipative_model
from hnnsym.physics.models import is_position_model
from hnnsym.physics.systems import MEASURED, System, system_from_config
from hnnsym.resources import check_memory
from hnnsym.training.checkpoints import load_checkpoint as read_checkpoint
from hnnsym.training.checkpoints import trained_options
from hnnsym.training.losses import data_problem

CHECKPOINT_KEYS = ("model", "model_config", "dim", "system")


def train_command() -> str:
    """``python -m hnnsym.train`` with this run's overrides (evaluate's own ones left out)."""
    if not HydraConfig.initialized():  # called in-process, not from the command line
        return "python -m hnnsym.train with this run's overrides"
    overrides = [
        o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith("eval.")
    ]
    return "python -m hnnsym.train " + shlex.join(overrides)


def load_checkpoint(run_dir: Path, which: str) -> tuple[Path, dict]:
    path = run_dir / "checkpoints" / f"{which}.pt"
    if not path.exists():
        raise UserError(f"no checkpoint at {path}; run `{train_command()}` first")
    payload = read_checkpoint(path)
    missing = [k for k in CHECKPOINT_KEYS if not isinstance(payload, dict) or k not in payload]
    if missing:
        raise UserError(f"checkpoint {path} lacks {missing}; was it written by hnnsym.train?")
    return path, payload


def build_model(payload: dict, path: Path, device: torch.device, dtype: torch.dtype) -> nn.Module:
    try:
        model = model_from_checkpoint(payload)
    except (RuntimeError, ValueError, TypeError, KeyError) as err:
        raise UserError(f"checkpoint {path}: cannot rebuild its model ({err})") from err
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model


def jsonable(value: Any) -> Any:
    """Plain JSON: non-finite floats become null, tuples lists, numpy/torch scalars Python."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def draw_figures(
    cfg: DictConfig,
    out: Path,
    system: System,
    model: nn.Module,
    offset: float,
    truth: torch.Tensor,
    t: torch.Tensor,
    result: RolloutResult,
    roll: RolloutMetrics,
    data: Dataset,
) -> list[str]:
    """Write the figures into ``out``; returns their names (without .png)."""
    e = cfg.eval
    k = min(int(e.plot_trajectories), truth.shape[1])
    per = roll.per_trajectory
    figures = []
    if has_hamiltonian(model):
        plots.plot_hamiltonian_slice(system, model, offset, out / "hamiltonian.png",
                                     e.slice_points, e.chunk, truth.device)  # fmt: skip
        figures.append("hamiltonian")
    if k:
        plots.plot_phase_portraits(truth[:, :k], result.states[:, :k], system.dim,
                                   out / "phase_portrait.png")  # fmt: skip
        plots.plot_energy(t - t[0], per["energy_true"][:, :k], per["energy_data"][:, :k],
                          per["energy_pred"][:, :k], out / "energy.png")  # fmt: skip
        figures += ["phase_portrait", "energy"]
    plots.plot_rollout_error(t - t[0], per["l2"], per["rel_err"], e.valid_threshold,
                             out / "rollout_error.png")  # fmt: skip
    figures.append("rollout_error")
    if e.plot_training_data:
        plots.plot_training_data(data.splits["train"].observed, system.dim, out / "training_data.png",
                                 max_points=e.scatter_points,
                                 generator=torch.Generator().manual_seed(cfg.seed))  # fmt: skip
        figures.append("training_data")
    return figures


def recorded_config(cfg: DictConfig, payload: dict) -> dict:
    """This evaluation's resolved config, its ``train`` section the one the checkpoint was trained
    with (evaluate composes ``train`` only so that train's overrides are accepted here too)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    if trained := trained_options(payload):
        config["train"] = trained
    return config


def out_dir(cfg: DictConfig) -> Path:
    """Where the evaluation goes: ``eval.out_dir``, by default ``${run_dir}/eval``."""
    return Path(cfg.eval.out_dir) if cfg.eval.out_dir else Path(cfg.run_dir) / "eval"


def earlier_evaluation(out: Path, data_file: Path, data_sha: str, overwrite: bool) -> dict | None:
    """The metrics of the evaluation already in ``out`` (None if there is none, or unreadable),
    after checking that this one may replace it: it must be of the same data (sha256), unless
    ``overwrite``. UserError otherwise, before any work is done or file written."""
    path = out / "metrics.json"
    if not path.exists():
        return None
    try:
        earlier = json.loads(path.read_text())
        data = earlier["data"]
        sha, file = str(data["sha256"]), data.get("file")
    except (OSError, ValueError, KeyError, TypeError):
        earlier, sha, file = None, None, None
    if overwrite or sha == data_sha:
        return earlier if isinstance(earlier, dict) else None
    keep = (
        "pass eval.overwrite=true to replace it, or eval.out_dir=<dir> to write this one elsewhere"
    )
    if sha is None:
        raise UserError(f"{out} holds an evaluation ({path}) that does not say which data it is "
                        f"of; {keep}")  # fmt: skip
    if file == str(data_file):
        what = (f"of {file} as it was before it changed (sha256 {sha[:12]}…, now "
                f"{data_sha[:12]}…)")  # fmt: skip
    else:
        what = f"of other data, {file} (sha256 {sha[:12]}…), not of {data_file} ({data_sha[:12]}…)"
    raise UserError(f"{out} holds an evaluation {what}; {keep}")


EVAL_DIR = "the evaluation directory"


@contextlib.contextmanager
def replacing_evaluation(out: Path, overwrite: bool) -> Iterator[None]:
    """Claim ``out`` (new, or one hnnsym wrote: ``claim_output_dir``) and take the replaced
    evaluation's metrics.json away for the block, so that a metrics.json stands only beside the
    files of the evaluation it describes: one killed midway leaves none. When the block fails
    before it wrote a file, the old metrics.json is put back. Temporaries of an earlier
    evaluation killed mid-write are removed."""
    claim_output_dir(out, "evaluate", overwrite, "eval.overwrite", ("metrics.json",), EVAL_DIR)
    mark_output_dir(out, "evaluate", EVAL_DIR)
    for stale in out.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    metrics = out / "metrics.json"
    previous = metrics.read_bytes() if metrics.is_file() else None
    metrics.unlink(missing_ok=True)
    started = time.time_ns()
    try:
        yield
    except BaseException:
        untouched = all(p.stat().st_mtime_ns < started for p in out.iterdir() if p.is_file()
                        and p.name != OUTPUT_MARKER)  # fmt: skip
        if previous is not None and untouched and not metrics.exists():
            metrics.write_bytes(previous)
        raise


def remove_leftovers(out: Path, earlier: dict | None, written: list[str]) -> None:
    """Delete the files the replaced evaluation listed that this one did not write (a figure
    switched off), so ``out`` holds one evaluation."""
    files = (earlier or {}).get("files")
    if not isinstance(files, dict):
        return
    listed = [files.get("rollout"), *(files.get("figures") or [])]
    for name in listed:
        if isinstance(name, str) and name == Path(name).name and name not in written:
            (out / name).unlink(missing_ok=True)


def overrides() -> list[str] | None:
    """This evaluation's command-line overrides (None when called in-process)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def hamiltonian_metrics(
    cfg: DictConfig,
    out: Path,
    system: System,
    model: nn.Module,
    truth: torch.Tensor,
    t: torch.Tensor,
    obs_dt: float,
    steps: int,
    substeps: int,
    data: Dataset,
    payload: dict,
    reference: str,
) -> tuple[dict, pd.DataFrame, list[str]]:
    """The metrics (with notes), per-step curves and figures of a model of (q, p) states: H and
    its vector field on the grid, and the rollout through the integrator group from the test
    initial conditions ``truth[0]`` (``eval.init=observed``: the first observed test states;
    ``fitted``: the starts fitted to the first ``eval.init_steps`` + 1 of them,
    ``fit_initial_states``)."""
    e = cfg.eval
    device, dtype = truth.device, truth.dtype
    data_file = Path(cfg.data_file)
    # grid errors of H and of its vector field
    points = int(e.grid_points or default_grid_points(system.dim))
    grid = system.grid(points).to(device, dtype)
    if grid.shape[0] == 0:
        raise UserError(f"eval.grid_points={points} leaves no point inside {system.name}'s domain")
    grid_m = grid_errors(system, model, grid, e.chunk)

    # rollout of the learned H from the test initial conditions (clean, else observed)
    try:
        integ = build_integrator(cfg.integrator)
    except ValueError as err:
        raise UserError(str(err)) from err
    start, fitted = truth[0], {"rollout_init": e.init}
    if e.init != "first":
        k = 0 if e.init == "observed" else int(e.init_steps)
        observed = torch.as_tensor(data.splits["test"].observed[: truth.shape[1], : k + 1])
        observed = observed.transpose(0, 1).to(device, dtype)
        start = observed[0]
        if e.init == "fitted":
            start, rms = fit_initial_states(model, observed, obs_dt, integ, substeps=substeps,
                                            iterations=int(e.init_iterations),
                                            segment=e.segment)  # fmt: skip
            fitted |= {"init_steps": k, "init_fit_rms": float(rms[torch.isfinite(rms)].mean())}
        fitted |= {
            "start_error": float((start - truth[0]).norm(dim=-1).mean()),
            "start_error_observed": float((observed[0] - truth[0]).norm(dim=-1).mean()),
        }
    result = rollout(model, start, obs_dt, steps, integ, substeps=substeps, segment=e.segment)
    roll = rollout_metrics(result, truth, t, system, model, e.valid_threshold, e.chunk)

    # figures, curves, metrics
    figures = (
        draw_figures(cfg, out, system, model, grid_m["h_offset"], truth, t, result, roll, data)
        if e.figures
        else []
    )
    curves = pd.DataFrame({key: v.detach().cpu().numpy() for key, v in roll.curves.items()})
    curves.insert(0, "step", range(len(curves)))
    notes = []
    if not has_hamiltonian(model):
        notes.append(
            f"model {payload['model_config'].get('name')} learns a vector field without a "
            "Hamiltonian: the H grid errors (h_l1, h_l1_raw, h_l1_rel) and energy_drift_pred are "
            "null; vf_l1/vf_rel and the rollout metrics are defined"
        )
    if reference == "observed":
        notes.append(
            f"{data_file} has no clean test trajectories: the rollouts start from the observed "
            "test states and are compared with them, so the rollout errors include the "
            "measurement noise, and energy_drift_data_max is the true H along the observed states"
        )
    core = {
        **grid_m,
        "notes": notes,
        "grid_points_per_axis": points,
        **roll.summary,
        "rollout_substeps": substeps,
        "rollout_integrator": integ.name,
        "rollout_reference": reference,
        **fitted,
        "rollout_failures": sorted({r for r in result.fail_reason if r}),
    }
    return core, curves, figures


def evaluate(cfg: DictConfig) -> dict:
    """Compute, draw and write everything for the run of ``cfg``; returns the metrics dict (as
    written to ``<eval.out_dir>/metrics.json``)."""
    e = validated(cfg, "system", "noise", "train", "eval").eval
    device, dtype = configure(cfg), resolve_dtype(e.dtype)
    run_dir = Path(cfg.run_dir)
    out = out_dir(cfg)
    ckpt_path, payload = load_checkpoint(run_dir, e.checkpoint)
    asked = OmegaConf.to_container(cfg.model, resolve=True)
    if not same_model(model_spec(payload["model_config"]), model_spec(asked)):
        raise UserError(
            f"checkpoint {ckpt_path} holds model {payload['model_config']}, but the config asks for "
            f"{asked}; evaluate with the overrides the run was trained with"
        )
    model = build_model(payload, ckpt_path, device, dtype)
    system: System = system_from_config(payload["system"])
    if system.dim != payload["dim"]:
        raise UserError(
            f"checkpoint {ckpt_path}: dim {payload['dim']}, {system.name} has {system.dim}"
        )
    if problem := coordinates_problem(system.name, model):  # Finzi et al.'s coordinates
        raise UserError(f"checkpoint {ckpt_path}: {problem}")

    data_file = Path(cfg.data_file)
    # a recording's evaluation fits its linear baseline on the train split
    train_too = (e.figures and e.plot_training_data) or not system.known
    splits = ("test", "train") if train_too else ("test",)
    data = read_dataset(
        data_file, system=system.name, dim=system.dim, splits=splits, memory_limit=cfg.memory_limit
    )
    width = data.splits["test"].observed.shape[-1]  # positions only (d) or states (2d)
    observes = "q" if is_position_model(model) else "qp"
    if problem := data_problem(observes, width, system.dim, model, cfg.method.name, str(data_file)):
        raise UserError(problem)
    data_sha = sha256(data_file)
    if payload.get("data_sha256") not in (None, data_sha):
        print(
            f"warning: {data_file} (sha256 {data_sha[:12]}…) is not the file this model was trained "
            f"on ({payload.get('data_file')}, sha256 {str(payload['data_sha256'])[:12]}…)",
            file=sys.stderr,
        )
    earlier = earlier_evaluation(out, data_file, data_sha, bool(e.overwrite))
    if e.grid_points is not None:  # the float64 box grid of H's metrics, before the filter
        box = float(e.grid_points) ** (2 * system.dim) * 2 * system.dim * 8
        check_memory(3 * box, f"eval.grid_points={e.grid_points}", cfg.memory_limit)
    with replacing_evaluation(out, bool(e.overwrite)):
        obs_dt = float(data.attrs["obs_dt"])  # checked by read_dataset
        test = data.splits["test"]
        # rollouts are compared with the ground truth when the file has one, else with the data
        reference, states = (
            ("clean", test.clean) if test.clean is not None else ("observed", test.observed)
        )
        if states.shape[-1] != 2 * system.dim and system.known:  # a recording: positions too
            raise UserError(
                f"the test split of {data_file} has no clean states and its observed ones are not "
                f"(q, p) states {states.shape}; evaluate needs one of them (a clean dataset)"
            )
        available = states.shape[1] - 1
        steps = available if e.rollout_steps is None else int(e.rollout_steps)
        if steps < 1:
            raise UserError(f"the test split of {data_file} has no steps to roll out")
        if steps > available:
            raise UserError(
                f"eval.rollout_steps={steps} exceeds the {available} steps of the test split"
            )
        n = min(int(e.max_trajectories or states.shape[0]), states.shape[0])
        truth = torch.as_tensor(states[:n, : steps + 1]).transpose(0, 1).to(device, dtype)
        t = torch.as_tensor(test.t[: steps + 1]).to(device, dtype)
        substeps = int(e.substeps or trained_options(payload).get("substeps") or 1)
        if e.init != "first":
            where = None
            if is_constrained(system) or is_position_model(model) or not system.known:
                where = "a model of (q, p) states of a known system (not this one)"
            elif test.observed.shape[-1] != 2 * system.dim:
                where = "observed (q, p) states in the test split"
            elif e.init == "fitted" and e.init_steps > steps:
                where = f"eval.init_steps <= the {steps} rolled-out steps, got {e.init_steps}"
            if where:
                raise UserError(f"eval.init={e.init} needs {where}")

        if is_constrained(system):  # Finzi et al.: rollouts compared in Cartesian coordinates
            fine_dt = data.attrs.get("fine_dt")
            core, curves, figures = evaluate_constrained(
                cfg, out, system, model, truth, t, obs_dt, steps, substeps, fine_dt
            )
        elif not system.known:  # a recording (hnnsym.ingest): no true H, its own units
            core, curves, figures = evaluate_measured(cfg, out, system, model, truth, t, obs_dt,
                                                      steps, substeps, data, payload)  # fmt: skip
        elif is_position_model(
            model
        ):  # learned from positions only (Aoshima et al.): Eq. 12 / recurrences
            core, curves, figures = evaluate_positions(cfg, out, system, model, truth, t, obs_dt)
        else:
            core, curves, figures = hamiltonian_metrics(
                cfg, out, system, model, truth, t, obs_dt, steps, substeps, data, payload, reference
            )
            # the learned damping rate beside the true one (generate's files omit damping 0)
            true_rate = (data.attrs.get("system_params") or {}).get("damping")
            if true_rate is None and made_by_generate(data.attrs):
                true_rate = 0.0
            if is_dissipative_model(model) or true_rate:
                core |= damping_metrics(model, truth, true_rate, e.chunk)
        write_text(out / "rollout.csv", curves.to_csv(index=False))
        metrics = {
            **core,
            "checkpoint": {
                "path": str(ckpt_path),
                "which": e.checkpoint,
                "epoch": payload.get("epoch"),
            },
            "data": {
                "file": str(data_file),
                "sha256": data_sha,
                "checkpoint_sha256": payload.get("data_sha256"),
                "obs_dt": obs_dt,
                "test_trajectories": n,
                "train_trajectories": data.attrs.get("n_train"),
                "clean": reference == "clean",
                "made_by_generate": made_by_generate(data.attrs),
                "noise_std": data.attrs.get("noise_std"),
            },
            "system": {"name": system.name, "params": dict(system.params)},
            "model_config": payload["model_config"],
            "files": {
                "dir": str(out),
                "rollout": "rollout.csv",
                "figures": [f"{f}.png" for f in figures],
            },
            "config": recorded_config(cfg, payload),
            "overrides": overrides(),
            "versions": versions(),
            "created": now_utc(),
        }
        metrics = jsonable(metrics)
        write_text(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        remove_leftovers(out, earlier, ["rollout.csv", *metrics["files"]["figures"]])
    return metrics


def summary(m: dict, out: Path | None = None) -> str:
    """A few lines for the terminal: the headline numbers and where the files are (in
    ``m["files"]["dir"]``; ``out`` for metrics that do not record it)."""
    out = Path(m["files"].get("dir") or out)
    if m.get("prediction"):  # learned from positions only: hnnsym.evaluation.positions
        return position_summary(m, out)
    if m.get("system", {}).get("name") == MEASURED:  # no true H: hnnsym.evaluation.measured
        return measured_summary(m, out)
    if "floor_rel_err_gmean" in m:  # a constrained system: hnnsym.evaluation.constrained
        return constrained_summary(m, out)

    f = partial(number, m)  # f(key): the metric for the terminal

    body = (
        f"  H on {m['grid_size']} grid points: h_l1 {f('h_l1')} (raw {f('h_l1_raw')}, "
        f"rel {f('h_l1_rel')}); vector field l1 {f('vf_l1')} (rel {f('vf_rel')})\n"
        f"  rollout of {m['rollout_trajectories']} test trajectories to t = "
        f"{m['rollout_horizon']:g} ({m['rollout_integrator']}, h = {m['rollout_dt']:g}): "
        f"mse {f('traj_mse')}, rel. error gmean {f('rel_err_gmean')}, valid time "
        f"{f('vpt_mean')} (threshold {m['vpt_threshold']:g}), true-energy drift max "
        f"{f('energy_drift_true_max')}, failed {100 * m['rollout_failed']:.3g} %"
    )
    if "damping_true" in m:
        body += (
            f"\n  damping: learned {f('damping_learned')}, true {f('damping_true')} (rel. error "
            f"{f('damping_rel_err')}; eigenvalues of R_pp {m['damping_eigenvalues']})"
        )
    return summary_text(m, out, body)
