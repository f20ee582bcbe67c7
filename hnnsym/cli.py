"""What every stage entry point shares: one-line errors and a clean Ctrl-C."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from hnnsym.errors import ConvergenceError, UserError


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
            if _in_multirun():  # let the launcher mark this job failed and run the others
                raise UserError(str(err)) from None
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
