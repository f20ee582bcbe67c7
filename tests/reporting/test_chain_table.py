"""hnnsym.table_chain / hnnsym.reporting.table_chain: Finzi et al.'s chain table from run dirs made by
hand (``make_run``, conftest), every expected value computed here: grouping by N, model, noise,
data size, budget, rollout integrator and horizon; the angle-coordinate HNN joining its chain; one
chaos-floor row per data set; the reference beside the rows it was measured for; the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from hnnsym.reporting.table_chain import REFERENCE, build_table, make_table, markdown_table

REPO = Path(__file__).resolve().parents[2]

CHAIN = ["system=chain_pendulum", "system.params.links=2", "noise=none", "train.epochs=3"]
ANGLES = ["system=chain_pendulum_angles", "system.params.links=2", "noise=none",
          "train.epochs=3", "model=hnn", "integrator=rk4", "gradient=backprop"]  # fmt: skip
RUNS = {
    "CHNN": [*CHAIN, "method=chnn"],
    "CLNN": [*CHAIN, "method=clnn"],
    "NODE": [*CHAIN, "method=node"],
    "HNN (angles)": ANGLES,
    "CHNN, RATTLE-4": [
        *CHAIN,
        "method=chnn",
        "integrator=rattle",
        "gradient=symplectic_adjoint",
        "integrator.composition=suzuki",
    ],  # fmt: skip
}


def chain_metrics(rng: np.random.Generator, floor: float, horizon: float = 3.0) -> dict:
    return {
        "rel_err_gmean": float(rng.uniform(1e-4, 1e-2)),
        "rel_err_gmean_pooled": float(rng.uniform(1e-4, 1e-2)),
        "floor_rel_err_gmean": floor,
        "floor_rel_err_gmean_pooled": floor / 2,
        "constraint_phi_max": float(rng.uniform(0, 1e-3)),
        "energy_drift_rel_mean": float(rng.uniform(0, 1e-2)),
        "rollout_failed": 0.0,
        "rollout_horizon": horizon,
    }


def row(table: pd.DataFrame, **keys) -> pd.Series:
    mask = np.ones(len(table), bool)
    for key, value in keys.items():
        mask &= (table[key] == value).to_numpy()
    assert mask.sum() == 1, (keys, table[list(keys)])
    return table[mask].iloc[0]


@pytest.fixture
def chain_grid(make_run, tmp_path):
    """Every model of RUNS at seeds 0-2 on 800 trajectories, 3 s; the floor of the Cartesian files
    is 1e-4 (seed + 1), the angle files' another (which the floor row must not take)."""
    rng = np.random.default_rng(11)
    values: dict[str, list[float]] = {}
    for i, (label, overrides) in enumerate(RUNS.items()):
        for seed in (0, 1, 2):
            floor = (7e-3 if label.startswith("HNN") else 1e-4) * (seed + 1)
            m = chain_metrics(rng, floor)
            values.setdefault(label, []).append(m["rel_err_gmean"])
            make_run(overrides, seed, metrics=m, n_train=800, root=f"runs/model{i}")
    return values


def test_mean_std_per_model_beside_the_reference(chain_grid, tmp_path):
    table, notes = build_table(str(tmp_path / "runs"))
    for label, xs in chain_grid.items():
        r = row(table, N=2, model=label, noise="none", trajectories=800, horizon=3.0)
        assert (r["n"], r["seeds"], r["epochs"]) == (3, "0,1,2", 3)
        assert r["rel_err_gmean_mean"] == pytest.approx(np.mean(xs), rel=1e-12)
        assert r["rel_err_gmean_std"] == pytest.approx(np.std(xs, ddof=1), rel=1e-12)
    reference = dict(zip(["CHNN", "CLNN", "HNN (angles)", "NODE", "chaos floor"], REFERENCE[2]))
    for label, value in reference.items():
        r = row(table, N=2, model=label, noise="none", trajectories=800)
        assert r["reference_rel_err_gmean_mean"] == value
    # the RATTLE-4 row is trained and rolled out by RATTLE-4; the reference has no such row
    r = row(table, model="CHNN, RATTLE-4")
    assert r["rollout"] == "rattle-4" and np.isnan(r["reference_rel_err_gmean_mean"])
    assert row(table, N=2, model="HNN (angles)", trajectories=800)["system"] == "chain_pendulum"
    # one floor per data file (seed), from the Cartesian runs only: 1e-4, 2e-4, 3e-4
    floor = row(table, N=2, model="chaos floor", noise="none", trajectories=800)
    assert floor["n"] == 3 and floor["rollout"] == "truth"
    assert floor["rel_err_gmean_mean"] == pytest.approx(2e-4, rel=1e-12)
    assert floor["rel_err_gmean_std"] == pytest.approx(1e-4, rel=1e-12)
    # the reference's other N are shown, with no runs
    assert row(table, N=5, model="CHNN")["n"] == 0
    assert not any("no evaluated" in n for n in notes)


