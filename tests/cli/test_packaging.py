"""The package as a researcher installs it: the wheel holds the configs and py.typed, its console
scripts run generate -> train -> evaluate from a directory outside the checkout; a user's own
config dir (``--config-dir``, ``hydra.searchpath``) adds experiments beside the shipped ones; and
progress bars are drawn only on a terminal."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from stage_cli import run_stage

import hnnsym
from hnnsym.config import CONF_DIR
from hnnsym.progress import on_terminal, progress

ROOT = Path(__file__).resolve().parents[2]  # the checkout the wheel is built from
# what a build copies from the checkout: not the runs, the data, the VCS or earlier builds
SKIP_AT_ROOT = {".git", ".venv", "data", "outputs", "results", "multirun", "build", "dist"}
SKIP_ANYWHERE = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}

SYSTEM = "system=double_well"
TINY = [  # generate's sizes (train and evaluate take the system and the paths)
    SYSTEM,
    "generate.n_train=16",
    "generate.n_val=8",
    "generate.n_test=2",
    "generate.test_steps=10",
    "generate.train_steps=8",
]

USER_EXPERIMENT = """\
# @package _global_
generate:
  n_train: 17
  train_steps: 9
"""


def run_here(stage: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m hnnsym.<stage>`` of this checkout from ``cwd``: PYTHONPATH names the checkout
    (from another cwd, the project venv's editable finder could import another checkout's)."""
    return run_stage(stage, *overrides, cwd=cwd, env={"PYTHONPATH": str(ROOT)})


def _source_copy(dst: Path) -> Path:
    """The checkout's files without runs, data, caches and build leftovers (a build in place would
    write build/ and *.egg-info into the checkout, and a stale build/ leaks deleted files)."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = SKIP_ANYWHERE | (SKIP_AT_ROOT if Path(directory) == ROOT else set())
        return {n for n in names if n in skip or n.endswith(".egg-info")}

    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def _venv_without_the_checkout(venv: Path) -> Path:
    """A fresh venv whose own site-packages comes first and which sees the project venv's
    site-packages (torch, hydra, ... without network) as a plain path entry.

    Not ``--system-site-packages``: that gives the base interpreter's site-packages, not the
    project venv's (no torch there). And the project venv's site-packages is only a path entry
    (a .pth line), not a site dir: its .pth files, among them the editable install's finder that
    maps ``hnnsym`` to a checkout, are not run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    project_site = sysconfig.get_paths()["purelib"]
    (Path(site) / "project_site_packages.pth").write_text(project_site + "\n")
    return python


