"""python -m hnnsym.evaluate — metrics and figures of a trained run (same overrides as ``train``)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from hnnsym.cli import exits_cleanly, one_line_config_errors
from hnnsym.evaluation.stage import evaluate, summary


@one_line_config_errors
@hydra.main(version_base="1.3", config_path="conf", config_name="evaluate")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    metrics = evaluate(cfg)
    print(summary(metrics, Path(cfg.run_dir) / "eval"))


if __name__ == "__main__":
    main()
