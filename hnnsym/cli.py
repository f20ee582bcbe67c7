"""What every stage entry point shares: one-line errors, device and dtype selection."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

import torch


class UserError(Exception):
    """A problem the user can fix (bad input, missing artifact): printed as one line, exit 2."""


def exits_cleanly(main: Callable) -> Callable:
    """Wrap a stage's main: UserError (and ConvergenceError) become one line on stderr and exit 2;
    Ctrl-C (KeyboardInterrupt) becomes ``interrupted`` and exit 130 (artifacts are written
    atomically, so an interrupted stage leaves none half-written; in a multirun the exit stops
    the sweep). Set HYDRA_FULL_ERROR=1 or HNNSYM_DEBUG=1 to get the traceback instead.
    """
    from hnnsym.integrators import ConvergenceError

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
        except KeyboardInterrupt:
            if _debug():
                raise
            print("\ninterrupted", file=sys.stderr)
            sys.exit(130)

    return wrapped


def _debug() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1" or os.environ.get("HNNSYM_DEBUG") == "1"


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when available, else cpu."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name not in ("cpu", "cuda") and not name.startswith("cuda:"):
        raise UserError(f"device must be auto, cpu or cuda, got {name!r}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} but CUDA is not available here; use device=cpu or auto")
    return torch.device(name)


def set_threads(threads: int | None) -> None:
    """torch intra-op threads. The models here are tiny, so extra threads mostly contend: measured
    on 2 cores, one small vector-field call took 40-146 ms with 2 threads against ~1 ms with 1."""
    if threads is not None:
        if int(threads) < 1:
            raise UserError(f"threads must be >= 1 or null, got {threads}")
        torch.set_num_threads(int(threads))


def configure(cfg) -> torch.device:
    """Per-stage torch setup from the common config: threads, then the device."""
    set_threads(cfg.get("threads"))
    return resolve_device(cfg.device)


def resolve_dtype(name: str) -> torch.dtype:
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if name not in dtypes:
        raise UserError(f"dtype must be float32 or float64, got {name!r}")
    return dtypes[name]
