"""Choudhary et al.'s Table 1 from our runs, with the paper's numbers beside ours, and the noise sweep.

The runs are read like the generic report's (``hnnsym.reporting.runs``) and grouped by system and
*method*: the model, with the training improvement ``train.init=smoothed`` as a method of its own.
Any other config key that varies within a method becomes a column too (the table never mixes
configurations silently). Cells are mean ± sample std over the seeds of a group (n), rendered by
``hnnsym.reporting.tables``.

Columns: the paper's two, the H error ``h_l1`` (mean |H_true − H_pred − c| on the evaluation grid)
and the runtime ``time_to_checkpoint``, the training wall time until the checkpoint evaluated
(from metrics.csv): until the epoch of least validation loss for best.pt, the paper's runtime
until validation saturation, and the whole run for last.pt (the weight-averaged rows, whose
average covers the run's second half), each with the paper's published value; then ours:
the rollout error ``traj_mse``, the true-energy drift ``energy_drift_true_max`` and the valid
prediction time ``vpt_mean`` on the test trajectories. The paper's runtimes are from other
hardware and code, so only their ratios between methods compare.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from hnnsym.artifacts import save_figure, write_text
from hnnsym.reporting.figures import noise_sweep_figure
from hnnsym.reporting.runs import IDENTITY_KEYS, load_runs, method_labels, method_names
from hnnsym.reporting.tables import (
    aggregate,
    beside_published,
    display_name,
    ignored,
    to_csv,
    to_latex,
    to_markdown,
)

SYSTEMS = ("double_well", "coupled_oscillator", "henon_heiles")
# The rows in the paper's order: a run's row is its config's method.label (the table1_* experiments
# set it); runs made before the label are placed by method name (config group `method`) here,
# "This work" with train.init=smoothed being ours with the initial-state improvement.
METHODS = {
    "This work": "hnn",
    "This work, smoothed y0": "hnn",
    "This work, EMA": "hnn",
    "This work, SWA, paper's time": "hnn",
    "SHNN": "shnn",
    "NSSNN": "nssnn",
    "HNN (derivative)": "hnn_derivative",
    "NODE": "node",
}
# Choudhary et al., Table 1: (H error, runtime in s until validation loss saturation) per method, system.
PAPER: dict[tuple[str, str], tuple[float, float]] = {
    ("This work", "double_well"): (0.00035, 100.16),
    ("This work", "coupled_oscillator"): (0.74799, 100.11),
    ("This work", "henon_heiles"): (0.02078, 112.18),
    ("SHNN", "double_well"): (0.40925, 81.77),
    ("SHNN", "coupled_oscillator"): (0.76570, 82.61),
    ("SHNN", "henon_heiles"): (0.07238, 96.59),
    ("NSSNN", "double_well"): (0.04303, 101.17),
    ("NSSNN", "coupled_oscillator"): (1.27298, 103.31),
    ("NSSNN", "henon_heiles"): (0.078556, 105.11),
}
# metric key -> column header; "paper_*" columns hold the published values.
COLUMNS = {
    "h_l1": "H error",
    "paper_h_l1": "H error (paper)",
    "time_to_checkpoint": "runtime s",
    "paper_runtime": "runtime s (paper)",
    "traj_mse": "rollout MSE",
    "energy_drift_true_max": "energy drift",
    "vpt_mean": "valid time",
}
OURS = ("h_l1", "time_to_checkpoint", "traj_mse", "energy_drift_true_max", "vpt_mean")
PUBLISHED = ("paper_h_l1", "paper_runtime")  # shown as published, not as mean ± std
PAPER_NOISE = "low"  # the noise group of the paper's setting (std 0.01)
NOISE_METRICS = ("h_l1", "h_l1_rel", "vf_rel", "traj_mse", "vpt_mean")


# ---- methods --------------------------------------------------------------------------------


def method_label(method: str, init: object = None, ema: object = None) -> str:
    """The Table 1 method of a run made before ``method.label``, from its method name, train.init
    (missing: observed) and train.ema (missing or NaN: no weight average)."""
    if method == "hnn":
        if init == "smoothed":
            return "This work, smoothed y0"
        return "This work, EMA" if isinstance(ema, (int, float)) and ema == ema else "This work"
    names = {m: label for label, m in METHODS.items() if m != "hnn"}
    return names.get(method, method)


def with_methods(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs (one row per run, flattened config as ``runs.load_runs`` gives them) with a
    ``method`` column."""
    none = pd.Series(None, index=runs.index)
    init = runs["train.init"] if "train.init" in runs else none
    ema = runs["train.ema"] if "train.ema" in runs else none
    out = runs.copy()
    legacy = [method_label(m, i, a) for m, i, a in zip(method_names(runs), init, ema)]
    out["method"] = method_labels(runs, legacy)
    return out


