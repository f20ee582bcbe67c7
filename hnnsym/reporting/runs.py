"""Finding and reading runs: the run dirs below paths or globs, each run's flattened config, its
training summary (from ``metrics.csv``) and its evaluation metrics, gathered in a ``RunSet``.

A run is a directory holding the ``config.yaml`` that ``train`` writes (the resolved config), the
per-epoch ``metrics.csv`` and, once evaluated, ``eval/metrics.json``. Checkpoints are never read.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from hnnsym.errors import UserError, first_line

RUN_CONFIG = "config.yaml"
TRAIN_METRICS = "metrics.csv"
EVAL_METRICS_FILE = "metrics.json"  # in the run's eval dir (eval/ unless told)
# The training summary taken from metrics.csv (see ``train_summary``).
TRAIN_KEYS = (
    "epochs", "train_loss", "val_loss", "best_val_loss", "best_epoch", "time_to_best",
    "train_time", "solver_unconverged",
)  # fmt: skip
# The config groups whose ``name`` is shown without ".name" (system.name -> system).
GROUPS = ("system", "noise", "method", "model", "integrator", "gradient")
SKIP_DIRS = {".hydra", ".submitit"}
# Never grouped by automatically: the replicate (seed), the per-run paths derived from it, and the
# labels the tables read (method.label: the row; chain_run: the chain experiments' folder).
IDENTITY_KEYS = (
    "seed",
    "run_name",
    "run_dir",
    "data_dir",
    "data_file",
    "method.label",
    "chain_run",
)


@dataclass
class RunSet:
    """The runs found: one row per run dir with ``run_dir``, ``status``, ``note``, the flattened
    config (``config_keys``) and the results (``metric_keys``: training summary, eval metrics).
    ``status``: ``complete`` (evaluated), ``stale`` (the evaluation is of another epoch than the
    one the training now holds), ``no eval``, or ``no metrics`` (no epoch finished yet)."""

    runs: pd.DataFrame
    config_keys: list[str]
    metric_keys: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> pd.DataFrame:
        return self.runs[self.runs["status"].isin(["complete", "stale"])]


# ---- finding runs ---------------------------------------------------------------------------


def find_runs(patterns: str | Iterable[str]) -> tuple[list[Path], list[str]]:
    """Run dirs from paths or globs (``**`` recursive): a run dir itself, or any directory below
    which run dirs are searched. Returns (sorted unique run dirs, notes about patterns that matched
    nothing)."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    found: set[Path] = set()
    notes = []
    for pattern in map(os.path.expanduser, map(str, patterns)):
        matches = glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]
        matches = [Path(m) for m in matches if Path(m).exists()]
        before = len(found)
        for path in matches:
            if path.is_file() and path.name == RUN_CONFIG:
                path = path.parent
            if path.is_dir():
                found.update(_runs_below(path))
        if len(found) == before:
            notes.append(
                f"{pattern!r} matched no path" if not matches else f"no runs in {pattern!r}"
            )
    return sorted(found), notes


def _runs_below(root: Path) -> list[Path]:
    """root if it is a run dir, else every run dir under it (not inside .hydra/ or .submitit/)."""
    if _is_run(root):
        return [root.resolve()]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        if RUN_CONFIG in filenames and _is_run(Path(dirpath)):
            out.append(Path(dirpath).resolve())
            dirnames[:] = [d for d in dirnames if d != "eval"]
    return out


def _is_run(path: Path) -> bool:
    """Does ``path`` hold a train run: a config.yaml with a top-level ``train:`` section (an
    unreadable one counts when metrics.csv is beside it, so that it is reported, not skipped)?"""
    config = path / RUN_CONFIG
    if path.name in SKIP_DIRS or not config.is_file():
        return False
    try:
        text = config.read_text(errors="replace")
    except OSError:
        return False
    return "\ntrain:" in f"\n{text}" or (path / TRAIN_METRICS).exists()


# ---- reading one run ------------------------------------------------------------------------


def flatten(config: dict) -> dict:
    """Nested config -> {dotted key: scalar}; lists become their JSON text (hashable, sortable)."""
    flat = pd.json_normalize(config, sep=".").to_dict("records")[0] if config else {}
    return {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in flat.items()}


