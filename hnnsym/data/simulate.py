"""Making data: seeded draws per split, the ground-truth rollout, observation noise.

``generate(cfg)`` (below) is the generate stage: it samples initial conditions, integrates them with
a high-order integrator and writes the HDF5 file (``hnnsym.data.hdf5``). With
``generate.observe=q`` the observations are positions only: the q part of the same noisy states
(so a positions file and a states file of one seed hold the same noisy q).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import Tensor

from hnnsym.artifacts import creatable_dir
from hnnsym.config.runtime import configure
from hnnsym.config.schemas import validated
from hnnsym.data.hdf5 import SPLITS, Split, refuse_overwrite, write_dataset
from hnnsym.errors import ConvergenceError, UserError
from hnnsym.ode.integrators import Integrator, advance, get_integrator
from hnnsym.ode.problem import Problem, SolverStats
from hnnsym.physics.constraints import ConstrainedSystem
from hnnsym.physics.systems import System, system_from_config
from hnnsym.progress import progress
from hnnsym.resources import check_memory


def split_generator(seed: int, split: str, stream: str) -> torch.Generator:
    """A CPU generator for one (split, stream) of ``seed``; stream is "initial" or "noise".

    Streams are independent (numpy SeedSequence spawn keys), so e.g. n_train does not change the
    val/test draws and the noise level does not change the clean trajectories.
    """
    streams = ("initial", "noise")
    if split not in SPLITS or stream not in streams:
        raise ValueError(f"split must be in {SPLITS} and stream in {streams}")
    if seed < 0:
        raise UserError(f"seed must be >= 0, got {seed}")
    key = (SPLITS.index(split), streams.index(stream))
    state = np.random.SeedSequence(seed, spawn_key=key).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def simulate(
    H: Callable[[Tensor], Tensor],
    y0: Tensor,
    fine_dt: float,
    every: int,
    steps: int,
    integrator: Integrator,
    stats: SolverStats | None = None,
    progress: Callable[[int], Any] | None = None,
) -> Tensor:
    """Ground truth: integrate from y0 (B, 2d) with step ``fine_dt`` and keep every ``every``-th
    state, ``steps`` times: (steps+1, B, 2d), time-major like ``integrate``, no graph.

    One run of every·steps steps, taken an observation interval at a time (the predictor's
    history carried over, so the states are those of one ``integrate`` call, bit for bit);
    ``progress(B)`` is called after each interval.
    """
    problem = Problem(H, get_integrator(integrator), float(fine_dt), every * steps)
    problem.integrator.check(problem, y0)
    ys, y, previous = [y0], y0, ()
    with torch.no_grad():
        for k in range(steps):
            states, previous = advance(problem, y, k * every, (k + 1) * every, previous)
            y = states[-1] if states else y
            ys.append(y)
            if progress is not None:
                progress(y.shape[0])
    if stats is not None:
        stats.merge(problem.stats)
    return torch.stack(ys)


def add_noise(clean: np.ndarray, std: float, generator: torch.Generator) -> np.ndarray:
    """clean + std * N(0, 1) on every entry (a copy of clean when std == 0, with no draw)."""
    if std == 0:
        return clean.copy()
    noise = torch.randn(clean.shape, generator=generator, dtype=torch.float64).numpy()
    return clean + std * noise


def observation_ratio(obs_dt: float, fine_dt: float) -> int:
    """obs_dt / fine_dt as a whole number; UserError when it is not one (to 1e-9 relative)."""
    if not (math.isfinite(obs_dt) and obs_dt > 0 and math.isfinite(fine_dt) and fine_dt > 0):
        raise UserError(f"obs_dt and fine_dt must be finite and > 0, got {obs_dt} and {fine_dt}")
    ratio = obs_dt / fine_dt
    every = round(ratio)
    if every < 1 or abs(ratio - every) > 1e-9 * ratio:
        raise UserError(
            f"obs_dt={obs_dt} must be a whole multiple of fine_dt={fine_dt} (ratio {ratio:.6g})"
        )
    return every


# ---- the generate stage ---------------------------------------------------------------------

log = logging.getLogger(__name__)


def check_config(cfg: DictConfig) -> tuple[System, int, str]:
    """Validate the config before any work: (system, obs_dt / fine_dt, resolved config YAML)."""
    g = validated(cfg, "system", "noise", "generate").generate
    try:
        resolved = OmegaConf.to_yaml(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise UserError(f"the config does not resolve: {str(err).splitlines()[0]}") from err
    every = observation_ratio(g.obs_dt, g.fine_dt)
    configure(cfg)  # threads and device, checked before any work
    try:
        get_integrator(g.integrator)
        system = system_from_config(cfg.system)
    except (ValueError, TypeError) as err:
        raise UserError(str(err)) from err
    check_memory(generated_bytes(g, system.dim), generate_request(g), cfg.memory_limit)
    refuse_overwrite(cfg.data_file, g.overwrite)
    creatable_dir(Path(cfg.data_file).parent, "the directory of data_file")
    return system, every, resolved


def generated_bytes(g: DictConfig, dim: int) -> float:
    """Memory the generate stage holds at its peak, in bytes: every split's clean and observed
    float64 states (N, T+1, 2d), and the split being made twice more (its chunks and their
    concatenation)."""
    sizes = {
        s: g[f"n_{s}"] * ((g.test_steps if s == "test" else g.train_steps) + 1) for s in SPLITS
    }
    state = 2 * dim * 8
    return (2 * sum(sizes.values()) + 2 * max(sizes.values())) * state


def generate_request(g: DictConfig) -> str:
    """The options that size the data, for a refusal."""
    return (
        f"generate.n_train={g.n_train} n_val={g.n_val} n_test={g.n_test} "
        f"train_steps={g.train_steps} test_steps={g.test_steps}"
    )


def make_split(
    cfg: DictConfig, system: System, split: str, every: int, device: torch.device
) -> tuple[Split, SolverStats]:
    """Sample, integrate (in chunks, with a progress bar) and add noise for one split."""
    g = cfg.generate
    n = int(g[f"n_{split}"])
    steps = int(g.test_steps if split == "test" else g.train_steps)
    integrator = get_integrator(g.integrator, tol=g.tol, max_iter=int(g.max_iter))
    y0 = system.sample(n, split_generator(cfg.seed, split, "initial"), dtype=torch.float64)
    stats = SolverStats()
    chunks = []
    with progress(total=n * steps, desc=f"{split:>5}", unit="obs", unit_scale=True) as bar:
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
    if g.observe == "q":  # positions only: the q part of the same noisy states
        observed = np.ascontiguousarray(observed[..., : system.dim])
    t = torch.arange(steps + 1, dtype=torch.float64).numpy() * float(g.obs_dt)
    return Split(observed=observed, clean=clean, t=t), stats


def energy_error(system: System, clean: torch.Tensor) -> float:
    """max over trajectories and time of |H(y_t) - H(y_0)|, for the log."""
    energy = system(clean.reshape(-1, clean.shape[-1])).reshape(clean.shape[:-1])
    return float((energy - energy[:, :1]).abs().max())


def energy_report(system: System, clean: torch.Tensor) -> str:
    """The ground truth's energy for the log, clean (N, T+1, 2d): a conservative system's
    max |H(t) − H(0)| (the integrator's error); a damped system's energy lost H(0) − H(T), mean
    and max over trajectories (physics, not an error: dH/dt = −∇Hᵀ R ∇H)."""
    if not system.params.get("damping"):  # conservative (a constrained system too)
        return f"ground truth max |H(t) - H(0)| = {energy_error(system, clean):.2e}"
    energy = system(clean.reshape(-1, clean.shape[-1])).reshape(clean.shape[:-1])
    lost = energy[:, 0] - energy[:, -1]
    return (
        f"energy lost H(0) - H(T) = {float(lost.mean()):.3e} mean, {float(lost.max()):.3e} max "
        f"(damped {system.name}, γ = {system.params.get('damping')})"
    )


def check_constraints(system: System, split: str, clean: np.ndarray) -> None:
    """For a constrained system (``constraint_violation``, ``constraint_tol``: hnnsym.physics.
    constrained): log max |Φ| and |Φ̇| along the ground truth; UserError above the tolerance."""
    if not isinstance(system, ConstrainedSystem):
        return
    phi, phidot = system.constraint_violation(torch.from_numpy(clean))
    log.info("%s: ground truth max |Phi| = %.2e, max |dPhi/dt| = %.2e", split, phi, phidot)
    if not max(phi, phidot) <= system.constraint_tol:
        raise UserError(
            f"the {split} ground truth leaves the constraint manifold (max |Phi| {phi:.2e}, "
            f"|dPhi/dt| {phidot:.2e} > {system.constraint_tol:g}); lower generate.tol or "
            "generate.fine_dt"
        )


def generate(cfg: DictConfig) -> Path:
    """Validate, simulate every split, write ``cfg.data_file``; returns its path."""
    system, every, resolved = check_config(cfg)
    device = configure(cfg)
    g = cfg.generate
    splits = {}
    for split in SPLITS:
        splits[split], stats = make_split(cfg, system, split, every, device)
        log.info(
            "%s: %d x %d states; %s, %.2f fixed-point iterations per step (max %d)",
            split, *splits[split].clean.shape[:2],
            energy_report(system, torch.from_numpy(splits[split].clean)),
            stats.mean_iterations, stats.max_iterations,
        )  # fmt: skip
        check_constraints(system, split, splits[split].clean)
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
        "observe": str(g.observe),
    }
    path = Path(cfg.data_file)
    write_dataset(path, splits, attrs, overwrite=bool(g.overwrite))
    return path
