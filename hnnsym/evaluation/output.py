"""Where an evaluation is written and what it replaces: ``eval.out_dir``, an earlier evaluation
there (of the same data unless ``eval.overwrite``), its files, and plain JSON."""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from hnnsym.artifacts import OUTPUT_MARKER, claim_output_dir, mark_output_dir
from hnnsym.errors import UserError


def jsonable(value: Any) -> Any:
    """Plain JSON: non-finite floats become null, tuples lists, numpy/torch scalars Python."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def out_dir(cfg: DictConfig) -> Path:
    """Where the evaluation goes: ``eval.out_dir``, by default ``${run_dir}/eval`` (the test
    split) or ``${run_dir}/eval_val`` (``eval.split=val``)."""
    if cfg.eval.out_dir:
        return Path(cfg.eval.out_dir)
    return Path(cfg.run_dir) / ("eval" if cfg.eval.get("split", "test") == "test" else "eval_val")


def earlier_evaluation(
    out: Path, data_file: Path, data_sha: str, overwrite: bool, split: str = "test"
) -> dict | None:
    """The metrics of the evaluation already in ``out`` (None if there is none, or unreadable),
    after checking that this one may replace it: it must be of the same data (sha256) and split,
    unless ``overwrite``. UserError otherwise, before any work is done or file written."""
    path = out / "metrics.json"
    if not path.exists():
        return None
    try:
        earlier = json.loads(path.read_text())
        data = earlier["data"]
        sha, file = str(data["sha256"]), data.get("file")
        earlier_split = str(data.get("split", "test"))
    except (OSError, ValueError, KeyError, TypeError):
        earlier, sha, file, earlier_split = None, None, None, None
    if overwrite or (sha == data_sha and earlier_split == split):
        return earlier if isinstance(earlier, dict) else None
    keep = (
        "pass eval.overwrite=true to replace it, or eval.out_dir=<dir> to write this one elsewhere"
    )
    if sha == data_sha:
        raise UserError(f"{out} holds an evaluation of the {earlier_split} split of {file}, not of "
                        f"its {split} split; {keep}")  # fmt: skip
    if sha is None:
        raise UserError(f"{out} holds an evaluation ({path}) that does not say which data it is "
                        f"of; {keep}")  # fmt: skip
    if file == str(data_file):
        what = (f"of {file} as it was before it changed (sha256 {sha[:12]}…, now "
                f"{data_sha[:12]}…)")  # fmt: skip
    else:
        what = f"of other data, {file} (sha256 {sha[:12]}…), not of {data_file} ({data_sha[:12]}…)"
    raise UserError(f"{out} holds an evaluation {what}; {keep}")


EVAL_DIR = "the evaluation directory"


@contextlib.contextmanager
def replacing_evaluation(out: Path, overwrite: bool) -> Iterator[None]:
    """Claim ``out`` (new, or one hnnsym wrote: ``claim_output_dir``) and take the replaced
    evaluation's metrics.json away for the block, so that a metrics.json stands only beside the
    files of the evaluation it describes: one killed midway leaves none. When the block fails
    before it wrote a file, the old metrics.json is put back. Temporaries of an earlier
    evaluation killed mid-write are removed."""
    claim_output_dir(out, "evaluate", overwrite, "eval.overwrite", ("metrics.json",), EVAL_DIR)
    mark_output_dir(out, "evaluate", EVAL_DIR)
    for stale in out.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    metrics = out / "metrics.json"
    previous = metrics.read_bytes() if metrics.is_file() else None
    metrics.unlink(missing_ok=True)
    started = time.time_ns()
    try:
        yield
    except BaseException:
        untouched = all(p.stat().st_mtime_ns < started for p in out.iterdir() if p.is_file()
                        and p.name != OUTPUT_MARKER)  # fmt: skip
        if previous is not None and untouched and not metrics.exists():
            metrics.write_bytes(previous)
        raise


def remove_leftovers(out: Path, earlier: dict | None, written: list[str]) -> None:
    """Delete the files the replaced evaluation listed that this one did not write (a figure
    switched off), so ``out`` holds one evaluation."""
    files = (earlier or {}).get("files")
    if not isinstance(files, dict):
        return
    listed = [files.get("rollout"), *(files.get("figures") or [])]
    for name in listed:
        if isinstance(name, str) and name == Path(name).name and name not in written:
            (out / name).unlink(missing_ok=True)
