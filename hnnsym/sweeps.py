"""How a multirun reports its failed jobs, whatever the launcher.

Every job that fails raises (its stage's ``UserError``, or any exception); Hydra's ``run_job``
turns that into a FAILED ``JobReturn``, which the basic and joblib launchers hand back as it is
and hnnsym's submitit launchers (``hnnsym.launchers``) rebuild from the job's record on disk, so
that the job itself exits non-zero and Slurm accounts it FAILED. ``CollectingSweeper`` (Hydra's basic
sweeper, registered in hnnsym/conf/hydra/default.yaml) launches every job and collects the failed
ones instead of stopping at the first; ``hnnsym.cli.StageCallback`` prints them at the end, one
line each, and exits 2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from hnnsym.errors import ConvergenceError, UserError, exit_with_error


@dataclass
class FailedJob:
    num: int
    overrides: list[str]
    error: str


class JobFailed(UserError):
    """A job of a multirun that failed; its message is the job's one-line error. Raised in the job
    (so that its process exits non-zero) and carried back to the launcher."""


# the failed jobs of the multirun in progress (in the launching process), read by StageCallback
FAILED: list[FailedJob] = []


def describe(error: BaseException) -> str:
    """One line for a job's exception: the message of an error the user can fix, else its type and
    message (a bug: HNNSYM_DEBUG=1 raises it with its traceback)."""
    if isinstance(error, (UserError, ConvergenceError)):
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}".rstrip(": ")
    return " ".join(text.split()) or type(error).__name__


def debug() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("HNNSYM_DEBUG") == "1"


class CollectingSweeper(BasicSweeper):
    """Hydra's basic sweeper that runs every batch even when jobs fail, and records each failed
    job in ``FAILED`` (Hydra's raises the first failure with a traceback). A launcher that cannot
    submit at all (``UserError``, e.g. sbatch refused the array) ends the command with one line."""

    def __init__(self, max_batch_size: int | None = None, params: dict | None = None) -> None:
        # BasicSweeper.__init__ calls super(BasicSweeper, self), and Hydra's plugin scan executes
        # its module again (a new BasicSweeper): set its fields here instead
        self.overrides = None
        self.batch_index = 0
        self.max_batch_size = max_batch_size
        self.params = params or {}
        self.hydra_context = None
        self.config = None
        self.launcher = None

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        FAILED.clear()
        params_conf = self._parse_config()
        params_conf.extend(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(params_conf)
        self.overrides = self.split_arguments(overrides, self.max_batch_size)
        returns: list[Any] = []
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        initial_job_idx = 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            try:
                results = self.launcher.launch(batch, initial_job_idx=initial_job_idx)
            except UserError as err:
                if debug():
                    raise
                exit_with_error(err)
            for num, result in enumerate(results, start=initial_job_idx):
                if result.status != JobStatus.FAILED:
                    continue
                if debug():
                    _ = result.return_value  # Hydra's own report: raises with the traceback
                FAILED.append(failed_job(result, num, batch[num - initial_job_idx]))
            initial_job_idx += len(batch)
            returns.append(results)
        return returns


def failed_job(result: JobReturn, num: int, overrides: Any) -> FailedJob:
    error = result._return_value
    job_overrides = list(result.overrides or overrides)
    return FailedJob(num, [str(o) for o in job_overrides], describe(error))


def summary(failed: list[FailedJob]) -> str:
    """The multirun's last words: one line per failed job, by job number."""
    lines = [f"error: {len(failed)} job(s) of this multirun failed:"]
    for job in sorted(failed, key=lambda j: j.num):
        lines.append(f"  #{job.num} {' '.join(job.overrides)}: {job.error}")
    return "\n".join(lines)
