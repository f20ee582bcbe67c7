"""python -m hnnsym.generate — simulate noisy trajectories of a system into one HDF5 file."""

import hydra
from omegaconf import DictConfig

from hnnsym.cli import exits_cleanly, one_line_config_errors
from hnnsym.data.simulate import generate


@one_line_config_errors
@hydra.main(version_base="1.3", config_path="conf", config_name="generate")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    path = generate(cfg)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
