"""Mean ± std tables over seeds: grouping runs, aggregating them, and the one renderer of such tables
to Markdown, LaTeX and CSV (used by the generic report and by Table 1).

Grouping: the config is flattened to dotted keys (``system.name``, ``train.lr``, ...). The keys that
vary between runs, minus bookkeeping ones (seed, paths, ...), are the configuration; a key that
only changes together with the others (the parameters of each system, say) is shown through them
and not as a column of its own. Within a group the statistics run over its seeds: mean, sample
standard deviation (ddof = 1; none for a single run) and the count.

An aggregated table (``aggregate``) has the key columns, ``n``, ``seeds`` and ``<metric>_mean``,
``<metric>_std`` per metric; it is written as CSV as it is, and as text (``formatted``) with one
``mean ± std`` cell per metric.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from hnnsym.artifacts import write_text
from hnnsym.errors import UserError
from hnnsym.reporting.runs import GROUPS, IDENTITY_KEYS

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


def key_values(series: pd.Series) -> pd.Series:
    """Hashable, sortable values of a key column: as they are when none is missing, else as text
    with '-' for missing (a key that only some runs have)."""
    if series.notna().all():
        return series
    return series.astype(str).where(series.notna(), "-")


def ignored(key: str, ignore: Iterable[str]) -> bool:
    """Is the dotted ``key`` in ``ignore`` or below a dotted prefix in it (``eval`` covers
    ``eval.figures``, ``system`` covers ``system.name``)?"""
    parts = key.split(".")
    return any(".".join(parts[:i]) in ignore for i in range(1, len(parts) + 1))


def choose_keys(
    runs: pd.DataFrame, config_keys: Sequence[str], ignore: Iterable[str] = ()
) -> list[str]:
    """The config keys that vary between ``runs``, in config order, minus ``IDENTITY_KEYS`` and
    ``ignore`` (names as in ``resolve_key``; a dotted prefix covers its keys: ``eval`` covers
    ``eval.figures``), keeping a key only if it is not already determined by the keys kept before
    it (the group choices first)."""
    ignore = set(ignore) | set(IDENTITY_KEYS)
    varying = [
        k for k in config_keys if not ignored(k, ignore) and key_values(runs[k]).nunique() > 1
    ]
    choices = [k for k in varying if display_name(k) != k]
    keys: list[str] = []
    for key in choices + [k for k in varying if k not in choices]:
        kept = [key_values(runs[k]) for k in keys]
        if not keys or key_values(runs[key]).groupby(kept).nunique().max() > 1:
            keys.append(key)
    return keys


def aggregate(runs: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per configuration: the key columns (display names), ``n`` (runs), ``seeds``, and
    ``<metric>_mean``, ``<metric>_std`` (sample std, ddof = 1: NaN for a single run) per metric.
    NaN metric values (a non-finite result) are left out of that metric's statistics."""
    data = runs.copy()
    labels = [display_name(k) for k in keys]
    for key, label in zip(keys, labels):
        data[label] = key_values(data[key])
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


def beside_published(
    agg: pd.DataFrame | None, paper: pd.DataFrame, on: Sequence[str], metrics: Iterable[str]
) -> pd.DataFrame:
    """Our rows (``aggregate``; None when there are no runs) outer-joined on ``on`` with a paper's
    published rows: n = 0 and no seeds where only the paper has a row, and NaN ``<metric>_mean``/
    ``_std`` columns for every metric that no run has."""
    table = (
        paper.assign(n=0, seeds="") if agg is None else agg.merge(paper, on=list(on), how="outer")
    )
    table["n"] = table["n"].fillna(0).astype(int)
    table["seeds"] = table["seeds"].fillna("")
    for metric in metrics:
        for stat in ("mean", "std"):
            if f"{metric}_{stat}" not in table:
                table[f"{metric}_{stat}"] = np.nan
    return table


