"""Finzi et al.'s chain-pendulum table from our runs, the reference's published numbers beside ours
(``python -m hnnsym.table_chain``, the last step of ``make chain-pendulum``).

The runs (method=chnn / clnn / node on ``chain_pendulum`` or ``coupled_pendulum``, and HNN on
``chain_pendulum_angles``, evaluated) are read like the generic report's (``hnnsym.reporting.runs``)
and grouped by system (the angle version joins the Cartesian one: same motion), size N (links or
bobs), model, noise, training epochs, rollout integrator and horizon; cells are mean ± sample std
over the seeds (n). The model label names the training integrator where it is not rk4 (``CHNN,
RATTLE-4``: CHNN trained through RATTLE composed by Suzuki's scheme); the rollout column names the
evaluation's integrator, which ``evaluate integrator=... eval.out_dir=...`` may change
(``report.eval_dir`` picks that evaluation).

Per (system, N, noise, horizon) one ``chaos floor`` row: the ground truth from the test starts
perturbed by 1e-4 against the truth (``floor_rel_err_gmean``), one value per data file (seed),
beside the reference's floor. Columns:

- ``rel_err_gmean``: geometric mean over the rollout of e(t) = ‖ẑ−z‖/(‖ẑ‖+‖z‖), mean over the test
  trajectories (the reference's metric), with the reference's value (2000 epochs, 800 noise-free
  trajectories, 3 s) beside it;
- ``rel_err_gmean_pooled``: the same from e(t) pooled over the trajectories;
- ``constraint_phi_max``: max |Φ| along the learned rollouts (0 in angles);
- ``energy_drift_rel_mean``: mean relative drift of the true energy along the learned rollouts;
- ``rollout_failed``: fraction of rollouts that failed (NaN, solver);
- ``train_time``: training wall seconds (all epochs).
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

# system.name -> the table's system (angle coordinates: the same chain)
SYSTEMS = {
    "chain_pendulum": "chain_pendulum",
    "chain_pendulum_angles": "chain_pendulum",
    "coupled_pendulum": "coupled_pendulum",
}
SIZE_KEYS = ("system.params.links", "system.params.bobs")
# the row of a run is its config's method.label (experiment=chain_<model>); runs made before the
# label by method name:
MODELS = {"chnn": "CHNN", "clnn": "CLNN", "hnn": "HNN (angles)", "node": "NODE"}
FLOOR = "chaos floor"
ORDER = ("CHNN", "CLNN", "HNN (angles)", "NODE", FLOOR)
# Finzi et al. 2020, the chain pendulum: per N, (CHNN, CLNN, HNN, NODE, chaos floor),
# rel_err_gmean over 3 s, 100 test trajectories, 2000 epochs, 800 noise-free trajectories.
REFERENCE: dict[int, tuple[float, float, float, float, float]] = {
    1: (7.5e-5, 7.4e-5, 1.8e-4, 1.1e-3, 4.9e-5),
    2: (5.3e-4, 1.8e-4, 1.3e-2, 1.2e-1, 8.0e-5),
    3: (3.3e-3, 2.0e-3, 9.7e-2, 3.0e-1, 3.5e-4),
    5: (3.6e-3, 4.3e-3, 3.6e-1, 4.5e-1, 2.5e-4),
}
KEYS = ("system", "N", "model", "noise", "trajectories", "epochs", "rollout", "horizon")
REFERENCE_KEYS = {"system": "chain_pendulum", "noise": "none", "trajectories": 800, "horizon": 3.0}
COLUMNS = {
    "rel_err_gmean": "rel_err_gmean",
    "reference_rel_err_gmean": "reference",
    "rel_err_gmean_pooled": "pooled",
    "constraint_phi_max": "max |Φ|",
    "energy_drift_rel_mean": "energy drift",
    "rollout_failed": "failed",
    "train_time": "train s",
}
OURS = ("rel_err_gmean", "rel_err_gmean_pooled", "constraint_phi_max", "energy_drift_rel_mean",
        "rollout_failed", "train_time")  # fmt: skip
PUBLISHED = ("reference_rel_err_gmean",)


def _integrator_label(name: object, composition: object) -> str:
    """rk4, rattle, rattle-4 (a composition), gauss_legendre4, ... ('-' when unknown)."""
    if not isinstance(name, str):
        return "-"
    if name == "rattle" and isinstance(composition, str) and composition != "none":
        return "rattle-4"
    return name


def model_label(label: str, integrator: str) -> str:
    """A run's label (CHNN), with the training integrator where it is not rk4 (``CHNN,
    RATTLE-4``)."""
    return label if integrator in ("rk4", "-") else f"{label}, {integrator.upper()}"


def _column(runs: pd.DataFrame, key: str) -> pd.Series:
    return runs[key] if key in runs else pd.Series(math.nan, index=runs.index)


def _is_chain(runs: pd.DataFrame) -> pd.Series:
    """Which runs of a ``load_runs`` frame are of the table's systems."""
    return _column(runs, "system.name").isin(set(SYSTEMS))


