"""Aggregate trained and evaluated runs into one table: mean ± std over seeds per configuration.

A run is a directory holding the ``config.yaml`` that ``train`` writes (the resolved config), the
per-epoch ``metrics.csv`` and, once evaluated, ``eval/metrics.json``. Checkpoints are never read.

Grouping: the config is flattened to dotted keys (``system.name``, ``train.lr``, ...). The keys that
vary between runs, minus bookkeeping ones (seed, paths, ...), are the configuration; a key that
only changes together with the others (the parameters of each system, say) is shown through them
and not as a column of its own. Within a group the statistics run over its seeds: mean, sample
standard deviation (ddof = 1; none for a single run) and the count.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from omegaconf import OmegaConf

from hnnsym.artifacts import atomic_path, write_text
from hnnsym.cli import UserError

RUN_CONFIG = "config.yaml"
TRAIN_METRICS = "metrics.csv"
EVAL_METRICS = "eval/metrics.json"
# The training summary taken from metrics.csv (see ``train_summary``).
TRAIN_KEYS = (
    "epochs", "train_loss", "val_loss", "best_val_loss", "best_epoch", "time_to_best",
    "train_time", "solver_unconverged",
)  # fmt: skip
# The config groups whose ``name`` is shown without ".name" (system.name -> system).
GROUPS = ("system", "noise", "model", "integrator", "gradient")
SKIP_DIRS = {".hydra", ".submitit"}
# Never grouped by automatically: the replicate (seed) and the per-run paths derived from it.
IDENTITY_KEYS = ("seed", "run_name", "run_dir", "data_dir", "data_file")


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


def load_run(run_dir: Path) -> tuple[dict, dict, dict]:
    """(status and note, flattened config, results) of one run. Results are the training summary
    and the numeric eval metrics (JSON null, a non-finite value, becomes NaN); the evaluation's own
    settings join the config as ``eval.*``, so that they group too. ValueError if config.yaml
    cannot be read."""
    try:
        config = OmegaConf.to_container(OmegaConf.load(run_dir / RUN_CONFIG), resolve=False)
    except Exception as err:  # YAML and OmegaConf raise many kinds
        raise ValueError(f"cannot read {run_dir / RUN_CONFIG}: {_first_line(err)}") from err
    flat, results = flatten(config), {}

    def status(name: str, note: str = "") -> tuple[dict, dict, dict]:
        return {"status": name, "note": note}, flat, results

    try:
        results.update(train_summary(pd.read_csv(run_dir / TRAIN_METRICS)))
    except FileNotFoundError:
        return status("no metrics", "training has not finished an epoch")
    except (ValueError, KeyError, pd.errors.ParserError) as err:  # EmptyDataError is a ValueError
        return status("no metrics", f"{TRAIN_METRICS}: {_first_line(err)}")
    eval_path = run_dir / EVAL_METRICS
    if not eval_path.exists():
        return status("no eval", f"not evaluated: {evaluate_command(config)}")
    try:
        metrics = json.loads(eval_path.read_text())
        if not isinstance(metrics, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        return status("no eval", f"{EVAL_METRICS}: {_first_line(err)}")
    for key, value in metrics.items():
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            results[key] = math.nan if value is None else float(value)
    flat.update(flatten({"eval": (metrics.get("config") or {}).get("eval") or {}}))
    checkpoint = metrics.get("checkpoint") or {}
    which = checkpoint.get("which", "best")
    expected = results["best_epoch"] if which == "best" else results["epochs"]
    if checkpoint.get("epoch") is not None and checkpoint["epoch"] != expected:
        return status(
            "stale",
            f"evaluated the {which} checkpoint of epoch {checkpoint['epoch']}, training now has "
            f"it at epoch {expected}: re-run {evaluate_command(config)}",
        )
    return status("complete")


def evaluate_command(config: dict) -> str:
    """The ``python -m hnnsym.evaluate`` command for a run, from its resolved train config."""
    args = [f"{g}={config[g]['name']}" for g in GROUPS if isinstance(config.get(g), dict)]
    args += [f"seed={config.get('seed')}", f"run_dir={config.get('run_dir')}"]
    args += [f"data_file={config.get('data_file')}"]
    return "python -m hnnsym.evaluate " + " ".join(args)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_runs(patterns: str | Iterable[str]) -> RunSet:
    """Find and read every run (UserError when none is found)."""
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
            status, config, results = load_run(run_dir)
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


# ---- grouping -------------------------------------------------------------------------------


def display_name(key: str) -> str:
    """system.name -> system (the config choice); other keys stay dotted (train.lr)."""
    group, _, leaf = key.rpartition(".")
    return group if leaf == "name" and group in GROUPS else key


def resolve_key(name: str, columns: Iterable[str], what: str = "report.group_by") -> str:
    """A user's key (``system`` or ``system.name``, ``train.lr``) -> the column it names."""
    columns = list(columns)
    for candidate in (name, f"{name}.name"):
        if candidate in columns:
            return candidate
    shown = [display_name(c) for c in columns]
    more = f", ... ({len(shown)} keys)" if len(shown) > 12 else ""
    raise UserError(f"{what}: no key {name!r} among {', '.join(shown[:12]) or 'none'}{more}")


