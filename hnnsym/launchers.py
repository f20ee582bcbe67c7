"""What hnnsym adds to hydra-submitit-launcher (hydra/launcher=slurm and =local; the plugin
classes are in hydra_plugins/hnnsym_plugins/submitit_launchers.py):

- In the job: a job that fails prints its ``error:`` line to its log, records the line beside
  its submitit result and raises, so that its process exits non-zero (Slurm: FAILED, not
  COMPLETED 0:0).
- At the launcher: it waits for every job of the array, and turns each failed, cancelled or
  timed-out job into a failed ``JobReturn`` with one line saying why (no stderr dump), for
  ``hnnsym.sweeps.CollectingSweeper`` to sum up. An sbatch refusal is one line with sbatch's
  reason.
- Timeouts and preemption: on submitit's pre-timeout signal the job is requeued (up to
  ``max_num_timeout`` times) with a mark that makes ``train`` resume its own run (``train.resume``
  false is taken as auto), from the last epoch's checkpoint; once the job's work is done the
  signal is ignored.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from omegaconf import OmegaConf

from hnnsym.artifacts import REQUEUED_ENV
from hnnsym.errors import UserError
from hnnsym.sweeps import JobFailed, debug, describe


def _failure_record(result_pickle: Path) -> Path:
    return result_pickle.with_name(result_pickle.name.replace("_result.pkl", "_failure.json"))


def sbatch_refusal(text: str) -> str:
    """sbatch's reason in one line, from the FailedJobError submitit raises."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    reasons = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
    reason = "; ".join(dict.fromkeys(reasons)) or (lines[-1] if lines else "no reason given")
    return f"sbatch refused the jobs: {reason}"


class ReportingLauncher:
    """Mixed into hydra-submitit-launcher's SlurmLauncher and LocalLauncher (before them)."""

    requeued = False

    # ---- in the job ----
    def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state) -> Any:
        import submitit

        if self.requeued:
            os.environ[REQUEUED_ENV] = "1"
        ret = super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
        # The job's work is over. One that ends less than signal_delay_s (+30 s) before its limit
        # may still get Slurm's pre-timeout signal: it must not requeue a finished job, nor kill it
        # while Python exits (which resets handlers to the default, but keeps SIG_IGN), for which
        # Slurm would account the job FAILED.
        signal.signal(getattr(signal, f"SIG{submitit.JobEnvironment.USR_SIG}"), signal.SIG_IGN)
        if ret.status != JobStatus.FAILED:
            return ret
        error = ret._return_value
        if debug():
            raise error
        message = describe(error)
        print(f"error: {message}", file=sys.stderr, flush=True)
        env = submitit.JobEnvironment()
        record = {"num": job_num, "overrides": list(ret.overrides or sweep_overrides),
                  "error": message}  # fmt: skip
        with contextlib.suppress(OSError):
            _failure_record(env.paths.result_pickle).write_text(json.dumps(record))
        raise JobFailed(message) from None  # the job's process exits non-zero

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit calls this on the pre-timeout (or preemption) signal: requeue this job, marked
        so that it resumes its own run. last.pt holds the last whole epoch (train writes it after
        every epoch), so at most the epoch in progress is done again."""
        import submitit

        again = copy.copy(self)
        again.requeued = True
        print("requeued: the job will resume its run from its last checkpoint", file=sys.stderr)
        return submitit.helpers.DelayedSubmission(again, *args, **kwargs)

    # ---- at the launcher ----
    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        import submitit
        from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
        from submitit.core.utils import FailedJobError

        assert self.config is not None
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR, folder=self.params["submitit_folder"],
            **{f"{self._EXECUTOR}_max_num_timeout": self.params["max_num_timeout"]}
            if "max_num_timeout" in self.params else {},
        )  # fmt: skip
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{
            k if k in base else f"{self._EXECUTOR}_{k}": v for k, v in self.params.items()
            if k not in {"submitit_folder", "max_num_timeout"}
        })  # fmt: skip
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        params = []
        for num, overrides in enumerate(job_overrides, start=initial_job_idx):
            print(f"  #{num} : {' '.join(filter_overrides(overrides))}", file=sys.stderr)
            params.append((list(overrides), "hydra.sweep.dir", num, f"job_id_for_{num}",
                           Singleton.get_state()))  # fmt: skip
        try:
            with contextlib.redirect_stderr(io.StringIO()) as said:  # sbatch's own stderr
                jobs = executor.map_array(self, *zip(*params))
        except FailedJobError as err:
            raise UserError(sbatch_refusal(str(err) or said.getvalue())) from None
        if jobs:
            folder = Path(str(jobs[0].paths.folder)).parent
            print(f"submitted {len(jobs)} job(s) ({jobs[0].job_id.split('_')[0]}); their logs: "
                  f"{folder}/<job id>/", file=sys.stderr)  # fmt: skip
        return [
            self._job_return(job, num, overrides)
            for num, (job, overrides) in enumerate(zip(jobs, job_overrides), start=initial_job_idx)
        ]

    def _job_return(self, job: Any, num: int, overrides: Any) -> JobReturn:
        """The job's own JobReturn, or a failed one saying why it has none."""
        try:
            return job.results()[0]
        except Exception as exc:  # FailedJobError, UncompletedJobError: waited for, never dumped
            failed = JobReturn()
            failed.overrides = list(overrides)
            failed.status = JobStatus.FAILED
            failed._return_value = JobFailed(self._why(job, exc))
            return failed

    def _why(self, job: Any, exc: Exception) -> str:
        record = _failure_record(Path(job.paths.result_pickle))
        with contextlib.suppress(OSError, ValueError, KeyError):
            return json.loads(record.read_text())["error"]
        state = str(job.state or "UNKNOWN")
        log = job.paths.stderr
        if "timed-out" in str(exc) or state.startswith("TIMEOUT"):
            what = (f"timed out (hydra.launcher.timeout_min={self.params.get('timeout_min')}, "
                    f"requeued at most max_num_timeout={self.params.get('max_num_timeout')} "
                    "times)")  # fmt: skip
        elif state.startswith("CANCELLED"):
            what = f"cancelled ({state.lower()})"
        else:
            what = f"ended {state} without a result"
        if OmegaConf.select(self.config, "hydra.job.name") == "train":
            what += "; rerun with train.resume=auto to continue its run"
        return f"job {job.job_id} {what}; its log: {log}"
