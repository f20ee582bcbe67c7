"""Sweeps: the launcher configs (hnnsym/conf/hydra/launcher), the data hand-over between concurrent jobs,
and a multirun generate -> train -> evaluate -> report through submitit (hydra/launcher=local,
the code path of hydra/launcher=slurm) and through joblib (hydra/launcher=parallel)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import random_splits, tiny_attrs
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

import hnnsym.artifacts
import hnnsym.data.hdf5
import hnnsym.errors
from hnnsym.config import CONF_DIR
from hnnsym.data.hdf5 import DataError, read_dataset, write_dataset

REPO = Path(__file__).resolve().parents[2]
submitit = pytest.importorskip("submitit", reason="pip install -e '.[sweeps]'")
pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason="pip install -e '.[sweeps]'")


def hydra_config(*overrides: str):
    """The train config with its hydra node, as a multirun job would see it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", list(overrides), return_hydra_config=True)


# ---- launcher configs -----------------------------------------------------------------------


def test_launcher_configs_extend_the_plugins_schemas():
    # composing validates every field against the plugin's dataclass (an unknown key fails)
    targets = {
        "parallel": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
        "local": "hydra_plugins.hnnsym_plugins.submitit_launchers.LocalLauncher",
        "slurm": "hydra_plugins.hnnsym_plugins.submitit_launchers.SlurmLauncher",
    }
    for name, target in targets.items():
        launcher = hydra_config(f"hydra/launcher={name}").hydra.launcher
        assert launcher._target_ == target
    assert hydra_config("hydra/launcher=parallel").hydra.launcher.prefer == "processes"
    local = hydra_config("hydra/launcher=local").hydra.launcher
    assert local.gpus_per_node == 0 and "%j" in local.submitit_folder


def test_slurm_config_becomes_the_sbatch_script(tmp_path, monkeypatch):
    """The hydra-submitit launcher turns hnnsym/conf/hydra/launcher/slurm.yaml (+ overrides) into sbatch
    options; stop it just before it would call sbatch and read the script it submits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit looks for srun
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = hydra_config(
        "hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=1",
        "hydra.launcher.timeout_min=30", f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra.job.name=train",
    )  # fmt: skip
    captured = {}

    class Submitted(Exception):
        pass

    def map_array(self, fn, *args):
        captured["executor"], captured["args"] = self, args
        raise Submitted

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=lambda c: None, config=cfg)
    with pytest.raises(Submitted):
        launcher.launch([["seed=0"], ["seed=1"]], initial_job_idx=0)
    executor = captured["executor"]._executor
    script = executor._make_submission_file_text("python -m submitit.core._submit x", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=1", "--time=30", "--cpus-per-task=2",
                 "--mem=8GB", "--job-name=train"):  # fmt: skip
        assert f"#SBATCH {line}\n" in script, line
    assert "export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1" in script
    assert executor.parameters["array_parallelism"] == 64  # becomes --array=0-1%64 at submission
    folder = str(executor.folder)
    assert folder.startswith(str(tmp_path / "sweep" / ".submitit" / "train-"))
    assert captured["args"][0] == (["seed=0"], ["seed=1"])


# ---- data hand-over between jobs ------------------------------------------------------------


def test_a_reader_never_sees_a_data_file_being_written(tmp_path, monkeypatch):
    """generate writes the HDF5 beside its final name and renames it when complete: until then a
    train job finds no file and is told to run generate (never a half-written file)."""
    path = tmp_path / "data" / "double_well" / "low" / "seed0.h5"
    seen = {}
    atomic_path = hnnsym.artifacts.atomic_path

    @contextlib.contextmanager
    def spy(target, replace=True):
        with atomic_path(target, replace) as tmp:
            yield tmp
            # the writer has written and closed the whole file; it is not renamed yet
            seen["temp_size"] = tmp.stat().st_size
            with pytest.raises(DataError) as err:
                read_dataset(target, system="double_well")
            seen["message"] = str(err.value)

    monkeypatch.setattr(hnnsym.artifacts, "atomic_path", spy)
    write_dataset(path, random_splits(), tiny_attrs())
    assert seen["temp_size"] > 0
    assert seen["message"].startswith(f"no data file at {path}; run `python -m hnnsym.generate")
    assert read_dataset(path, system="double_well").splits["train"].observed.shape == (6, 6, 2)
    assert os.listdir(path.parent) == ["seed0.h5"]


def test_two_writers_of_one_data_file_do_not_clobber(tmp_path, monkeypatch):
    """Both jobs pass the existence check; the second to publish gets the overwrite error and the
    first job's file stays as it was."""
    path = tmp_path / "seed0.h5"
    write_h5 = hnnsym.data.hdf5._write_h5

    def racing(target, *args, **kwargs):
        target.write_bytes(b"the other job's file")  # published while this job was computing
        return write_h5(target, *args, **kwargs)

    monkeypatch.setattr(hnnsym.data.hdf5, "_write_h5", racing)
    with pytest.raises(DataError, match="already exists"):
        write_dataset(path, random_splits(), tiny_attrs())
    assert path.read_bytes() == b"the other job's file"
    assert os.listdir(tmp_path) == ["seed0.h5"]


