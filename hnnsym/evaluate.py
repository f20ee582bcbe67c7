"""python -m hnnsym.evaluate — metrics and figures of a trained run (same overrides as ``train``)."""

from pathlib import Path

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("evaluate")
def main(cfg: DictConfig) -> None:
    from hnnsym.evaluation.stage import evaluate, summary

    metrics = evaluate(cfg)
    print(summary(metrics, Path(cfg.run_dir) / "eval"))


if __name__ == "__main__":
    main()
