"""python -m hnnsym.report — one table (CSV / Markdown / LaTeX) and figure from many runs.

The stage is ``hnnsym.reporting.stage.report``; ``hnnsym/conf/report.yaml`` documents the options.
"""

import hydra
from omegaconf import DictConfig

from hnnsym.cli import exits_cleanly, one_line_config_errors
from hnnsym.reporting.stage import report


@one_line_config_errors
@hydra.main(version_base="1.3", config_path="conf", config_name="report")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    report(cfg)


if __name__ == "__main__":
    main()