# ---- whole sweeps ---------------------------------------------------------------------------

TINY_DATA = ["generate.n_train=64", "generate.n_val=16", "generate.n_test=4",
             "generate.test_steps=20"]  # fmt: skip
TINY_TRAIN = ["train.epochs=1", "train.batch_size=32", "train.progress=false"]
TINY_EVAL = ["eval.figures=false", "eval.grid_points=64"]
SWEEP = ["system=double_well", "seed=0,1", "gradient=backprop,symplectic_adjoint"]


def cli(stage: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(
        [sys.executable, "-m", f"hnnsym.{stage}", *overrides],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"{stage} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_submitit_local_sweep_generate_train_evaluate_report(tmp_path):
    out, data = tmp_path / "outputs", f"data_dir={tmp_path / 'data'}"
    where = [f"run_dir={out}/${{run_name}}", f"hydra.sweep.dir={out}", data]
    local = "hydra/launcher=local"
    cli("generate", "-m", local, "system=double_well", "seed=0,1", *TINY_DATA, *where[1:])
    cli("train", "-m", local, *SWEEP, *where, *TINY_TRAIN)
    cli("evaluate", "-m", local, *SWEEP, *where, *TINY_EVAL)

    # every job ran with its own overrides into its own run dir
    runs = sorted(p.parent for p in out.glob("double_well/hnn/*/low/seed*/config.yaml"))
    assert len(runs) == 4
    for run in runs:
        config = OmegaConf.load(run / "config.yaml")
        assert run.name == f"seed{config.seed}" and run.parent.parent.name.endswith(
            f"-{config.gradient.name}"
        )
        assert (run / "checkpoints" / "best.pt").exists() and (run / "metrics.csv").exists()
        metrics = json.loads((run / "eval" / "metrics.json").read_text())
        assert metrics["data"]["file"].endswith(f"seed{config.seed}.h5")
    # one submitit folder per job and stage, each holding its own result; Hydra's sweep record
    jobs = [p for p in (out / ".submitit").glob("*/*") if p.name != "%j"]
    assert len(jobs) == 2 + 4 + 4
    assert all(len(list(job.glob("*_result.pkl"))) == 1 for job in jobs)
    assert (out / "multirun.yaml").exists()

    proc = cli("report", f"report.runs={out}", f"report.out_dir={tmp_path / 'results'}")
    table = pd.read_csv(tmp_path / "results" / "report.csv").set_index("gradient")
    assert list(table.index) == ["backprop", "symplectic_adjoint"] and set(table["n"]) == {2}
    assert set(table["seeds"]) == {"0,1"} and "4 evaluated run(s) of 4 found" in proc.stdout
    # the seeds are different data (a spread), the two exact gradient methods the same model
    assert (table["h_l1_std"] > 0).all()
    for metric in ("h_l1", "vf_rel", "best_val_loss"):
        a, b = table[f"{metric}_mean"]
        assert a == pytest.approx(b, rel=1e-4), metric


@pytest.mark.slow
def test_joblib_jobs_do_not_depend_on_what_ran_before_in_their_worker(tmp_path):
    """joblib workers run job after job in one process: a job must give the same numbers whether
    it is its worker's first or comes after others (no state leaks: RNG, threads, caches). Two
    workers take the six jobs (seed, copy) = (1, a) (1, b) (1, c) (0, a) (0, b) (0, c) in order,
    so seed 1 has copies run first in a fresh worker and copies run after another job."""
    for seed in (0, 1):
        write_dataset(tmp_path / "data" / "double_well" / "low" / f"seed{seed}.h5",
                      random_splits(sizes={"train": (16, 8), "val": (4, 8), "test": (2, 8)},
                                    seed=seed), tiny_attrs(seed=seed))  # fmt: skip
    root = tmp_path / "runs"
    cli("train", "-m", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", "system=double_well",
        "seed=1,0", "+copy=a,b,c", f"run_dir={root}/${{copy}}/seed${{seed}}", f"hydra.sweep.dir={root}",
        f"data_dir={tmp_path / 'data'}", "train.epochs=2", "train.batch_size=8",
        "train.progress=false", "train.window=4")  # fmt: skip
    columns = ["epoch", "train_loss", "val_loss", "best_val_loss"]
    for seed in (0, 1):
        a, *others = (pd.read_csv(root / c / f"seed{seed}" / "metrics.csv")[columns] for c in "abc")
        for other in others:
            pd.testing.assert_frame_equal(a, other, check_exact=True)
    assert not pd.read_csv(root / "a" / "seed0" / "metrics.csv")[columns].equals(
        pd.read_csv(root / "a" / "seed1" / "metrics.csv")[columns]
    )  # the seeds (data, initialisation) do differ


# ---- failed jobs ----------------------------------------------------------------------------


@pytest.mark.parametrize("launcher", ["basic", "hydra/launcher=parallel", "hydra/launcher=local"])
def test_every_failed_job_is_summed_up_whatever_the_launcher(tmp_path, launcher):
    """Every job runs; the command ends with one line per failed job and exit 2, no traceback; a
    submitit job that failed exits non-zero (its result is an error, not a success)."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env.pop("HYDRA_FULL_ERROR", None)
    args = [] if launcher == "basic" else [launcher]
    proc = subprocess.run(
        [sys.executable, "-m", "hnnsym.train", "-m", *args, "system=double_well", "seed=5,6",
         f"data_dir={tmp_path / 'none'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
         f"run_dir={tmp_path}/${{seed}}", *TINY_TRAIN],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Error executing job" not in proc.stderr
    lines = proc.stderr.splitlines()
    head = lines.index("error: 2 job(s) of this multirun failed:")
    assert lines[head + 1].startswith("  #0 system=double_well seed=5 ")
    assert lines[head + 2].startswith("  #1 system=double_well seed=6 ")
    assert all("no data file at" in line for line in lines[head + 1 :]) and len(lines) == head + 3
    if launcher == "hydra/launcher=local":
        (folder,) = (tmp_path / "sweep" / ".submitit").glob("train-*")
        for job in (p for p in folder.iterdir() if p.name != "%j"):
            (result,) = job.glob("*_result.pkl")
            assert submitit.core.utils.pickle_load(result)[0] == "error"  # the job failed
            assert "error: no data file at" in next(job.glob("*_log.err")).read_text()


# ---- run-dir locks under Slurm ----------------------------------------------------------------


def fake_squeue(tmp_path, monkeypatch, running: set[str]):
    """squeue on PATH that lists only the job ids in ``running`` (Slurm's answer for others)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "squeue"
    script.write_text(
        "#!/bin/sh\n# squeue -h -j ID -o %T\n"
        f'case "$3" in {"|".join(running) or "none"}) echo RUNNING;; *) '
        'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1;; esac\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_lock_of_a_slurm_job_no_longer_running_is_taken_over(tmp_path, monkeypatch):
    fake_squeue(tmp_path, monkeypatch, running={"4242"})
    monkeypatch.setenv("SLURM_JOB_ID", "5000")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").write_text("node042 123 2026-01-01T00:00:00+00:00 slurm-job 4141")
    with hnnsym.artifacts.exclusive_dir(run, "train"):
        assert (run / ".lock").read_text().endswith(" slurm-job 5000")
    # a job squeue still lists keeps its lock; the message says what to do either way
    (run / ".lock").write_text("node042 123 2026-01-01T00:00:00+00:00 slurm-job 4242")
    with pytest.raises(hnnsym.errors.UserError) as err:
        with hnnsym.artifacts.exclusive_dir(run, "train"):
            pass
    assert "in use by another train job (node042 123" in str(err.value)
    assert f"if that job no longer runs (killed on another machine), delete {run / '.lock'}" in str(
        err.value
    )
    # this very job before its requeue (same job id, its process gone) is taken over
    (run / ".lock").write_text("node042 123 2026-01-01T00:00:00+00:00 slurm-job 5000")
    with hnnsym.artifacts.exclusive_dir(run, "train"):
        pass
    assert not (run / ".lock").exists()


def test_a_finished_job_ignores_the_pre_timeout_signal():
    """A job that ends less than signal_delay_s before its limit may get Slurm's signal while it
    exits: ignored, it neither requeues the finished job nor kills it (Slurm would say FAILED)."""
    from hydra.core.utils import JobReturn, JobStatus

    from hnnsym.launchers import ReportingLauncher

    class Done:
        def __call__(self, *args):
            ret = JobReturn()
            ret.status = JobStatus.COMPLETED
            return ret

    class Launcher(ReportingLauncher, Done):
        pass

    before = signal.signal(signal.SIGUSR2, lambda *_: None)  # as submitit's handler in a job
    try:
        ret = Launcher()([], "hydra.sweep.dir", 0, "job_id_for_0", {})
        assert ret.status == JobStatus.COMPLETED
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, before)
