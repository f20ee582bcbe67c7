"""python -m hnnsym.report — one table (CSV / Markdown / LaTeX) and figure from many runs.

The stage is ``hnnsym.reporting.stage.report``; ``hnnsym/conf/report.yaml`` documents the options.
"""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("report")
def main(cfg: DictConfig) -> None:
    from hnnsym.reporting.stage import report

    report(cfg)


if __name__ == "__main__":
    main()
