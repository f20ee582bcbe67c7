"""The saved-bytes meter: live and peak bytes of the unique storages autograd saves for backward
(``saved_mb_*``; the definition is in the ``hnnsym.profiling`` package doc)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from hnnsym.ode.workspace import listening

MB = float(2**20)


def _storage_key(t: Tensor) -> tuple[str, int, int] | None:
    """(device, data_ptr, nbytes) of a tensor's storage; None when it has none (e.g. sparse)."""
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (str(t.device), st.data_ptr(), st.nbytes())


class _Packed:
    """What the pack hook returns: holds the saved tensor; its release un-counts the storage."""

    __slots__ = ("meter", "key", "tensor")

    def __init__(self, meter: "SavedTensorMeter", key, tensor: Tensor):
        self.meter, self.key, self.tensor = meter, key, tensor

    def __del__(self):
        self.meter._release(self.key)


class SavedTensorMeter:
    """Live and peak bytes of the unique storages autograd saves for backward (see module doc).

    Use as a context manager around forward *and* backward. ``exclude`` are tensors whose storages
    pre-exist and are not counted (parameters, inputs). ``mark()`` records the live total at that
    moment (e.g. when the forward pass ends).
    """

    def __init__(self, exclude: Iterable[Tensor] = ()):
        self.exclude = {k[:2] for k in map(_storage_key, exclude) if k is not None}
        self.live: dict[tuple[str, int], list[int]] = {}  # (device, ptr) -> [nbytes, references]
        self.current = 0
        self.peak = 0
        self.packs = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> "SavedTensorMeter":
        self._hooks.__enter__()
        self._workspace = listening(self._pack)
        self._workspace.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._workspace.__exit__(*exc)
        self._hooks.__exit__(*exc)

    def mark(self) -> int:
        return self.current

    def _pack(self, t: Tensor):
        key = _storage_key(t)
        if key is None or key[:2] in self.exclude:
            return t
        self.packs += 1
        entry = self.live.get(key[:2])
        if entry is None:
            self.live[key[:2]] = [key[2], 1]
            self.current += key[2]
            self.peak = max(self.peak, self.current)
        else:
            entry[1] += 1
        return _Packed(self, key[:2], t.detach())  # detached: no cycle through a saved output

    @staticmethod
    def _unpack(packed) -> Tensor:
        return packed.tensor if isinstance(packed, _Packed) else packed

    def _release(self, key) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.current -= entry[0]
