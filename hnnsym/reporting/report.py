"""The generic report: the runs found, grouped by the config keys that vary between them (or the
ones asked for), with mean ± std over seeds of the requested metrics, written as CSV, Markdown,
LaTeX and a bar plot."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hnnsym.artifacts import save_figure, write_text
from hnnsym.errors import UserError
from hnnsym.reporting.figures import report_figure
from hnnsym.reporting.runs import RunSet, load_runs
from hnnsym.reporting.tables import (
    aggregate,
    choose_keys,
    display_name,
    duplicate_seeds,
    key_values,
    resolve_key,
    to_csv,
    to_latex,
    to_markdown,
)


@dataclass
class Report:
    """A built report: the runs, what they are grouped by and the aggregated table."""

    runs: RunSet
    keys: list[str]  # the config keys grouped by
    metrics: list[str]  # the table's metrics
    table: pd.DataFrame  # aggregate() of the complete runs
    notes: list[str]
    constants: dict[str, object]  # config choices common to every run (system, model, ...)
    plot: list[str] = field(default_factory=list)  # the plotted metrics
    hue: str | None = None  # the config key that colours the bars


# The baselines a recording's evaluation puts beside its errors (hnnsym.evaluation.horizons):
# metric ``<m>`` has ``<m>_<baseline>`` for each.
BASELINES = ("no_motion", "constant_velocity", "linear")


def beside_baselines(metrics: Sequence[str], available: Sequence[str]) -> list[str]:
    """``metrics`` with, right after each, its baselines' columns where the runs have them
    (``mse_h12`` -> ``mse_h12``, ``mse_h12_no_motion``, ``mse_h12_constant_velocity``,
    ``mse_h12_linear``), each once."""
    out: list[str] = []
    for m in metrics:
        for key in (m, *(f"{m}_{b}" for b in BASELINES)):
            if key not in out and (key == m or key in available):
                out.append(key)
    return out


def build_report(
    patterns: str | Iterable[str],
    metrics: Sequence[str],
    group_by: Sequence[str] | None = None,
    ignore: Iterable[str] = (),
    plot: Sequence[str] = (),
    hue: str | None = None,
    eval_dir: str = "eval",
) -> Report:
    """Find and read the runs (their evaluation in ``eval_dir``), check the requested metrics and
    keys, choose the grouping keys (``group_by`` None: ``choose_keys``) and aggregate the complete
    runs."""
    runset = load_runs(patterns, eval_dir)
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
    metrics = beside_baselines(metrics, runset.metric_keys)
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
        if display_name(k) != k and k not in keys and key_values(complete[k]).nunique() == 1
    }
    table = aggregate(complete, keys, metrics)
    return Report(runset, keys, list(metrics), table, notes, constants, list(plot), hue_key)


def markdown(report: Report, digits: int, title: str) -> str:
    """The Markdown report: what was grouped, the table, and the notes (incomplete runs, ...)."""
    r = report
    fixed = ", ".join(f"{k}={v}" for k, v in r.constants.items()) or "none"
    by = ", ".join(display_name(k) for k in r.keys) or "nothing (all runs are one configuration)"
    notes = "\n".join(f"- {n}" for n in r.notes) or "- none"
    table = to_markdown(r.table, r.metrics, digits)
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
    write_text(paths["csv"], to_csv(report.table))
    first = list(dict.fromkeys(["run_dir", "status", *report.keys, "seed"]))
    columns = first + [m for m in report.runs.metric_keys if m not in first] + ["note"]
    runs = report.runs.runs[columns].rename(columns=display_name)
    write_text(paths["runs"], to_csv(runs))
    write_text(paths["md"], markdown(report, digits, name))
    write_text(paths["tex"], to_latex(report.table, report.metrics, digits, caption=name))
    if report.plot:
        complete = report.runs.complete
        paths["png"] = out_dir / f"{name}.png"
        table = aggregate(complete, report.keys, report.plot)
        figure = report_figure(table, complete, report.keys, report.plot, report.hue)
        save_figure(figure, paths["png"])
    return paths
