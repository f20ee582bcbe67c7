"""hydra.sweeper._target_ in hnnsym/conf/hydra/default.yaml (the logic: hnnsym.sweeps)."""

from hnnsym.sweeps import CollectingSweeper


class Sweeper(CollectingSweeper):
    """Hydra's basic sweeper that runs every job and collects the failed ones."""
