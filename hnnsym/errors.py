"""The error types of hnnsym. This module imports nothing of hnnsym, so every layer may raise
them.

``UserError`` and its subclasses are problems the user can fix (bad input, a missing artifact, an
impossible combination of options); a stage prints them as one ``error:`` line and exits 2
(``exit_with_error``). ``ConvergenceError`` is a numerical failure of an iteration; stages print it
the same way.
"""

import sys
from typing import NoReturn


class UserError(Exception):
    """A problem the user can fix (bad input, missing artifact): printed as one line, exit 2."""


class DataError(UserError):
    """A data file is missing, unreadable or not what was asked for (message says what to do)."""


class IncompatibleError(UserError, ValueError):
    """A model, integrator and gradient method that cannot work together."""


class FixedPointOverflowError(UserError, OverflowError):
    """A fixed-point state or increment left the int64 range (or a force was not finite)."""


class ConvergenceError(RuntimeError):
    """A fixed-point iteration stopped at ``max_iter`` with its change still above ``tol``."""


def first_line(err: BaseException) -> str:
    """The first line of an error's message (torch's and h5py's run to many), for a one-line
    error; the error's type when it has no message."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def exit_with_error(message: object) -> NoReturn:
    """The end of a command refusing its input: one ``error:`` line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


__all__ = [
    "ConvergenceError",
    "DataError",
    "FixedPointOverflowError",
    "IncompatibleError",
    "UserError",
    "exit_with_error",
    "first_line",
]