def train_summary(history: pd.DataFrame) -> dict:
    """The training summary of one run from its per-epoch history (metrics.csv).

    best_val_loss / best_epoch / time_to_best: the first epoch of least validation loss (the one
    ``train`` saved as best.pt) and the training wall time up to its end; train_time: the wall
    time of all epochs; epochs, train_loss, val_loss: of the last epoch.
    """
    if history.empty:
        raise ValueError("no epochs")
    missing = [k for k in ("epoch", "train_loss", "val_loss", "wall_time") if k not in history]
    if missing:
        raise ValueError(f"lacks columns {missing}")
    last = history.iloc[-1]
    best = history.loc[history["val_loss"].idxmin()]
    unconverged = history.get("solver_unconverged")
    return {
        "epochs": int(last["epoch"]),
        "train_loss": float(last["train_loss"]),
        "val_loss": float(last["val_loss"]),
        "best_val_loss": float(best["val_loss"]),
        "best_epoch": int(best["epoch"]),
        "time_to_best": float(best["wall_time"]),
        "train_time": float(last["wall_time"]),
        "solver_unconverged": float(unconverged.sum()) if unconverged is not None else math.nan,
    }


def load_run(run_dir: Path, eval_dir: str = "eval") -> tuple[dict, dict, dict]:
    """(status and note, flattened config, results) of one run. Results are the training summary
    and the numeric metrics of the evaluation in ``run_dir/eval_dir`` (JSON null, a non-finite
    value, becomes NaN); the evaluation's own settings join the config as ``eval.*``, its
    integrator (the rollout's) as ``eval.integrator.*`` and the data file's number of training
    trajectories as ``data.n_train``, so that they group too; ``time_to_checkpoint`` is the
    training wall time up to the checkpoint evaluated: ``time_to_best`` for best.pt, ``train_time``
    for last.pt, plus the seconds of its ``train.refit``. ValueError if config.yaml cannot be
    read."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(run_dir / RUN_CONFIG), resolve=False)
    except Exception as err:  # YAML and OmegaConf raise many kinds
        raise ValueError(f"cannot read {run_dir / RUN_CONFIG}: {first_line(err)}") from err
    flat, results = flatten(config), {}

    def status(name: str, note: str = "") -> tuple[dict, dict, dict]:
        return {"status": name, "note": note}, flat, results

    try:
        results.update(train_summary(pd.read_csv(run_dir / TRAIN_METRICS)))
    except FileNotFoundError:
        return status("no metrics", "training has not finished an epoch")
    except (ValueError, KeyError, pd.errors.ParserError) as err:  # EmptyDataError is a ValueError
        return status("no metrics", f"{TRAIN_METRICS}: {first_line(err)}")
    eval_path = run_dir / eval_dir / EVAL_METRICS_FILE
    shown = f"{eval_dir}/{EVAL_METRICS_FILE}"
    if not eval_path.exists():
        if eval_dir == "eval":
            return status("no eval", f"not evaluated: {evaluate_command(config)}")
        return status(
            "no eval",
            f"not evaluated into {eval_dir}/: {evaluate_command(config)} "
            f"eval.out_dir={run_dir / eval_dir}",
        )
    try:
        metrics = json.loads(eval_path.read_text())
        if not isinstance(metrics, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        return status("no eval", f"{shown}: {first_line(err)}")
    for key, value in metrics.items():
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            results[key] = math.nan if value is None else float(value)
    used = metrics.get("config") or {}
    rollout = {"integrator": used["integrator"]} if used.get("integrator") else {}
    flat.update(flatten({"eval": {**(used.get("eval") or {}), **rollout}}))
    n_train = (metrics.get("data") or {}).get("train_trajectories")
    if n_train is not None:  # the data file's, which generate.n_train need not be
        flat["data.n_train"] = n_train
    checkpoint = metrics.get("checkpoint") or {}
    which = checkpoint.get("which", "best")
    expected = results["best_epoch"] if which == "best" else results["epochs"]
    refit = checkpoint.get("refit") or {}
    results["time_to_checkpoint"] = results["time_to_best" if which == "best" else "train_time"]
    results["time_to_checkpoint"] += float(refit.get("seconds", 0.0))
    if checkpoint.get("epoch") is not None and checkpoint["epoch"] != expected:
        return status(
            "stale",
            f"evaluated the {which} checkpoint of epoch {checkpoint['epoch']}, training now has "
            f"it at epoch {expected}: re-run {evaluate_command(config)}",
        )
    return status("complete")


def method_and_model(config: dict) -> tuple[str | None, str | None]:
    """(method, model) config options that rebuild a run. ``method.name`` is the network's name for
    method=hnn (this work); runs made before the method group named the method in ``model.name``
    and the network in ``model.arch``."""
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    network = model.get("arch") or model.get("name")
    method = config["method"].get("name") if isinstance(config.get("method"), dict) else None
    method = method or model.get("name")
    if method is None:
        return None, network
    return ("hnn" if method == network else method), network


def method_names(runs: pd.DataFrame) -> pd.Series:
    """Each run's method: ``method.name``, or ``model.name`` for runs made before the method
    group."""
    names = runs["model.name"] if "model.name" in runs else pd.Series(None, index=runs.index)
    if "method.name" in runs:
        names = runs["method.name"].where(runs["method.name"].notna(), names)
    return names


def evaluate_command(config: dict) -> str:
    """The ``python -m hnnsym.evaluate`` command for a run, from its resolved train config: the
    groups it was made with, and the system's own settings (``++system.params.links=2``), which
    evaluate needs to rebuild the system the checkpoint was trained on."""
    method, model = method_and_model(config)
    choices = {g: config[g]["name"] for g in GROUPS if isinstance(config.get(g), dict)}
    choices |= {k: v for k, v in (("method", method), ("model", model)) if v is not None}
    args = [f"{g}={choices[g]}" for g in GROUPS if g in choices]
    system = config.get("system") if isinstance(config.get("system"), dict) else {}
    # ++: set the key whether or not the group's defaults have it (a custom H's constants)
    args += [_override(f"++system.{k}", v) for k, v in _leaves(system) if k != "name"]
    args += [f"seed={config.get('seed')}", _override("run_dir", config.get("run_dir"))]
    args += [_override("data_file", config.get("data_file"))]
    return "python -m hnnsym.evaluate " + " ".join(args)


def _leaves(tree: dict, prefix: str = "") -> Iterable[tuple[str, object]]:
    """(dotted key, value) of every non-dict value of a nested dict."""
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _override(key: str, value: object) -> str:
    """``key=value`` as one shell word that Hydra's override grammar reads back as ``value``."""
    return shlex.quote(f"{key}={_hydra_value(value)}")


