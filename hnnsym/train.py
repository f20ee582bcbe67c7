"""python -m hnnsym.train — learn H_θ from the data file that ``generate`` wrote for these overrides."""

import shlex
import sys

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("train")
def main(cfg: DictConfig) -> None:
    from hnnsym.training.stage import train
    from hnnsym.training.trainer import no_improvement_warning

    result = train(cfg)
    s = result.state
    overrides = [
        o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith("hydra")
    ]
    print(
        f"done: {s.stop_reason}; best val loss {s.best_val:.4e} at epoch {s.best_epoch} "
        f"({s.time_to_best:.1f}s of {s.elapsed:.1f}s)\n"
        f"  checkpoints: {result.best}, {result.last}\n"
        f"  metrics:     {result.run_dir / 'metrics.csv'}\n"
        f"next: python -m hnnsym.evaluate {shlex.join(overrides)}"
    )
    if warning := no_improvement_warning(s):
        print(warning, file=sys.stderr)


if __name__ == "__main__":
    main()