def chain_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The constrained-system runs of a ``load_runs`` frame with the table's key columns
    (``KEYS``) added; other systems' runs are left out."""
    runs = runs[_is_chain(runs)]
    if not len(runs):
        return runs.assign(**{k: [] for k in KEYS})
    size = _column(runs, SIZE_KEYS[0]).fillna(_column(runs, SIZE_KEYS[1]))
    trained = [
        _integrator_label(n, c)
        for n, c in zip(_column(runs, "integrator.name"), _column(runs, "integrator.composition"))
    ]
    rollout = [
        _integrator_label(n, c)
        for n, c in zip(
            _column(runs, "eval.integrator.name"), _column(runs, "eval.integrator.composition")
        )
    ]
    labels = method_labels(runs, [MODELS.get(m, m) for m in method_names(runs)])
    return runs.assign(
        system=runs["system.name"].map(SYSTEMS),
        N=size.astype(int),
        model=[model_label(label, i) for label, i in zip(labels, trained)],
        noise=runs["noise.name"],
        trajectories=_column(runs, "data.n_train").fillna(-1).astype(int),
        epochs=_column(runs, "train.epochs").astype(int),
        rollout=[r if r != "-" else t for r, t in zip(rollout, trained)],
        horizon=_column(runs, "rollout_horizon").round(6),
    )


def floor_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """One ``chaos floor`` row per data set (system, N, noise, horizon, seed): its floor as the
    row's rel_err_gmean. Angle-coordinate runs are left out (their floor is of the angle file):
    a Cartesian run's system is its table system."""
    cartesian = runs[runs["system.name"] == runs["system"]]
    cartesian = cartesian[cartesian["floor_rel_err_gmean"].notna()]
    by = ["system", "N", "noise", "trajectories", "horizon", "seed"]
    first = cartesian.sort_values("run_dir").groupby(by, as_index=False).first()
    return first.assign(
        model=FLOOR,
        epochs=0,
        rollout="truth",
        rel_err_gmean=first["floor_rel_err_gmean"],
        rel_err_gmean_pooled=first["floor_rel_err_gmean_pooled"],
        **{k: math.nan for k in OURS if k not in ("rel_err_gmean", "rel_err_gmean_pooled")},
    )


