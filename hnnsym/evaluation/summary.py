"""The terminal lines every evaluation prints: which checkpoint on which data, the kind's own
headline lines, where the files are, and the notes (``evaluate``'s metrics dict, ``m``)."""

from __future__ import annotations

from pathlib import Path


def number(m: dict, key: str) -> str:
    """A metric for the terminal: 4 significant digits, ``n/a`` when missing or null."""
    return "n/a" if m.get(key) is None else f"{m[key]:.4g}"


def split_name(m: dict) -> str:
    """The evaluated split (``eval.split``): ``test`` unless the metrics say otherwise."""
    return str(m.get("data", {}).get("split", "test"))


def summary_text(m: dict, out: Path, body: str, about: str = "") -> str:
    """``evaluated <checkpoint> on <data><about>``, the ``body`` lines (indented by the caller),
    the metrics/curves/figures paths under ``out`` and one line per note."""
    figures = ",".join(name.removesuffix(".png") for name in m["files"]["figures"]) or "none"
    return (
        f"evaluated {m['checkpoint']['path']} (epoch {m['checkpoint']['epoch']}) "
        f"on {m['data']['file']}{about}\n"
        f"{body}\n" + all_failed(m) + f"  metrics: {out / 'metrics.json'}\n"
        f"  curves:  {out / 'rollout.csv'}\n"
        f"  figures: {out}/{{{figures}}}.png"
        + "".join(f"\n  note: {note}" for note in m.get("notes", []))
    )


def all_failed(m: dict) -> str:
    """The warning line when every rollout failed (else ""): their errors and drifts cover only
    the states before each failure, and are null where no state was predicted."""
    if m.get("rollout_failed") != 1:
        return ""
    reasons = "; ".join(m.get("rollout_failures") or []) or "no reason recorded"
    return (
        f"  warning: all {m['rollout_trajectories']} rollouts failed ({reasons}): their errors and "
        "drifts cover only the states before each failure, n/a where none was predicted\n"
    )
