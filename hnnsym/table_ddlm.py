"""python -m hnnsym.table_ddlm — Aoshima et al.'s Tables 2 and 3 (positions only) from our runs, the
paper's numbers beside ours.

    python -m hnnsym.table_ddlm report.runs=outputs/ddlm      ->  results/table_ddlm.{csv,md}

Same config as ``python -m hnnsym.report`` (``hnnsym/conf/report.yaml``: report.runs, report.out_dir,
report.digits). The stage is ``hnnsym.reporting.stage.table_ddlm``; the table is built in
``hnnsym.reporting.table_ddlm``.
"""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("report")
def main(cfg: DictConfig) -> None:
    from hnnsym.reporting.stage import table_ddlm

    table_ddlm(cfg)


if __name__ == "__main__":
    main()
