"""The evaluate stage: CLI end to end, its errors, and that it tells a fitted H from an untrained one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import hnnsym
from hnnsym.artifacts import sha256, versions
from hnnsym.checkpoints import run_checkpoint, save_checkpoint
from hnnsym.config import CONF_DIR
from hnnsym.data.hdf5 import Split, write_dataset
from hnnsym.data.simulate import simulate
from hnnsym.errors import UserError
from hnnsym.evaluation.constrained import ConstrainedPart
from hnnsym.evaluation.extras import extras
from hnnsym.evaluation.hamiltonian import HamiltonianPart
from hnnsym.evaluation.measured import MeasuredPart
from hnnsym.evaluation.positions import PositionPart
from hnnsym.evaluation.problem import Kind, Problem, Rolled
from hnnsym.evaluation.registry import part_for, summary_part
from hnnsym.evaluation.stage import evaluate, summary
from hnnsym.ode.dynamics import vector_field
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.models import HNN
from hnnsym.physics.systems import get_system

REPO = Path(hnnsym.__file__).resolve().parent.parent
CONF = CONF_DIR
SYSTEM = "double_well"
MODEL_CFG = {"name": "hnn", "hidden": [16, 32, 16], "activation": "tanh"}
FAST = ["eval.grid_points=60", "eval.slice_points=41", "device=cpu"]


def write_tiny_dataset(data_dir: Path) -> Path:
    """data/<system>/low/seed0.h5 with 12 train and 4 test trajectories (40 steps of 0.05)."""
    system = get_system(SYSTEM)
    gen = torch.Generator().manual_seed(0)
    integ = get_integrator("gauss_legendre6", tol=1e-14)
    splits = {}
    for name, n, steps in (("train", 12, 8), ("val", 4, 8), ("test", 4, 40)):
        y0 = system.sample(n, gen)
        clean = simulate(system, y0, 0.025, 2, steps, integ).transpose(0, 1).numpy()
        noise = 0.01 * torch.randn(clean.shape, generator=gen, dtype=torch.float64).numpy()
        splits[name] = Split(clean + noise, clean, np.arange(steps + 1) * 0.05)
    path = data_dir / SYSTEM / "low" / "seed0.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    attrs = {
        "system": SYSTEM, "system_params": {}, "dim": 1, "obs_dt": 0.05, "fine_dt": 0.025,
        "integrator": "gauss_legendre6", "noise": "low", "noise_std": 0.01, "seed": 0, "config": "",
    }  # fmt: skip
    write_dataset(path, splits, attrs)
    return path


def write_checkpoint(run_dir: Path, model: torch.nn.Module, data_file: Path, **extra) -> Path:
    """A checkpoint in the format hnnsym.train writes (the keys evaluate reads)."""
    path = run_dir / "checkpoints" / "best.pt"
    payload = {
        "model": model.state_dict(),
        "model_config": MODEL_CFG,
        "dim": 1,
        "system": {"name": SYSTEM, "params": {}},
        "config": {"train": {"substeps": 1}},
        "epoch": 3,
        "data_file": str(data_file),
        "data_sha256": sha256(data_file),
        "versions": versions(),
        **extra,
    }
    save_checkpoint(path, payload)
    return path


def untrained() -> HNN:
    torch.manual_seed(0)
    return HNN(1)


def fitted_to_true_field(steps: int = 300) -> HNN:
    """An HNN fitted by Adam to the true double-well vector field on the domain (a stand-in for a
    trained model: only evaluate's ability to tell good from bad is tested here)."""
    system = get_system(SYSTEM)
    model = untrained().double()
    y = system.sample(1024, torch.Generator().manual_seed(1))
    target = vector_field(system, y, create_graph=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((vector_field(model, y) - target) ** 2).mean()
        loss.backward()
        opt.step()
    return model.float()


def compose_cfg(data_dir: Path, run_dir: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(
            "evaluate",
            [f"system={SYSTEM}", f"data_dir={data_dir}", f"run_dir={run_dir}", *FAST, *overrides],
        )


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("HNNSYM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "hnnsym.evaluate", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_tiny_dataset(root)
    return root


def data_file(data_dir: Path) -> Path:
    return data_dir / SYSTEM / "low" / "seed0.h5"


# ---- the CLI --------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_end_to_end(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, untrained(), data_file(data_dir))
    proc = run_cli(f"system={SYSTEM}", f"data_dir={data_dir}", f"run_dir={run_dir}", *FAST,
                   "eval.rollout_steps=30", "eval.plot_trajectories=2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    out = run_dir / "eval"
    assert str(out / "metrics.json") in proc.stdout and "h_l1" in proc.stdout

    metrics = json.loads((out / "metrics.json").read_text())
    scalars = [
        "h_l1", "h_l1_raw", "h_l1_rel", "h_offset", "vf_l1", "vf_rel", "traj_mse", "traj_l2_mean",
        "rel_err_gmean", "vpt_mean", "energy_drift_true_max", "energy_drift_true_mean",
        "energy_drift_pred_max", "energy_drift_data_max", "rollout_failed",
    ]  # fmt: skip
    for key in scalars:
        assert isinstance(metrics[key], float) and math.isfinite(metrics[key]), key
    assert metrics["h_l1"] > 0 and metrics["rollout_failed"] == 0.0
    assert metrics["rollout_steps"] == 30 and metrics["rollout_trajectories"] == 4
    assert metrics["rollout_horizon"] == pytest.approx(1.5)
    assert metrics["grid_points_per_axis"] == 60 and metrics["grid_size"] == 3600
    assert metrics["checkpoint"] == {"path": str(run_dir / "checkpoints" / "best.pt"),
                                     "which": "best", "epoch": 3}  # fmt: skip
    assert metrics["data"]["sha256"] == metrics["data"]["checkpoint_sha256"]
    assert metrics["config"]["eval"]["rollout_steps"] == 30
    assert metrics["versions"]["hnnsym"] == hnnsym.__version__

    curves = pd.read_csv(out / "rollout.csv")
    assert len(curves) == 31 and curves["t"].iloc[-1] == pytest.approx(1.5)
    assert {"mse", "l2_mean", "rel_err_mean", "energy_drift_true_mean"} <= set(curves.columns)
    assert curves["l2_mean"].iloc[0] == 0.0 and curves["l2_mean"].iloc[-1] > 0
    for name in metrics["files"]["figures"]:
        assert (out / name).stat().st_size > 1000, name
    assert len(metrics["files"]["figures"]) == 5
    assert metrics["files"]["dir"] == str(out) and metrics["rollout_reference"] == "clean"
    assert metrics["data"]["clean"] and metrics["data"]["noise_std"] == 0.01
    assert metrics["data"]["train_trajectories"] == 12  # the file's, for the tables' grouping
    assert "eval.rollout_steps=30" in metrics["overrides"]  # the provenance Hydra's .hydra/ held
    # Hydra writes no .hydra/ (a refused evaluation would rewrite it), nor into the train run's
    assert not (out / ".hydra").exists() and not (run_dir / ".hydra").exists()


@pytest.mark.slow
def test_cli_missing_checkpoint_is_one_line(data_dir, tmp_path):
    run_dir = tmp_path / "never-trained"
    proc = run_cli(f"system={SYSTEM}", f"data_dir={data_dir}", f"run_dir={run_dir}", "seed=0")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(run_dir / "checkpoints" / "best.pt") in lines[0]
    assert f"python -m hnnsym.train system={SYSTEM}" in lines[0] and "seed=0" in lines[0]


# ---- in process -----------------------------------------------------------------------------


def test_fitted_model_beats_untrained_by_far(data_dir, tmp_path, capsys):
    results = {}
    for name, model in (("untrained", untrained()), ("fitted", fitted_to_true_field())):
        run_dir = tmp_path / name
        write_checkpoint(run_dir, model, data_file(data_dir))
        cfg = compose_cfg(data_dir, run_dir, "eval.figures=false")
        results[name] = evaluate(cfg)
        saved = json.loads((run_dir / "eval" / "metrics.json").read_text())
        assert saved["h_l1"] == results[name]["h_l1"]
    bad, good = results["untrained"], results["fitted"]
    assert good["h_l1"] < 0.05 * bad["h_l1"]
    assert good["vf_l1"] < 0.05 * bad["vf_l1"]
    assert good["traj_l2_mean"] < 0.1 * bad["traj_l2_mean"]
    assert good["rel_err_gmean"] < bad["rel_err_gmean"]
    assert good["files"]["figures"] == []
    assert "warning" not in capsys.readouterr().err


def test_warns_when_data_differ_from_training(data_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, untrained(), data_file(data_dir), data_sha256="0" * 64)
    cfg = compose_cfg(data_dir, run_dir, "eval.rollout_steps=2", "eval.plot_trajectories=0",
                      "eval.plot_training_data=false")  # fmt: skip
    # (plot_trajectories=0 and no training data: only the H slice and the error figure)
    metrics = evaluate(cfg)
    err = capsys.readouterr().err
    assert "warning" in err and str(data_file(data_dir)) in err
    assert metrics["data"]["checkpoint_sha256"] == "0" * 64
    assert metrics["files"]["figures"] == ["hamiltonian.png", "rollout_error.png"]
    assert sorted(p.name for p in (run_dir / "eval").glob("*.png")) == metrics["files"]["figures"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.checkpoint=middle", "eval.checkpoint must be best or last"),
        ("eval.rollout_steps=41", "exceeds the 40 steps of the test split"),
        ("eval.valid_threshold=1.5", "eval.valid_threshold must be in (0, 1)"),
    ],
)
def test_bad_settings_are_user_errors(data_dir, tmp_path, override, message):
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, untrained(), data_file(data_dir))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate(compose_cfg(data_dir, run_dir, override))


def test_fitted_starts_are_closer_to_the_clean_ones_and_checked(data_dir, tmp_path):
    """eval.init=fitted: the rollouts start from states fitted to the first 8 noisy test
    observations under the model; with a model close to the true field they are closer to the
    clean starts than the observed ones, and the rollout is compared with the clean states."""
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, fitted_to_true_field(), data_file(data_dir))
    fast = ("eval.figures=false", "eval.rollout_steps=20")
    metrics = evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.init=fitted"))
    assert metrics["rollout_init"] == "fitted" and metrics["init_steps"] == 8
    assert metrics["start_error"] < 0.7 * metrics["start_error_observed"], metrics
    assert 0.005 < metrics["init_fit_rms"] < 0.02  # about the noise std 0.01
    first = evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.overwrite=true"))
    assert first["rollout_init"] == "first" and "start_error" not in first
    assert first["traj_mse"] != metrics["traj_mse"]
    observed = evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.init=observed"))
    assert observed["start_error"] == observed["start_error_observed"] > 0
    assert observed["start_error_observed"] == metrics["start_error_observed"]
    assert "init_steps" not in observed
    for override, message in (
        ("eval.init=smooth", "eval.init must be first, observed or fitted, got 'smooth'"),
        ("eval.init_steps=21", "eval.init=fitted needs eval.init_steps <= the 20 rolled-out steps"),
    ):
        with pytest.raises(UserError, match=message):
            evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.init=fitted", override))


def test_corrupt_checkpoint_is_a_user_error(data_dir, tmp_path):
    path = tmp_path / "run" / "checkpoints" / "best.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="cannot read checkpoint"):
        evaluate(compose_cfg(data_dir, tmp_path / "run"))


def test_train_overrides_are_accepted_and_the_checkpoints_train_config_recorded(data_dir, tmp_path):
    """A sweep's overrides work unchanged in evaluate (`train.lr` in a run_dir template), and
    eval/metrics.json records the train section the checkpoint was trained with, not evaluate's."""
    write_checkpoint(tmp_path / "lr0.5", untrained(), data_file(data_dir))
    cfg = compose_cfg(
        data_dir, tmp_path, "train.lr=0.5", f"run_dir={tmp_path}/lr${{train.lr}}",
        "eval.figures=false", "eval.max_trajectories=2", "eval.rollout_steps=5",
    )  # fmt: skip
    assert cfg.run_dir == f"{tmp_path}/lr0.5"
    saved = evaluate(cfg)
    assert saved["config"]["train"] == {"substeps": 1}  # write_checkpoint's, not train.lr=0.5
    with pytest.raises(UserError, match="train.lr: Value 'fast'"):
        evaluate(compose_cfg(data_dir, tmp_path, "train.lr=fast"))


# ---- data that generate did not write, and earlier evaluations ---------------------


def without_clean(source: Path, target: Path) -> Path:
    """A copy of ``source`` without the clean datasets and the simulation's attributes, as a file
    of measurements would be."""
    target.write_bytes(source.read_bytes())
    with h5py.File(target, "r+") as f:
        for name in ("train", "val", "test"):
            del f[f"{name}/clean"]
        for key in ("fine_dt", "integrator", "noise", "noise_std", "seed", "config"):
            del f.attrs[key]
    return target


def test_without_clean_states_the_rollouts_are_compared_with_the_observed_ones(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    measured = without_clean(data_file(data_dir), tmp_path / "measured.h5")
    write_checkpoint(run_dir, untrained(), measured)
    metrics = evaluate(compose_cfg(data_dir, run_dir, f"data_file={measured}",
                                   "eval.figures=false", "eval.rollout_steps=20"))  # fmt: skip
    assert metrics["rollout_reference"] == "observed" and metrics["data"]["clean"] is False
    assert metrics["data"]["noise_std"] is None and not metrics["data"]["made_by_generate"]
    assert any("compared with them" in note for note in metrics["notes"])
    curves = pd.read_csv(run_dir / "eval" / "rollout.csv")
    assert curves["l2_mean"].iloc[0] == 0.0  # started from the observed states it is compared with
    # the same model against the clean states differs: the noise is in the error above
    clean = evaluate(compose_cfg(data_dir, run_dir, "eval.figures=false", "eval.rollout_steps=20",
                                 "eval.overwrite=true"))  # fmt: skip
    assert clean["rollout_reference"] == "clean" and clean["traj_mse"] != metrics["traj_mse"]


def test_an_evaluation_of_other_data_is_replaced_only_when_asked(data_dir, tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "run" / "eval"
    other = without_clean(data_file(data_dir), tmp_path / "other.h5")
    write_checkpoint(run_dir, untrained(), data_file(data_dir))
    fast = ["eval.figures=false", "eval.rollout_steps=5", "eval.max_trajectories=2"]
    evaluate(compose_cfg(data_dir, run_dir, *fast))
    before = (out / "metrics.json").read_bytes()
    with pytest.raises(
        UserError, match=r"holds an evaluation of other data, .*eval.overwrite=true"
    ):
        evaluate(compose_cfg(data_dir, run_dir, *fast, f"data_file={other}"))
    assert (out / "metrics.json").read_bytes() == before
    evaluate(compose_cfg(data_dir, run_dir, *fast))  # the same data: replaced
    # an earlier metrics.json that does not say which data: refused too
    (out / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match="does not say which data it is of"):
        evaluate(compose_cfg(data_dir, run_dir, *fast))
    saved = evaluate(compose_cfg(data_dir, run_dir, *fast, f"data_file={other}",
                                 "eval.overwrite=true"))  # fmt: skip
    assert json.loads((out / "metrics.json").read_text())["data"]["file"] == str(other)
    assert saved["files"]["dir"] == str(out)
    # eval.out_dir: anywhere else, Hydra's run dir untouched
    elsewhere = tmp_path / "elsewhere"
    saved = evaluate(compose_cfg(data_dir, run_dir, *fast, f"eval.out_dir={elsewhere}"))
    assert (elsewhere / "metrics.json").exists() and saved["files"]["dir"] == str(elsewhere)
    assert json.loads((out / "metrics.json").read_text())["data"]["file"] == str(other)
    (tmp_path / "afile").write_text("")
    with pytest.raises(UserError, match="cannot write to the evaluation directory"):
        evaluate(compose_cfg(data_dir, run_dir, *fast, f"eval.out_dir={tmp_path / 'afile' / 'x'}"))


def test_the_validation_split_is_scored_apart_from_the_test_split(data_dir, tmp_path):
    """eval.split=val rolls out the validation trajectories (8 steps here, the test ones 40) into
    ${run_dir}/eval_val, leaves the test evaluation alone and is never taken for it."""
    run_dir = tmp_path / "run"
    write_checkpoint(run_dir, fitted_to_true_field(50), data_file(data_dir))
    fast = ["eval.figures=false", "eval.max_trajectories=3"]
    test = evaluate(compose_cfg(data_dir, run_dir, *fast))
    before = (run_dir / "eval" / "metrics.json").read_bytes()
    val = evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.split=val"))
    assert (run_dir / "eval" / "metrics.json").read_bytes() == before
    saved = json.loads((run_dir / "eval_val" / "metrics.json").read_text())
    assert saved["data"]["split"] == "val" and test["data"]["split"] == "test"
    assert saved["rollout_steps"] == 8 and test["rollout_steps"] == 40
    assert val["traj_mse"] != test["traj_mse"]
    assert "rollout of 3 val trajectories" in summary(val)
    with pytest.raises(UserError, match="holds an evaluation of the test split of .*, not of its "
                                        "val split"):  # fmt: skip
        evaluate(compose_cfg(data_dir, run_dir, *fast, "eval.split=val",
                             f"eval.out_dir={run_dir / 'eval'}"))  # fmt: skip
    assert (run_dir / "eval" / "metrics.json").read_bytes() == before


# ---- the parts: chosen by what the data and the model are, not by their names ----------------


def kind_problem(system, model, **cfg) -> Problem:
    """A Problem holding only what choosing a part and the extras read."""
    return Problem(OmegaConf.create({"eval": {"chunk": 1024, **cfg}}), Path("."), model, system,
                   None, {}, None, None, 0.1, 1, 1, "clean")  # fmt: skip


class DeclaresPositionsOnly(torch.nn.Module):
    """No name evaluation knows; it declares what it is."""

    capabilities = frozenset({ModelCapability.POSITION_ONLY})


class DeclaresMasses(torch.nn.Module):
    capabilities = frozenset({ModelCapability.MASSES})

    def masses(self) -> torch.Tensor:
        return torch.tensor([1.5, 0.5])


def test_the_part_follows_the_kind_of_data_and_the_declared_capabilities():
    pendulum, chain = get_system("pendulum"), get_system("chain_pendulum")
    assert isinstance(part_for(kind_problem(pendulum, HNN(1))), HamiltonianPart)
    assert isinstance(part_for(kind_problem(pendulum, DeclaresPositionsOnly())), PositionPart)
    assert isinstance(part_for(kind_problem(get_system("measured", dim=1), HNN(1))), MeasuredPart)
    assert isinstance(part_for(kind_problem(chain, HNN(4))), ConstrainedPart)
    probed = HNN(1)
    probed.position_only = True  # an attribute, not a declaration: not read
    assert kind_problem(pendulum, probed).kind == Kind("own", "qp", "known")
    with pytest.raises(UserError, match="no evaluation for a model observing q of chain_pendulum"):
        part_for(kind_problem(chain, DeclaresPositionsOnly()))


def test_extras_follow_the_declared_capabilities():
    pendulum = get_system("pendulum")
    states = torch.zeros(3, 2, 2, dtype=torch.float64)
    declared = kind_problem(pendulum, DeclaresMasses())
    assert extras(declared, Rolled(states, declared.model)) == {"mass_learned": [1.5, 0.5]}
    assert extras(kind_problem(pendulum, HNN(1)), Rolled(states, HNN(1))) == {}
    # damped data: the damping of a model without any is reported beside the true rate
    found = extras(kind_problem(pendulum, HNN(1)), Rolled(states, HNN(1), known_damping=0.3))
    assert found["damping_true"] == 0.3 and found["damping_learned"] is None


def test_the_summary_is_the_part_that_wrote_the_metrics():
    assert isinstance(summary_part({"prediction": {"scheme": "eq12"}}), PositionPart)
    assert isinstance(summary_part({"system": {"name": "measured"}}), MeasuredPart)
    assert isinstance(summary_part({"floor_rel_err_gmean": 0.1}), ConstrainedPart)
    assert isinstance(summary_part({"grid_points_per_axis": 60}), HamiltonianPart)


def test_a_run_checkpoint_without_its_model_keys_is_one_line(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(UserError, match=r"no checkpoint at .*best.pt; train first"):
        run_checkpoint(run_dir, "best", "train first")
    save_checkpoint(run_dir / "checkpoints" / "best.pt", {"model": {}, "model_config": {}})
    with pytest.raises(UserError, match=r"lacks \['dim', 'system'\]; was it written by hnnsym"):
        run_checkpoint(run_dir, "best", "train first")
