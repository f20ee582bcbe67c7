"""The per-stage process setup: glibc's allocator keeps freed memory (``keep_freed_memory``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hnnsym.config.runtime import glibc, keep_freed_memory

pytestmark = pytest.mark.skipif(glibc() is None, reason="glibc's allocator only")

# Eight 1 MiB blocks alive at once (as a chunk's linearisation holds them), written, freed, ten
# times over; prints the minor page faults of the last nine rounds (the first grows the heap).
CHURN = """
import ctypes, resource
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 1 << 20

def churn():
    blocks = [libc.malloc(size) for _ in range(8)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in blocks:
        libc.free(block)

churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(9):
    churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES = 9 * 8 * (1 << 20) // 4096  # the rounds' pages, were each written to fresh memory


def test_glibc_defaults_fault_chunk_sized_blocks_in_again():
    """The behaviour ``keep_freed_memory`` changes, in a fresh process with glibc's defaults:
    each round's blocks are fresh pages again."""
    faults = int(subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True,
                                check=True).stdout)  # fmt: skip
    assert faults > PAGES // 2


def test_freed_blocks_are_reused_without_page_faults():
    assert keep_freed_memory()
    namespace: dict = {}
    exec(compile(CHURN.replace("print(", "result = ("), "<churn>", "exec"), namespace)
    assert namespace["result"] < PAGES // 20