def _values(series: pd.Series) -> pd.Series:
    """Hashable, sortable values of a key column: as they are when none is missing, else as text
    with '-' for missing (a key that only some runs have)."""
    if series.notna().all():
        return series
    return series.astype(str).where(series.notna(), "-")


def choose_keys(
    runs: pd.DataFrame, config_keys: Sequence[str], ignore: Iterable[str] = ()
) -> list[str]:
    """The config keys that vary between ``runs``, in config order, minus ``IDENTITY_KEYS`` and
    ``ignore`` (names as in ``resolve_key``; a dotted prefix covers its keys: ``eval`` covers
    ``eval.figures``), keeping a key only if it is not already determined by the keys kept before
    it (the group choices first)."""
    ignore = set(ignore) | set(IDENTITY_KEYS)

    def ignored(key: str) -> bool:
        parts = key.split(".")
        return any(".".join(parts[:i]) in ignore for i in range(1, len(parts) + 1)) or (
            display_name(key) in ignore
        )

    varying = [k for k in config_keys if not ignored(k) and _values(runs[k]).nunique() > 1]
    choices = [k for k in varying if display_name(k) != k]
    keys: list[str] = []
    for key in choices + [k for k in varying if k not in choices]:
        if (
            not keys
            or _values(runs[key]).groupby([_values(runs[k]) for k in keys]).nunique().max() > 1
        ):
            keys.append(key)
    return keys


