"""The evaluate stage: ``evaluate(cfg)`` computes the metrics and figures of a trained run (same
overrides as ``train``).

Reads ``${run_dir}/checkpoints/<eval.checkpoint>.pt`` and the test split of ``${data_file}``;
writes ``metrics.json``, ``rollout.csv`` and the figures ``*.png`` into ``eval.out_dir`` (null:
``${run_dir}/eval``). An evaluation there of other data (another sha256) is replaced only with
``eval.overwrite=true``.

Every run goes through the same steps (``evaluate``): load the run, build the ``Problem``, and
through the part for its kind (``hnnsym.evaluation.registry``) roll out, compute the metrics, the
model's extras and the baselines, draw the figures; then write.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch import nn

from hnnsym.artifacts import now_utc, sha256, versions, write_text
from hnnsym.checkpoints import run_checkpoint, trained_options
from hnnsym.compatibility import (
    coordinates_problem,
    data_problem,
    momenta_problem,
    recording_model_config,
)
from hnnsym.config.build import model_from_checkpoint, model_spec, same_model
from hnnsym.config.runtime import configure, resolve_dtype
from hnnsym.config.schemas import validated
from hnnsym.data.chains import tracked_points
from hnnsym.data.hdf5 import Dataset, made_by_generate, read_dataset
from hnnsym.data.velocities import velocity_map
from hnnsym.errors import UserError
from hnnsym.evaluation.extras import extras
from hnnsym.evaluation.output import (
    earlier_evaluation,
    jsonable,
    out_dir,
    remove_leftovers,
    replacing_evaluation,
)
from hnnsym.evaluation.problem import Problem
from hnnsym.evaluation.registry import part_for, summary_part
from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.systems import System, system_from_config
from hnnsym.resources import check_memory


def train_command() -> str:
    """``python -m hnnsym.train`` with this run's overrides (evaluate's own ones left out)."""
    if not HydraConfig.initialized():  # called in-process, not from the command line
        return "python -m hnnsym.train with this run's overrides"
    overrides = [
        o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith("eval.")
    ]
    return "python -m hnnsym.train " + shlex.join(overrides)


def load_run(
    cfg: DictConfig, device: torch.device, dtype: torch.dtype
) -> tuple[Path, dict, nn.Module, System]:
    """The checkpoint (path, payload) of ``cfg``'s run, its model and system; UserError when
    they do not fit the config or each other."""
    e = cfg.eval
    ckpt_path, payload = run_checkpoint(
        Path(cfg.run_dir), e.checkpoint, f"run `{train_command()}` first"
    )
    asked = OmegaConf.to_container(cfg.model, resolve=True)
    system: System = system_from_config(payload["system"])
    attrs = (
        read_dataset(Path(cfg.data_file), splits=()).attrs if Path(cfg.data_file).is_file() else {}
    )
    asked = recording_model_config(asked, system.name, attrs)  # as train adapted it
    if not same_model(model_spec(payload["model_config"]), model_spec(asked)):
        raise UserError(
            f"checkpoint {ckpt_path} holds model {payload['model_config']}, but the config asks for "
            f"{asked}; evaluate with the overrides the run was trained with"
        )
    model = build_model(payload, ckpt_path, device, dtype)
    if system.dim != payload["dim"]:
        raise UserError(
            f"checkpoint {ckpt_path}: dim {payload['dim']}, {system.name} has {system.dim}"
        )
    if problem := coordinates_problem(system.name, model, tracked_points(attrs)):
        raise UserError(f"checkpoint {ckpt_path}: {problem}")
    return ckpt_path, payload, model, system


def build_model(payload: dict, path: Path, device: torch.device, dtype: torch.dtype) -> nn.Module:
    try:
        model = model_from_checkpoint(payload)
    except (RuntimeError, ValueError, TypeError, KeyError) as err:
        raise UserError(f"checkpoint {path}: cannot rebuild its model ({err})") from err
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return model


def read_data(cfg: DictConfig, model: nn.Module, system: System) -> Dataset:
    """The evaluated split of ``cfg.data_file`` (``eval.split``: test, or val to choose settings
    without the test windows), under the key "test" that every part reads, and the train split
    where a figure or a baseline needs it; UserError when the model does not fit its
    observations."""
    e, data_file = cfg.eval, Path(cfg.data_file)
    # a recording's evaluation fits its linear baseline on the train split
    train_too = (e.figures and e.plot_training_data) or not system.known
    splits = (e.split, "train") if train_too else (e.split,)
    data = read_dataset(
        data_file, system=system.name, dim=system.dim, splits=splits, memory_limit=cfg.memory_limit
    )
    if e.split != "test":
        data.splits["test"] = data.splits.pop(e.split)
    width = data.splits["test"].observed.shape[-1]  # positions only (d) or states (2d)
    observes = "q" if has(model, ModelCapability.POSITION_ONLY) else "qp"
    if problem := data_problem(observes, width, system.dim, model, cfg.method.name, str(data_file)):
        raise UserError(problem)
    return data


def build_problem(
    cfg: DictConfig, out: Path, model: nn.Module, system: System, data: Dataset, payload: dict,
    device: torch.device, dtype: torch.dtype,
) -> Problem:  # fmt: skip
    """The test trajectories to roll out on: clean when the file has them, else observed; as
    many steps and trajectories as ``eval.rollout_steps`` and ``eval.max_trajectories`` ask."""
    e, data_file = cfg.eval, Path(cfg.data_file)
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
    obs_dt = float(data.attrs["obs_dt"])  # checked by read_dataset
    velocities = None
    if has(model, ModelCapability.OWN_MOMENTA):
        if problem := momenta_problem(model, system, data.attrs, truth, str(data_file)):
            raise UserError(problem)
        velocities = velocity_map(system, data.attrs)
    return Problem(cfg, out, model, system, data, payload, truth, t, obs_dt, steps, substeps,
                   reference, velocities)  # fmt: skip


def check_init(p: Problem, starts: bool) -> None:
    """UserError when ``eval.init`` asks for starts that the part (``starts``) or data lack."""
    e = p.e
    if e.init == "first":
        return
    where = None
    if not starts:
        where = "a model of (q, p) states of a known system (not this one)"
    elif p.data.splits["test"].observed.shape[-1] != 2 * p.system.dim:
        where = "observed (q, p) states in the test split"
    elif e.init == "fitted" and e.init_steps > p.steps:
        where = f"eval.init_steps <= the {p.steps} rolled-out steps, got {e.init_steps}"
    if where:
        raise UserError(f"eval.init={e.init} needs {where}")


def recorded_config(cfg: DictConfig, payload: dict) -> dict:
    """This evaluation's resolved config, its ``train`` section the one the checkpoint was trained
    with (evaluate composes ``train`` only so that train's overrides are accepted here too)."""
    config = OmegaConf.to_container(cfg, resolve=True)
    if trained := trained_options(payload):
        config["train"] = trained
    return config


def overrides() -> list[str] | None:
    """This evaluation's command-line overrides (None when called in-process)."""
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None


def evaluate(cfg: DictConfig) -> dict:
    """Compute, draw and write everything for the run of ``cfg``; returns the metrics dict (as
    written to ``<eval.out_dir>/metrics.json``)."""
    e = validated(cfg, "system", "noise", "train", "eval").eval
    device, dtype = configure(cfg), resolve_dtype(e.dtype)
    out = out_dir(cfg)
    ckpt_path, payload, model, system = load_run(cfg, device, dtype)
    data = read_data(cfg, model, system)
    data_file = Path(cfg.data_file)
    data_sha = sha256(data_file)
    if payload.get("data_sha256") not in (None, data_sha):
        print(
            f"warning: {data_file} (sha256 {data_sha[:12]}…) is not the file this model was trained "
            f"on ({payload.get('data_file')}, sha256 {str(payload['data_sha256'])[:12]}…)",
            file=sys.stderr,
        )
    earlier = earlier_evaluation(out, data_file, data_sha, bool(e.overwrite), e.split)
    if e.grid_points is not None:  # the float64 box grid of H's metrics, before the filter
        box = float(e.grid_points) ** (2 * system.dim) * 2 * system.dim * 8
        check_memory(3 * box, f"eval.grid_points={e.grid_points}", cfg.memory_limit)
    with replacing_evaluation(out, bool(e.overwrite)):
        problem = build_problem(cfg, out, model, system, data, payload, device, dtype)
        part = part_for(problem)
        check_init(problem, part.starts)
        rolled = part.roll_out(problem)
        core, curves = part.metrics(problem, rolled)
        core |= extras(problem, rolled)
        found, columns = part.baselines(problem, rolled, core)
        core |= found
        curves = pd.concat([curves, pd.DataFrame(columns, index=curves.index)], axis=1)
        figures = part.figures(problem, rolled, curves) if e.figures else []
        write_text(out / "rollout.csv", curves.to_csv(index=False))
        metrics = {
            **core,
            "checkpoint": {
                "path": str(ckpt_path),
                "which": e.checkpoint,
                "epoch": payload.get("epoch"),
                **({"refit": payload["refit"]} if "refit" in payload else {}),  # train.refit
            },
            "data": {
                "file": str(data_file),
                "sha256": data_sha,
                "split": e.split,
                "checkpoint_sha256": payload.get("data_sha256"),
                "obs_dt": problem.obs_dt,
                "test_trajectories": int(problem.truth.shape[1]),
                "train_trajectories": data.attrs.get("n_train"),
                "clean": problem.reference == "clean",
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
    return summary_part(m).summary(m, out)
