"""``python -m hnnsym.profile``: time, memory and gradient error per gradient method (Fig. 5).

Writes ``profile.csv``, ``profile.md`` and ``profile.png`` into the run dir
(``outputs/profile/<system>/<integrator>`` by default) and prints the summary tables. The stage is
``hnnsym.profiling.stage.profile``; the measuring code and the column definitions are in
``hnnsym.profiling``.
"""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("profile")
def main(cfg: DictConfig) -> None:
    from hnnsym.profiling.stage import profile

    profile(cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
