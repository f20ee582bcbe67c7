"""Signals handled at safe points instead of between two arbitrary bytecodes.

A Python signal handler runs in the main thread wherever that thread is. A handler that raises
unwinds from that point: Ctrl-C's ``KeyboardInterrupt``, or submitit's pre-timeout handler, which
requeues the Slurm job and calls ``sys.exit``. If that point is inside a library's
acquire/release pair, the unwinding can turn into an unrelated error. ``tqdm.write``, for
one, releases its lock in a ``finally`` that also runs when the signal came before the lock
was taken, and raises ``RuntimeError: cannot release un-acquired lock`` in place of the
``SystemExit``.

Inside ``deferred_signals`` such a signal is only recorded. The caller calls the yielded
``safe_point()`` where its state is whole (the trainer does so at every batch boundary), and the
recorded handlers run there.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

DEFERRED_SIGNALS: tuple[signal.Signals, ...] = (
    signal.SIGINT,  # Ctrl-C
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,  # submitit's pre-timeout and preemption signal under Slurm
)


@contextlib.contextmanager
def deferred_signals(
    signums: tuple[signal.Signals, ...] = DEFERRED_SIGNALS,
) -> Iterator[Callable[[], None]]:
    """Defer each of ``signums`` whose handler is Python code to the yielded ``safe_point()``.

    A signal whose handler is the default action or ``SIG_IGN`` is left as it is: a kill still
    kills, and an ignored Ctrl-C stays ignored. On a normal exit the handlers are restored and a
    signal still pending is raised again, so none is lost. On an exit by an exception, a pending
    signal is dropped, and the exception goes on. Outside the main thread, where Python runs no
    signal handlers, ``safe_point`` does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    handlers = {s: h for s in signums if callable(h := signal.getsignal(s))}
    pending: list[int] = []

    def record(signum: int, frame: object) -> None:
        pending.append(signum)

    def safe_point() -> None:
        while pending:
            signum = pending.pop(0)
            handlers[signum](signum, None)

    for signum in handlers:
        signal.signal(signum, record)
    try:
        yield safe_point
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    still_pending = list(dict.fromkeys(pending))
    pending.clear()
    for signum in still_pending:
        signal.raise_signal(signum)
