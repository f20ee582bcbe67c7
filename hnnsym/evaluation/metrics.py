"""How good is a learned Hamiltonian: grid errors of H and of its vector field, and rollout metrics.
The rollouts themselves are ``hnnsym.evaluation.rollout``, fitted starts
``hnnsym.evaluation.initial_states``, the learned damping ``hnnsym.evaluation.damping``.

Pure functions on tensors; states are (B, 2d) ordered [q, p], trajectories time-major (T+1, B, 2d)
like ``integrate``. Every quantity is computed in the dtype of its inputs (evaluate uses float64).

Grid error of H (H is defined up to an additive constant; Choudhary et al. / the SHNN code):
    c        = mean(H_true - H_pred)
    h_l1     = mean |H_true - H_pred - c|
    h_l1_raw = mean |H_true - H_pred|
    h_l1_rel = h_l1 / mean |H_true - mean H_true|
Vector field f = J^-1 ∇H: vf_l1 = mean over points and components of |f_true - f_pred|,
vf_rel = vf_l1 / mean |f_true|.

Rollout (from the clean test initial conditions, learned H, compared to the clean trajectory):
    bounded relative error (Finzi et al.)  e(t) = ||ŷ(t) - y(t)|| / (||ŷ(t)|| + ||y(t)||)  in [0, 1]
    its geometric mean over time       exp( (1 / (T - t_1)) ∫_{t_1}^{T} log e(t) dt )  (trapezoid;
                                       from the first step t_1, since e(0) = 0 by construction)
    valid prediction time              the first time e(t) exceeds a threshold (the horizon if never)
A trajectory whose rollout fails (fixed-point iteration not converging, NaN/Inf) keeps its states
up to the failure; after it its states are NaN, e(t) = 1 (the bound: a diverged prediction), and
it is left out of the error and energy averages from that time on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from hnnsym.evaluation.rollout import RolloutResult
from hnnsym.ode.dynamics import has_hamiltonian, vector_field

Hamiltonian = Callable[[Tensor], Tensor]


# ---- evaluation in chunks -------------------------------------------------------------------


def energies(H: Hamiltonian, y: Tensor, chunk: int = 65536) -> Tensor:
    """H(y) for states y (..., 2d) -> (...), in chunks of ``chunk`` states, without a graph.
    ValueError for a model without a Hamiltonian (``hnnsym.ode.dynamics.has_hamiltonian``)."""
    if not has_hamiltonian(H):
        raise ValueError(f"{type(H).__name__} has no Hamiltonian to evaluate")
    flat = y.reshape(-1, y.shape[-1])
    with torch.no_grad():
        out = torch.cat([H(part) for part in flat.split(chunk)]) if len(flat) else flat[:, 0]
    return out.reshape(y.shape[:-1])


def vector_fields(H: Hamiltonian, y: Tensor, chunk: int = 65536) -> Tensor:
    """f(y) = J^-1 ∇H(y) for states y (..., 2d) -> (..., 2d), in chunks, without a graph."""
    flat = y.reshape(-1, y.shape[-1])
    with torch.no_grad():
        parts = [vector_field(H, part, create_graph=False) for part in flat.split(chunk)]
    return (torch.cat(parts) if parts else flat).reshape(y.shape)


# ---- grid errors ----------------------------------------------------------------------------


def hamiltonian_error(h_true: Tensor, h_pred: Tensor) -> dict[str, float]:
    """Errors of H values on the same points (G,): h_l1, h_l1_raw, h_l1_rel and the offset c.

    For h_pred = a h_true + b, h_l1_rel = |1 - a| exactly (the offset b is removed by c).
    """
    if h_true.shape != h_pred.shape or h_true.dim() != 1 or h_true.numel() == 0:
        raise ValueError(
            f"need two non-empty (G,) tensors, got {tuple(h_true.shape)}, {tuple(h_pred.shape)}"
        )
    diff = h_true - h_pred
    c = diff.mean()
    h_l1 = (diff - c).abs().mean()
    spread = (h_true - h_true.mean()).abs().mean()
    return {
        "h_l1": float(h_l1),
        "h_l1_raw": float(diff.abs().mean()),
        "h_l1_rel": float(h_l1 / spread) if spread > 0 else math.nan,
        "h_offset": float(c),
    }


def vector_field_error(f_true: Tensor, f_pred: Tensor) -> dict[str, float]:
    """vf_l1 = mean |f_true - f_pred| over points and components; vf_rel = vf_l1 / mean |f_true|."""
    if f_true.shape != f_pred.shape:
        raise ValueError(f"shapes differ: {tuple(f_true.shape)} vs {tuple(f_pred.shape)}")
    vf_l1 = (f_true - f_pred).abs().mean()
    scale = f_true.abs().mean()
    return {"vf_l1": float(vf_l1), "vf_rel": float(vf_l1 / scale) if scale > 0 else math.nan}


def grid_errors(
    H_true: Hamiltonian, H_pred: Hamiltonian, grid: Tensor, chunk: int = 65536
) -> dict[str, float]:
    """H and vector-field errors of H_pred against H_true on the states ``grid`` (G, 2d).
    For a model without a Hamiltonian (NODE) the H errors are NaN; the vector-field ones stay."""
    if has_hamiltonian(H_pred):
        out = hamiltonian_error(energies(H_true, grid, chunk), energies(H_pred, grid, chunk))
    else:
        out = dict.fromkeys(("h_l1", "h_l1_raw", "h_l1_rel", "h_offset"), math.nan)
    out |= vector_field_error(
        vector_fields(H_true, grid, chunk), vector_fields(H_pred, grid, chunk)
    )
    out["grid_size"] = int(grid.shape[0])
    return out


def default_grid_points(dim: int, target: int = 100_000) -> int:
    """Points per axis so that the full 2d-dimensional box grid has about ``target`` points
    (316 in 2-D, 18 in 4-D) before the energy filter."""
    return max(2, round(target ** (1.0 / (2 * dim))))


# ---- rollout metrics ------------------------------------------------------------------------


def relative_error(pred: Tensor, true: Tensor) -> Tensor:
    """Bounded relative error of Finzi et al., ||ŷ - y|| / (||ŷ|| + ||y||) over the last axis, in [0, 1]
    (0 where both are 0). Both are scaled by their largest |entry| first (e does not change), so a
    finite state too large for its norm (a diverging rollout at 1e296) gives e ≈ 1, not NaN."""
    scale = torch.maximum(pred.abs().amax(-1, keepdim=True), true.abs().amax(-1, keepdim=True))
    scale = scale.clamp_min(torch.finfo(scale.dtype).tiny)
    pred, true = pred / scale, true / scale
    num = (pred - true).norm(dim=-1)
    den = pred.norm(dim=-1) + true.norm(dim=-1)
    return torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), 0.0 * num)


def geometric_mean_over_time(err: Tensor, t: Tensor, skip_first: bool = True) -> Tensor:
    """exp( (1/(t_end - t_start)) ∫ log err dt ) per column of err (T+1, B), by the trapezoid rule.

    ``skip_first`` starts at t_1 (the error at t_0 is 0 for a rollout from the true initial
    condition). Zeros are clamped to the smallest normal number of the dtype, so they give a tiny
    finite mean instead of -inf. A single time point gives that point's value.
    """
    if skip_first:
        err, t = err[1:], t[1:]
    if err.shape[0] == 0:
        raise ValueError("need at least one time point after the first")
    log = err.clamp_min(torch.finfo(err.dtype).tiny).log()
    if err.shape[0] == 1:
        return log[0].exp()
    t = t.to(err)
    integral = torch.trapezoid(log, t, dim=0)
    return (integral / (t[-1] - t[0])).exp()


def valid_prediction_time(err: Tensor, t: Tensor, threshold: float) -> tuple[Tensor, Tensor]:
    """Per column of err (T+1, B): the first time t_n - t_0 with err > threshold (NaN counts as
    exceeding), and whether it never happened (censored: the horizon t_T - t_0 is returned)."""
    exceeded = ~(err <= threshold)
    ever = exceeded.any(0)
    last = torch.full_like(ever, err.shape[0] - 1, dtype=torch.long)
    first = torch.where(ever, exceeded.long().argmax(0), last)
    t = t.to(err)
    return t[first] - t[0], ~ever


@dataclass
class RolloutMetrics:
    """summary: scalars; curves: (T+1,) per time; per_trajectory: (T+1, B) or (B,) tensors."""

    summary: dict[str, float]
    curves: dict[str, Tensor]
    per_trajectory: dict[str, Tensor]


def rollout_metrics(
    result: RolloutResult,
    truth: Tensor,
    t: Tensor,
    H_true: Hamiltonian | None,
    H_pred: Hamiltonian,
    threshold: float = 0.1,
    chunk: int = 65536,
) -> RolloutMetrics:
    """Metrics of a rollout against the clean trajectory ``truth`` (T+1, B, 2d) at times t (T+1,).

    Energy drifts are |E(y_n) - E(y_0)| along a path: the true H along the predicted path
    (``energy_drift_true``), H_pred along its own path (``energy_drift_pred``: how well the
    integrator conserves the learned H; NaN for a model without H) and the true H along the clean
    data (``energy_drift_data``: the ground truth's accuracy). Errors and drifts are averaged over the
    states before each trajectory's failure; the relative error counts 1 after it. With
    ``H_true`` None (measurements: no true H) the true-H energies and drifts are NaN.
    """
    pred = result.states
    if pred.shape != truth.shape or t.shape != truth.shape[:1]:
        raise ValueError(
            f"states {tuple(pred.shape)}, truth {tuple(truth.shape)} and t {tuple(t.shape)} "
            "must be (T+1, B, 2d) twice and (T+1,)"
        )
    t = t.to(pred)
    valid = result.valid()
    n_valid = valid.sum(1)  # (T+1,)

    def mean_per_time(x: Tensor) -> Tensor:
        total = torch.where(valid, x, 0.0).sum(1)
        return (total / n_valid.clamp_min(1)).where(n_valid > 0, math.nan)

    def max_per_time(x: Tensor) -> Tensor:
        return torch.where(valid, x, -math.inf).amax(1).where(n_valid > 0, math.nan)

    def over_valid(x: Tensor, reduce: str) -> float:
        if not bool(valid[1:].any()):  # no state predicted (the starts are given): not 0
            return math.nan
        return float(x[valid].mean() if reduce == "mean" else x[valid].max())

    sq = ((pred - truth) ** 2).mean(-1)  # (T+1, B)
    l2 = (pred - truth).norm(dim=-1)
    rel = relative_error(pred, truth).where(valid, 1.0)
    nan = torch.full(pred.shape[:2], math.nan, dtype=pred.dtype, device=pred.device)
    e_true = nan if H_true is None else energies(H_true, pred, chunk)
    e_pred = (
        energies(H_pred, pred, chunk)
        if has_hamiltonian(H_pred)
        else torch.full_like(e_true, math.nan)
    )
    e_data = nan if H_true is None else energies(H_true, truth, chunk)
    drift_true = (e_true - e_true[0]).abs()
    drift_pred = (e_pred - e_pred[0]).abs()
    drift_data = (e_data - e_data[0]).abs()
    gmean = geometric_mean_over_time(rel, t)
    vpt, censored = valid_prediction_time(rel, t, threshold)
    fail = result.fail_step.to(pred.device)
    failed = fail >= 0

    summary = {
        "rollout_trajectories": int(pred.shape[1]),
        "rollout_steps": int(pred.shape[0] - 1),
        "rollout_horizon": float(t[-1] - t[0]),
        "rollout_dt": result.dt / result.substeps,
        "rollout_failed": float(failed.double().mean()),
        "rollout_fail_time_mean": (
            float((t[fail[failed]] - t[0]).mean()) if bool(failed.any()) else math.nan
        ),
        "traj_mse": over_valid(sq, "mean"),
        "traj_l2_mean": over_valid(l2, "mean"),
        "traj_l2_final": float(mean_per_time(l2)[-1]),
        "rel_err_gmean": float(gmean.mean()),
        "rel_err_final": float(rel[-1].mean()),
        "vpt_mean": float(vpt.mean()),
        "vpt_censored": float(censored.double().mean()),
        "vpt_threshold": float(threshold),
        "energy_drift_true_max": over_valid(drift_true, "max"),
        "energy_drift_true_mean": over_valid(drift_true, "mean"),
        "energy_drift_pred_max": over_valid(drift_pred, "max"),
        "energy_drift_pred_mean": over_valid(drift_pred, "mean"),
        "energy_drift_data_max": float(drift_data.max()),
    }
    curves = {
        "t": t - t[0],
        "n_valid": n_valid,
        "mse": mean_per_time(sq),
        "l2_mean": mean_per_time(l2),
        "rel_err_mean": rel.mean(1),
        "rel_err_median": rel.median(1).values,
        "energy_drift_true_mean": mean_per_time(drift_true),
        "energy_drift_true_max": max_per_time(drift_true),
        "energy_drift_pred_mean": mean_per_time(drift_pred),
        "energy_drift_data_mean": drift_data.mean(1),
    }
    per_trajectory = {
        "energy_true": e_true,
        "energy_pred": e_pred,
        "energy_data": e_data,
        "l2": l2,
        "rel_err": rel,
        "rel_err_gmean": gmean,
        "vpt": vpt,
    }
    return RolloutMetrics(summary, curves, per_trajectory)
