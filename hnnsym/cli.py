"""What every stage entry point shares: one-line errors, a clean Ctrl-C, and the Hydra callback
that checks the run directory before Hydra makes it and sums up a multirun's failed jobs."""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from hnnsym.artifacts import writable_dir
from hnnsym.errors import ConvergenceError, UserError

FAILED_JOBS_ENV = "HNNSYM_FAILED_JOBS_DIR"


def exits_cleanly(main: Callable) -> Callable:
    """Wrap a stage's main: UserError (and ConvergenceError) become one line on stderr and exit 2;
    Ctrl-C (KeyboardInterrupt) becomes ``interrupted`` and exit 130 (artifacts are written
    atomically, so an interrupted stage leaves none half-written; in a multirun the exit stops
    the sweep). Set HYDRA_FULL_ERROR=1 or HNNSYM_DEBUG=1 to get the traceback instead.
    """

    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except (UserError, ConvergenceError) as err:
            if _debug():
                raise
            print(f"error: {err}", file=sys.stderr)
            if _in_multirun():
                if _record_failed_job(str(err)):  # summed up at the end by StageCallback
                    return None
                raise UserError(str(err)) from None  # let the launcher mark this job failed
            sys.exit(2)
        except KeyboardInterrupt as interrupt:  # the one Ctrl-C handler of every stage
            if _debug():
                raise
            said = f"; {interrupt}" if str(interrupt) else ""
            print(f"\ninterrupted{said}", file=sys.stderr)
            sys.exit(130)

    return wrapped


def _debug() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("HNNSYM_DEBUG") == "1"


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _record_failed_job(error: str) -> bool:
    """Write this job's number, overrides and error where ``StageCallback`` collects them; False
    when no collector is set up (the job is then left to fail in the launcher)."""
    directory = os.environ.get(FAILED_JOBS_ENV)
    if not directory or not Path(directory).is_dir():
        return False
    hydra = HydraConfig.get()
    record = {"num": int(hydra.job.num), "overrides": list(hydra.overrides.task), "error": error}
    (Path(directory) / f"{hydra.job.num}.json").write_text(json.dumps(record))
    return True


class StageCallback(Callback):
    """Registered in hnnsym/conf/hydra/default.yaml. Before Hydra makes the run directory, check that it
    can be written (Hydra's own mkdir would fail with a traceback); around a multirun, collect
    the jobs that failed with an error and end with one line each and exit 2 (the jobs of a
    launcher on other hosts, which cannot see this host's temporary directory, fail in the
    launcher as before)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        directory = OmegaConf.select(config, "hydra.run.dir", default=None)
        if directory is None:
            return
        try:
            writable_dir(str(directory), "the run directory (hydra.run.dir)")
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ[FAILED_JOBS_ENV] = tempfile.mkdtemp(prefix="hnnsym-failed-jobs-")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        directory = Path(os.environ.pop(FAILED_JOBS_ENV, "") or "/nonexistent")
        if not directory.is_dir():
            return
        failed = []
        for path in directory.glob("*.json"):
            failed.append(json.loads(path.read_text()))
            path.unlink()
        directory.rmdir()
        if not failed:
            return
        lines = [f"error: {len(failed)} job(s) of this multirun failed:"]
        for job in sorted(failed, key=lambda j: j["num"]):
            lines.append(f"  #{job['num']} {' '.join(job['overrides'])}: {job['error']}")
        print("\n".join(lines), file=sys.stderr)
        sys.exit(2)
