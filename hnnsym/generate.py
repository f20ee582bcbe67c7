"""python -m hnnsym.generate — noisy trajectories of a known system into ``${data_file}`` (HDF5).

Initial conditions: ``System.sample`` (uniform over the system's domain). Ground truth: the
``generate.integrator`` tableau at ``fine_dt`` in float64, kept every ``obs_dt``. Observations:
ground truth + ``noise.std`` * N(0, 1) on every state. Each split has its own random streams for
initial conditions and noise (``hnnsym.data.split_generator``), all from ``seed``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tqdm import tqdm

from hnnsym.cli import UserError, configure, exits_cleanly
from hnnsym.data import (
    SPLITS,
    Split,
    add_noise,
    observation_ratio,
    refuse_overwrite,
    simulate,
    split_generator,
    write_dataset,
)
from hnnsym.integrators import ConvergenceError, SolverStats, get_integrator
from hnnsym.schemas import validated
from hnnsym.systems import System, get_system

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig) -> tuple[System, int, str]:
    """Validate the config before any work: (system, obs_dt / fine_dt, resolved config YAML)."""
    g = validated(cfg, "system", "noise", "generate").generate
    try:
        resolved = OmegaConf.to_yaml(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise UserError(f"the config does not resolve: {str(err).splitlines()[0]}") from err
    for key in ("n_train", "n_val", "n_test", "train_steps", "test_steps", "chunk", "max_iter"):
        if g[key] < 1:
            raise UserError(f"generate.{key} must be >= 1, got {g[key]}")
    every = observation_ratio(g.obs_dt, g.fine_dt)
    if g.tol is not None and not g.tol > 0:
        raise UserError(f"generate.tol must be > 0 (or null), got {g.tol}")
    if not (math.isfinite(cfg.noise.std) and cfg.noise.std >= 0):
        raise UserError(f"noise.std must be a finite number >= 0, got {cfg.noise.std}")
    configure(cfg)  # threads and device, checked before any work
    if cfg.seed < 0:
        raise UserError(f"seed must be >= 0, got {cfg.seed}")
    try:
        get_integrator(g.integrator)
        system = get_system(cfg.system.name, **cfg.system.params)
    except (ValueError, TypeError) as err:
        raise UserError(str(err)) from err
    refuse_overwrite(cfg.data_file, g.overwrite)
    return system, every, resolved


def make_split(
    cfg: DictConfig, system: System, split: str, every: int, device: torch.device
) -> tuple[Split, SolverStats]:
    """Sample, integrate (in chunks, with a progress bar) and add noise for one split."""
    g = cfg.generate
    n = int(g[f"n_{split}"])
    steps = int(g.test_steps if split == "test" else g.train_steps)
    integrator = get_integrator(g.integrator, g.tol, int(g.max_iter))
    y0 = system.sample(n, split_generator(cfg.seed, split, "initial"), dtype=torch.float64)
    stats = SolverStats()
    chunks = []
    with tqdm(total=n * steps, desc=f"{split:>5}", unit="obs", unit_scale=True) as bar:
        for start in range(0, n, int(g.chunk)):
            y = y0[start : start + int(g.chunk)].to(device)
            try:
                ys = simulate(
                    system, y, float(g.fine_dt), every, steps, integrator, stats, bar.update
                )
            except ConvergenceError as err:
                raise UserError(
                    f"ground truth of {split} trajectories {start}..{start + y.shape[0] - 1}: {err} "
                    "(generate.fine_dt / generate.max_iter)"
                ) from err
            if not torch.isfinite(ys).all():
                raise UserError(
                    f"the ground truth of {split} trajectories {start}..{start + y.shape[0] - 1} "
                    "diverged (NaN/Inf); try a smaller generate.fine_dt"
                )
            chunks.append(ys.transpose(0, 1).cpu())
    clean = torch.cat(chunks).numpy()
    observed = add_noise(clean, float(cfg.noise.std), split_generator(cfg.seed, split, "noise"))
    t = torch.arange(steps + 1, dtype=torch.float64).numpy() * float(g.obs_dt)
    return Split(observed=observed, clean=clean, t=t), stats


def energy_error(system: System, clean: torch.Tensor) -> float:
    """max over trajectories and time of |H(y_t) - H(y_0)|, for the log."""
    energy = system(clean.reshape(-1, clean.shape[-1])).reshape(clean.shape[:-1])
    return float((energy - energy[:, :1]).abs().max())


def run(cfg: DictConfig) -> Path:
    """Validate, simulate every split, write ``cfg.data_file``; returns its path."""
    system, every, resolved = check_config(cfg)
    device = configure(cfg)
    g = cfg.generate
    splits = {}
    for split in SPLITS:
        splits[split], stats = make_split(cfg, system, split, every, device)
        log.info(
            "%s: %d x %d states; ground truth max |H(t) - H(0)| = %.2e, %.2f fixed-point "
            "iterations per step (max %d)",
            split, *splits[split].clean.shape[:2],
            energy_error(system, torch.from_numpy(splits[split].clean)),
            stats.mean_iterations, stats.max_iterations,
        )  # fmt: skip
    attrs = {
        "system": system.name,
        "system_params": dict(system.params),
        "dim": system.dim,
        "obs_dt": float(g.obs_dt),
        "fine_dt": float(g.fine_dt),
        "integrator": str(g.integrator),
        "noise": str(cfg.noise.name),
        "noise_std": float(cfg.noise.std),
        "seed": int(cfg.seed),
        "config": resolved,
    }
    path = Path(cfg.data_file)
    write_dataset(path, splits, attrs, overwrite=bool(g.overwrite))
    return path


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    path = run(cfg)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