def _hydra_value(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(_hydra_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.fullmatch(text) and text.lower() not in ("null", "true", "false"):
        try:
            float(text)  # "1e3", "nan", "inf": Hydra would read a number
        except ValueError:
            return text  # a path or a name: as it is
    return '"' + text.replace('"', '\\"') + '"'


_BARE = re.compile(r"[A-Za-z0-9_./+-]+")


def load_runs(patterns: str | Iterable[str], eval_dir: str = "eval") -> RunSet:
    """Find and read every run, with the evaluation in each run's ``eval_dir`` (UserError when
    none is found)."""
    dirs, notes = find_runs(patterns)
    if not dirs:
        shown = patterns if isinstance(patterns, str) else ", ".join(map(str, patterns))
        raise UserError(
            f"no runs found in {shown}; a run dir is where train wrote config.yaml "
            "(e.g. report.runs=outputs or report.runs='outputs/**/seed*')"
        )
    rows, config_keys, metric_keys = [], {}, {}
    for run_dir in dirs:
        try:
            status, config, results = load_run(run_dir, eval_dir)
        except ValueError as err:
            notes.append(f"skipped: {err}")
            continue
        config_keys.update(dict.fromkeys(config))
        metric_keys.update(dict.fromkeys(results))
        rows.append({"run_dir": str(run_dir), **status, **config, **results})
        if status["status"] != "complete":
            notes.append(f"{status['status']}: {run_dir} ({status['note']})")
    if not rows:
        raise UserError(f"none of the {len(dirs)} run dirs found could be read: {notes[-1]}")
    return RunSet(pd.DataFrame(rows), list(config_keys), list(metric_keys), notes)


def method_labels(runs: pd.DataFrame, legacy: Sequence[str]) -> list[str]:
    """Each run's row label: its config's ``method.label`` (set by the experiment or method config
    that made it), else ``legacy`` (the label of a run made before ``method.label``)."""
    labels = runs["method.label"] if "method.label" in runs else [None] * len(runs)
    return [label if isinstance(label, str) else old for label, old in zip(labels, legacy)]