def extra_keys(runs: pd.DataFrame, config_keys: Iterable[str], ignore: Iterable[str]) -> list[str]:
    """Config keys that vary within a (system, method) group, bookkeeping keys and ``ignore``
    (dotted prefixes cover their keys) left out."""
    ignore = set(ignore) | set(IDENTITY_KEYS)
    ignore |= {
        "system.name",
        "method.name",
        "method.label",
        "model.name",
        "train.init",
        "train.ema",
        "noise",
    }
    groups = [runs["system.name"], runs["method"]]
    return [
        k for k in config_keys
        if k in runs and not ignored(k, ignore)
        and runs[k].astype(str).groupby(groups).nunique().max() > 1
    ]  # fmt: skip


def paper_order(table: pd.DataFrame) -> pd.Series:
    """The rank of each row's (system, method) in the paper's order (SYSTEMS, then METHODS);
    other systems and methods after those, tied."""
    systems = {name: i for i, name in enumerate(SYSTEMS)}
    methods = {name: i for i, name in enumerate(METHODS)}
    system = table["system"].map(systems).fillna(len(systems))
    return system * 100 + table["method"].map(methods).fillna(len(methods))


def setting_labels(table: pd.DataFrame, keys: Sequence[str] = ()) -> pd.Series:
    """The method of each row, with the ``keys`` whose value differs from the table's most common
    one appended (``This work, train.epochs=100``), so that settings of one method stay apart."""
    columns = [display_name(k) for k in keys]
    modes = {c: table[c].astype(str).mode().iloc[0] for c in columns}

    def label(row: pd.Series) -> str:
        extra = [f"{c}={row[c]}" for c in columns if str(row[c]) != modes[c]]
        return ", ".join([row["method"], *extra])

    return table.apply(label, axis=1) if len(table) else table["method"]


# ---- Table 1 --------------------------------------------------------------------------------


def make_table1(runs: pd.DataFrame, keys: Sequence[str] = ()) -> pd.DataFrame:
    """The aggregated table: one row per (system, method, *keys) of ``runs`` (with_methods rows of
    complete runs) and per published (system, method) of the paper, in the paper's order; columns
    system, method, the keys (display names), n, seeds, and ``<metric>_mean``/``_std`` for OURS
    and the paper's ``paper_h_l1``/``paper_runtime`` (std NaN)."""
    paper = pd.DataFrame(
        [
            {"system": s, "method": m, "paper_h_l1_mean": e, "paper_h_l1_std": math.nan,
             "paper_runtime_mean": r, "paper_runtime_std": math.nan}
            for (m, s), (e, r) in PAPER.items()
        ]
    )  # fmt: skip
    agg = aggregate(runs, ["system.name", "method", *keys], OURS) if len(runs) else None
    table = beside_published(agg, paper, ["system", "method"], OURS)
    table = table.assign(_rank=paper_order(table)).sort_values("_rank", kind="stable")
    stats = [f"{m}_{s}" for m in COLUMNS for s in ("mean", "std")]
    labels = ["system", "method", *(display_name(k) for k in keys), "n", "seeds"]
    return table[labels + stats].reset_index(drop=True)


def table_markdown(table: pd.DataFrame, digits: int) -> str:
    """Table 1 as a Markdown table with the COLUMNS headers: ``mean ± std`` for ours, the paper's
    values as published, '-' where there is no value."""
    return to_markdown(table, list(COLUMNS), digits, headers=COLUMNS, exact=PUBLISHED)


def markdown(table: pd.DataFrame, digits: int, notes: Sequence[str] = ()) -> str:
    """The Markdown document: what the columns are, the table and the notes."""
    listed = "\n".join(f"- {n}" for n in notes) or "- none"
    return (
        "# Table 1 (Choudhary et al.) reproduced\n\n"
        "H error: mean |H_true − H_pred − c| on the evaluation grid (c = mean offset); runtime: "
        "training wall time until the checkpoint evaluated: the epoch of least validation loss, "
        "or the whole run for a row that evaluates the last checkpoint (the paper's runtimes are "
        "from its own hardware). Ours: mean ± sample std over n seeds; rollout MSE, energy drift "
        "(max |H_true(ŷ_t) − H_true(ŷ_0)|) and valid time (first t with relative error > 0.1) on "
        "the test trajectories. NODE has no H: its H error is undefined (-).\n\n"
        f"{table_markdown(table, digits)}\n\n## Notes\n\n{listed}\n"
    )


