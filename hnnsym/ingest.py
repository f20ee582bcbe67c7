"""python -m hnnsym.ingest — measurements from a file (.csv/.txt/.npz/.h5) into the HDF5 schema."""

import hydra
from omegaconf import DictConfig

from hnnsym.cli import exits_cleanly, one_line_config_errors
from hnnsym.data.ingest import ingest


@one_line_config_errors
@hydra.main(version_base="1.3", config_path="conf", config_name="ingest")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    path = ingest(cfg)
    print(
        f"wrote {path} ({path.stat().st_size / 2**20:.2f} MiB); next: python -m hnnsym.train "
        f"system=measured data_file={path}"
    )


if __name__ == "__main__":
    main()
