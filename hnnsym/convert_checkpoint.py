"""python -m hnnsym.convert_checkpoint PATH [--trust] — rewrite a checkpoint of an earlier hnnsym
in the safe form that evaluate and train.resume read (tensors, numbers, strings, lists and dicts
only, with a sha256 checksum).

Reading an earlier checkpoint means unpickling it, which runs any code stored in the file, so the
command warns and asks to type ``yes`` (``--trust`` confirms for scripts; without a terminal to ask
and without ``--trust`` it refuses). The original is kept beside it as ``PATH.unsafe``; the new file
replaces PATH atomically. A checkpoint that is already safe is left as it is.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

from hnnsym.artifacts import atomic_path
from hnnsym.checkpoints import (
    CHECKSUM,
    UnsafeCheckpointError,
    check_finite,
    load_checkpoint,
    plain,
    save_checkpoint,
)
from hnnsym.cli import exits_cleanly
from hnnsym.errors import UserError, first_line


def convert(path: Path, trust: bool) -> str:
    """Convert ``path`` (asking on the terminal unless ``trust``); returns what was done."""
    if not path.is_file():
        raise UserError(f"no checkpoint at {path}")
    try:
        load_checkpoint(path)
        return f"{path} is already a safe checkpoint; nothing to do"
    except UnsafeCheckpointError as err:  # any other UserError: the file cannot be converted
        needs_unpickle = err.needs_unpickle
    backup = path.with_name(path.name + ".unsafe")
    if backup.exists():
        raise UserError(f"{backup} already exists; move it away to convert {path} (kept as it was)")
    if needs_unpickle and not trust:
        confirm(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=not needs_unpickle)
    except Exception as err:  # whatever the unpickled file raises
        raise UserError(
            f"cannot read checkpoint {path} ({type(err).__name__}: {first_line(err)})"
        ) from None
    if not isinstance(payload, dict):
        raise UserError(
            f"{path} holds a {type(payload).__name__}, not a checkpoint of hnnsym.train"
        )
    try:
        payload = plain(payload)
    except TypeError as err:
        raise UserError(f"cannot convert {path}: {err}") from None
    payload.pop(CHECKSUM, None)
    check_finite(payload, path)
    try:
        with atomic_path(backup, replace=False) as tmp:
            shutil.copy2(path, tmp)
    except FileExistsError:
        raise UserError(f"{backup} appeared meanwhile; {path} was left as it was") from None
    save_checkpoint(path, payload)
    load_checkpoint(path)
    return f"converted {path} to the safe form (with a sha256 checksum); the original is kept at {backup}"


def confirm(path: Path) -> None:
    """Warn that unpickling runs code stored in the file and ask for ``yes`` on the terminal."""
    if not sys.stdin.isatty():
        raise UserError(
            f"not converted: reading {path} unpickles it, which runs any code stored in it; pass "
            "--trust if you trust the file (stdin is not a terminal to ask)"
        )
    print(
        f"warning: converting {path} unpickles it, which runs any code stored in the file; "
        "convert only a file you trust (e.g. one you trained yourself)",
        file=sys.stderr,
    )
    print("Type yes (and Enter) to convert it, anything else to leave it:", file=sys.stderr)
    if sys.stdin.readline().strip() != "yes":
        raise UserError(f"not converted: {path} was left as it was")


@exits_cleanly
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m hnnsym.convert_checkpoint",
        description="Rewrite a checkpoint of an earlier hnnsym in the safe form (keeps PATH.unsafe).",
    )
    parser.add_argument(
        "path", type=Path, help="the checkpoint, e.g. outputs/<run>/checkpoints/best.pt"
    )
    parser.add_argument(
        "--trust", action="store_true",
        help="confirm that you trust the file (unpickling it runs code stored in it) without asking",
    )  # fmt: skip
    args = parser.parse_args(argv)
    print(convert(args.path, args.trust))


if __name__ == "__main__":
    main()
