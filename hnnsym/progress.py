"""Progress bars only on a terminal: the one place that makes a tqdm bar.

Under Slurm, CI or ``> log`` a tqdm bar would write every refresh (``\\r`` lines) into the log;
there ``progress`` returns a disabled bar (iterating and ``update`` still work, nothing is drawn),
and what a log needs comes from the stages' own lines (train: one line per epoch).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm import tqdm


def on_terminal(stream: TextIO | None = None) -> bool:
    """Is ``stream`` (default: sys.stderr, where tqdm draws) an interactive terminal?"""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def progress(iterable: Iterable | None = None, *, enabled: bool = True, **kw: Any) -> tqdm:
    """``tqdm(iterable, **kw)``, drawn only when ``enabled`` and its stream is a terminal."""
    return tqdm(iterable, disable=not (enabled and on_terminal(kw.get("file"))), **kw)