def make_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per KEYS value of the complete chain runs (and their chaos floors) and per
    published (N, model), ordered by system, N, noise, model: the KEYS, n, seeds and
    ``<metric>_mean``/``_std`` for OURS and the PUBLISHED reference."""
    reference = pd.DataFrame(
        [
            {**REFERENCE_KEYS, "N": n, "model": model,
             "reference_rel_err_gmean_mean": value, "reference_rel_err_gmean_std": math.nan}
            for n, values in REFERENCE.items()
            for model, value in zip(ORDER, values)
        ]
    )  # fmt: skip
    agg = None
    runs = chain_runs(runs)
    if len(runs):
        rows = pd.concat([runs, floor_runs(runs)], ignore_index=True)
        agg = aggregate(rows, list(KEYS), OURS)
    table = beside_published(agg, reference, ["N", "model", *REFERENCE_KEYS], OURS)
    table = table.assign(**{k: math.nan for k in KEYS if k not in table})  # no runs
    models = {name: i for i, name in enumerate(ORDER)}
    base = table["model"].str.split(",").str[0]
    table = table.assign(
        _system=table["system"].map({"chain_pendulum": 0}).fillna(1),
        _noise=table["noise"].map({"none": 0}).fillna(1),
        _model=base.map(models).fillna(len(models)),
        _floor=table["model"] == FLOOR,  # last in its group, as the reference's column
    )
    order = ["_system", "system", "N", "_noise", "noise", "trajectories", "horizon", "_floor",
             "epochs", "_model", "model"]  # fmt: skip
    table = table.sort_values(order, kind="stable", na_position="first")
    stats = [f"{m}_{s}" for m in COLUMNS for s in ("mean", "std")]
    return table[[*KEYS, "n", "seeds", *stats]].reset_index(drop=True)


def markdown_table(table: pd.DataFrame, digits: int) -> str:
    """The table as a Markdown pipe table, '-' for the keys a reference-only row has not."""
    shown = table.assign(
        trajectories=[str(int(n)) if n == n and n >= 0 else "-" for n in table["trajectories"]],
        epochs=[str(int(e)) if e == e and e > 0 else "-" for e in table["epochs"]],
        horizon=[f"{h:g} s" if h == h else "-" for h in table["horizon"]],
    ).fillna({"rollout": "-"})
    return to_markdown(shown, list(COLUMNS), digits, headers=COLUMNS, exact=PUBLISHED)


def markdown(table: pd.DataFrame, digits: int, notes: Sequence[str] = ()) -> str:
    listed = "\n".join(f"- {n}" for n in notes) or "- none"
    body = markdown_table(table, digits)
    return (
        "# The chain pendulum of Finzi et al. (CHNN, CLNN, HNN, NODE) reproduced\n\n"
        "rel_err_gmean: the geometric mean over the rollout of e(t) = |ẑ−z|/(|ẑ|+|z|) in "
        "Cartesian coordinates (angle runs mapped to Cartesian), mean over the test "
        "trajectories; pooled: of e(t) averaged over the trajectories first. Ours: mean ± "
        "sample std over n seeds (one data set and one initialisation per seed) at the epochs "
        "shown, rolled out by `rollout` over `horizon`; chaos floor: the truth from the test "
        "starts perturbed by 1e-4. Reference: Finzi et al. (2020), 2000 epochs, 800 noise-free "
        "trajectories, 3 s, on the noise=none rows. max |Φ|: the constraint's largest violation "
        "along the learned rollouts; energy drift: mean relative drift of the true energy; "
        "failed: fraction of rollouts that failed; train s: training wall seconds.\n\n"
        f"{body}\n\n## Notes\n\n{listed}\n"
    )


def write_table(
    table: pd.DataFrame, out_dir: str | Path, digits: int = 3, notes: Sequence[str] = ()
) -> dict[str, Path]:
    """``table_chain.csv`` (numbers) and ``table_chain.md`` in out_dir, each atomically."""
    return write_csv_and_markdown(table, out_dir, "table_chain", markdown(table, digits, notes))


def build_table(
    patterns: str | Iterable[str], eval_dir: str = "eval"
) -> tuple[pd.DataFrame, list[str]]:
    """(make_table of the complete chain runs found in ``patterns``, read from their
    ``eval_dir``, notes)."""
    runset = load_runs(patterns, eval_dir)
    notes = list(runset.notes)
    runs = runset.complete
    if not _is_chain(runs).any():
        notes.append("no evaluated chain or coupled-pendulum runs: only the reference is shown")
    return make_table(runs), notes
