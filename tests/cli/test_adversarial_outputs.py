"""Hostile and unlucky places to write, through the CLI: a full disk, a user's directory, an empty
path, a file where a directory should be, requests too big for memory, a multirun with failing
jobs, a killed evaluation. Each ends in one ``error:`` line and exit 2, with the files on disk as
they were (by hash) and no temporary left behind."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stage_cli import assert_one_line_error, run_stage, tree_hashes

pytestmark = pytest.mark.slow

SYSTEM = ["system=double_well", "noise=low", "seed=0"]
SMALL = ["generate.n_train=32", "generate.n_val=8", "generate.n_test=4", "generate.test_steps=20",
         "generate.train_steps=12"]  # fmt: skip
TINY = ["train.epochs=2", "train.batch_size=8", "train.progress=false"]


def stage(name: str, tmp: Path, *overrides: str, **kwargs) -> subprocess.CompletedProcess:
    return run_stage(name, *SYSTEM, f"data_dir={tmp / 'data'}", *overrides, cwd=tmp, **kwargs)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny data file and a 2-epoch run (run/), read-only for the tests that use it."""
    root = tmp_path_factory.mktemp("outputs")
    assert stage("generate", root, *SMALL).returncode == 0
    proc = stage("train", root, *TINY, f"run_dir={root / 'run'}")
    assert proc.returncode == 0, proc.stderr
    return root


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp")]


