"""hnnsym.report / hnnsym.reporting: finding runs, the training summary, grouping, mean ± std,
incomplete runs, and the files written. Runs are made by hand (the repo's composed train config,
a metrics.csv and an eval/metrics.json with chosen numbers), so every expected value is computed
independently here."""

from __future__ import annotations

import math
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from hnnsym.artifacts import write_text
from hnnsym.errors import UserError
from hnnsym.reporting.report import build_report
from hnnsym.reporting.runs import evaluate_command, find_runs, load_runs, train_summary
from hnnsym.reporting.tables import aggregate, choose_keys, to_latex

METRICS = ["h_l1", "vf_rel", "best_val_loss"]
REPO = Path(__file__).resolve().parents[2]


def grid_of_runs(make_run, rng: np.random.Generator, seeds=(0, 1, 2)) -> dict:
    """2 systems x 2 gradients x seeds, evaluated, with random metrics: {(system, gradient):
    {metric: [values over seeds]}}."""
    values = {}
    for system in ("double_well", "pendulum"):
        for gradient in ("backprop", "symplectic_adjoint"):
            cell = values.setdefault((system, gradient), {m: [] for m in METRICS})
            for seed in seeds:
                val = list(rng.uniform(0.1, 1.0, size=3))
                m = {"h_l1": float(rng.uniform()), "vf_rel": float(rng.uniform())}
                make_run([f"system={system}", f"gradient={gradient}"], seed, val, m)
                for key in ("h_l1", "vf_rel"):
                    cell[key].append(m[key])
                cell["best_val_loss"].append(min(val))
    return values


def test_train_summary_takes_the_first_least_validation_loss():
    history = pd.DataFrame({
        "epoch": [1, 2, 3, 4], "train_loss": [4.0, 3.0, 2.0, 1.0], "val_loss": [3.0, 1.0, 2.0, 1.0],
        "wall_time": [1.0, 2.5, 4.0, 7.0], "solver_unconverged": [0, 1, 0, 3],
    })  # fmt: skip
    s = train_summary(history)
    # train saves best.pt on strict improvement, so the tie at epoch 4 does not move the best
    assert (s["best_epoch"], s["best_val_loss"], s["time_to_best"]) == (2, 1.0, 2.5)
    assert (s["epochs"], s["train_loss"], s["val_loss"], s["train_time"]) == (4, 1.0, 1.0, 7.0)
    assert s["solver_unconverged"] == 4
    with pytest.raises(ValueError, match="lacks columns"):
        train_summary(history.drop(columns="wall_time"))


def test_mean_std_over_seeds_per_varying_choice(make_run, tmp_path):
    values = grid_of_runs(make_run, np.random.default_rng(7))
    rep = build_report(str(tmp_path / "runs"), METRICS)
    assert rep.keys == ["system.name", "gradient.name"]  # seed is the replicate, not a key
    assert rep.constants == {
        "noise": "low",
        "method": "hnn",
        "model": "hnn",
        "integrator": "implicit_midpoint",
    }
    assert (
        len(rep.table) == 4 and set(rep.table["n"]) == {3} and set(rep.table["seeds"]) == {"0,1,2"}
    )
    for (system, gradient), cell in values.items():
        row = rep.table[(rep.table["system"] == system) & (rep.table["gradient"] == gradient)]
        for metric, xs in cell.items():
            assert row[f"{metric}_mean"].item() == pytest.approx(np.mean(xs), rel=1e-12)
            assert row[f"{metric}_std"].item() == pytest.approx(np.std(xs, ddof=1), rel=1e-12)


def test_keys_that_only_follow_other_keys_are_not_columns(make_run, tmp_path, compose_config):
    ignore = compose_config("report").report.ignore
    # the system parameters and lr change with the system (lr 0.01 for one, 0.02 for the other):
    # shown through the system, not as columns
    for seed in (0, 1):
        make_run(["system=coupled_oscillator", "train.lr=0.01"], seed, metrics={"h_l1": 1.0})
        make_run(["system=mass_spring", "train.lr=0.02"], seed, metrics={"h_l1": 2.0})
    found = load_runs(str(tmp_path / "runs"))
    assert choose_keys(found.runs, found.config_keys, ignore) == ["system.name"]
    # lr varying within a system is a key of its own (run_name has no lr: another run_dir)
    make_run(["system=mass_spring", "train.lr=0.05"], 0, metrics={"h_l1": 3.0}, root="runs/lr")
    found = load_runs(str(tmp_path / "runs"))
    keys = choose_keys(found.runs, found.config_keys, ignore)
    assert keys == ["system.name", "train.lr"]
    runs = found.runs
    table = aggregate(runs, keys, ["h_l1"])
    assert list(table["train.lr"]) == [0.01, 0.02, 0.05] and list(table["n"]) == [2, 2, 1]
    assert math.isnan(table["h_l1_std"].iloc[2])  # a single run has no spread


