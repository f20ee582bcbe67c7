"""Where one training epoch's CPU time goes: torch.profiler over one epoch (after a warm-up epoch)
of a train run, split into the loss's rollout (training batches and validation) and the rest.

    python benchmarks/epoch_profile.py experiment=table1 system=double_well seed=0 \\
        data_file=data/double_well/low/seed0.h5 run_dir=outputs/bench/epoch_profile

Prints the epoch's CPU seconds and the profiler's tables (ops by self CPU time; sections by total).
The run dir is used for the trainer's checkpoints only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile, record_function

from hnnsym.config import CONF_DIR
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import read_dataset
from hnnsym.physics.systems import system_from_config
from hnnsym.training import losses
from hnnsym.training.stage import build_trainer

CONF = CONF_DIR


def main(overrides: list[str]) -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*overrides, "train.progress=false"])
    cfg = validated(cfg, "system", "noise", "train")  # as the train stage: the typed options
    torch.set_num_threads(1)
    system = system_from_config(OmegaConf.to_container(cfg.system, resolve=True))
    data = read_dataset(cfg.data_file, system=system.name, dim=system.dim, splits=("train", "val"))
    train, val = (
        torch.as_tensor(data.splits[s].observed, dtype=torch.float32) for s in ("train", "val")
    )
    trainer = build_trainer(
        cfg, Path(cfg.run_dir), train, val, float(data.attrs["obs_dt"]), system.dim,
        Path(cfg.data_file), {"name": system.name, "params": dict(system.params)},
    )  # fmt: skip
    trainer.run_epoch()  # warm-up
    evaluate, validate = losses.WindowLoss.evaluate, trainer.validate

    def timed_evaluate(self, *args, **kwargs):
        with record_function("## loss forward (rollout)"):
            return evaluate(self, *args, **kwargs)

    def timed_validate():
        with record_function("## validate"):
            return validate()

    losses.WindowLoss.evaluate, trainer.validate = timed_evaluate, timed_validate
    cpu = time.process_time()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.run_epoch()
    print(f"epoch CPU s (under the profiler): {time.process_time() - cpu:.2f}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main(sys.argv[1:])
