"""Artifacts on disk: atomic writes, provenance, checksums, checkpoints."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only if the block succeeds.

    A crash or an exception leaves any previous file at ``path`` untouched and no partial file.
    With ``replace=False`` the file is published with a hard link, which fails atomically with
    FileExistsError when ``path`` appeared meanwhile (two jobs writing the same file).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
    try:
        yield tmp_path
        if replace:
            os.replace(tmp_path, path)
        else:
            os.link(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """Versions of the package and the libraries whose behaviour shapes the numbers."""
    import h5py
    import numpy

    import hnnsym

    return {
        "hnnsym": hnnsym.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "h5py": h5py.__version__,
        "python": platform.python_version(),
    }


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """torch.save, atomically."""
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
