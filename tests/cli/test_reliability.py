"""Bad input ends in one clear line and exit 2 with prior artifacts intact; SIGKILL + resume is
bitwise identical to an uninterrupted run; training is deterministic."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_trainer
from stage_cli import TINY_GENERATE, assert_one_line_error, run_stage

from hnnsym.errors import UserError

pytestmark = pytest.mark.slow

SYSTEM = ["system=double_well", "noise=low", "seed=0"]
TINY_TRAIN = ["train.batch_size=32", "train.progress=false", "train.early_stop.patience=100"]


def cli(stage: str, tmp: Path, *overrides: str, run: str = "run", wait: bool = True, **kwargs):
    paths = [f"data_dir={tmp / 'data'}", f"run_dir={tmp / run}", f"hydra.run.dir={tmp / 'hydra'}"]
    if not wait:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("HYDRA_FULL_ERROR", None)
        cmd = [sys.executable, "-m", f"hnnsym.{stage}", *SYSTEM, *paths, *overrides]
        # Ctrl-C's SIGINT as a terminal delivers it: a suite started in the background ignores
        # SIGINT, Python keeps an inherited SIG_IGN, and the stages leave an ignored signal ignored
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    return run_stage(stage, *SYSTEM, *paths, *overrides, **kwargs)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("reliability")
    proc = cli("generate", root, *TINY_GENERATE)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture
def tmp(data_root: Path, tmp_path: Path) -> Path:
    """A fresh working dir whose data/ is a copy of the module's tiny dataset."""
    src = data_root / "data" / "double_well" / "low" / "seed0.h5"
    dst = tmp_path / "data" / "double_well" / "low" / "seed0.h5"
    dst.parent.mkdir(parents=True)
    dst.write_bytes(src.read_bytes())
    return tmp_path


@pytest.fixture(scope="module")
def trained_run(data_root: Path) -> Path:
    """A 1-epoch run of the module's dataset (TINY_TRAIN), read-only: tests take a copy."""
    proc = cli("train", data_root, *TINY_TRAIN, "train.epochs=1", run="trained")
    assert proc.returncode == 0, proc.stderr
    return data_root / "trained"


def copy_run(trained_run: Path, tmp: Path, run: str = "run") -> Path:
    """``tmp/<run>``: a copy of the module's 1-epoch run, as if trained there."""
    return Path(shutil.copytree(trained_run, tmp / run))


def data_file(tmp: Path) -> Path:
    return tmp / "data" / "double_well" / "low" / "seed0.h5"