def aggregate(runs: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per configuration: the key columns (display names), ``n`` (runs), ``seeds``, and
    ``<metric>_mean``, ``<metric>_std`` (sample std, ddof = 1: NaN for a single run) per metric.
    NaN metric values (a non-finite result) are left out of that metric's statistics."""
    data = runs.copy()
    labels = [display_name(k) for k in keys]
    for key, label in zip(keys, labels):
        data[label] = _values(data[key])
    if not labels:
        data["all"] = "all runs"
    by = labels or ["all"]
    grouped = data.groupby(by, sort=True, dropna=False)
    out = grouped.size().rename("n").to_frame()
    out["seeds"] = grouped["seed"].agg(lambda s: ",".join(str(x) for x in sorted(s)))
    for metric in metrics:
        values = pd.to_numeric(data[metric], errors="coerce")
        stats = values.groupby([data[c] for c in by], sort=True, dropna=False).agg(["mean", "std"])
        out[f"{metric}_mean"] = stats["mean"]
        out[f"{metric}_std"] = stats["std"]
    out = out.reset_index()
    return out.drop(columns=["all"]) if not labels else out


def duplicate_seeds(runs: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """Notes for configurations holding the same seed more than once (copies, not replicates)."""
    data = runs.assign(**{f"_k{i}": _values(runs[k]) for i, k in enumerate(keys)})
    by = [f"_k{i}" for i in range(len(keys))] + ["seed"]
    notes = []
    for _, part in data.groupby(by, sort=True, dropna=False):
        if len(part) > 1:
            notes.append(
                f"seed {part['seed'].iloc[0]} appears {len(part)} times in one configuration "
                f"(its std then mixes copies with replicates): {', '.join(part['run_dir'])}"
            )
    return notes


# ---- tables ---------------------------------------------------------------------------------


def _fmt(x: float, digits: int) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


def formatted(
    agg: pd.DataFrame, metrics: Sequence[str], digits: int, pm: str = "±"
) -> pd.DataFrame:
    """The aggregated table as text: one ``mean ± std`` column per metric (mean alone for n = 1)."""
    keys = [c for c in agg.columns if c not in {"n", "seeds"} and not c.endswith(("_mean", "_std"))]
    out = agg[keys + ["n"]].copy()
    for metric in metrics:
        mean, std = agg[f"{metric}_mean"], agg[f"{metric}_std"]
        out[metric] = [
            _fmt(m, digits) if not np.isfinite(s) else f"{_fmt(m, digits)} {pm} {_fmt(s, 2)}"
            for m, s in zip(mean, std)
        ]
    return out


def to_latex(agg: pd.DataFrame, metrics: Sequence[str], digits: int, caption: str = "") -> str:
    """A booktabs LaTeX table (pandas Styler): key values and headers escaped, ``$\\pm$``."""
    table = formatted(agg, metrics, digits, pm="$\\pm$")
    text_columns = [c for c in table.columns if c not in metrics and c != "n"]
    styler = table.style.hide(axis="index")
    styler = styler.format(escape="latex", subset=text_columns).format_index(escape="latex", axis=1)
    align = "l" * len(text_columns) + "r" * (len(table.columns) - len(text_columns))
    return styler.to_latex(hrules=True, column_format=align, caption=caption or None)


# ---- plots ----------------------------------------------------------------------------------


def plot_report(
    agg: pd.DataFrame,
    runs: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str],
    path: str | os.PathLike,
    hue: str | None = None,
    title: str = "",
) -> None:
    """One panel per metric: a bar per configuration at its mean, ± std error bars, each run a dot.

    ``agg`` is ``aggregate(runs, keys, metrics)``. Bars of one colour share the value of ``hue``
    (default: the gradient if it varies, else the last key); the other keys make the x positions.
    Log scale when a metric is positive and spans more than a decade. Written atomically (format
    from the suffix)."""
    labels = [display_name(k) for k in keys]
    hue_label = display_name(hue) if hue else None
    if hue_label is None and labels:
        hue_label = "gradient" if "gradient" in labels else labels[-1]
    x_labels = [c for c in labels if c != hue_label]

    def positions(frame: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
        """x tick text and hue text of each row (from the key columns, as text)."""
        text = frame[labels].astype(str)
        x = text[x_labels].agg("\n".join, axis=1) if x_labels else pd.Series("", frame.index)
        h = text[hue_label] if hue_label else pd.Series("", frame.index)
        return x, h

    runs = runs.assign(**{lab: _values(runs[k]) for k, lab in zip(keys, labels)})
    agg_x, agg_h = positions(agg)
    run_x, run_h = positions(runs)
    xs, hs = list(dict.fromkeys(agg_x)), list(dict.fromkeys(agg_h))
    width = 0.8 / len(hs)
    offset = {h: (j - (len(hs) - 1) / 2) * width for j, h in enumerate(hs)}
    colour = {h: f"C{j % 10}" for j, h in enumerate(hs)}

    ncols = {1: 1, 2: 2, 4: 2}.get(len(metrics), 3)
    nrows = math.ceil(len(metrics) / ncols)
    panel_width = max(3.2, 0.55 * len(xs) * len(hs) + 1.2)
    fig = Figure(figsize=(panel_width * ncols, 2.9 * nrows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    for ax, metric in zip(axes, metrics):
        values = pd.to_numeric(runs[metric], errors="coerce")
        for (x, h), row in zip(zip(agg_x, agg_h), agg.itertuples(index=False)):
            pos = xs.index(x) + offset[h]
            mean, std = getattr(row, f"{metric}_mean"), getattr(row, f"{metric}_std")
            ax.bar(pos, mean, width * 0.9, color=colour[h], alpha=0.75)
            if np.isfinite(std):
                ax.errorbar(pos, mean, yerr=std, color="black", capsize=3, lw=1)
            dots = values[(run_x == x) & (run_h == h)].dropna()
            ax.plot(np.full(len(dots), pos), dots, "o", ms=3, color="black", alpha=0.6)
        finite = values[np.isfinite(values)]
        if len(finite) and (finite > 0).all() and finite.max() > 10 * finite.min():
            ax.set_yscale("log")
        ax.set_xticks(range(len(xs)), xs, fontsize=8)
        ax.set_title(metric, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3, which="both")
        if x_labels:
            ax.set_xlabel(" / ".join(x_labels), fontsize=8)
    if hue_label and len(hs) > 1:
        handles = [Patch(color=colour[h], alpha=0.75, label=h) for h in hs]
        fig.legend(handles=handles, title=hue_label, loc="outside right upper", fontsize=8)
    fig.suptitle(
        title or "mean ± std over the runs of each configuration (dots: runs)", fontsize=10
    )
    fmt = os.fspath(path).rsplit(".", 1)[-1].lower()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120)


# ---- the whole report -----------------------------------------------------------------------


@dataclass
class Report:
    runs: RunSet
    keys: list[str]  # the config keys grouped by
    metrics: list[str]  # the table's metrics
    table: pd.DataFrame  # aggregate() of the complete runs
    notes: list[str]
    constants: dict[str, object]  # config choices common to every run (system, model, ...)
    plot: list[str] = field(default_factory=list)  # the plotted metrics
    hue: str | None = None  # the config key that colours the bars


def build_report(
    patterns: str | Iterable[str],
    metrics: Sequence[str],
    group_by: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    plot: Sequence[str] = (),
    hue: str | None = None,
) -> Report:
    """Find and read the runs, check the requested metrics and keys, choose the grouping keys
    (``group_by`` None: ``choose_keys``) and aggregate the complete runs."""
    runset = load_runs(patterns)
    complete = runset.complete
    if complete.empty:
        raise UserError(
            f"found {len(runset.runs)} run(s) but none is evaluated yet: " + "; ".join(runset.notes)
        )
    for what, names in (("metrics", metrics), ("plot", plot)):
        unknown = [m for m in names if m not in runset.metric_keys]
        if unknown:
            raise UserError(
                f"report.{what}: unknown {unknown}; available: {', '.join(runset.metric_keys)}"
            )
    if group_by is None:
        keys = choose_keys(complete, runset.config_keys, ignore)
    else:
        keys = list(dict.fromkeys(resolve_key(k, runset.config_keys) for k in group_by))
    hue_key = None
    if hue is not None:
        hue_key = resolve_key(hue, keys, "report.hue (one of the grouped keys)")
    notes = runset.notes + duplicate_seeds(complete, keys)
    constants = {
        display_name(k): complete[k].iloc[0]
        for k in runset.config_keys
        if display_name(k) != k and k not in keys and _values(complete[k]).nunique() == 1
    }
    table = aggregate(complete, keys, metrics)
    return Report(runset, keys, list(metrics), table, notes, constants, list(plot), hue_key)


def markdown(report: Report, digits: int, title: str) -> str:
    """The Markdown report: what was grouped, the table, and the notes (incomplete runs, ...)."""
    r = report
    fixed = ", ".join(f"{k}={v}" for k, v in r.constants.items()) or "none"
    by = ", ".join(display_name(k) for k in r.keys) or "nothing (all runs are one configuration)"
    notes = "\n".join(f"- {n}" for n in r.notes) or "- none"
    table = formatted(r.table, r.metrics, digits).to_markdown(index=False)
    return (
        f"# {title}\n\n"
        f"{len(r.runs.complete)} evaluated run(s) of {len(r.runs.runs)} found, grouped by {by}; "
        f"mean ± sample std over the runs of each group (n).\nCommon to all runs: {fixed}.\n\n"
        f"{table}\n\n## Notes\n\n{notes}\n"
    )


def write_report(
    report: Report, out_dir: str | os.PathLike, name: str, digits: int = 3
) -> dict[str, Path]:
    """``<name>.csv`` (the aggregated numbers), ``<name>_runs.csv`` (one row per run, incomplete
    ones included), ``<name>.md``, ``<name>.tex`` and, when ``report.plot`` names metrics,
    ``<name>.png`` in ``out_dir``, each written atomically. Returns the paths."""
    out_dir = Path(out_dir)
    paths = {key: out_dir / f"{name}{suffix}" for key, suffix in
             (("csv", ".csv"), ("runs", "_runs.csv"), ("md", ".md"), ("tex", ".tex"))}  # fmt: skip
    write_text(paths["csv"], report.table.to_csv(index=False))
    first = list(dict.fromkeys(["run_dir", "status", *report.keys, "seed"]))
    columns = first + [m for m in report.runs.metric_keys if m not in first] + ["note"]
    runs = report.runs.runs[columns].rename(columns=display_name)
    write_text(paths["runs"], runs.to_csv(index=False))
    write_text(paths["md"], markdown(report, digits, name))
    write_text(paths["tex"], to_latex(report.table, report.metrics, digits, caption=name))
    if report.plot:
        complete = report.runs.complete
        paths["png"] = out_dir / f"{name}.png"
        table = aggregate(complete, report.keys, report.plot)
        plot_report(table, complete, report.keys, report.plot, paths["png"], report.hue)
    return paths


def config_names(value, key: str) -> list[str] | None:
    """A report config value that is a name or a list of names -> list (None stays None)."""
    from omegaconf import OmegaConf

    from hnnsym.cli import UserError

    if value is None:
        return None
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"report.{key} must be a name or a list of names, got {value!r}")
    return value


def checked_runs_and_digits(r) -> tuple[list[str], int]:
    """The ``report.runs`` patterns and ``report.digits`` of a report config, checked."""
    from hnnsym.cli import UserError

    if isinstance(r.digits, bool) or not isinstance(r.digits, int) or r.digits < 1:
        raise UserError(f"report.digits must be a whole number >= 1, got {r.digits!r}")
    runs = config_names(r.runs, "runs")
    if not runs:
        raise UserError("report.runs is empty; give run dirs or globs, e.g. report.runs=outputs")
    return runs, int(r.digits)
