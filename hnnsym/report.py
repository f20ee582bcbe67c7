"""python -m hnnsym.report — one table (CSV / Markdown / LaTeX) and figure from many runs.

The aggregation is in ``hnnsym.reporting``; ``conf/report.yaml`` documents the options.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from hnnsym.cli import UserError, exits_cleanly
from hnnsym.reporting import (
    build_report,
    checked_runs_and_digits,
    config_names,
    formatted,
    write_report,
)
from hnnsym.schemas import validated


@hydra.main(version_base="1.3", config_path="../conf", config_name="report")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    r = validated(cfg, "report", common=False).report
    runs, digits = checked_runs_and_digits(r)
    if not str(r.name) or "/" in str(r.name):
        raise UserError(f"report.name must be a file name without '/', got {r.name!r}")
    report = build_report(
        runs, config_names(r.metrics, "metrics") or [], config_names(r.group_by, "group_by"),
        config_names(r.ignore, "ignore") or [], config_names(r.plot, "plot") or [], r.hue,
    )  # fmt: skip
    paths = write_report(report, r.out_dir, str(r.name), digits)
    for note in report.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(formatted(report.table, report.metrics, digits).to_markdown(index=False))
    print(f"{len(report.runs.complete)} evaluated run(s) of {len(report.runs.runs)} found; wrote "
          + ", ".join(str(p) for p in paths.values()))  # fmt: skip


if __name__ == "__main__":
    main()
