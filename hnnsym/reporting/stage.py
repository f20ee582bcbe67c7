"""The reporting stages, everything but Hydra: ``report(cfg)`` (``python -m hnnsym.report``),
``table1(cfg)`` (``python -m hnnsym.table1``), ``table_ddlm(cfg)`` (``python -m
hnnsym.table_ddlm``) and ``table_chain(cfg)`` (``python -m hnnsym.table_chain``), all reading the
``report`` section of ``hnnsym/conf/report.yaml``: check it, aggregate the runs, write the files, print
the table."""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from hnnsym.artifacts import claim_output_dir, mark_output_dir
from hnnsym.config.schemas import validated
from hnnsym.errors import UserError
from hnnsym.reporting import table_chain as chain
from hnnsym.reporting.report import build_report, write_report
from hnnsym.reporting.table1 import (
    at_paper_noise,
    load_method_runs,
    make_table1,
    noise_sweep,
    spans_noise,
    table_markdown,
    write_noise_sweep,
    write_table1,
)
from hnnsym.reporting.table_ddlm import COLUMNS as DDLM_COLUMNS
from hnnsym.reporting.table_ddlm import PUBLISHED as DDLM_PUBLISHED
from hnnsym.reporting.table_ddlm import build_table, write_table
from hnnsym.reporting.tables import to_markdown


def config_names(value, key: str) -> list[str] | None:
    """A report config value that is a name or a list of names -> list (None stays None)."""
    if value is None:
        return None
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"report.{key} must be a name or a list of names, got {value!r}")
    return value


def checked_runs_and_digits(r: DictConfig) -> tuple[list[str], int, str]:
    """The ``report.runs`` patterns, ``report.digits`` and ``report.eval_dir`` of a report config,
    checked."""
    if isinstance(r.digits, bool) or not isinstance(r.digits, int) or r.digits < 1:
        raise UserError(f"report.digits must be a whole number >= 1, got {r.digits!r}")
    runs = config_names(r.runs, "runs")
    if not runs:
        raise UserError("report.runs is empty; give run dirs or globs, e.g. report.runs=outputs")
    eval_dir = str(r.eval_dir)
    if not eval_dir or "/" in eval_dir or eval_dir in (".", ".."):
        raise UserError(
            f"report.eval_dir must be the name of a directory in each run dir, got {r.eval_dir!r}"
        )
    return runs, int(r.digits), eval_dir


def announce(notes: list[str], table: str, paths: dict) -> None:
    """A table stage's output: its notes as warnings (stderr), the table, the files written."""
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    print(table)
    print("wrote " + ", ".join(str(p) for p in paths.values()))


def report(cfg: DictConfig) -> None:
    """One table (CSV / Markdown / LaTeX) and figure from many runs, into ``report.out_dir``."""
    r = validated(cfg, "report", common=False).report
    runs, digits, eval_dir = checked_runs_and_digits(r)
    claim_output_dir(r.out_dir, "report", bool(r.overwrite), "report.overwrite")
    if not str(r.name) or "/" in str(r.name):
        raise UserError(f"report.name must be a file name without '/', got {r.name!r}")
    rep = build_report(
        runs, config_names(r.metrics, "metrics") or [], config_names(r.group_by, "group_by"),
        config_names(r.ignore, "ignore") or [], config_names(r.plot, "plot") or [], r.hue,
        eval_dir,
    )  # fmt: skip
    mark_output_dir(r.out_dir, "report")
    paths = write_report(rep, r.out_dir, str(r.name), digits)
    for note in rep.notes:
        print(f"warning: {note}", file=sys.stderr)
    print(to_markdown(rep.table, rep.metrics, digits))
    print(f"{len(rep.runs.complete)} evaluated run(s) of {len(rep.runs.runs)} found; wrote "
          + ", ".join(str(p) for p in paths.values()))  # fmt: skip


def table1(cfg: DictConfig) -> None:
    """Table 1 beside the paper's numbers (and the noise sweep when the runs span noise levels),
    into ``report.out_dir``."""
    r = cfg.report
    runs, digits, eval_dir = checked_runs_and_digits(r)
    claim_output_dir(r.out_dir, "report", bool(r.overwrite), "report.overwrite")
    found, keys, notes = load_method_runs(runs, config_names(r.ignore, "ignore") or [], eval_dir)
    table = make_table1(at_paper_noise(found), keys)
    mark_output_dir(r.out_dir, "report")
    paths = write_table1(table, r.out_dir, digits, notes)
    if spans_noise(found):
        written = write_noise_sweep(noise_sweep(found, keys), r.out_dir, digits, keys)
        paths |= {f"noise {k}": v for k, v in written.items()}
    announce(notes, table_markdown(table, digits), paths)


def table_ddlm(cfg: DictConfig) -> None:
    """Aoshima et al.'s Tables 2 and 3 beside the paper's numbers, into ``report.out_dir``."""
    r = cfg.report
    runs, digits, eval_dir = checked_runs_and_digits(r)
    claim_output_dir(r.out_dir, "report", bool(r.overwrite), "report.overwrite")
    table, notes = build_table(runs, eval_dir)
    mark_output_dir(r.out_dir, "report")
    paths = write_table(table, r.out_dir, digits, notes)
    announce(
        notes, to_markdown(table, list(DDLM_COLUMNS), digits, DDLM_COLUMNS, DDLM_PUBLISHED), paths
    )


def table_chain(cfg: DictConfig) -> None:
    """Finzi et al.'s chain-pendulum table beside the reference's numbers, into ``report.out_dir``."""
    r = cfg.report
    runs, digits, eval_dir = checked_runs_and_digits(r)
    claim_output_dir(r.out_dir, "report", bool(r.overwrite), "report.overwrite")
    table, notes = chain.build_table(runs, eval_dir)
    mark_output_dir(r.out_dir, "report")
    paths = chain.write_table(table, r.out_dir, digits, notes)
    announce(notes, chain.markdown_table(table, digits), paths)
