"""What every stage entry point shares: one-line errors, a clean Ctrl-C, and the Hydra callback
that checks the run directory before Hydra makes it and sums up a multirun's failed jobs."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from hnnsym import sweeps
from hnnsym.artifacts import writable_dir
from hnnsym.errors import ConvergenceError, UserError
from hnnsym.sweeps import debug


def exits_cleanly(main: Callable) -> Callable:
    """Wrap a stage's main: UserError (and ConvergenceError) become one line on stderr and exit 2;
    Ctrl-C (KeyboardInterrupt) becomes ``interrupted`` and exit 130 (artifacts are written
    atomically, so an interrupted stage leaves none half-written; in a multirun the exit stops
    the sweep). In a multirun an error is raised instead, so that the job fails (a Slurm job
    exits non-zero) and the sweep's summary names it (``hnnsym.sweeps``). Set
    HYDRA_FULL_ERROR=1 or HNNSYM_DEBUG=1 to get the traceback instead.
    """

    @functools.wraps(main)
    def wrapped(*args, **kwargs):
        # a log record that cannot be written (a full disk, a file-size limit on the run's log)
        # is dropped instead of printing a traceback per record; the stage's own write of its
        # artifacts then fails with its one-line error
        logging.raiseExceptions = debug()
        try:
            return main(*args, **kwargs)
        except (UserError, ConvergenceError) as err:
            if debug():
                raise
            if _in_multirun():
                raise  # the job fails; hnnsym.sweeps.CollectingSweeper sums up the failed jobs
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt as interrupt:  # the one Ctrl-C handler of every stage
            if debug():
                raise
            said = f"; {interrupt}" if str(interrupt) else ""
            print(f"\ninterrupted{said}", file=sys.stderr)
            sys.exit(130)

    return wrapped


def _in_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


class StageCallback(Callback):
    """Registered in hnnsym/conf/hydra/default.yaml. Before Hydra makes the run directory, check
    that it can be written (Hydra's own mkdir would fail with a traceback); after a multirun,
    print the failed jobs that ``hnnsym.sweeps.CollectingSweeper`` collected, one line each, and
    exit 2."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        directory = OmegaConf.select(config, "hydra.run.dir", default=None)
        if directory is None:
            return
        try:
            writable_dir(str(directory), "the run directory (hydra.run.dir)")
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not sweeps.FAILED:
            return
        print(sweeps.summary(sweeps.FAILED), file=sys.stderr)
        sweeps.FAILED.clear()
        sys.exit(2)
