"""Artifacts on disk: atomic writes (text, figures, checkpoints), provenance, checksums, locks."""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import platform
import shutil
import socket
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from hnnsym.errors import UserError
from hnnsym.version import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place only if the block succeeds.

    A crash or an exception leaves any previous file at ``path`` untouched and no partial file.
    With ``replace=False`` the file is published with a hard link, which fails atomically with
    FileExistsError when ``path`` appeared meanwhile (two jobs writing the same file). Any other
    OSError while writing (a full disk, a read-only place) becomes a one-line UserError, and the
    temporary file is removed.
    """
    path = Path(path)
    tmp_path: Path | None = None
    taken: FileExistsError | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        yield tmp_path
        if replace:
            os.replace(tmp_path, path)
        else:
            try:
                os.link(tmp_path, path)
            except FileExistsError as err:  # published meanwhile: the caller's to report
                taken = err
    except OSError as err:
        raise write_error(path, err) from err
    finally:
        if tmp_path is not None:
            tmp_path.unlink(missing_ok=True)
    if taken is not None:
        raise taken


def write_error(path: str | os.PathLike, err: OSError) -> UserError:
    """The one-line error for a failed write of ``path`` (ENOSPC, EROFS, EACCES, ...)."""
    reason = err.strerror or str(err) or type(err).__name__
    if err.errno == errno.ENOSPC:
        reason += "; free some space or write elsewhere"
    return UserError(f"cannot write {path}: {reason}")


def write_bytes(path: str | os.PathLike, data: bytes, replace: bool = True) -> None:
    """Write ``data`` to ``path`` atomically, after checking that the file system has room for it
    (so a full disk is refused before a byte is written, and caught if it fills meanwhile)."""
    with atomic_path(path, replace=replace) as tmp:
        free = shutil.disk_usage(tmp.parent).free
        if len(data) > free:
            raise UserError(
                f"cannot write {path}: it needs {len(data) / 2**20:.1f} MiB and the file system "
                f"has {free / 2**20:.1f} MiB free; free some space or write elsewhere"
            )
        tmp.write_bytes(data)


def writable_dir(directory: str | os.PathLike, what: str) -> Path:
    """Create ``directory`` (and its parents) and check that a file can be made in it, before any
    work is done; UserError naming ``what`` (e.g. "run_dir") otherwise, or for an empty path."""
    directory = creatable_dir(directory, what)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hnnsym-probe.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UserError(
            f"cannot write to {what} {directory}: {err.strerror or err}; choose another place"
        ) from err
    return directory


def creatable_dir(directory: str | os.PathLike, what: str) -> Path:
    """Check, without creating anything, that ``directory`` is or can be made a directory we may
    write into: not empty, no file on its path, its nearest existing ancestor writable.
    UserError naming ``what`` otherwise. (``writable_dir`` makes it and tries a file.)"""
    if not str(directory).strip():
        raise UserError(f"{what} is empty; give a directory")
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        shown = "it is" if existing == directory else f"{existing} is"
        raise UserError(f"cannot write to {what} {directory}: {shown} a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write to {what} {directory}: {existing} is not writable")
    return directory


REQUEUED_ENV = "HNNSYM_REQUEUED"


def requeued() -> bool:
    """Whether this process is a requeued Slurm job (after a timeout or preemption), which
    continues the run its first attempt began (set by ``hnnsym.launchers``)."""
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    return os.environ.get(REQUEUED_ENV) == "1" or (restarts.isdigit() and int(restarts) > 0)


OUTPUT_MARKER = ".hnnsym-output"


def claim_output_dir(
    directory: str | os.PathLike,
    stage: str,
    overwrite: bool,
    option: str,
    own_files: tuple[str, ...] = (),
    what: str = "",
) -> Path:
    """Check, before any work and without writing, that ``stage`` may write into ``directory``:
    it may be new, empty, or one that hnnsym wrote (it holds ``OUTPUT_MARKER``, or one of
    ``own_files``, files only this stage writes, for directories written before the marker
    existed). Anything else is refused (UserError naming ``option``, the switch that allows it)
    unless ``overwrite``; so is a path that is empty or a file. ``what`` names the directory in
    errors. Call ``mark_output_dir`` just before the first write."""
    directory = creatable_dir(directory, what or f"the {stage} output directory")
    if not directory.is_dir() or (directory / OUTPUT_MARKER).exists() or overwrite:
        return directory
    if any((directory / name).is_file() for name in own_files):
        return directory
    hydras = (".hydra", f"{stage}.log", ".lock")  # Hydra's own files, and exclusive_dir's
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in hydras)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise UserError(
            f"{directory} holds files hnnsym did not write ({shown}); {stage} writes only into "
            f"a new directory or one of its own: choose another, or pass {option}=true to "
            "write there anyway"
        )
    return directory


def mark_output_dir(directory: str | os.PathLike, stage: str, what: str = "") -> Path:
    """Make ``directory`` (checked by ``claim_output_dir``) and mark it as hnnsym's, so the
    next run recognises it; UserError when it cannot be written."""
    directory = writable_dir(directory, what or f"the {stage} output directory")
    marker = directory / OUTPUT_MARKER
    if not marker.exists():
        write_text(marker, f"written by hnnsym {__version__} ({stage}); do not remove\n")
    return directory


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files ``atomic_path(path)`` left beside ``path`` when its process was
    killed mid-write (``.<name>.<random>.tmp``). Only for a file whose writer is known to be gone
    (the caller holds the directory, ``exclusive_dir``). Returns the paths removed."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = [p for p in path.parent.glob(f".{glob.escape(path.name)}.*.tmp") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 120) -> None:
    """Render a matplotlib Figure with Agg and write ``path`` atomically (format from the suffix).
    The one way figures are saved: no pyplot state, no half-written file."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # ~0.5 s CPU: only when drawing

    FigureCanvasAgg(fig)
    fmt = os.fspath(path).rsplit(".", 1)[-1].lower()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def versions() -> dict[str, str]:
    """Versions of the package and the libraries whose behaviour shapes the numbers (imported
    here: ``hnnsym.cli`` and the launchers import this module before a stage needs torch)."""
    import h5py
    import numpy
    import torch

    return {
        "hnnsym": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "h5py": h5py.__version__,
        "python": platform.python_version(),
    }


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def exclusive_dir(directory: str | os.PathLike, what: str, hint: str = "") -> Iterator[Path]:
    """Hold ``directory/.lock`` (created with O_EXCL) for the block, so two jobs never write one
    run dir at once. The lock names its holder: host, pid, time, and under Slurm the job id. A
    lock whose holder is gone is taken over: a dead process on this host (e.g. after SIGKILL), a
    Slurm job that ``squeue`` no longer lists (killed on another node, cancelled, out of memory),
    or an earlier attempt of this very Slurm job (requeued). UserError when the directory is in
    use (with ``hint``) or cannot be written."""
    directory = Path(directory)
    lock = directory / ".lock"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = lock.read_text().strip() if lock.exists() else ""
                if _stale(owner):
                    lock.unlink(missing_ok=True)
                    continue
                raise UserError(
                    f"{directory} is in use by another {what} job ({owner}){hint}; if that job no "
                    f"longer runs (killed on another machine), delete {lock}"
                ) from None
            with os.fdopen(fd, "w") as fh:
                fh.write(f"{socket.gethostname()} {os.getpid()} {now_utc()}{_slurm_job()}")
            break
    except OSError as err:
        raise UserError(f"cannot write to the run directory {directory}: {err.strerror}") from err
    try:
        yield directory
    finally:
        lock.unlink(missing_ok=True)


def _slurm_job() -> str:
    """`` slurm-job <id>`` under Slurm (the id squeue knows the job by), else empty."""
    job = os.environ.get("SLURM_JOB_ID", "")
    return f" slurm-job {job}" if job.isdigit() else ""


def _stale(owner: str) -> bool:
    """Whether the holder a lock names is gone."""
    host, _, rest = owner.partition(" ")
    fields = rest.split()
    pid = fields[0] if fields else ""
    if "slurm-job" in fields[:-1]:
        job = fields[fields.index("slurm-job") + 1]
        if job == os.environ.get("SLURM_JOB_ID"):  # this job, before its requeue
            return not (host == socket.gethostname() and pid.isdigit() and _alive(int(pid)))
        running = _slurm_job_listed(job)
        if running is not None:
            return not running
    return host == socket.gethostname() and pid.isdigit() and not _alive(int(pid))


def _slurm_job_listed(job: str) -> bool | None:
    """Whether squeue lists the job (pending, running, completing); None when squeue cannot say
    (not installed, the controller does not answer)."""
    import subprocess

    try:
        proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                              text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return False if "Invalid job id" in proc.stderr else None
    return bool(proc.stdout.strip())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