def test_incomplete_stale_and_unreadable_runs_are_notes_not_crashes(make_run, tmp_path):
    good = {"h_l1": 0.5, "vf_rel": 0.25}
    make_run(["gradient=backprop"], 0, metrics=good)
    make_run(["gradient=backprop"], 1, metrics={**good, "h_l1": None})  # non-finite -> null
    unevaluated = make_run(["gradient=backprop"], 2)
    untrained = make_run(["gradient=backprop"], 3, val_losses=None)
    stale = make_run(["gradient=backprop"], 4, metrics={**good, "h_l1": 1.5}, eval_epoch=1)
    broken = make_run(["gradient=backprop"], 5, metrics=good)
    (broken / "config.yaml").write_text("seed: [unclosed\n")

    rep = build_report(str(tmp_path / "runs"), ["h_l1", "vf_rel"])
    status = dict(zip(rep.runs.runs["run_dir"], rep.runs.runs["status"]))
    assert status[str(unevaluated)] == "no eval" and status[str(untrained)] == "no metrics"
    assert status[str(stale)] == "stale" and str(broken) not in status
    notes = "\n".join(rep.notes)
    assert "python -m hnnsym.evaluate" in notes and f"run_dir={unevaluated}" in notes
    assert "epoch 1" in notes and "epoch 2" in notes  # stale: evaluated 1, best is now 2
    assert f"cannot read {broken / 'config.yaml'}" in notes
    # the stale run counts (with its warning), the null h_l1 is left out of h_l1 only
    row = rep.table.iloc[0]
    assert row["n"] == 3 and row["seeds"] == "0,1,4"
    assert row["h_l1_mean"] == pytest.approx(1.0) and row["vf_rel_mean"] == pytest.approx(0.25)


def test_finding_runs_by_dir_glob_and_file(make_run, tmp_path):
    a = make_run(["system=double_well"], 0, metrics={"h_l1": 1.0})
    b = make_run(["system=pendulum"], 1, metrics={"h_l1": 1.0})
    make_run(["system=pendulum"], 0, metrics={"h_l1": 1.0}, root="other")
    # evaluate's own .hydra/config.yaml inside a run is not a run
    write_text(a / "eval" / ".hydra" / "config.yaml", "train: {epochs: 1}\n")
    root = tmp_path / "runs"
    assert find_runs(str(root)) == ([a, b], [])
    assert find_runs(f"{root}/**/seed1")[0] == [b]
    assert find_runs([str(a), str(a / "config.yaml"), f"{root}/**/seed*"])[0] == [a, b]
    nope, none_here = str(tmp_path / "nope"), f"{tmp_path}/other/**/seed7"
    dirs, notes = find_runs([str(root), nope, none_here, str(tmp_path / "other" / "pendulum")])
    assert dirs == sorted([a, b, *find_runs(str(tmp_path / "other"))[0]])
    assert notes == [f"{nope!r} matched no path", f"{none_here!r} matched no path"]
    with pytest.raises(UserError, match="no runs found"):
        load_runs(str(tmp_path / "nope"))


def test_duplicate_seeds_are_flagged(make_run, tmp_path):
    make_run(["gradient=backprop"], 0, metrics={"h_l1": 1.0})
    make_run(["gradient=backprop"], 0, metrics={"h_l1": 1.0}, root="runs/copy")
    rep = build_report(str(tmp_path / "runs"), ["h_l1"])
    assert any("seed 0 appears 2 times" in n for n in rep.notes)


def test_bad_requests_are_one_line_user_errors(make_run, tmp_path):
    make_run([], 0, metrics={"h_l1": 1.0})
    root = str(tmp_path / "runs")
    with pytest.raises(UserError, match=r"report.metrics: unknown \['h_l2'\]; available: .*h_l1"):
        build_report(root, ["h_l2"])
    with pytest.raises(UserError, match="report.group_by: no key 'sytem' among seed, device"):
        build_report(root, ["h_l1"], group_by=["sytem"])
    with pytest.raises(UserError, match=r"report.hue \(one of the grouped keys\): no key 'seed'"):
        build_report(root, ["h_l1"], group_by=["system"], hue="seed")
    make_run([], 1, metrics=None, root="pending")
    with pytest.raises(UserError, match="none is evaluated"):
        build_report(str(tmp_path / "pending"), ["h_l1"])


def test_latex_escapes_names_and_keeps_pm():
    agg = pd.DataFrame(
        {"system": ["henon_heiles"], "n": [2], "h_l1_mean": [0.5], "h_l1_std": [0.25]}
    )
    tex = to_latex(agg, ["h_l1"], 3)
    assert "henon\\_heiles & 2 & 0.5 $\\pm$ 0.25" in tex and "h\\_l1" in tex
    assert "\\toprule" in tex and "\\bottomrule" in tex


