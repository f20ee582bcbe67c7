"""python -m hnnsym.ingest — measurements from a file (.csv/.txt/.npz/.h5) into the HDF5 schema."""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("ingest")
def main(cfg: DictConfig) -> None:
    from hnnsym.data.ingest import ingest

    path = ingest(cfg)
    print(
        f"wrote {path} ({path.stat().st_size / 2**20:.2f} MiB); next: python -m hnnsym.train "
        f"system=measured data_file={path}"
    )


if __name__ == "__main__":
    main()
