"""python -m hnnsym.report — one table (CSV / Markdown / LaTeX) and figure from many runs.

The aggregation is in ``hnnsym.reporting``; ``conf/report.yaml`` documents the options.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig, OmegaConf

from hnnsym.cli import UserError, exits_cleanly
from hnnsym.reporting import build_report, formatted, write_report


def _names(value, key: str) -> list[str] | None:
    """A config value that is a name or a list of names -> list (None stays None)."""
    if value is None:
        return None
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"report.{key} must be a name or a list of names, got {value!r}")
    return value


@hydra.main(version_base="1.3", config_path="../conf", config_name="report")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    r = cfg.report
    if not isinstance(r.digits, int) or r.digits < 1:
        raise UserError(f"report.digits must be a whole number >= 1, got {r.digits!r}")
    if not str(r.name) or "/" in str(r.name):
        raise UserError(f"report.name must be a file name without '/', got {r.name!r}")
    runs = _names(r.runs, "runs")
    if not runs:
        raise UserError("report.runs is empty; give run dirs or globs, e.g. report.runs=outputs")
    report = build_report(
        runs, _names(r.metrics, "metrics") or [], _names(r.group_by, "group_by"),
        _names(r.ignore, "ignore") or [], _names(r.plot, "plot") or [], r.hue,
    )  # fmt: skip
    paths = write_report(report, r.out_dir, str(r.name), int(r.digits))
    for note in report.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(formatted(report.table, report.metrics, int(r.digits)).to_markdown(index=False))
    print(f"{len(report.runs.complete)} evaluated run(s) of {len(report.runs.runs)} found; wrote "
          + ", ".join(str(p) for p in paths.values()))  # fmt: skip


if __name__ == "__main__":
    main()