def file_size_limit(n_bytes: int):
    """preexec_fn: writes past n_bytes fail with EFBIG (Python ignores SIGXFSZ), as on a full
    disk, for a process that cannot mount a small file system."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))


# ---- a full disk ----------------------------------------------------------------------------
def test_generate_onto_a_disk_too_small_is_refused_before_writing(tmp_path):
    """The file is built in memory, so its size is known: on a mounted 100 KiB tmpfs (where this
    process may mount one) the refusal names the size and the free space."""
    target = tmp_path / "small"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(target)],
                             capture_output=True).returncode == 0  # fmt: skip
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (the file-size-limit test covers the write path)")
    try:
        proc = run_stage("generate", *SYSTEM, *SMALL, "generate.n_train=512", f"data_dir={target}")
        assert_one_line_error(proc, "free", "MiB")
        assert not list(target.rglob("*.h5")) and not temporaries(target)
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.mark.parametrize("stage_name", ["generate", "train", "evaluate"])
def test_a_write_that_fails_midway_is_one_line_and_leaves_no_temporary(
    trained, tmp_path, stage_name
):
    """Every artifact goes through one atomic writer: EFBIG/ENOSPC is one line, exit 2, no
    temporary file, earlier files untouched."""
    work = tmp_path / "w"
    if stage_name == "generate":
        args = [*SMALL, "generate.n_train=512", f"data_dir={work}"]
    elif stage_name == "train":
        args = [*TINY, f"data_dir={trained / 'data'}", f"run_dir={work}"]
    else:
        args = [f"data_dir={trained / 'data'}", f"run_dir={trained / 'run'}",
                f"eval.out_dir={work}"]  # fmt: skip
    before = tree_hashes(trained)
    proc = run_stage(stage_name, *SYSTEM, *args, preexec_fn=file_size_limit(20_000))
    assert_one_line_error(proc, "cannot write", "File too large")
    assert not temporaries(tmp_path) and not temporaries(trained)
    assert tree_hashes(trained) == before


def test_a_log_that_cannot_be_written_adds_no_traceback(tmp_path):
    """The run's log already at the file-size limit (as on a full disk): its records are
    dropped, and the stage still ends with its own one-line error, not a traceback per record.
    With HNNSYM_DEBUG=1 logging reports them as usual."""
    log = tmp_path / "outputs/generate/double_well/low/seed0/generate.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"x" * 20_000)
    args = [*SYSTEM, *SMALL, "generate.n_train=512", f"data_dir={tmp_path / 'w'}"]
    proc = run_stage("generate", *args, cwd=tmp_path, preexec_fn=file_size_limit(20_000))
    assert_one_line_error(proc, "cannot write", "File too large")
    loud = run_stage("generate", *args, cwd=tmp_path, preexec_fn=file_size_limit(20_000),
                     env={"HNNSYM_DEBUG": "1"})  # fmt: skip
    assert "Logging error" in loud.stderr  # the record did fail: the test means something


# ---- a user's files ------------------------------------------------------------------------
def test_evaluate_does_not_write_into_a_users_directory(trained, tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "rollout.csv").write_text("my,own\n1,2\n")
    (user / "energy.png").write_bytes(b"\x89PNG mine")
    before = tree_hashes(user)
    proc = stage("evaluate", trained, f"run_dir={trained / 'run'}", f"eval.out_dir={user}",
                 "eval.figures=false")  # fmt: skip
    assert_one_line_error(proc, "did not write", "eval.overwrite=true")
    assert tree_hashes(user) == before
    # asked to, it writes there; and the directory is then its own
    proc = stage("evaluate", trained, f"run_dir={trained / 'run'}", f"eval.out_dir={user}",
                 "eval.figures=false", "eval.overwrite=true")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (user / "metrics.json").exists()
    again = stage("evaluate", trained, f"run_dir={trained / 'run'}", f"eval.out_dir={user}",
                  "eval.figures=false")  # fmt: skip
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("stage_name", ["train", "report", "profile"])
def test_train_report_and_profile_do_not_write_into_a_users_directory(
    trained, tmp_path, stage_name
):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    before = tree_hashes(user)
    args = {
        "train": [*SYSTEM, *TINY, f"data_dir={trained / 'data'}", f"run_dir={user}"],
        "report": [f"report.runs={trained / 'run'}", f"report.out_dir={user}"],
        "profile": [
            "profile.steps=[2]",
            "profile.batch=4",
            "profile.repeats=1",
            "profile.warmup=0",
            f"run_dir={user}",
        ],  # fmt: skip
    }[stage_name]
    proc = run_stage(stage_name, *args, cwd=tmp_path)
    assert_one_line_error(proc, "did not write", f"{stage_name}.overwrite=true")
    after = tree_hashes(user)  # Hydra's own log and .hydra/ of a profile run may be beside them
    assert {name: after.get(name) for name in before} == before


# ---- paths that are empty, files, or not writable -------------------------------------------
@pytest.mark.parametrize(
    ("stage_name", "override", "key"),
    [
        ("generate", "data_dir=", "data_dir"),
        ("generate", "data_file=", "data_file"),
        ("train", "run_dir=", "run directory (hydra.run.dir) is empty"),
        ("evaluate", "eval.out_dir=", "eval.out_dir"),
        ("report", "report.out_dir=", "report.out_dir"),
    ],  # fmt: skip
)
def test_an_empty_path_is_refused(tmp_path, stage_name, override, key):
    args = [] if stage_name == "report" else SYSTEM
    proc = run_stage(stage_name, *args, override, cwd=tmp_path)
    assert_one_line_error(proc, key if " " in key else f"{key} must be a non-empty path")
    assert not Path("/double_well").exists()


@pytest.mark.parametrize("stage_name", ["generate", "train"])
def test_a_file_where_hydras_run_dir_or_the_data_dir_should_be(tmp_path, stage_name):
    (tmp_path / "afile").write_text("a file\n")
    before = tree_hashes(tmp_path / "afile")
    where = "data_dir=afile" if stage_name == "generate" else "run_dir=afile"
    start = time.monotonic()
    args = SMALL if stage_name == "generate" else TINY
    proc = run_stage(stage_name, *SYSTEM, *args, where, cwd=tmp_path)
    assert_one_line_error(proc, "afile", "ot a directory")
    assert tree_hashes(tmp_path / "afile") == before
    assert time.monotonic() - start < 120  # refused before the simulation, not after


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_run_dir_is_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    proc = run_stage("train", *SYSTEM, *TINY, f"run_dir={ro / 'run'}", cwd=tmp_path)
    assert_one_line_error(proc, "cannot write to the run directory")


# ---- requests too big for memory ------------------------------------------------------------
@pytest.mark.parametrize(
    ("stage_name", "override", "named"),
    [
        ("generate", "generate.n_train=10000000000", "generate.n_train=10000000000"),
        ("generate", "generate.train_steps=100000000", "train_steps=100000000"),
        ("evaluate", "eval.grid_points=1000000", "eval.grid_points=1000000"),
    ],  # fmt: skip
)
def test_a_request_too_big_for_memory_is_refused_before_work(
    trained, tmp_path, stage_name, override, named
):
    before = tree_hashes(trained)
    where = [f"run_dir={trained / 'run'}", f"eval.out_dir={tmp_path / 'e'}"]
    if stage_name == "generate":
        where = [f"data_dir={tmp_path}"]
    proc = run_stage(stage_name, *SYSTEM, f"data_dir={trained / 'data'}", *where, override,
                     timeout=120)  # fmt: skip
    line = assert_one_line_error(proc, named, "of memory, more than", "memory_limit")
    assert "TiB" in line
    assert tree_hashes(trained) == before
    assert not (tmp_path / "e" / "metrics.json").exists()


def test_memory_limit_is_the_configured_one(tmp_path):
    proc = run_stage("generate", *SYSTEM, *SMALL, f"data_dir={tmp_path}", "memory_limit=10KiB")
    assert_one_line_error(proc, "more than the 10 KiB of memory_limit")
    proc = run_stage("generate", *SYSTEM, *SMALL, f"data_dir={tmp_path}", "memory_limit=lots")
    assert_one_line_error(proc, "memory_limit must be a positive size")


# ---- a multirun with failing jobs -----------------------------------------------------------
def test_a_multirun_sums_up_every_failed_job(trained, tmp_path):
    proc = run_stage("train", "--multirun", "system=double_well", *TINY,
                     f"data_dir={trained / 'data'}", "seed=0,1,2", "hydra.sweep.dir=sweep",
                     cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    head = lines.index("error: 2 job(s) of this multirun failed:")
    jobs = lines[head + 1 :]
    assert len(jobs) == 2 and "seed=1" in jobs[0] and "seed=2" in jobs[1]
    assert all("no data file" in job for job in jobs)
    assert list((tmp_path / "outputs").rglob("checkpoints/best.pt"))  # seed 0 ran


# ---- a killed evaluation --------------------------------------------------------------------
def test_a_killed_evaluation_leaves_no_metrics_beside_new_figures(trained, tmp_path):
    out = tmp_path / "eval"
    args = [f"data_dir={trained / 'data'}", f"run_dir={trained / 'run'}", f"eval.out_dir={out}"]
    assert run_stage("evaluate", *SYSTEM, *args).returncode == 0
    (out / ".energy.png.abc123.tmp").write_bytes(b"left by a killed write")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "hnnsym.evaluate", *SYSTEM, *args, "eval.grid_points=500"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while (out / "metrics.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert not (out / "metrics.json").exists()  # the old one went before the first new file
    assert not (out / ".energy.png.abc123.tmp").exists()
    # a later evaluation completes the directory again
    assert run_stage("evaluate", *SYSTEM, *args).returncode == 0
    assert (out / "metrics.json").exists() and not temporaries(out)


def test_a_refused_evaluation_keeps_the_earlier_one(trained, tmp_path):
    out = tmp_path / "eval"
    args = [f"data_dir={trained / 'data'}", f"run_dir={trained / 'run'}", f"eval.out_dir={out}",
            "eval.figures=false"]  # fmt: skip
    assert run_stage("evaluate", *SYSTEM, *args).returncode == 0
    before = tree_hashes(out)
    proc = run_stage("evaluate", *SYSTEM, *args, "eval.rollout_steps=100000")
    assert_one_line_error(proc, "eval.rollout_steps=100000")
    assert tree_hashes(out) == before


def test_ingest_and_report_pointed_at_a_file_are_one_line(trained, tmp_path):
    (tmp_path / "afile").write_text("a file\n")
    csv = tmp_path / "pendulum.csv"
    csv.write_text("t,theta,omega\n" + "".join(f"{0.1 * k},{0.01 * k},0.1\n" for k in range(200)))
    proc = run_stage("ingest", f"ingest.source={csv}", "ingest.positions=[theta]",
                     "ingest.velocities=[omega]", f"data_file={tmp_path / 'afile' / 'x.h5'}",
                     cwd=tmp_path)  # fmt: skip
    assert_one_line_error(proc, "afile")
    proc = run_stage("report", f"report.runs={trained / 'run'}",
                     f"report.out_dir={tmp_path / 'afile'}", cwd=tmp_path)  # fmt: skip
    assert_one_line_error(proc, "afile", "not a directory")
    assert (tmp_path / "afile").read_text() == "a file\n"
