"""Sweeps on a real single-node Slurm (.ci/slurm-up.sh brings it up as root, installing Slurm with
apt-get if missing; .ci/slurm-down.sh takes it down by PID): the documented generate -> train ->
evaluate sweep as array jobs, a missing data file among others, a stale lock of a job on "another
node", scancel of one task, and requeues that resume their run: submitit's pre-timeout signal sent
by hand, and sent by Slurm as a run outlasts its time limit. Skipped, with the reason, where Slurm cannot be started."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("SLURM_STATE", "/tmp/hnnsym-slurm-test"))
pytest.importorskip("submitit", reason="pip install -e '.[sweeps]'")
pytestmark = [pytest.mark.slow, pytest.mark.slurm]

TINY_DATA = ["generate.n_train=32", "generate.n_val=8", "generate.n_test=4",
             "generate.test_steps=20", "generate.train_steps=8"]  # fmt: skip
TRAIN = ["train.batch_size=16", "train.progress=false", "train.window=4"]


@pytest.fixture(scope="module")
def slurm():
    env = {**os.environ, "SLURM_STATE": str(STATE)}
    up = subprocess.run([str(REPO / ".ci" / "slurm-up.sh")], env=env, capture_output=True,
                        text=True, timeout=600)  # fmt: skip
    if up.returncode != 0:
        subprocess.run([str(REPO / ".ci" / "slurm-down.sh")], env=env, timeout=120)
        pytest.skip(f"no Slurm here: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
    env.update(
        PATH=f"{STATE / 'bin'}{os.pathsep}{env['PATH']}",  # sacct from scontrol (no database)
        SLURM_CONF=str(STATE / "slurm.conf"),
        PYTHONPATH=str(REPO),  # the jobs import this checkout whatever their cwd
        MPLBACKEND="Agg",
    )
    env.pop("HYDRA_FULL_ERROR", None)
    yield env
    subprocess.run([str(REPO / ".ci" / "slurm-down.sh")], env=env, timeout=120)


def stage(env, name, *overrides, cwd, check=True, timeout=300):
    cmd = [sys.executable, "-m", f"hnnsym.{name}", *overrides]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{name}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


UNFINISHED = ("?", "PENDING", "RUNNING", "COMPLETING")  # sacct's states before a job's end


def slurm_state(env, job: str) -> str:
    out = subprocess.run(["sacct", "-j", job], env=env, capture_output=True, text=True).stdout
    return dict(line.split("|")[:2] for line in out.splitlines()[1:]).get(job, "?")


SLURM = ["-m", "hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.mem_gb=1",
         "hydra.launcher.cpus_per_task=1"]  # fmt: skip


def test_sweep_on_slurm_failed_job_stale_lock_and_results_as_basic(slurm, tmp_path):
    where = ["system=double_well", f"data_dir={tmp_path / 'data'}", f"hydra.sweep.dir={tmp_path / 'o'}",
             f"run_dir={tmp_path}/o/${{run_name}}"]  # fmt: skip
    stage(slurm, "generate", *SLURM, "seed=0,1", *TINY_DATA, *where, cwd=tmp_path)
    # a lock left by a job killed on another node (squeue no longer knows its job id)
    run1 = tmp_path / "o/double_well/hnn/implicit_midpoint-symplectic_adjoint/low/seed1"
    run1.mkdir(parents=True)
    (run1 / ".lock").write_text("node042 4242 2026-01-01T00:00:00+00:00 slurm-job 987654")
    train = stage(slurm, "train", *SLURM, "seed=0,1,2", "train.epochs=2", *TRAIN, *where,
                  cwd=tmp_path, check=False)  # fmt: skip
    assert train.returncode == 2, train.stderr[-3000:]
    assert "Traceback" not in train.stderr
    lines = train.stderr.splitlines()
    head = lines.index("error: 1 job(s) of this multirun failed:")
    assert lines[head + 1].startswith("  #2 ") and "no data file at" in lines[head + 1]
    assert len(lines) == head + 2
    # the jobs ran as Slurm array tasks; the failed one is FAILED, not COMPLETED 0:0
    (folder,) = (tmp_path / "o" / ".submitit").glob("train-*")
    logs = sorted(p for p in folder.iterdir() if p.is_dir() and "_" in p.name)
    assert [p.name.split("_")[1] for p in logs] == ["0", "1", "2"]
    for log in logs:
        said = "".join(p.read_text() for p in log.glob("*_log.*"))
        assert f"JobEnvironment(job_id={log.name}," in said
    # accounting records a job's end a moment after submitit has read its result
    for log in (logs[2], logs[0]):
        wait_for(lambda log=log: slurm_state(slurm, log.name) not in UNFINISHED,
                 f"the accounting of job {log.name}'s end", timeout=60)  # fmt: skip
    assert slurm_state(slurm, logs[2].name) == "FAILED"
    assert slurm_state(slurm, logs[0].name) == "COMPLETED"
    assert not (run1 / ".lock").exists() and (run1 / "checkpoints" / "best.pt").exists()
    stage(slurm, "evaluate", *SLURM, "seed=0,1", "eval.figures=false", "eval.grid_points=64",
          *where, cwd=tmp_path)  # fmt: skip
    # the same numbers as the basic launcher
    basic = [*where[:3], f"run_dir={tmp_path}/basic/${{run_name}}"]
    stage(slurm, "train", "-m", "seed=0", "train.epochs=2", *TRAIN, *basic, cwd=tmp_path)
    run0 = "double_well/hnn/implicit_midpoint-symplectic_adjoint/low/seed0"
    cols = ["epoch", "train_loss", "val_loss", "best_val_loss"]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "o" / run0 / "metrics.csv")[cols],
                                  pd.read_csv(tmp_path / "basic" / run0 / "metrics.csv")[cols])  # fmt: skip


@pytest.mark.parametrize(
    ("override", "reason"),
    [("hydra.launcher.partition=gpu", "invalid partition specified: gpu; Batch job submission "
      "failed: Invalid partition name specified"),
     ("hydra.launcher.gpus_per_node=1", "Invalid generic resource (gres) specification")],
)  # fmt: skip
def test_sbatch_refusal_is_one_line(slurm, tmp_path, override, reason):
    proc = stage(slurm, "generate", *SLURM, override, "seed=0", f"data_dir={tmp_path}",
                 f"hydra.sweep.dir={tmp_path / 'o'}", cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sbatch refused the jobs: ") and reason in last, last
    assert "sbatch: error" not in proc.stderr  # sbatch's own lines are not repeated


def wait_for(predicate, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_scancel_of_one_task_and_a_requeue(slurm, tmp_path):
    where = ["system=double_well", f"data_dir={tmp_path / 'data'}", f"hydra.sweep.dir={tmp_path / 'o'}",
             f"run_dir={tmp_path}/o/${{run_name}}"]  # fmt: skip
    stage(slurm, "generate", *SLURM, "seed=0,1", *TINY_DATA, "generate.n_train=256", *where,
          cwd=tmp_path)  # fmt: skip
    cmd = [sys.executable, "-m", "hnnsym.train", *SLURM, "seed=0,1", "train.epochs=300", "train.early_stop.patience=100000", *TRAIN,
           *where]  # fmt: skip
    sweep = subprocess.Popen(cmd, cwd=tmp_path, env=slurm, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    runs = tmp_path / "o/double_well/hnn/implicit_midpoint-symplectic_adjoint/low"
    wait_for(lambda: all((runs / f"seed{k}" / "checkpoints" / "last.pt").exists() for k in (0, 1)),
             "both tasks' first epoch")  # fmt: skip
    (folder,) = (tmp_path / "o" / ".submitit").glob("train-*")
    array = next(p.name for p in folder.iterdir() if p.is_dir() and "_" in p.name).split("_")[0]
    # task 0: submitit's pre-timeout signal (as Slurm sends it signal_delay_s before the limit)
    subprocess.run(["scancel", "--signal=USR2", f"{array}_0"], env=slurm, check=True)
    time.sleep(3)
    subprocess.run(["scancel", f"{array}_1"], env=slurm, check=True)  # task 1: cancelled
    out, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 2, err[-3000:]
    lines = err.splitlines()
    assert len(lines) < 40 and "Traceback" not in err, err[-3000:]
    head = lines.index("error: 1 job(s) of this multirun failed:")
    assert lines[head + 1].startswith("  #1 ") and "cancelled" in lines[head + 1]
    assert "train.resume=auto" in lines[head + 1]
    # task 0 was requeued and resumed its own run (train.resume=false) to the end
    log0 = next((folder / f"{array}_0").glob("*_log.out")).read_text()
    assert "resuming" in log0
    assert len(pd.read_csv(runs / "seed0" / "metrics.csv")) == 300
    # the cancelled run is resumable: its stale lock is taken over and it continues
    assert (runs / "seed1" / ".lock").exists()
    done = len(pd.read_csv(runs / "seed1" / "metrics.csv"))
    resumed = stage(slurm, "train", "seed=1", "train.epochs=300", "train.early_stop.patience=100000", "train.resume=auto", *TRAIN,
                    *where[:2], f"run_dir={runs / 'seed1'}", cwd=tmp_path)  # fmt: skip
    # last.pt is written before its metrics.csv row, so a cancel between the two leaves the
    # checkpoint one epoch ahead of the rows; the resumed run rewrites the rows from it
    (epoch,) = re.findall(r"from epoch (\d+)", resumed.stdout)
    assert int(epoch) in (done, done + 1), (epoch, done)
    assert len(pd.read_csv(runs / "seed1" / "metrics.csv")) == 300


def submitit_time(line: str) -> float:
    """Seconds since the epoch of a submitit log line, ``submitit INFO (2026-01-01 12:00:00,123) - ...``."""
    stamp = line.split("(", 1)[1].split(")", 1)[0]
    return time.mktime(time.strptime(stamp.split(",")[0], "%Y-%m-%d %H:%M:%S"))


def test_time_limit_requeues_and_the_job_resumes_its_run(slurm, tmp_path):
    """No signal by hand: timeout_min runs out, Slurm sends submitit's pre-timeout signal (up to 30 s
    earlier than signal_delay_s before the limit: slurmctld checks time limits every 30 s), the job
    is requeued (held cred_expire seconds, .ci/slurm-up.sh) and each later attempt resumes the run.
    The run is longer than one attempt; how many attempts it takes varies with the signal's time."""
    where = ["system=double_well", f"data_dir={tmp_path / 'data'}", f"hydra.sweep.dir={tmp_path / 'o'}",
             f"run_dir={tmp_path}/o/${{run_name}}"]  # fmt: skip
    stage(slurm, "generate", *SLURM, "seed=0", *TINY_DATA, "generate.n_train=256", *where,
          cwd=tmp_path)  # fmt: skip
    limit_s, delay_s = 120, 40
    # 100 s of training at this machine's speed now (a probe of 40 epochs): more than an attempt
    # can do before its signal (at most limit_s - delay_s after its start, less its start-up)
    opts = ["train.early_stop.patience=100000", *TRAIN]
    stage(slurm, "train", "seed=0", "train.epochs=40", *opts, *where[:2], f"run_dir={tmp_path / 'probe'}",
          cwd=tmp_path)  # fmt: skip
    per_epoch = pd.read_csv(tmp_path / "probe" / "metrics.csv")["wall_time"].iloc[-1] / 40
    epochs = int(100 / per_epoch)
    timed = ["hydra.launcher.timeout_min=2", f"hydra.launcher.signal_delay_s={delay_s}",
             "hydra.launcher.max_num_timeout=4"]  # fmt: skip
    train = stage(slurm, "train", *SLURM, *timed, "seed=0", f"train.epochs={epochs}", *opts, *where,
                  cwd=tmp_path, timeout=540)  # fmt: skip
    assert "error" not in train.stderr, train.stderr[-3000:]
    (folder,) = (tmp_path / "o" / ".submitit").glob("train-*")
    (log,) = (p for p in folder.iterdir() if p.is_dir())  # one job: not an array
    # submitit returns once the job has written its result; Slurm's COMPLETED comes a moment later
    wait_for(lambda: slurm_state(slurm, log.name) == "COMPLETED", "the job's end", timeout=60)
    job = subprocess.run(["scontrol", "-o", "show", "job", log.name], env=slurm, check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    restarts = int(dict(kv.split("=", 1) for kv in job.split() if "=" in kv)["Restarts"])
    assert restarts >= 1, f"ended before Slurm's signal (a fast machine? raise epochs): {job}"
    # every attempt but the last was cut off by Slurm's signal, signal_delay_s before its limit
    out = next(log.glob("*_log.out")).read_text()
    lines = [ln for ln in out.splitlines() if ln.startswith("submitit ")]  # its own log lines
    starts = [submitit_time(ln) for ln in lines if "Starting with JobEnvironment" in ln]
    signals = [submitit_time(ln) for ln in lines if "Caught signal SIGUSR2" in ln]
    assert len(starts) == restarts + 1 and len(signals) == restarts, out[-3000:]
    for start, at in zip(starts, signals):
        assert limit_s - delay_s - 45 <= at - start <= limit_s - delay_s + 5, (start, at)
    assert sum("this job is timed-out" in ln for ln in lines) == restarts
    assert sum(f"Requeued job {log.name} " in ln for ln in lines) == restarts
    # each requeued attempt resumed its own run from last.pt, and the last one finished it
    run = tmp_path / "o/double_well/hnn/implicit_midpoint-symplectic_adjoint/low/seed0"
    assert out.count(f"resuming {run} from epoch ") == restarts, out[-3000:]
    assert len(pd.read_csv(run / "metrics.csv")) == epochs
    assert (run / "checkpoints" / "best.pt").exists() and not (run / ".lock").exists()
