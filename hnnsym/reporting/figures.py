"""The reporting figures: the report's bar plot (mean ± std per configuration, each run a dot) and
the noise sweep (a metric against the noise std). Each function builds a matplotlib ``Figure``
(no pyplot state); the writers save it with ``hnnsym.artifacts.save_figure``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from hnnsym.reporting.tables import display_name, key_values


def report_figure(
    agg: pd.DataFrame,
    runs: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str],
    hue: str | None = None,
    title: str = "",
) -> Figure:
    """One panel per metric: a bar per configuration at its mean, ± std error bars, each run a dot.

    ``agg`` is ``aggregate(runs, keys, metrics)``. Bars of one colour share the value of ``hue``
    (default: the gradient if it varies, else the last key); the other keys make the x positions.
    Log scale when a metric is positive and spans more than a decade."""
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

    runs = runs.assign(**{lab: key_values(runs[k]) for k, lab in zip(keys, labels)})
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
    return fig


def noise_sweep_figure(table: pd.DataFrame, lines: pd.Series, metric: str = "h_l1") -> Figure:
    """``metric`` (mean ± std over seeds) against the noise std, one panel per system, one line
    per value of ``lines`` (the label of each row of ``table``, a noise sweep with ``system`` and
    ``noise.std`` columns; lines without the metric, NODE's for h_l1, are left out)."""
    table = table.assign(setting=lines)
    systems = list(dict.fromkeys(table["system"]))
    fig = Figure(figsize=(4.2 * len(systems), 3.6), layout="constrained")
    axes = fig.subplots(1, len(systems), squeeze=False)[0]
    for ax, system in zip(axes, systems):
        part = table[table["system"] == system]
        for line, rows in part.groupby("setting", sort=False):
            rows = rows[rows[f"{metric}_mean"].notna()]
            if len(rows):
                ax.errorbar(rows["noise.std"], rows[f"{metric}_mean"],
                            yerr=rows[f"{metric}_std"].fillna(0), marker="o", capsize=3,
                            label=line)  # fmt: skip
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_yscale("log")
        ax.set_xlabel("noise std")
        ax.set_title(system)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel(f"{metric} (mean ± std over seeds)")
    axes[-1].legend(fontsize=8)
    return fig
