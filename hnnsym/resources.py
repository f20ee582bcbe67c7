"""Resource estimates checked before a stage starts work: a request that would not fit in memory
is refused in one line that names the estimate and the limit, instead of failing in an allocation
(or running for days) later.

The limit is the top-level ``memory_limit`` option (hnnsym/conf/common.yaml): a number of bytes or a size
such as ``8GiB``; null means the memory this machine has available now.
"""

from __future__ import annotations

import math
import os
import re

from hnnsym.errors import UserError

_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})
_UNITS.update({"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12})


def available_memory() -> int:
    """Bytes of memory available to a new allocation (Linux MemAvailable; else physical memory)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**63 - 1


def parse_size(value: int | float | str | None) -> int | None:
    """``memory_limit`` as bytes: None stays None; 1.5e9, "8GiB", "512 MB" are accepted."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"memory_limit must be a positive size, got {value!r}")
        return int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS or float(match.group(1)) <= 0:
        raise UserError(
            f"memory_limit must be a positive size such as 8GiB or 2e9 (bytes), got {value!r}"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def check_memory(estimate: float, what: str, limit: int | float | str | None = None) -> None:
    """Refuse (UserError) when ``estimate`` bytes exceed ``limit`` (``memory_limit``; None: the
    memory available now). ``what`` names the request, e.g. "generate.n_train=10000000000"."""
    cap = parse_size(limit)
    source = "memory_limit"
    if cap is None:
        cap, source = available_memory(), "available memory"
    if not math.isfinite(estimate) or estimate > cap:
        raise UserError(
            f"{what} needs about {format_size(estimate)} of memory, more than the "
            f"{format_size(cap)} of {source}; ask for less, or raise memory_limit=..."
        )