def test_other_sizes_budgets_noise_and_rollouts_are_rows_of_their_own(make_run, tmp_path):
    rng = np.random.default_rng(5)
    chnn = RUNS["CHNN"]

    def run(name: str, overrides: list[str], metrics: dict, n_train: int = 800, **kw) -> Path:
        return make_run(overrides, 0, metrics=metrics, n_train=n_train, root=f"runs/{name}", **kw)

    runs = [
        run("base", chnn, chain_metrics(rng, 1e-4)),
        run("small", chnn, chain_metrics(rng, 1e-4), n_train=100),
        run("long", [*chnn, "train.epochs=5"], chain_metrics(rng, 1e-4),
            val_losses=[3.0, 2.0, 2.5, 2.4, 2.6]),
        run("noisy", [*CHAIN[:2], "noise=low", "train.epochs=3", "method=chnn"],
            chain_metrics(rng, 1e-4)),
        run("30s", chnn, chain_metrics(rng, 4e-2, 30.0)),
    ]  # fmt: skip
    # the base run also rolled out by GL4 into another eval dir (report.eval_dir picks it)
    gl4 = chain_metrics(rng, 1e-4)
    run("base", chnn, gl4, eval_dir="eval_gl4",
        rollout_integrator={"name": "gauss_legendre4", "tol": None})  # fmt: skip
    table, _ = build_table(str(tmp_path / "runs"))
    ours = table[table["n"] > 0]
    assert len(ours[ours["model"] == "CHNN"]) == 5  # base, small, long, noisy, 30 s
    # the reference is of 800 noise-free trajectories, 3 s: beside no other row
    for other in ({"trajectories": 100}, {"noise": "low"}, {"horizon": 30.0}):
        assert np.isnan(row(ours, model="CHNN", **other)["reference_rel_err_gmean_mean"])
    base = row(ours, model="CHNN", trajectories=800, epochs=3, noise="none", horizon=3.0)
    assert base["reference_rel_err_gmean_mean"] == REFERENCE[2][0]
    assert row(ours, model="chaos floor", horizon=30.0)["rel_err_gmean_mean"] == 4e-2
    assert row(ours, model="CHNN", epochs=5)["n"] == 1
    assert all(r.exists() for r in runs)
    other, _ = build_table(str(tmp_path / "runs"), "eval_gl4")
    r = row(other[other["n"] > 0], model="CHNN")
    assert r["rollout"] == "gauss_legendre4"
    assert r["rel_err_gmean_mean"] == gl4["rel_err_gmean"]


def test_runs_of_other_systems_leave_only_the_reference(make_run, tmp_path):
    make_run(["system=double_well"], 0, metrics={"h_l1": 1.0})
    table, notes = build_table(str(tmp_path / "runs"))
    assert set(table["n"]) == {0} and len(table) == 5 * len(REFERENCE)
    assert any("no evaluated chain" in n for n in notes)


