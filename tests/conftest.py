"""Shared fixtures: composing the repo's Hydra configs, small valid data files, and run dirs made
by hand (for the reporting stages)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import hnnsym
from hnnsym.artifacts import write_text
from hnnsym.config import CONF_DIR
from hnnsym.config.build import build_optimizer, build_scheduler
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import Split, write_dataset
from hnnsym.physics.models import HNN
from hnnsym.training.trainer import TrainData, Trainer

REPO = Path(hnnsym.__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The networks here are tiny: extra intra-op threads only contend (measured up to 30x slower
    with 2 threads on 2 busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def compose_config() -> Callable[..., DictConfig]:
    """compose_config("generate", ["system=double_well", ...]): the stage's config, as the CLI
    would build it (without the hydra node)."""

    def _compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=config_name, overrides=list(overrides or []))

    return _compose


def random_splits(
    dim: int = 1, sizes: dict[str, tuple[int, int]] | None = None, seed: int = 0
) -> dict[str, Split]:
    """Splits of random numbers (not trajectories): {name: (N, T)} -> observed/clean (N, T+1, 2d)."""
    rng = np.random.default_rng(seed)
    sizes = sizes or {"train": (6, 5), "val": (3, 5), "test": (2, 9)}
    out = {}
    for name, (n, steps) in sizes.items():
        clean = rng.standard_normal((n, steps + 1, 2 * dim))
        observed = clean + 0.01 * rng.standard_normal(clean.shape)
        out[name] = Split(observed, clean, 0.1 * np.arange(steps + 1))
    return out


def tiny_attrs(system: str = "double_well", dim: int = 1, **overrides) -> dict:
    """The root attrs write_dataset requires, with plausible values."""
    attrs = {
        "system": system, "system_params": {}, "dim": dim, "obs_dt": 0.1, "fine_dt": 0.01,
        "integrator": "gauss_legendre6", "noise": "low", "noise_std": 0.01, "seed": 0,
        "config": "seed: 0\n",
    }  # fmt: skip
    attrs.update(overrides)
    return attrs


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Callable[..., Path]:
    """tiny_dataset(system=..., dim=..., sizes=..., **attrs) writes
    ``<tmp>/data/<system>/low/seed0.h5`` with random splits and returns its path."""

    def _write(
        system: str = "double_well",
        dim: int = 1,
        sizes: dict[str, tuple[int, int]] | None = None,
        **attrs,
    ) -> Path:
        path = tmp_path / "data" / system / "low" / "seed0.h5"
        write_dataset(path, random_splits(dim, sizes), tiny_attrs(system, dim, **attrs))
        return path

    return _write


def make_model(cls, d: int, seed: int, gain: float) -> torch.nn.Module:
    """A random-init float64 model whose last layer(s) start ``gain`` times larger (the models'
    ``output_gain``), so its flow moves states by O(0.1–1) per step instead of the ~1e-2 of a
    fresh init (a test on a near-identity map proves little)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return cls(d, hidden=(16, 16), output_gain=gain).to(torch.float64)


def squared_output(model, windows, stats=None):
    """The stand-in loss of ``tiny_trainer``'s tests: the mean square of H at the windows' first
    states."""
    return (model(windows[0]) ** 2).mean()


def tiny_trainer(cfg, loss, run_dir: Path):
    """A Trainer of a fresh float64 HNN(1) on 16 random trajectories of 8 states (seeded), its
    validation windows the first 4 of them, optimizer and schedule built from ``cfg.train`` as the
    train stage builds them: for tests of the training loop with a stand-in loss."""
    torch.manual_seed(0)
    data = torch.randn(16, 8, 2, dtype=torch.float64)
    model = HNN(1).double()
    optimizer = build_optimizer(cfg.train, model)
    return Trainer(
        model, loss, optimizer, build_scheduler(cfg.train, optimizer),
        TrainData(data, data[:4, :7].transpose(0, 1), torch.Generator().manual_seed(0)),
        OmegaConf.to_object(validated(cfg, "train", common=False).train), run_dir, {"model_config": {}},
    )  # fmt: skip


@pytest.fixture
def make_run(tmp_path, compose_config):
    """make_run(overrides, seed, val_losses, metrics=None, eval_epoch=None, root="runs", ...) writes
    a run dir like train + evaluate would (metrics None: not evaluated; the evaluation's rollout
    integrator config, the data's number of training trajectories and the eval dir as given) and
    returns it."""

    def _make(
        overrides: list[str],
        seed: int,
        val_losses: list[float] | None = (3.0, 2.0, 2.5),
        metrics: dict | None = None,
        eval_epoch: int | None = None,
        root: str = "runs",
        eval_config: dict | None = None,
        rollout_integrator: dict | None = None,
        n_train: int | None = None,
        eval_dir: str = "eval",
    ) -> Path:
        cfg = compose_config(
            "train", [*overrides, f"seed={seed}", f"run_dir={tmp_path / root}/${{run_name}}"]
        )
        container = OmegaConf.to_container(cfg, resolve=True)
        run_dir = Path(container["run_dir"])
        write_text(run_dir / "config.yaml", OmegaConf.to_yaml(container))
        if val_losses is None:
            return run_dir
        n = len(val_losses)
        history = pd.DataFrame({
            "epoch": range(1, n + 1), "train_loss": np.linspace(5, 1, n), "val_loss": val_losses,
            "lr": 0.01, "epoch_time": 1.5, "wall_time": 1.5 * np.arange(1, n + 1),
            "solver_unconverged": [0] * (n - 1) + [2],
        })  # fmt: skip
        write_text(run_dir / "metrics.csv", history.to_csv(index=False))
        if metrics is not None:
            best_epoch = int(np.argmin(val_losses)) + 1
            payload = {
                **metrics,
                "rollout_integrator": (rollout_integrator or container["integrator"])["name"],
                "rollout_failures": [],
                "checkpoint": {"which": "best", "epoch": eval_epoch or best_epoch},
                "data": {"train_trajectories": n_train},
                "config": {
                    "eval": eval_config or {"checkpoint": "best", "figures": True},
                    "integrator": rollout_integrator or container["integrator"],
                },
            }
            write_text(run_dir / eval_dir / "metrics.json", json.dumps(payload))
        return run_dir

    return _make
