"""python -m hnnsym.generate — simulate noisy trajectories of a system into one HDF5 file."""

from omegaconf import DictConfig

from hnnsym.cli import stage_main


@stage_main("generate")
def main(cfg: DictConfig) -> None:
    from hnnsym.data.simulate import generate

    path = generate(cfg)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
