"""What every stage entry point shares: one-line errors, a clean Ctrl-C, and the Hydra callback
that checks the run directory before Hydra makes it and sums up a multirun's failed jobs."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import hydra
from hydra._internal import utils as hydra_utils
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

# importing hnnsym.config stores the configs declared in Python in Hydra's ConfigStore
import hnnsym.config  # noqa: F401
from hnnsym import sweeps
from hnnsym.artifacts import writable_dir
from hnnsym.errors import ConvergenceError, UserError, exit_with_error, first_line
from hnnsym.sweeps import debug

# what Hydra raises for an override it cannot apply, before it calls the stage
CONFIG_ERRORS = (ConfigCompositionException, MissingConfigException, OverrideParseException)


def stage_main(config_name: str) -> Callable[[Callable[[DictConfig], Any]], Callable[..., Any]]:
    """A stage's entry point: Hydra composes the config ``config_name`` (hnnsym/conf) with the
    command line's overrides, and the stage runs on it, its errors one line each
    (``exits_cleanly``), and so are Hydra's own (``one_line_config_errors``). Stage modules
    import their stage's code inside the decorated function, so that torch is imported only once
    the config is composed: a bad override, ``--help`` and ``--cfg job`` answer without it."""

    def decorate(stage: Callable[[DictConfig], Any]) -> Callable[..., Any]:
        hydra_main = hydra.main(version_base="1.3", config_path="conf", config_name=config_name)
        return one_line_config_errors(hydra_main(exits_cleanly(stage)))

    return decorate


def one_line_config_errors(hydra_main: Callable) -> Callable:
    """Wrap a stage's ``hydra.main``: an override Hydra cannot apply (a key that does not exist,
    an option of a config group that does not, bad syntax) becomes one ``error:`` line and exit
    2, as the stage's own errors do (``exits_cleanly``), in place of Hydra's message over several
    lines and exit 1. Hydra composes the config before it calls the stage, inside its reporter
    (``hydra._internal.utils.run_and_report``, hydra-core 1.3), which this wraps for the call.
    HNNSYM_DEBUG=1 gives Hydra's own report, and HYDRA_FULL_ERROR=1 its traceback."""

    @functools.wraps(hydra_main)
    def wrapped(*args, **kwargs):
        report = hydra_utils.run_and_report

        def run_and_report(func: Callable) -> Any:
            def composed() -> Any:
                try:
                    return func()
                except CONFIG_ERRORS as err:
                    if debug():
                        raise
                    exit_with_error(config_error_line(err))

            return report(composed)

        hydra_utils.run_and_report = run_and_report
        try:
            return hydra_main(*args, **kwargs)
        finally:
            hydra_utils.run_and_report = report

    return wrapped


def config_error_line(err: BaseException) -> str:
    """Hydra's message in one line: its first line with its cause's ("Could not override
    'train.bogus': Key 'bogus' is not in struct") or the override it could not parse, then its
    other lines, a list under a heading joined after it ("Available options in 'system': a,
    b"), less the config search path."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    head = lines[0] if lines else type(err).__name__
    if err.__cause__ is not None:
        head = f"{head.rstrip('.')}: {first_line(err.__cause__)}"
    override = getattr(err, "override", None)
    if override and override not in head:
        head = f"{override}: {head}"
    sections: list[tuple[str, list[str]]] = []  # (line or heading, the items under a heading)
    for line in lines[1:]:
        if sections and sections[-1][0].endswith(":") and not line.endswith(":"):
            sections[-1][1].append(line)
        else:
            sections.append((line, []))
    parts = [f"{line} {', '.join(items)}".strip() for line, items in sections
             if line != "Config search path:"]  # fmt: skip
    return "; ".join([head, *parts])


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
            exit_with_error(err)
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
            exit_with_error(err)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not sweeps.FAILED:
            return
        print(sweeps.summary(sweeps.FAILED), file=sys.stderr)
        sweeps.FAILED.clear()
        sys.exit(2)
