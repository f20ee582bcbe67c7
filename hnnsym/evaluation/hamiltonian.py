"""Evaluating a model of (q, p) states of a known system (``hnnsym.evaluation.metrics``): H and its
vector field on the grid, and the rollout through the integrator group from the test initial
conditions ``truth[0]`` (``eval.init=observed``: the first observed test states; ``fitted``: the
starts fitted to the first ``eval.init_steps`` + 1 of them, ``fit_initial_states``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd
import torch

from hnnsym.config.build import build_integrator
from hnnsym.data.hdf5 import made_by_generate
from hnnsym.errors import UserError
from hnnsym.evaluation import plots
from hnnsym.evaluation.initial_states import fit_initial_states
from hnnsym.evaluation.metrics import default_grid_points, grid_errors, rollout_metrics
from hnnsym.evaluation.problem import Problem, Rolled
from hnnsym.evaluation.rollout import in_data_coordinates, model_rollout
from hnnsym.evaluation.summary import number, split_name, summary_text
from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.ode.integrators import Integrator


def run_integrator(p: Problem) -> Integrator:
    """The integrator group's integrator (``cfg.integrator``), errors as one line."""
    try:
        return build_integrator(p.cfg.integrator)
    except ValueError as err:
        raise UserError(str(err)) from err


def known_damping(p: Problem) -> float | None:
    """The data's true damping rate (generate's files omit damping 0)."""
    rate = (p.data.attrs.get("system_params") or {}).get("damping")
    if rate is None and made_by_generate(p.data.attrs):
        rate = 0.0
    return rate


