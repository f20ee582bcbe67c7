"""Per-stage process setup from the common config: threads, device and dtype, and the C
library's allocator."""

from __future__ import annotations

import ctypes
import functools

import torch

from hnnsym.errors import UserError


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


@functools.lru_cache(maxsize=1)
def glibc() -> ctypes.CDLL | None:
    """The GNU C library of this process, for its allocator's controls; None elsewhere."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own symbol: not musl or another libc)
    except (OSError, AttributeError):
        return None
    return libc


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 64 << 20, 128 << 20


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse; False where the C library is not glibc.

    By default glibc serves a block above a threshold that starts at 128 KiB with its own
    ``mmap`` and returns the top of the heap to the system once more than twice that is free.
    A chunk of the symplectic adjoint's linearisation or a compiled program's buffers (a
    4096 × 32 float32 tensor is 512 KiB) then comes back as fresh pages, which the kernel faults
    in and zeroes on first touch, on every chunk. Blocks below 64 MiB now come from the heap, and
    up to 128 MiB of free heap is kept. A stage's process holds at most that much more memory than
    it uses."""
    libc = glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))  # fmt: skip


def configure(cfg) -> torch.device:
    """Per-stage process setup from the common config: threads, the allocator
    (``keep_freed_memory``), then the device."""
    set_threads(cfg.get("threads"))
    keep_freed_memory()
    return resolve_device(cfg.device)


def resolve_dtype(name: str) -> torch.dtype:
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if name not in dtypes:
        raise UserError(f"dtype must be float32 or float64, got {name!r}")
    return dtypes[name]