def _clean_env(venv: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("PYTHONPATH", "HYDRA_FULL_ERROR", "HNNSYM_DEBUG", "PYTHONHOME"):
        env.pop(key, None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.mark.slow
def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    src = _source_copy(tmp_path / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", str(wheels), str(src)],
        check=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("hnnsym-*.whl")
    assert wheel.name.startswith(f"hnnsym-{hnnsym.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("hnnsym/conf/") and n.endswith(".yaml"))
    in_checkout = sorted(
        f"hnnsym/conf/{p.relative_to(CONF_DIR).as_posix()}" for p in CONF_DIR.rglob("*.yaml")
    )
    assert shipped == in_checkout and len(shipped) > 50
    assert "hnnsym/py.typed" in names
    entry_points = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
        .decode()
    )
    for stage in ("generate", "ingest", "train", "evaluate", "profile", "report", "table1",
                  "table_ddlm", "table_chain"):  # fmt: skip
        assert f"hnnsym-{stage.replace('_', '-')} = hnnsym.{stage}:main" in entry_points

    venv = tmp_path / "venv"
    python = _venv_without_the_checkout(venv)
    env = _clean_env(venv)
    # --ignore-installed: the project venv's editable hnnsym is visible to this pip; never touch it
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--ignore-installed", "--quiet",
         "--disable-pip-version-check", str(wheel)],
        check=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    where = subprocess.run(
        [str(python), "-c", "import hnnsym; print(hnnsym.__file__, hnnsym.__version__)"],
        check=True, cwd=tmp_path, env=env, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    assert Path(where[0]).resolve().is_relative_to(venv.resolve()), where
    assert where[1] == hnnsym.__version__

    work = tmp_path / "work"  # outside the checkout: no conf/ beside it, no hnnsym/ below it
    work.mkdir()
    paths = [f"data_dir={tmp_path / 'data'}", f"run_dir={tmp_path / 'run'}"]

    def command(name: str, *overrides: str) -> subprocess.CompletedProcess:
        script = venv / "bin" / name
        assert script.exists(), name
        proc = subprocess.run(
            [str(script), *overrides], cwd=work, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-3000:])
        return proc

    command("hnnsym-generate", *TINY, paths[0])  # its run dir is its own
    assert list((tmp_path / "data").rglob("*.h5"))
    command("hnnsym-train", SYSTEM, *paths, "train.epochs=1", "train.batch_size=8",
            "train.progress=false")  # fmt: skip
    command("hnnsym-evaluate", SYSTEM, *paths, "eval.figures=false")
    assert list((tmp_path / "run").rglob("metrics.json"))

    # python -m hnnsym.<stage> of the installed package, outside the checkout
    module = subprocess.run(
        [str(python), "-m", "hnnsym.generate", "system=henon_heiles", "--cfg", "job"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert module.returncode == 0 and "henon_heiles" in module.stdout, module.stderr[-3000:]

    # a user's experiment beside the shipped ones, through the installed command
    user = tmp_path / "user_conf"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(USER_EXPERIMENT)
    shown = command("hnnsym-generate", "--config-dir", str(user), "experiment=mine", "--cfg", "job")
    assert "n_train: 17" in shown.stdout and "train_steps: 9" in shown.stdout


@pytest.mark.parametrize("how", ["--config-dir", "hydra.searchpath"])
def test_a_user_config_dir_adds_experiments(tmp_path: Path, how: str) -> None:
    """A directory of the user's own configs (experiment/<name>.yaml) composes with the shipped
    ones; --cfg job prints the composed config and runs nothing."""
    user = tmp_path / "user_conf"
    (user / "experiment").mkdir(parents=True)
    (user / "experiment" / "mine.yaml").write_text(USER_EXPERIMENT)
    extra = (
        ["--config-dir", str(user)]
        if how == "--config-dir"
        else [f"hydra.searchpath=[file://{user}]"]
    )
    proc = run_here("generate", *extra, "experiment=mine", "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "n_train: 17" in proc.stdout and "train_steps: 9" in proc.stdout
    assert "system:" in proc.stdout  # the shipped groups are still there
    unknown = run_here("generate", *extra, "experiment=not_there", "--cfg", "job", cwd=tmp_path)
    assert unknown.returncode != 0 and "not_there" in unknown.stderr


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_draws_only_on_a_terminal() -> None:
    for tty, drawn in ((True, True), (False, False)):
        stream = _Stream(tty)
        assert on_terminal(stream) is tty
        for _ in progress(range(3), file=stream, mininterval=0):
            pass
        assert ("\r" in stream.getvalue()) is drawn, stream.getvalue()
    off = _Stream(True)
    for _ in progress(range(3), file=off, enabled=False):
        pass
    assert off.getvalue() == ""
    closed = io.StringIO()
    closed.close()  # isatty raises ValueError
    assert on_terminal(closed) is False


@pytest.mark.slow
def test_a_log_gets_no_progress_bars(tmp_path: Path) -> None:
    """stdout and stderr piped (as under Slurm, CI or > log): no bar refreshes, and train's one
    line per epoch is still there."""
    paths = [f"data_dir={tmp_path / 'data'}", f"run_dir={tmp_path / 'run'}"]
    gen = run_here("generate", *TINY, paths[0], cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr[-3000:]
    train = run_here("train", SYSTEM, *paths, "train.epochs=2", "train.batch_size=8",
                      "train.progress=true", cwd=tmp_path)  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    for proc in (gen, train):
        log = proc.stdout + proc.stderr
        assert "\r" not in log and "it/s" not in log and "obs/s" not in log, log[-2000:]
    epochs = [line for line in train.stdout.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 2, train.stdout
