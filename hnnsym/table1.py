"""python -m hnnsym.table1 — Choudhary et al.'s Table 1 from our runs, with the paper's numbers beside ours.

    python -m hnnsym.table1 report.runs=outputs/table1      ->  results/table1.{csv,md,tex}
                                                             (+ results/noise_sweep.{csv,md,png}
                                                              when the runs span noise levels)

Same config as ``python -m hnnsym.report`` (``hnnsym/conf/report.yaml``: report.runs, report.out_dir,
report.ignore, report.digits). The stage is ``hnnsym.reporting.stage.table1``; the table is built
in ``hnnsym.reporting.table1``.
"""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("report")
def main(cfg: DictConfig) -> None:
    from hnnsym.reporting.stage import table1

    table1(cfg)


if __name__ == "__main__":
    main()
