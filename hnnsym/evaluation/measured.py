"""Evaluating a model of measurements (system ``measured``, ``python -m hnnsym.ingest``): there
is no true H, so only what the data allow is measured.

From the first observed state of each held-out (test) trajectory, the learned H is rolled out
through the integrator group over the test horizon and compared with the observed states (so the
errors include the measurement noise):

    traj_mse, traj_l2_mean, rel_err_gmean, vpt_mean, vpt_censored, rollout_failed ...
                     as for simulated data (``hnnsym.evaluation.metrics.rollout_metrics``)
    short_horizon_steps  the training window τ (the horizon the model was fitted on), capped at
                     the test horizon; ``traj_l2_short``, ``rel_err_short``: mean ‖ŷ − y‖ and
                     mean relative error there; ``traj_l2_final``, ``rel_err_final``: at the end
    learned_energy_data_drift_{mean,max}  |H_θ(y_t) − H_θ(y_0)| along the observed test
                     trajectories; ``learned_energy_data_drift_rel`` = its mean over the std of H_θ
                     over the training states (≈ 0: H_θ is conserved along the data, relative to
                     the range of energies the data cover; real, damped data drift)
    energy_drift_pred_{max,mean}  H_θ along its own rollouts (the integrator's conservation)
    h_l1 … vf_rel, energy_drift_true_*, energy_drift_data_max  null: no true H (``notes``)

Figures: ``learned_hamiltonian.png`` (H_θ over the range of the training data with the data and
test trajectories on it), ``energy.png`` (H_θ along data and rollouts), ``phase_portrait.png``,
``rollout_error.png``, ``training_data.png``.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from hnnsym.errors import UserError
from hnnsym.evaluation import plots
from hnnsym.evaluation.metrics import energies, rollout, rollout_metrics
from hnnsym.evaluation.summary import number, summary_text
from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.ode.integrators import integrator_from_config
from hnnsym.physics.systems import System
from hnnsym.training.checkpoints import trained_options

UNAVAILABLE = ("h_l1", "h_l1_raw", "h_l1_rel", "h_offset", "vf_l1", "vf_rel", "grid_size")


def learned_energy_along(
    model: nn.Module, states: Tensor, chunk: int, reference: Tensor | None = None
) -> dict[str, Tensor]:
    """H_θ along trajectories (T+1, B, 2d): the energies (T+1, B), their drift |H_θ(y_t) −
    H_θ(y_0)|, and the drift's mean relative to the std of H_θ over the ``reference`` states
    (M, 2d; default: ``states``), i.e. to the range of energies the data cover."""
    e = energies(model, states, chunk)
    drift = (e - e[0]).abs()
    ref = e if reference is None else energies(model, reference, chunk)
    scale = ref.std() if ref.numel() > 1 else torch.zeros((), dtype=e.dtype)
    rel = drift.mean() / scale if scale > 0 else torch.tensor(math.nan)
    return {"energy": e, "drift": drift, "rel": rel}


def evaluate_measured(
    cfg: DictConfig,
    out: Path,
    system: System,
    model: nn.Module,
    truth: Tensor,
    t: Tensor,
    obs_dt: float,
    steps: int,
    substeps: int,
    train_states: Tensor | None,
    payload: dict,
) -> tuple[dict, pd.DataFrame, list[str]]:
    """Metrics (with notes), per-step curves and figures of a (q, p) model of measurements;
    ``truth`` (T+1, B, 2d) are the observed test states, ``train_states`` (M, 2d) the training
    data for the landscape figure (None: not drawn)."""
    e = cfg.eval
    try:
        integ = integrator_from_config(OmegaConf.to_container(cfg.integrator, resolve=True))
    except ValueError as err:
        raise UserError(str(err)) from err
    result = rollout(model, truth[0], obs_dt, steps, integ, substeps=substeps, segment=e.segment)
    roll = rollout_metrics(result, truth, t, None, model, e.valid_threshold, e.chunk)
    per = roll.per_trajectory
    window = int(trained_options(payload).get("window") or 1)
    short = min(window, steps)
    valid = result.valid()
    l2_short = per["l2"][short][valid[short]]
    metrics = dict.fromkeys(UNAVAILABLE)
    metrics |= {
        **roll.summary,
        "short_horizon_steps": short,
        "traj_l2_short": float(l2_short.mean()) if l2_short.numel() else math.nan,
        "rel_err_short": float(per["rel_err"][short].mean()),
    }
    notes = [
        "no true H (system measured): the H and vector-field errors (h_l1, h_l1_raw, h_l1_rel, "
        "vf_l1, vf_rel), energy_drift_true_* and energy_drift_data_max are unavailable (null)",
        "the rollouts start from the observed test states and are compared with them, so the "
        "rollout errors include the measurement noise",
    ]
    learned = None
    if has_hamiltonian(model):
        learned = learned_energy_along(model, truth, e.chunk, train_states)
        metrics |= {
            "learned_energy_data_drift_mean": float(learned["drift"].mean()),
            "learned_energy_data_drift_max": float(learned["drift"].max()),
            "learned_energy_data_drift_rel": float(learned["rel"]),
        }
    else:
        notes.append(
            f"model {payload['model_config'].get('name')} has no Hamiltonian: the learned-energy "
            "metrics are null"
        )
        metrics |= dict.fromkeys(("learned_energy_data_drift_mean", "learned_energy_data_drift_max",
                                  "learned_energy_data_drift_rel"))  # fmt: skip
    metrics |= {
        "notes": notes,
        "rollout_substeps": substeps,
        "rollout_integrator": integ.name,
        "rollout_reference": "observed",
        "rollout_failures": sorted({r for r in result.fail_reason if r}),
    }
    figures = []
    if e.figures:
        k = min(int(e.plot_trajectories), truth.shape[1])
        tt = t - t[0]
        if learned is not None and train_states is not None:
            plots.plot_learned_landscape(
                model, train_states, truth[:, :k], result.states[:, :k],
                out / "learned_hamiltonian.png", e.slice_points, e.chunk, e.scatter_points,
                torch.Generator().manual_seed(cfg.seed),
            )  # fmt: skip
            figures.append("learned_hamiltonian")
        if k:
            plots.plot_phase_portraits(truth[:, :k], result.states[:, :k], system.dim,
                                       out / "phase_portrait.png")  # fmt: skip
            figures.append("phase_portrait")
            if learned is not None:
                plots.plot_learned_energy(tt, learned["energy"][:, :k], per["energy_pred"][:, :k],
                                          out / "energy.png")  # fmt: skip
                figures.append("energy")
        plots.plot_rollout_error(tt, per["l2"], per["rel_err"], e.valid_threshold,
                                 out / "rollout_error.png")  # fmt: skip
        figures.append("rollout_error")
        if e.plot_training_data and train_states is not None:
            plots.plot_training_data(train_states, system.dim, out / "training_data.png",
                                     max_points=e.scatter_points,
                                     generator=torch.Generator().manual_seed(cfg.seed))  # fmt: skip
            figures.append("training_data")
    curves = pd.DataFrame({key: v.detach().cpu().numpy() for key, v in roll.curves.items()
                           if key not in ("energy_drift_true_mean", "energy_drift_true_max",
                                          "energy_drift_data_mean")})  # fmt: skip
    if learned is not None:
        curves["learned_energy_data_drift_mean"] = learned["drift"].mean(1).cpu().numpy()
    curves.insert(0, "step", range(len(curves)))
    return metrics, curves, figures


def measured_summary(m: dict, out: Path) -> str:
    """The terminal lines of an evaluation of measurements."""

    f = partial(number, m)  # f(key): the metric for the terminal

    body = (
        f"  rollout of {m['rollout_trajectories']} held-out trajectories from their observed "
        f"first states ({m['rollout_integrator']}, h = {m['rollout_dt']:g}):\n"
        f"    at {m['short_horizon_steps']} steps (the training window): |error| "
        f"{f('traj_l2_short')}, rel. error {f('rel_err_short')}\n"
        f"    at t = {m['rollout_horizon']:g} ({m['rollout_steps']} steps): |error| "
        f"{f('traj_l2_final')}, rel. error {f('rel_err_final')}; mse {f('traj_mse')}, rel. "
        f"error gmean {f('rel_err_gmean')}, valid time {f('vpt_mean')} (threshold "
        f"{m['vpt_threshold']:g}), failed {100 * m['rollout_failed']:.3g} %\n"
        f"  learned H along the data: drift mean {f('learned_energy_data_drift_mean')} "
        f"({f('learned_energy_data_drift_rel')} of its spread over the training data)"
    )
    return summary_text(m, out, body, about=" (measurements: no true H)")
