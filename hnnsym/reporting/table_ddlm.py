"""Aoshima et al.'s Tables 2 and 3 (learning from positions only) from our runs, the paper's numbers
beside ours (``python -m hnnsym.table_ddlm``, ``make table-ddlm``).

The runs (method=ddlm and its baselines, evaluated) are read like the generic report's
(``hnnsym.reporting.runs``) and grouped by system, method and noise; cells are mean ± sample std
over the seeds (n), rendered by ``hnnsym.reporting.tables``. Columns, each with the paper's value
(clean data, 15 trials) where it has one:

- ``q_mse``: mean squared error of the positions predicted from the first two (Table 2 "Position q"),
- ``energy_mse``: mean squared error of the true energy at the predicted states (Table 2 "Energy"),
- ``energy_var_model``: variance of the modelled energy along the prediction (Table 3),
- ours only: ``v_l1`` (V_θ against the true potential up to a constant) and the training wall time
  ``train_time`` (seconds, all epochs; the paper gives no times).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from hnnsym.reporting.runs import load_runs, method_labels, method_names
from hnnsym.reporting.tables import (
    aggregate,
    beside_published,
    to_markdown,
    write_csv_and_markdown,
)

SYSTEMS = ("mass_spring", "pendulum", "two_body")
# The rows in the paper's order: a run's row is its config's method.label (the ddlm* method
# configs set it); runs made before the label are placed by method name here.
METHODS = {
    "Euler": "ddlm_euler",
    "symplectic Euler": "ddlm_symplectic_euler",
    "leapfrog": "ddlm_leapfrog",
    "proposed": "ddlm",
    "leapfrog+proposed": "ddlm_leapfrog_proposed",
}
# Aoshima et al., Table 2 (position MSE, energy MSE) and Table 3 (variance of the modelled energy; not
# given for leapfrog+proposed), per (method label, system).
PAPER: dict[tuple[str, str], tuple[float, float, float]] = {
    ("Euler", "mass_spring"): (4.48e0, 1.23e1, 3.84e-1),
    ("Euler", "pendulum"): (2.96e2, 8.54e1, 3.85e1),
    ("Euler", "two_body"): (3.71e-1, 8.64e-4, 1.35e-4),
    ("symplectic Euler", "mass_spring"): (7.09e-2, 1.67e-3, 1.06e-3),
    ("symplectic Euler", "pendulum"): (4.89e-3, 7.45e-2, 7.15e-2),
    ("symplectic Euler", "two_body"): (1.65e-4, 2.77e-7, 1.70e-7),
    ("leapfrog", "mass_spring"): (7.09e-2, 6.57e-4, 3.10e-5),
    ("leapfrog", "pendulum"): (4.89e-3, 2.04e-2, 1.15e-2),
    ("leapfrog", "two_body"): (1.65e-4, 1.14e-7, 2.78e-9),
    ("proposed", "mass_spring"): (6.20e-2, 4.52e-5, 2.11e-12),
    ("proposed", "pendulum"): (5.43e-3, 2.20e-3, 4.58e-11),
    ("proposed", "two_body"): (7.31e-3, 3.00e-6, 2.42e-11),
    ("leapfrog+proposed", "mass_spring"): (8.30e-2, 6.19e-4, math.nan),
    ("leapfrog+proposed", "pendulum"): (1.47e-1, 8.38e-4, math.nan),
    ("leapfrog+proposed", "two_body"): (1.59e-4, 1.01e-7, math.nan),
}
PAPER_NOISE = "none"  # the paper's data are clean
COLUMNS = {
    "q_mse": "position MSE",
    "paper_q_mse": "position MSE (paper)",
    "energy_mse": "energy MSE",
    "paper_energy_mse": "energy MSE (paper)",
    "energy_var_model": "energy variance",
    "paper_energy_var_model": "energy variance (paper)",
    "v_l1": "V error",
    "train_time": "train time s",
}
OURS = ("q_mse", "energy_mse", "energy_var_model", "v_l1", "train_time")
PUBLISHED = ("paper_q_mse", "paper_energy_mse", "paper_energy_var_model")


def method_label(method: str) -> str:
    names = {name: label for label, name in METHODS.items()}
    return names.get(method, method)


def make_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (system, method, noise) of the complete runs and per published (system, method)
    at the paper's noise, in the paper's order: system, method, noise, n, seeds and
    ``<metric>_mean``/``_std`` for OURS and the PUBLISHED values."""
    paper = pd.DataFrame(
        [
            {"system": s, "method": m, "noise": PAPER_NOISE,
             **{f"{k}_mean": v for k, v in zip(PUBLISHED, values)},
             **{f"{k}_std": math.nan for k in PUBLISHED}}
            for (m, s), values in PAPER.items()
        ]
    )  # fmt: skip
    agg = None
    if len(runs):
        runs = runs.assign(
            method=method_labels(runs, [method_label(m) for m in method_names(runs)])
        )
        agg = aggregate(runs, ["system.name", "method", "noise.name"], OURS)
    table = beside_published(agg, paper, ["system", "method", "noise"], OURS)
    systems = {name: i for i, name in enumerate(SYSTEMS)}
    methods = {name: i for i, name in enumerate(METHODS)}
    rank = (
        table["system"].map(systems).fillna(len(systems)) * 1000
        + table["noise"].map({"none": 0}).fillna(1) * 100
        + table["method"].map(methods).fillna(len(methods))
    )
    table = table.assign(_rank=rank).sort_values(["_rank", "noise"], kind="stable")
    stats = [f"{m}_{s}" for m in COLUMNS for s in ("mean", "std")]
    return table[["system", "method", "noise", "n", "seeds", *stats]].reset_index(drop=True)


