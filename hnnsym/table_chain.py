"""python -m hnnsym.table_chain — Finzi et al.'s chain-pendulum table (CHNN, CLNN, HNN in angles, NODE,
the chaos floor) from our runs, the reference's numbers beside ours.

    python -m hnnsym.table_chain report.runs='outputs/chain*'   ->  results/table_chain.{csv,md}

Same config as ``python -m hnnsym.report`` (``hnnsym/conf/report.yaml``: report.runs, report.out_dir,
report.digits, report.eval_dir). The stage is ``hnnsym.reporting.stage.table_chain``; the table is
built in ``hnnsym.reporting.table_chain``.
"""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("report")
def main(cfg: DictConfig) -> None:
    from hnnsym.reporting.stage import table_chain

    table_chain(cfg)


if __name__ == "__main__":
    main()