def duplicate_seeds(runs: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """Notes for configurations holding the same seed more than once (copies, not replicates)."""
    data = runs.assign(**{f"_k{i}": key_values(runs[k]) for i, k in enumerate(keys)})
    by = [f"_k{i}" for i in range(len(keys))] + ["seed"]
    notes = []
    for _, part in data.groupby(by, sort=True, dropna=False):
        if len(part) > 1:
            notes.append(
                f"seed {part['seed'].iloc[0]} appears {len(part)} times in one configuration "
                f"(its std then mixes copies with replicates): {', '.join(part['run_dir'])}"
            )
    return notes


# ---- rendering ------------------------------------------------------------------------------

PUBLISHED_DIGITS = 10  # significant digits of a published value (``exact``): as printed


def _fmt(x: float, digits: int) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


def formatted(
    agg: pd.DataFrame,
    metrics: Sequence[str],
    digits: int,
    pm: str = "±",
    headers: Mapping[str, str] | None = None,
    exact: Iterable[str] = (),
) -> pd.DataFrame:
    """The aggregated table as text: the key columns, ``n`` and one ``mean ± std`` column per
    metric (mean alone for n = 1), '-' where there is no value. ``headers`` renames metric
    columns; the metrics in ``exact`` (published numbers, not statistics) show their mean alone,
    as published (``PUBLISHED_DIGITS``)."""
    headers, exact = headers or {}, set(exact)
    keys = [c for c in agg.columns if c not in {"n", "seeds"} and not c.endswith(("_mean", "_std"))]
    out = agg[keys + ["n"]].copy()
    for metric in metrics:
        mean, std = agg[f"{metric}_mean"], agg[f"{metric}_std"]
        if metric in exact:
            cells = [_fmt(m, PUBLISHED_DIGITS) for m in mean]
        else:
            cells = [
                _fmt(m, digits) if not np.isfinite(s) else f"{_fmt(m, digits)} {pm} {_fmt(s, 2)}"
                for m, s in zip(mean, std)
            ]
        out[headers.get(metric, metric)] = cells
    return out


def to_markdown(
    agg: pd.DataFrame,
    metrics: Sequence[str],
    digits: int,
    headers: Mapping[str, str] | None = None,
    exact: Iterable[str] = (),
) -> str:
    """The aggregated table as a Markdown (pipe) table of ``formatted`` cells; a ``|`` in a header
    or a cell (``max |Φ|``) is escaped, so that it does not split the column."""
    table = formatted(agg, metrics, digits, "±", headers, exact)
    table.columns = [str(c).replace("|", "\\|") for c in table.columns]
    table = table.apply(
        lambda c: c.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)
    )
    return table.to_markdown(index=False)


def to_latex(
    agg: pd.DataFrame,
    metrics: Sequence[str],
    digits: int,
    caption: str = "",
    headers: Mapping[str, str] | None = None,
    exact: Iterable[str] = (),
) -> str:
    """A booktabs LaTeX table (pandas Styler) of ``formatted`` cells: key values and headers
    escaped, ``$\\pm$``, key columns left-aligned and the rest right-aligned."""
    table = formatted(agg, metrics, digits, "$\\pm$", headers, exact)
    values = {(headers or {}).get(m, m) for m in metrics}
    text_columns = [c for c in table.columns if c not in values and c != "n"]
    styler = table.style.hide(axis="index")
    styler = styler.format(escape="latex", subset=text_columns).format_index(escape="latex", axis=1)
    align = "l" * len(text_columns) + "r" * (len(table.columns) - len(text_columns))
    return styler.to_latex(hrules=True, column_format=align, caption=caption or None)


def write_csv_and_markdown(
    table: pd.DataFrame, out_dir: str | Path, name: str, markdown: str
) -> dict[str, Path]:
    """``<name>.csv`` (the table's numbers, ``to_csv``) and ``<name>.md`` (``markdown``) in
    out_dir, each written atomically."""
    paths = {ext: Path(out_dir) / f"{name}.{ext}" for ext in ("csv", "md")}
    write_text(paths["csv"], to_csv(table))
    write_text(paths["md"], markdown)
    return paths


def to_csv(table: pd.DataFrame) -> str:
    """A table's numbers as CSV, without the index (the aggregated table as it is: ``n``,
    ``seeds``, ``<metric>_mean``, ``<metric>_std``)."""
    return table.to_csv(index=False)
