"""Per-stage torch setup from the common config: threads, device and dtype."""

from __future__ import annotations

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


def configure(cfg) -> torch.device:
    """Per-stage torch setup from the common config: threads, then the device."""
    set_threads(cfg.get("threads"))
    return resolve_device(cfg.device)


def resolve_dtype(name: str) -> torch.dtype:
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if name not in dtypes:
        raise UserError(f"dtype must be float32 or float64, got {name!r}")
    return dtypes[name]