def test_cli_writes_the_table_and_refuses_a_bad_eval_dir(chain_grid, tmp_path):
    out = tmp_path / "results"
    command = [sys.executable, "-m", "hnnsym.table_chain", f"report.runs={tmp_path}/runs"]
    proc = subprocess.run([*command, f"report.out_dir={out}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "table_chain.csv",
        "table_chain.md",
    ]
    csv = pd.read_csv(out / "table_chain.csv")
    assert row(csv, N=2, model="CLNN", trajectories=800)["n"] == 3
    md = (out / "table_chain.md").read_text()
    assert "| chain_pendulum |   2 | CHNN " in md and " ± " in md and "Finzi" in md
    bad = subprocess.run(
        [*command, f"report.out_dir={tmp_path}/bad", "report.eval_dir=a/b"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "report.eval_dir" in bad.stderr and not (tmp_path / "bad").exists()


def test_make_table_chain_reads_the_runs_below_the_prefix(chain_grid, tmp_path):
    """The Makefile target (the last step of make chain-pendulum): runs under $(CHAIN_OUT)*, each
    read from eval/ at the 3 s test trajectories, eval_3s/ with longer ones."""
    out = tmp_path / "results"
    make = ["make", "-o", "install", "table-chain", f"PY={sys.executable}",
            f"CHAIN_OUT={tmp_path}/ru", f"CHAIN_RESULTS={out}",
            f"DOCS_TABLES={tmp_path}/docs"]  # fmt: skip
    proc = subprocess.run(make, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "report.eval_dir=eval " in proc.stdout
    assert row(pd.read_csv(out / "table_chain.csv"), N=2, model="NODE", trajectories=800)["n"] == 3
    proc = subprocess.run(
        [*make, "CHAIN_TEST_STEPS=1000"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0 and "report.eval_dir=eval_3s " in proc.stdout, proc.stderr
    assert set(pd.read_csv(out / "table_chain.csv")["n"]) == {0}  # no eval_3s/ in these runs
    assert (tmp_path / "docs" / "table_chain.md").read_text().count("| chain_pendulum") == 20


def test_markdown_escapes_the_pipe_of_max_phi():
    """The column ``max |Φ|`` is one column of the Markdown table (its pipes escaped), so that the
    table copied into docs/papers/tables renders with as many cells as headers."""
    lines = markdown_table(make_table(pd.DataFrame()), 3).splitlines()
    assert "max \\|Φ\\|" in lines[0]
    cells = [line.replace("\\|", "").count("|") for line in lines]
    assert len(set(cells)) == 1


# ---- the chain experiments (make chain-pendulum) ----------------------------------------------


def test_rows_are_labelled_by_the_runs_configs(make_run, tmp_path):
    """Runs of the chain experiments carry method.label in their config; the table's row is that
    label (a relabelled run is a row of its own), plus the training integrator where not rk4."""
    size = ["system.params.links=2", "noise=none", "train.epochs=3"]
    runs = {"CHNN": ["experiment=chain_chnn"], "CHNN, RATTLE-4": ["experiment=chain_chnn_rattle4"],
            "HNN (angles)": ["experiment=chain_hnn"], "my CHNN": ["experiment=chain_chnn",
                                                             "method.label=my CHNN"]}  # fmt: skip
    rng = np.random.default_rng(3)
    for i, overrides in enumerate(runs.values()):
        make_run([*overrides, *size], 0, metrics=chain_metrics(rng, 1e-4), n_train=800,
                 root=f"runs/model{i}")  # fmt: skip
    table, _ = build_table(str(tmp_path / "runs"))
    models = set(table[table["N"] == 2]["model"])
    assert set(runs) <= models and "CHNN, RATTLE" not in models


OLD_RECIPES = {  # the command lines of make chain-pendulum before the experiments (100 epochs)
    "chnn": ["system=chain_pendulum", "method=chnn", "train.resume=auto"],
    "clnn": ["system=chain_pendulum", "method=clnn", "train.resume=auto"],
    "chnn_rattle": ["system=chain_pendulum", "method=chnn", "integrator=rattle",
                    "gradient=symplectic_adjoint", "train.substeps=2", "train.resume=auto",
                    "integrator.tol=1e-5"],
    "chnn_rattle4": ["system=chain_pendulum", "method=chnn", "integrator=rattle",
                     "gradient=symplectic_adjoint", "integrator.composition=suzuki",
                     "train.resume=auto", "integrator.tol=1e-5"],
    "hnn": ["system=chain_pendulum_angles", "model=hnn", "model.hidden=[256,256,256]",
            "integrator=rk4", "gradient=backprop"],
    "node": ["system=chain_pendulum", "method=node", "model.hidden=[256,256,256]"],
}  # fmt: skip
REFERENCE_TRAINING = ["train.window=4", "train.batch_size=200", "train.lr=3e-3",
                      "train.weight_decay=1e-4", "train.optimizer._target_=torch.optim.AdamW",
                      "train.schedule=cosine", "train.early_stop.patience=1000000",
                      "train.resume=auto", "train.ema=null"]  # fmt: skip


@pytest.mark.parametrize("run", sorted(OLD_RECIPES))
def test_each_chain_experiment_is_its_old_command_line(compose_config, run):
    common = ["system.params.links=3", "seed=1", "train.epochs=100", "train.progress=false"]
    old = OLD_RECIPES[run] + (REFERENCE_TRAINING if run in ("hnn", "node") else [])
    before = OmegaConf.to_container(compose_config("train", old + common))
    after = OmegaConf.to_container(compose_config("train", [f"experiment=chain_{run}", *common]))
    assert after.pop("chain_run") == run and isinstance(after["method"].pop("label"), str)
    assert after == before
