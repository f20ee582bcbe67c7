"""What the profile writes: the summary tables (methods × steps per measured quantity), the figure
(memory and time vs steps) and ``write_outputs`` (profile.csv, profile.md, profile.png)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from hnnsym.artifacts import atomic_path, save_figure, write_text
from hnnsym.profiling.run import COLUMN_HELP

SUMMARY = {
    "time_ms": "median wall time per iteration [ms]",
    "cpu_ms": "median CPU time per iteration [ms]",
    "saved_mb_peak": "peak saved-for-backward memory [MiB]",
    "rss_mb": "peak RSS growth of a fresh process [MiB]",
    "cuda_mb": "peak CUDA memory [MiB]",
    "grad_err_exact": "gradient error vs the exact gradient of the same discretization (float64)",
    "grad_err_ref": "gradient error vs the continuous-time reference (float64)",
}


# The quantities also shown as ratios: backprop's value / the method's (> 1: the method is
# cheaper than backprop).
RATIOS = {
    "cpu_ms": "backprop CPU time / the method's",
    "saved_mb_peak": "backprop peak saved memory / the method's",
    "rss_mb": "backprop RSS growth / the method's",
}
BASELINE = "backprop"


def ratio_tables(df: pd.DataFrame) -> list[str]:
    """Markdown tables of backprop's value over each method's, methods × steps (none without a
    backprop row)."""
    parts = []
    for col, title in RATIOS.items():
        if col not in df or df[col].isna().all() or BASELINE not in set(df["method"]):
            continue
        table = df.pivot_table(index="method", columns="steps", values=col, sort=False)
        ratio = table.rdiv(table.loc[BASELINE], axis="columns").drop(index=BASELINE)
        parts.append(f"**{title}**\n\n" + ratio.to_markdown(floatfmt=".3g"))
    return parts


def summary_tables(df: pd.DataFrame) -> str:
    """Markdown: one table per measured quantity, methods × steps, then the ratios to backprop."""
    parts = []
    for col, title in SUMMARY.items():
        if col not in df or df[col].isna().all():
            continue
        table = df.pivot_table(
            index="method", columns="steps", values=col, sort=False, dropna=False
        )
        fmt = ".3g" if col.startswith("grad_err") else ".4g"
        parts.append(f"**{title}**\n\n" + table.to_markdown(floatfmt=fmt))
    return "\n\n".join(parts + ratio_tables(df))


def plot_profile(df: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Memory and time vs steps, log-log, one line per method (``save_figure``: Agg, written
    atomically, format from the suffix: PNG for profile.png)."""
    panels = [
        (c, t)
        for c, t in (
            ("saved_mb_peak", "saved for backward, peak [MiB]"),
            ("rss_mb", "peak RSS growth of a fresh process [MiB]"),
            ("cuda_mb", "CUDA peak [MiB]"),
            ("time_ms", "time per iteration [ms] (wall; dotted: CPU)"),
        )
        if c in df and df[c].notna().any()
    ]
    methods = list(dict.fromkeys(df["method"]))
    color = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    fig = Figure(figsize=(4.6 * len(panels), 4.4))
    axes = fig.subplots(1, len(panels), squeeze=False)
    steps = sorted(df["steps"].unique())
    for ax, (col, label) in zip(axes[0], panels):
        for method, part in df.groupby("method", sort=False):
            part = part.dropna(subset=[col]).sort_values("steps")
            part = part[part[col] > 0]
            ax.plot(part["steps"], part[col], marker="o", ms=3, color=color[method])
            if col == "time_ms" and "cpu_ms" in part:
                ax.plot(part["steps"], part["cpu_ms"], ls=":", color=color[method])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(steps, [str(s) for s in steps], fontsize=7)
        ax.set_xlabel("steps")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=color[m], marker="o", ms=3) for m in methods]
    fig.legend(handles, methods, loc="lower center", ncol=min(len(methods), 4), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(methods) / 4), 1, 1))
    save_figure(fig, path, dpi=120)


def write_outputs(
    df: pd.DataFrame,
    notes: list[str],
    run_dir: str | os.PathLike,
    title: str = "",
) -> dict[str, Path]:
    """profile.csv, profile.md (tables, notes, column definitions) and profile.png in ``run_dir``."""
    run_dir = Path(run_dir)
    paths = {k: run_dir / f"profile.{k}" for k in ("csv", "md", "png")}
    with atomic_path(paths["csv"]) as tmp:
        df.to_csv(tmp, index=False)
    columns = "\n".join(f"- `{k}`: {v}" for k, v in COLUMN_HELP.items())
    note_text = "\n".join(f"- {n}" for n in notes) or "- none"
    text = (
        f"# {title}\n\n{summary_tables(df)}\n\n## Notes\n\n{note_text}\n\n## Columns\n\n{columns}\n"
    )
    write_text(paths["md"], text)
    if len(df):
        plot_profile(df, paths["png"], title)
    return paths
