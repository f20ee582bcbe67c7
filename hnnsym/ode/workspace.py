"""Tensors a gradient method keeps for its backward outside autograd's graph (the closed-form
linearisation of f, ``hnnsym.ode.dynamics.FieldLinearization``), announced so that a memory meter
counts them as it counts autograd's saved tensors (``hnnsym.profiling.meter``).

A meter listens with ``listening(pack)``: ``hold(tensors)`` calls ``pack`` on each tensor and
returns the results, which the holder keeps as long as it keeps the tensors (the meter counts a
storage until its last packed token is dropped, as for autograd's pack hooks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from torch import Tensor

_listeners: list[Callable[[Tensor], object]] = []


def hold(tensors: Iterable[Tensor]) -> list[object]:
    """The listeners' tokens for ``tensors`` (none when nothing listens): keep them with them."""
    if not _listeners:
        return []
    tensors = list(tensors)
    return [pack(t) for pack in _listeners for t in tensors]


@contextmanager
def listening(pack: Callable[[Tensor], object]) -> Iterator[None]:
    """Have ``hold`` pass its tensors to ``pack`` inside the block."""
    _listeners.append(pack)
    try:
        yield
    finally:
        _listeners.remove(pack)