def markdown(table: pd.DataFrame, digits: int, notes: Sequence[str] = ()) -> str:
    listed = "\n".join(f"- {n}" for n in notes) or "- none"
    body = to_markdown(table, list(COLUMNS), digits, headers=COLUMNS, exact=PUBLISHED)
    return (
        "# Tables 2 and 3 of Aoshima et al. (DDLM) reproduced\n\n"
        "Positions predicted from the first two of each test trajectory (25 trajectories of 101 "
        "points at Δt = 0.2; 2-body: 25 orbits of 501 points at Δt = 0.05). Position MSE: mean "
        "over the predicted steps and coordinates; energy "
        "MSE: the true H at the predicted positions with each method's own momentum, against the "
        "true energy; modelled-energy variance: of ½vᵀMv + V_θ(q) along each prediction (Table 3); "
        "V error: mean |V − V_θ − c| on a q grid over the test positions. Ours: mean ± sample std "
        "over n seeds (one data set and one initialisation per seed); the paper's values (clean "
        "data, 15 trials) in the (paper) columns, on the noise=none rows. Train time: training "
        "wall seconds (the paper gives none).\n\n"
        f"{body}\n\n## Notes\n\n{listed}\n"
    )


def write_table(
    table: pd.DataFrame, out_dir: str | Path, digits: int = 3, notes: Sequence[str] = ()
) -> dict[str, Path]:
    """``table_ddlm.csv`` (numbers) and ``table_ddlm.md`` in out_dir, each atomically."""
    return write_csv_and_markdown(table, out_dir, "table_ddlm", markdown(table, digits, notes))


def build_table(
    patterns: str | Iterable[str], eval_dir: str = "eval"
) -> tuple[pd.DataFrame, list[str]]:
    """(make_table of the complete position-only runs found in ``patterns``, notes)."""
    runset = load_runs(patterns, eval_dir)
    notes = list(runset.notes)
    runs = runset.complete
    if len(runs):
        runs = runs[method_names(runs).isin(set(METHODS.values()))]
    if not len(runs):
        notes.append("no evaluated position-only runs: only the paper's numbers are shown")
    return make_table(runs), notes
