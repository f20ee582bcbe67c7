"""Where one training epoch's CPU time goes: torch.profiler over one epoch (after a warm-up epoch)
of a train run, split into the loss's rollout (training batches and validation) and the rest;
then, without the profiler, the CPU time of ``EPOCHS`` more epochs split into its parts.

    python benchmarks/epoch_profile.py experiment=table1 system=double_well seed=0 \\
        data_file=data/double_well/low/seed0.h5 run_dir=outputs/bench/epoch_profile

Prints the epoch's CPU seconds, the profiler's tables (ops by self CPU time; sections by total)
and the split: the compiled programs (``hnnsym.ode.compiled``), the stepwise adjoint's forward and
backward around them, the loss around its rollout, the autograd engine's hand-off around the
adjoint's backward, Adam's step, and the rest of the trainer's loop. Pin it to one core
(``taskset -c 1``) for steady figures. The run dir is used for the trainer's checkpoints only.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile, record_function

from hnnsym.config import CONF_DIR
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import read_dataset
from hnnsym.ode import compiled
from hnnsym.ode.gradients import base
from hnnsym.physics.systems import system_from_config
from hnnsym.training import losses
from hnnsym.training.stage import build_trainer

CONF = CONF_DIR
EPOCHS = 5  # epochs of the split without the profiler


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
    losses.WindowLoss.evaluate, trainer.validate = evaluate, validate
    split(trainer)


def split(trainer: Any) -> None:
    """CPU ms per epoch, over ``EPOCHS`` epochs: each part's total minus the parts inside it."""
    spent: dict[str, float] = defaultdict(float)

    def timed(owner: Any, name: str, label: str) -> Callable[[], None]:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] += time.process_time() - start

        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, original)

    restore = [
        timed(compiled._Program, "__call__", "programs"),
        timed(base._StepwiseFunction, "forward", "adjoint forward"),
        timed(base._StepwiseFunction, "backward", "adjoint backward"),
        timed(losses.WindowLoss, "evaluate", "loss"),
        timed(torch.Tensor, "backward", "autograd"),
        timed(trainer.optimizer, "step", "adam"),
    ]
    start = time.process_time()
    try:
        for _ in range(EPOCHS):
            trainer.run_epoch()
    finally:
        for undo in restore:
            undo()
    total = time.process_time() - start
    if not (spent["adjoint backward"] and spent["loss"]):
        print("the split needs a stepwise gradient method (gradient=symplectic_adjoint or "
              "checkpoint) and the rollout loss")  # fmt: skip
        return
    adjoint = spent["adjoint forward"] + spent["adjoint backward"]
    parts = {
        "compiled programs": spent["programs"],
        "stepwise adjoint around them": adjoint - spent["programs"],
        "loss around its rollout": spent["loss"] - spent["adjoint forward"],
        "autograd hand-off": spent["autograd"] - spent["adjoint backward"],
        "Adam's step": spent["adam"],
    }
    parts["the rest of the loop"] = total - sum(parts.values())
    print(f"CPU ms per epoch without the profiler ({EPOCHS} epochs): {1000 * total / EPOCHS:.1f}")
    for label, seconds in parts.items():
        print(f"  {label:30s} {1000 * seconds / EPOCHS:7.1f}  ({seconds / total:.0%})")


if __name__ == "__main__":
    main(sys.argv[1:])