# ---- bad input ------------------------------------------------------------------------------
def test_train_without_data_says_to_generate(tmp_path):
    proc = cli("train", tmp_path, *TINY_TRAIN)
    assert_one_line_error(proc, "python -m hnnsym.generate", "system=double_well")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_truncated_data_file(tmp):
    blob = data_file(tmp).read_bytes()
    data_file(tmp).write_bytes(blob[: len(blob) // 2])
    assert_one_line_error(cli("train", tmp, *TINY_TRAIN), str(data_file(tmp)))


def test_data_of_another_system(tmp):
    target = tmp / "data" / "pendulum" / "low" / "seed0.h5"
    target.parent.mkdir(parents=True)
    target.write_bytes(data_file(tmp).read_bytes())
    proc = cli("train", tmp, *TINY_TRAIN, "system=pendulum")
    assert_one_line_error(proc, "double_well", "pendulum")


def test_nan_in_data(tmp):
    with h5py.File(data_file(tmp), "r+") as f:
        observed = f["train/observed"][...]
        observed[3, 2, 0] = np.nan
        f["train/observed"][...] = observed
    assert_one_line_error(cli("train", tmp, *TINY_TRAIN), "NaN")


def test_incompatible_schema_version(tmp):
    with h5py.File(data_file(tmp), "r+") as f:
        f.attrs["schema_version"] = 99
    assert_one_line_error(cli("train", tmp, *TINY_TRAIN), "schema")


@pytest.mark.parametrize(
    ("override", "fragments"),
    [
        ("system=lorenz", ["Could not find 'system/lorenz'",
                           "Available options in 'system':", "double_well, henon_heiles"]),
        ("train.no_such_key=1", ["Could not override 'train.no_such_key': Key 'no_such_key'"]),
        ("train.lr=[", ["train.lr=[:", "no viable alternative"]),
    ],
)  # fmt: skip
def test_an_override_hydra_cannot_apply_is_one_line(tmp, override, fragments):
    """Hydra's own errors (before it calls the stage) follow the stages' rule: one line, exit 2,
    without the config search path."""
    error = assert_one_line_error(cli("train", tmp, *TINY_TRAIN, override), *fragments)
    assert "search path" not in error and "HYDRA_FULL_ERROR" not in error


STAGE_MODULES = ["generate", "ingest", "train", "evaluate", "profile", "report", "table1",
                 "table_ddlm", "table_chain"]  # fmt: skip


@pytest.mark.parametrize(
    ("stage", "args"),
    [*((stage, ["--cfg", "job"]) for stage in STAGE_MODULES),
     ("train", ["system=lorenz"]), ("train", ["--help"])],
)  # fmt: skip
def test_a_stage_composes_its_config_before_it_imports_torch(tmp, stage, args):
    """torch (most of a stage's 2 s start) is imported once the stage runs: a bad override,
    ``--cfg job`` and ``--help`` answer without it. Run as ``python -m`` runs the module, in a
    fresh interpreter (the CLI tests' warm one has torch loaded)."""
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['hnnsym.{stage}', *{args!r}]\n"
        "try:\n"
        f"    runpy.run_module('hnnsym.{stage}', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as err:\n"
        "    print('exit', err.code, file=sys.stderr)\n"
        "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert "torch imported: False" in proc.stderr, proc.stderr
    if args == ["system=lorenz"]:
        assert (
            "exit 2" in proc.stderr
            and "error: In 'run': Could not find 'system/lorenz'" in proc.stderr
        )
    else:
        assert proc.stdout.strip() and "Traceback" not in proc.stderr, proc.stderr


def test_debugging_gives_hydras_own_report_of_an_override(tmp):
    """HNNSYM_DEBUG=1: Hydra's message as Hydra prints it; HYDRA_FULL_ERROR=1: its traceback."""
    proc = cli("train", tmp, "train.no_such_key=1", env={"HNNSYM_DEBUG": "1"})
    assert proc.returncode == 1 and "error: " not in proc.stderr
    assert "HYDRA_FULL_ERROR=1 for a complete stack trace" in proc.stderr
    proc = cli("train", tmp, "train.no_such_key=1", env={"HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "ConfigCompositionException" in proc.stderr


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("train.window=40", "longer than the trajectories"),
        ("train.lr=-1", "train.lr must be a finite number > 0"),
        ("train.window=5", "multiple of train.segments"),  # with segments=2 below
        ("threads=0", "threads must be >= 1"),
        (
            "train.epochs=abc",
            "train.epochs: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        ("train.lr=fast", "train.lr: Value 'fast' of type 'str' could not be converted to Float"),
        ("+train.epoch=3", "train.epoch: Key 'epoch' not in 'TrainOptions'"),
        ("+generate.n_train=96", "+generate.n_train=96: this stage does not read the generate"),
        ("train.progress=maybe", "train.progress: Value 'maybe' is not a valid bool"),
    ],
)
def test_non_physical_training_values(tmp, override, fragment):
    extra = ["train.segments=2"] if "window=5" in override else []
    assert_one_line_error(cli("train", tmp, *TINY_TRAIN, *extra, override), fragment)


def test_batch_larger_than_data_is_fine_but_said(tmp):
    proc = cli("train", tmp, *TINY_TRAIN, "train.epochs=1", "train.batch_size=4096")
    assert proc.returncode == 0, proc.stderr
    assert "exceeds the 96 training trajectories" in proc.stderr


def test_fixed_point_failure_names_step_and_keeps_nothing_half_written(tmp):
    proc = cli("train", tmp, *TINY_TRAIN, "train.epochs=2", "integrator.max_iter=1",
               "integrator.tol=1e-30")  # fmt: skip
    assert_one_line_error(proc, "did not converge", "at step", "residual", "smaller dt")
    assert not (tmp / "run" / "checkpoints" / "last.pt").exists()


def test_unwritable_run_dir(tmp):
    (tmp / "afile").write_text("not a directory")
    proc = cli("train", tmp, *TINY_TRAIN, run="afile/run")
    assert_one_line_error(proc, "cannot write to the run directory")


def test_finished_run_is_not_overwritten_and_architecture_is_checked(tmp, trained_run):
    copy_run(trained_run, tmp)  # a finished 1-epoch run
    last = tmp / "run" / "checkpoints" / "last.pt"
    before = last.read_bytes()
    assert_one_line_error(cli("train", tmp, *TINY_TRAIN, "train.epochs=1"), "already holds a run")
    proc = cli("train", tmp, *TINY_TRAIN, "train.epochs=2", "train.resume=true",
               "model.hidden=[8,8]")  # fmt: skip
    assert_one_line_error(proc, "holds model", "trained with")
    proc = cli("evaluate", tmp, "model.hidden=[8,8]")
    assert_one_line_error(proc, "holds model")
    assert last.read_bytes() == before
    assert cli("train", tmp, *TINY_TRAIN, "train.epochs=1", "train.overwrite=true").returncode == 0


def test_evaluate_without_checkpoint(tmp):
    proc = cli("evaluate", tmp)
    assert_one_line_error(proc, "no checkpoint", "python -m hnnsym.train")


# ---- files that generate did not write --------------------------------------------
SCHEMA_DOC = "docs/guide/recordings.md, section 'File format'"
TINY_EVAL = ["eval.grid_points=40", "eval.slice_points=21", "eval.rollout_steps=10",
             "eval.plot_trajectories=1", "device=cpu"]  # fmt: skip


def write_measured(path: Path, source: Path, n_train: int = 57, **attrs) -> Path:
    """A data file as a user writes one by hand from measured trajectories, with plain h5py and
    only what the schema table (docs/guide/recordings.md) marks required: root attributes schema_version, system, dim,
    obs_dt, and observed + t per split (no clean, no simulation attributes). The states are the
    first ``n_train`` training (and all val/test) observations of ``source``; ``attrs`` overrides
    a root attribute, or drops it when None."""
    with h5py.File(source, "r") as src, h5py.File(path, "w") as f:
        for name in ("train", "val", "test"):
            f[f"{name}/observed"] = src[name]["observed"][: n_train if name == "train" else None]
            f[f"{name}/t"] = src[name]["t"][...]
        root = {"schema_version": 1, "system": "double_well", "dim": 1,
                "obs_dt": float(src.attrs["obs_dt"]), **attrs}  # fmt: skip
        for key, value in root.items():
            if value is not None:
                f.attrs[key] = value
    return path


def eval_files(out: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(out.iterdir())
        if p.is_file() and not p.name.startswith(".")
    }


@pytest.mark.parametrize("missing", ["obs_dt", "val/t"])
def test_a_hand_written_file_lacking_what_train_reads_is_one_line(tmp, missing):
    """Was: KeyError: 'obs_dt' and Hydra's traceback hint. The line names what is missing and
    points to the schema (not "regenerate it": generate did not write this file)."""
    measured = write_measured(tmp / "measured.h5", data_file(tmp))
    with h5py.File(measured, "r+") as f:
        if "/" in missing:
            del f[missing]
        else:
            del f.attrs[missing]
    proc = cli("train", tmp, *TINY_TRAIN, f"data_file={measured}")
    what = "obs_dt (the time between observations" if missing == "obs_dt" else "lacks the dataset t"
    assert_one_line_error(proc, str(measured), what, SCHEMA_DOC)
    assert "regenerate" not in proc.stderr and "KeyError" not in proc.stderr
    assert not (tmp / "run" / "checkpoints").exists()


def test_a_file_of_a_system_that_is_not_built_in_is_one_line(tmp):
    """Out of reach (evaluate needs the true H, train the system's config group): said so."""
    measured = write_measured(tmp / "measured.h5", data_file(tmp), system="my_robot")
    proc = cli("train", tmp, *TINY_TRAIN, f"data_file={measured}")
    assert_one_line_error(proc, "holds system 'my_robot', which is not a built-in system",
                          "double_well", "set the file's system attribute")  # fmt: skip
    assert not (tmp / "run" / "checkpoints").exists()


def test_measured_data_without_simulation_attributes_trains_and_evaluates(tmp):
    """Required only: no fine_dt, integrator, noise, noise_std, seed, config, clean. 57 training
    trajectories with train.batch_size=64 is one optimizer step per epoch: said before training
    (with a batch size to use) and on every progress line."""
    measured = write_measured(tmp / "measured.h5", data_file(tmp))
    proc = cli("train", tmp, "train.progress=false", "train.batch_size=64", "train.epochs=2",
               f"data_file={measured}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        "note: train.batch_size=64 exceeds the 57 training trajectories: each epoch is one "
        "optimizer step" in proc.stderr
    )
    assert (
        "early stopping" in proc.stderr
        and "try train.batch_size=8 (8 steps per epoch)" in proc.stderr
    )
    progress = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert len(progress) == 2
    assert all("only 1 optimizer step/epoch: try train.batch_size=8" in line for line in progress)

    proc = cli("evaluate", tmp, *TINY_EVAL, f"data_file={measured}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp / "run" / "eval" / "metrics.json").read_text())
    # no clean trajectories: the rollouts are compared with the observed test states, and said so
    assert metrics["rollout_reference"] == "observed"
    assert metrics["data"]["clean"] is False and metrics["data"]["made_by_generate"] is False
    assert metrics["data"]["noise_std"] is None and metrics["data"]["file"] == str(measured)
    assert any("no clean test trajectories" in note for note in metrics["notes"])
    assert "no clean test trajectories" in proc.stdout
    assert math.isfinite(metrics["h_l1"]) and math.isfinite(metrics["traj_mse"])


def test_evaluate_does_not_replace_an_evaluation_of_other_data(tmp, trained_run):
    """Was: evaluating the run on a second data_file silently replaced the first evaluation."""
    copy_run(trained_run, tmp)  # a finished 1-epoch run
    out = tmp / "run" / "eval"
    assert cli("evaluate", tmp, *TINY_EVAL).returncode == 0
    first = eval_files(out)
    assert {"metrics.json", "rollout.csv", "rollout_error.png"} <= set(first)

    other = write_measured(tmp / "measured.h5", data_file(tmp))
    proc = cli("evaluate", tmp, *TINY_EVAL, f"data_file={other}")
    assert_one_line_error(proc, str(out), str(data_file(tmp)), str(other), "eval.overwrite=true",
                          "eval.out_dir=")  # fmt: skip
    assert eval_files(out) == first  # intact, nothing added

    # elsewhere: both evaluations kept
    elsewhere = tmp / "eval-measured"
    proc = cli("evaluate", tmp, *TINY_EVAL, f"data_file={other}", f"eval.out_dir={elsewhere}")
    assert proc.returncode == 0, proc.stderr
    assert str(elsewhere / "metrics.json") in proc.stdout
    assert json.loads((elsewhere / "metrics.json").read_text())["data"]["file"] == str(other)
    assert eval_files(out) == first

    # the same data again: replaced as before (without figures now: the old ones are removed)
    proc = cli("evaluate", tmp, *TINY_EVAL, "eval.figures=false")
    assert proc.returncode == 0, proc.stderr
    assert sorted(eval_files(out)) == ["metrics.json", "rollout.csv"]

    # other data with eval.overwrite=true: replaced
    proc = cli("evaluate", tmp, *TINY_EVAL, f"data_file={other}", "eval.overwrite=true")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "metrics.json").read_text())["data"]["file"] == str(other)


# ---- determinism, kill and resume ------------------------------------------------------------
def losses(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv")[["epoch", "train_loss", "val_loss", "lr"]]


def final_params(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=False)["model"]


def test_training_is_deterministic_and_survives_sigkill(tmp):
    epochs = ["train.epochs=20", "train.early_stop.patience=100"]
    assert cli("train", tmp, *TINY_TRAIN, *epochs, run="a").returncode == 0
    assert cli("train", tmp, *TINY_TRAIN, *epochs, run="b").returncode == 0
    pd.testing.assert_frame_equal(losses(tmp / "a"), losses(tmp / "b"), check_exact=True)
    for key, value in final_params(tmp / "a").items():
        assert torch.equal(value, final_params(tmp / "b")[key]), key

    # a third run, killed with SIGKILL once two epochs are on disk, then resumed
    proc = cli("train", tmp, *TINY_TRAIN, *epochs, run="c", wait=False)
    metrics = tmp / "c" / "metrics.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if metrics.exists() and len(pd.read_csv(metrics)) >= 2:
            break
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = len(pd.read_csv(metrics))
    assert done < 20, "the run finished before it could be killed"
    resumed = cli("train", tmp, *TINY_TRAIN, *epochs, "train.resume=true", run="c")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    pd.testing.assert_frame_equal(losses(tmp / "a"), losses(tmp / "c"), check_exact=True)
    for key, value in final_params(tmp / "a").items():
        assert torch.equal(value, final_params(tmp / "c")[key]), key
    assert not list((tmp / "c").rglob("*.tmp"))


def test_a_resumed_run_removes_the_temporaries_a_killed_write_left(tmp, trained_run):
    """SIGKILL during an atomic write leaves ``.<name>.<random>.tmp`` beside the file (the kill
    above lands there only sometimes): the next train job in the run dir removes those of its own
    files, and nothing else."""
    run = copy_run(trained_run, tmp, "c")  # a finished 1-epoch run
    stale = [run / ".metrics.csv.k1l2m3.tmp", run / "checkpoints" / ".last.pt.a9b8c7.tmp",
             run / "checkpoints" / ".best.pt.zz.tmp", run / ".config.yaml.q.tmp"]  # fmt: skip
    kept = [run / ".notes.txt.x1.tmp", run / "eval" / ".metrics.json.y2.tmp"]
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    resumed = cli("train", tmp, *TINY_TRAIN, "train.epochs=3", "train.resume=true", run="c")
    assert resumed.returncode == 0, resumed.stderr
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)
    assert "resuming" in resumed.stdout


def test_ctrl_c_stops_cleanly_and_the_run_resumes(tmp):
    epochs = ["train.epochs=30", "train.early_stop.patience=100"]
    proc = cli("train", tmp, *TINY_TRAIN, *epochs, wait=False)
    metrics = tmp / "run" / "metrics.csv"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and len(pd.read_csv(metrics)) >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr.decode()
    assert "continue with train.resume=true" in stderr.decode()
    assert "Traceback" not in stderr.decode()
    saved = torch.load(tmp / "run" / "checkpoints" / "last.pt", weights_only=False)
    assert saved["epoch"] >= 1
    resumed = cli("train", tmp, *TINY_TRAIN, *epochs, "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr
    assert len(pd.read_csv(metrics)) == 30


def test_a_run_dir_in_use_by_a_live_job_is_refused_and_a_dead_ones_lock_taken_over(tmp):
    run = tmp / "run"
    run.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run / ".lock").write_text(f"{socket.gethostname()} {live.pid} 2026-01-01T00:00:00")
        proc = cli("train", tmp, *TINY_TRAIN, "train.epochs=1")
        assert_one_line_error(proc, "in use by another train job", "run_dir=")
        assert not (run / "checkpoints").exists()
    finally:
        live.kill()
        live.wait()
    # the owner is gone now: its lock is stale and is taken over
    assert cli("train", tmp, *TINY_TRAIN, "train.epochs=1").returncode == 0
    assert not (run / ".lock").exists()


# ---- divergence (unit level: a loss that turns bad on cue) ------------------------------------
class _TurnsBad:
    """A stand-in loss: the mean squared output of the model until ``bad_epoch``, then ``how``."""

    def __init__(self, bad_epoch: int, how: str):
        self.bad_epoch, self.how, self.trainer = bad_epoch, how, None

    def __call__(self, model, windows, stats=None):
        out = model(windows[0])
        if self.trainer.state.epoch + 1 < self.bad_epoch:
            return (out**2).mean()
        if self.how == "nan_loss":
            return (out**2).mean() * float("nan")
        out.register_hook(lambda grad: grad * math.inf)  # a finite loss, an infinite gradient
        return (out**2).mean()


@pytest.mark.parametrize(("how", "said"), [("nan_loss", "loss nan"), ("inf_step", "non-finite")])
def test_diverging_training_stops_and_keeps_the_last_good_checkpoint(
    compose_config, tmp_path, how, said
):
    cfg = compose_config("train", ["train.epochs=5", "train.batch_size=8", "train.progress=false"])
    loss = _TurnsBad(bad_epoch=3, how=how)
    trainer = loss.trainer = tiny_trainer(cfg, loss, tmp_path)
    with pytest.raises(UserError) as err:
        trainer.fit()
    message = str(err.value)
    assert message.startswith("training diverged") and said in message, message
    assert "last good checkpoint is kept" in message and "(epoch 2)" in message
    kept = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert kept["epoch"] == 2
    assert all(torch.isfinite(v).all() for v in kept["model"].values())
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 2