class HamiltonianPart:
    """(q, p) states of a system with a true H."""

    starts = True

    def roll_out(self, p: Problem) -> Rolled:
        e, truth = p.e, p.truth
        device, dtype = truth.device, truth.dtype
        integ = run_integrator(p)
        start, fitted = truth[0], {"rollout_init": e.init}
        if e.init == "fitted" and p.velocities is not None:
            raise UserError(
                "eval.init=fitted fits starts in the model's own (q, p); a model with "
                "momenta of its own starts from observed states (eval.init=observed)"
            )
        if e.init != "first":
            k = 0 if e.init == "observed" else int(e.init_steps)
            observed = torch.as_tensor(p.data.splits["test"].observed[: truth.shape[1], : k + 1])
            observed = observed.transpose(0, 1).to(device, dtype)
            start = observed[0]
            if e.init == "fitted":
                start, rms = fit_initial_states(p.model, observed, p.obs_dt, integ,
                                                substeps=p.substeps,
                                                iterations=int(e.init_iterations),
                                                segment=e.segment)  # fmt: skip
                fitted |= {"init_steps": k, "init_fit_rms": float(rms[torch.isfinite(rms)].mean())}
            fitted |= {
                "start_error": float((start - truth[0]).norm(dim=-1).mean()),
                "start_error_observed": float((observed[0] - truth[0]).norm(dim=-1).mean()),
            }
        result = model_rollout(p.model, start, p.obs_dt, p.steps, integ, substeps=p.substeps,
                               segment=e.segment, velocities=p.velocities)  # fmt: skip
        detail = {"result": result, "integrator": integ, "fitted": fitted}
        return Rolled(truth, in_data_coordinates(p.model, p.velocities), known_damping(p), detail)

    def metrics(self, p: Problem, r: Rolled) -> tuple[dict, pd.DataFrame]:
        e, system, model, truth = p.e, p.system, r.model, p.truth
        points = int(e.grid_points or default_grid_points(system.dim))
        grid = system.grid(points).to(truth.device, truth.dtype)
        if grid.shape[0] == 0:
            raise UserError(
                f"eval.grid_points={points} leaves no point inside {system.name}'s domain"
            )
        grid_m = grid_errors(system, model, grid, e.chunk)
        result = r.detail["result"]
        roll = rollout_metrics(result, truth, p.t, system, model, e.valid_threshold, e.chunk)
        r.detail |= {"roll": roll, "h_offset": grid_m["h_offset"]}
        curves = pd.DataFrame({key: v.detach().cpu().numpy() for key, v in roll.curves.items()})
        curves.insert(0, "step", range(len(curves)))
        notes = []
        if not has_hamiltonian(model):
            notes.append(
                f"model {p.payload['model_config'].get('name')} learns a vector field without a "
                "Hamiltonian: the H grid errors (h_l1, h_l1_raw, h_l1_rel) and energy_drift_pred "
                "are null; vf_l1/vf_rel and the rollout metrics are defined"
            )
        if p.velocities is not None:
            notes.append(
                "the model has momenta of its own (p = M_θ(q) q̇): it is rolled out from "
                "(q, q̇) of the data's states, and its states are compared in the data's (q, p) "
                "(p = M(q) q̇ of the true system); H and the field on the grid are its own taken "
                "through that map"
            )
        if p.reference == "observed":
            notes.append(
                f"{p.data_file} has no clean test trajectories: the rollouts start from the "
                "observed test states and are compared with them, so the rollout errors include "
                "the measurement noise, and energy_drift_data_max is the true H along the observed "
                "states"
            )
        core = {
            **grid_m,
            "notes": notes,
            "grid_points_per_axis": points,
            **roll.summary,
            "rollout_substeps": p.substeps,
            "rollout_integrator": r.detail["integrator"].name,
            "rollout_reference": p.reference,
            **r.detail["fitted"],
            "rollout_failures": sorted({why for why in result.fail_reason if why}),
        }
        return core, curves

    def baselines(self, p: Problem, r: Rolled, metrics: dict) -> tuple[dict, dict]:
        return {}, {}

    def figures(self, p: Problem, r: Rolled, curves: pd.DataFrame) -> list[str]:
        e, cfg, system, truth, t = p.e, p.cfg, p.system, p.truth, p.t
        result, roll = r.detail["result"], r.detail["roll"]
        k = min(int(e.plot_trajectories), truth.shape[1])
        per = roll.per_trajectory
        figures = []
        if has_hamiltonian(r.model):
            plots.plot_hamiltonian_slice(system, r.model, r.detail["h_offset"],
                                         p.out / "hamiltonian.png", e.slice_points, e.chunk,
                                         truth.device)  # fmt: skip
            figures.append("hamiltonian")
        if k:
            plots.plot_phase_portraits(truth[:, :k], result.states[:, :k], system.dim,
                                       p.out / "phase_portrait.png")  # fmt: skip
            plots.plot_energy(t - t[0], per["energy_true"][:, :k], per["energy_data"][:, :k],
                              per["energy_pred"][:, :k], p.out / "energy.png")  # fmt: skip
            figures += ["phase_portrait", "energy"]
        plots.plot_rollout_error(t - t[0], per["l2"], per["rel_err"], e.valid_threshold,
                                 p.out / "rollout_error.png")  # fmt: skip
        figures.append("rollout_error")
        if e.plot_training_data:
            plots.plot_training_data(p.data.splits["train"].observed, system.dim,
                                     p.out / "training_data.png", max_points=e.scatter_points,
                                     generator=torch.Generator().manual_seed(cfg.seed))  # fmt: skip
            figures.append("training_data")
        return figures

    def wrote(self, m: dict) -> bool:
        return m.get("grid_points_per_axis") is not None

    def summary(self, m: dict, out: Path) -> str:
        f = partial(number, m)  # f(key): the metric for the terminal
        body = (
            f"  H on {m['grid_size']} grid points: h_l1 {f('h_l1')} (raw {f('h_l1_raw')}, "
            f"rel {f('h_l1_rel')}); vector field l1 {f('vf_l1')} (rel {f('vf_rel')})\n"
            f"  rollout of {m['rollout_trajectories']} {split_name(m)} trajectories to t = "
            f"{m['rollout_horizon']:g} ({m['rollout_integrator']}, h = {m['rollout_dt']:g}): "
            f"mse {f('traj_mse')}, rel. error gmean {f('rel_err_gmean')}, valid time "
            f"{f('vpt_mean')} (threshold {m['vpt_threshold']:g}), true-energy drift max "
            f"{f('energy_drift_true_max')}, failed {100 * m['rollout_failed']:.3g} %"
        )
        if "damping_true" in m:
            body += (
                f"\n  damping: learned {f('damping_learned')}, true {f('damping_true')} (rel. "
                f"error {f('damping_rel_err')}; eigenvalues of R_pp {m['damping_eigenvalues']})"
            )
        return summary_text(m, out, body)