def run_report(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hnnsym.report", *overrides],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip


def test_cli_writes_every_output_atomically(make_run, tmp_path):
    values = grid_of_runs(make_run, np.random.default_rng(3), seeds=(0, 1))
    out = tmp_path / "results"
    proc = run_report(
        f"report.runs={tmp_path}/runs/**/seed*", f"report.out_dir={out}", "report.name=sweep",
        f"report.metrics=[{','.join(METRICS)}]", "report.plot=[h_l1,best_val_loss]",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "8 evaluated run(s) of 8 found" in proc.stdout
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "sweep.csv", "sweep.md", "sweep.png", "sweep.tex", "sweep_runs.csv"
    ]  # no temp files left  # fmt: skip
    table = pd.read_csv(out / "sweep.csv")
    cell = values[("pendulum", "symplectic_adjoint")]
    row = table[(table["system"] == "pendulum") & (table["gradient"] == "symplectic_adjoint")]
    assert row["h_l1_mean"].item() == pytest.approx(np.mean(cell["h_l1"]), rel=1e-12)
    assert row["h_l1_std"].item() == pytest.approx(np.std(cell["h_l1"], ddof=1), rel=1e-12)
    runs = pd.read_csv(out / "sweep_runs.csv")
    assert len(runs) == 8 and set(runs["status"]) == {"complete"}
    assert {"system", "gradient", "seed", "h_l1", "best_val_loss"} <= set(runs.columns)
    md = (out / "sweep.md").read_text()
    assert "grouped by system, gradient" in md and " ± " in md
    assert "\\pm" in (out / "sweep.tex").read_text()
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_without_runs_exits_2_with_one_line(tmp_path):
    proc = run_report(f"report.runs={tmp_path}/none", f"report.out_dir={tmp_path}/results")
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.startswith("error: no runs found in") and "\n" not in err, err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        ["system=chain_pendulum", "system.params.links=2", "method=chnn"],
        ["system=coupled_oscillator", "system.params.alpha=0.25"],
        [
            "system=custom",
            "system.hamiltonian=\"p**2/2 + k*q**4/4 - 'c'*0 + q\"",
            "+system.params.k=2.5",
            "system.domain=[[-1.5,1.5],[-2.0,2.0]]",
        ],
    ],
)
def test_the_evaluate_command_rebuilds_the_runs_system(overrides, compose_config, tmp_path):
    """The command a report prints for an unevaluated run, read back as a shell and Hydra read
    it, composes evaluate's config with the run's own system: its parameters (a chain of 2 links,
    not the default 3), its expression and its domain, not the group's defaults."""
    train = compose_config("train", [*overrides, f"run_dir={tmp_path}/run a"])
    config = OmegaConf.to_container(train, resolve=True)
    words = shlex.split(evaluate_command(config))
    assert words[:3] == ["python", "-m", "hnnsym.evaluate"]
    evaluate = compose_config("evaluate", words[3:])
    assert OmegaConf.to_container(evaluate.system, resolve=True) == config["system"]
    assert evaluate.run_dir == f"{tmp_path}/run a" and evaluate.seed == train.seed


def test_table_rows_are_the_labels_in_the_runs_configs(make_run, tmp_path):
    """Table 1's and the DDLM table's rows come from method.label in each run's config (set by the
    table1_* experiments and the ddlm* methods): a run relabelled on the command line is a row
    of its own; the paper's rows keep their order."""
    from hnnsym.reporting.table1 import build_table1
    from hnnsym.reporting.table_ddlm import build_table as build_table_ddlm

    metrics = {"h_l1": 0.1, "traj_mse": 0.5, "energy_drift_true_max": 0.1, "vpt_mean": 4.0}
    for i, extra in enumerate([["experiment=table1_shnn"], ["experiment=table1_smoothed"],
                               ["experiment=table1", "method.label='ours, relabelled'"]]):  # fmt: skip
        make_run([*extra, "system=double_well"], 0, metrics=metrics, root=f"t1/{i}")
    table, _ = build_table1([str(tmp_path / "t1")])
    ours = table[(table["system"] == "double_well") & (table["n"] > 0)]
    assert set(ours["method"]) == {"SHNN", "This work, smoothed y0", "ours, relabelled"}
    methods = list(table[table["system"] == "double_well"]["method"])
    assert methods.index("This work, smoothed y0") < methods.index("SHNN")  # the paper's order

    ddlm = {"q_mse": 0.1, "energy_mse": 0.2, "energy_var_model": 0.3, "v_l1": 0.4}
    for i, method in enumerate(["ddlm", "ddlm_leapfrog_proposed"]):
        make_run(["experiment=ddlm_pendulum", f"method={method}", "noise=none"], 0,
                 metrics=ddlm, root=f"ddlm/{i}")  # fmt: skip
    table, _ = build_table_ddlm(str(tmp_path / "ddlm"))
    measured = table[(table["system"] == "pendulum") & (table["n"] > 0)]
    assert set(measured["method"]) == {"proposed", "leapfrog+proposed"}