def latex(table: pd.DataFrame, digits: int) -> str:
    """Table 1 as a booktabs LaTeX table (``tables.to_latex``)."""
    caption = (
        "Table 1 of Choudhary et al. reproduced: ours (mean $\\pm$ std over seeds) beside the paper"
    )
    return to_latex(table, list(COLUMNS), digits, caption, headers=COLUMNS, exact=PUBLISHED)


def write_table1(
    table: pd.DataFrame, out_dir: str | Path, digits: int = 3, notes: Sequence[str] = ()
) -> dict[str, Path]:
    """``table1.csv`` (numbers), ``table1.md`` and ``table1.tex`` in out_dir, each atomically."""
    out_dir = Path(out_dir)
    paths = {ext: out_dir / f"table1.{ext}" for ext in ("csv", "md", "tex")}
    write_text(paths["csv"], to_csv(table))
    write_text(paths["md"], markdown(table, digits, notes))
    write_text(paths["tex"], latex(table, digits))
    return paths


def load_method_runs(
    patterns: str | Iterable[str], ignore: Iterable[str] = (), eval_dir: str = "eval"
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(the complete runs of Table 1's SYSTEMS found in ``patterns`` with their ``method``, the
    config keys besides system/method/noise that vary within a method, notes on incomplete, mixed
    or left-out runs)."""
    runset = load_runs(patterns, eval_dir)
    notes = list(runset.notes)
    if not len(runset.complete):
        notes.append("no evaluated runs: only the paper's numbers are shown")
        return runset.complete, [], notes
    runs = with_methods(runset.complete)
    other = ~runs["system.name"].isin(SYSTEMS)
    if other.any():
        names = ", ".join(sorted(runs.loc[other, "system.name"].astype(str).unique()))
        notes.append(f"left out {int(other.sum())} run(s) of systems not in Table 1 ({names})")
        runs = runs[~other]
    keys = extra_keys(runs, runset.config_keys, ignore)
    if keys:
        notes.append(f"runs of one method differ in {', '.join(keys)}: shown as extra columns")
    return runs, keys, notes


def at_paper_noise(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs at the paper's noise level (noise=low, std 0.01)."""
    if not len(runs):
        return runs
    return runs[runs["noise.name"] == PAPER_NOISE]


def build_table1(
    patterns: str | Iterable[str], ignore: Iterable[str] = ()
) -> tuple[pd.DataFrame, list[str]]:
    """(make_table1 of the complete runs at noise=low found in ``patterns``, notes)."""
    runs, keys, notes = load_method_runs(patterns, ignore)
    return make_table1(at_paper_noise(runs), keys), notes


# ---- the noise sweep ------------------------------------------------------------------------


def spans_noise(runs: pd.DataFrame) -> bool:
    """Do the runs (``load_method_runs``) cover more than one noise level (then a sweep)?"""
    return bool(len(runs)) and runs["noise.name"].nunique() > 1


def noise_sweep(runs: pd.DataFrame, keys: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (system, method, noise std, *keys): n, seeds and mean/std of NOISE_METRICS."""
    agg = aggregate(runs, ["system.name", "method", *keys, "noise.std"], NOISE_METRICS)
    ranked = agg.assign(_rank=paper_order(agg))
    return ranked.sort_values(["_rank", "noise.std"]).drop(columns="_rank")


def write_noise_sweep(
    table: pd.DataFrame, out_dir: str | Path, digits: int = 3, keys: Sequence[str] = ()
) -> dict[str, Path]:
    """``noise_sweep.csv``, ``noise_sweep.md`` and ``noise_sweep.png`` (h_l1 vs noise, one line
    per method and setting; ``keys``: the config keys that vary within a method, as given to
    ``noise_sweep``)."""
    out_dir = Path(out_dir)
    paths = {ext: out_dir / f"noise_sweep.{ext}" for ext in ("csv", "md", "png")}
    write_text(paths["csv"], to_csv(table))
    write_text(
        paths["md"],
        "# H error against observation noise\n\nmean ± sample std over n seeds; noise.std is "
        "the std of the Gaussian noise on every observed state.\n\n"
        f"{to_markdown(table, NOISE_METRICS, digits)}\n",
    )
    save_figure(noise_sweep_figure(table, setting_labels(table, keys)), paths["png"])
    return paths
