"""Evaluating a model learned from positions only (Aoshima et al.: ``Potential``, method=ddlm and its
baselines): prediction from the first two positions, position and energy errors, the variance of
the modelled energy, and the potential against the true one.

Prediction (``rollout_positions``): from the clean q_0, q_1 of each test trajectory, every next
position by the run's scheme (``method.predict``, ``hnnsym.ode.lagrangian``): ``eq12`` solves
Eq. 12 with Newton's method (a trajectory whose solve fails is recorded as failed from that step
on: its positions are NaN, as in ``hnnsym.evaluation.rollout.rollout``); the explicit recurrences
(leapfrog, symplectic Euler, Euler) step directly.

Metrics (means over test trajectories; ``q̂`` predicted, ``q`` clean positions):
    q_mse          mean over the predicted steps n = 2..T and coordinates of (q̂_n − q_n)²
                   (Aoshima et al., Table 2 "Position q"); ``traj_mse`` is the same number
    energy_mse     mean over n = 1..T−1 of (H(q̂_n, p̂_n) − H(q_n, p_n))² with the true H and the
                   momentum p̂ = m v̂ from the scheme's own velocity v̂ (Eq. 11 for eq12; see
                   ``hnnsym.ode.lagrangian.velocities``) and the system's mass m (Table 2 "Energy")
    energy_var_model  the variance over n = 1..T−1 of the modelled energy E_n = ½ v̂ᵀMv̂ + V_θ(q̂_n)
                   along each prediction, averaged (Table 3); exactly conserved by eq12 up to the
                   Newton tolerance and rounding
    energy_drift_{true,pred}_max  max |E_n − E_1| of the true H along the prediction, and of the
                   modelled energy; energy_drift_data_max: the true H along the clean data
    rel_err_gmean, vpt_mean, vpt_censored: the relative-error metrics of
                   ``hnnsym.evaluation.metrics`` on positions
    v_l1, v_l1_rel, v_offset  the learned potential against the true one V(q) = H(q, 0) on a grid of
                   ``V_GRID`` points over the range of the test positions (d = 1), up to a constant
                   and with V_θ scaled by m / M_θ (the dynamics fix only M⁻¹∇V; 1 when M = m = 1)
    h_l1 … vf_rel  null: a potential of positions has no H(q, p) or vector field to compare on a
                   (q, p) grid (said in ``notes``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from hnnsym.errors import ConvergenceError, UserError
from hnnsym.evaluation import plots
from hnnsym.evaluation.metrics import (
    geometric_mean_over_time,
    hamiltonian_error,
    relative_error,
    valid_prediction_time,
)
from hnnsym.evaluation.problem import Problem, Rolled
from hnnsym.evaluation.summary import number, split_name, summary_text
from hnnsym.ode.lagrangian import (
    EXPLICIT,
    SCHEMES,
    DiscreteGradient,
    explicit_step,
    model_energy,
    solve_eq12,
    velocities,
)
from hnnsym.physics.systems import System

V_GRID = 1001  # points of the q grid of the potential error (d = 1)
H_KEYS = ("h_l1", "h_l1_raw", "h_l1_rel", "h_offset", "vf_l1", "vf_rel")


@dataclass
class PositionRollout:
    """Predicted positions (T+1, B, d), NaN from a trajectory's failure on; fail_step (B,): the
    first position that could not be computed (-1: none); fail_reason per trajectory; Newton
    iterations per solved step (empty for an explicit scheme)."""

    positions: Tensor
    fail_step: Tensor
    fail_reason: list[str]
    newton_iterations: Tensor

    def valid(self) -> Tensor:
        """(T+1, B) mask of the positions computed before each trajectory's failure."""
        steps = torch.arange(self.positions.shape[0], device=self.positions.device)[:, None]
        fail = self.fail_step.to(self.positions.device)
        return (fail[None, :] < 0) | (steps < fail[None, :])


def discrete_gradient_of(model: nn.Module) -> DiscreteGradient:
    return DiscreteGradient(getattr(model, "discrete_gradient", "gonzalez"),
                            int(getattr(model, "avf_nodes", 4)))  # fmt: skip


def rollout_positions(
    model: nn.Module,
    q0: Tensor,
    q1: Tensor,
    dt: float,
    steps: int,
    scheme: str = "eq12",
    tol: float | None = None,
    max_iter: int = 30,
) -> PositionRollout:
    """Predict ``steps`` intervals from the positions q0, q1 (B, d) with ``scheme``: positions
    (steps+1, B, d). Never raises on a failing trajectory: a Newton solve that does not converge,
    or a non-finite position, ends that trajectory alone (recorded in fail_step/fail_reason)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose one of {SCHEMES}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    B = q0.shape[0]
    mass = model.mass_matrix().detach()
    dg = discrete_gradient_of(model)
    qs = torch.full((steps + 1, *q0.shape), math.nan, dtype=q0.dtype, device=q0.device)
    qs[0], qs[1] = q0, q1
    fail_step = torch.full((B,), -1, dtype=torch.long)
    reasons = [""] * B
    alive = (torch.isfinite(q0).all(-1) & torch.isfinite(q1).all(-1)).cpu()
    for b in torch.nonzero(~alive).flatten().tolist():
        fail_step[b], reasons[b] = 0, "non-finite initial positions"
    iterations = []
    for n in range(1, steps):
        if not bool(alive.any()):
            break
        every = bool(alive.all())  # the usual case: no indexing
        idx = torch.nonzero(alive).flatten()
        at = slice(None) if every else idx.to(q0.device)
        if scheme in EXPLICIT:
            with torch.no_grad():
                nxt = explicit_step(scheme, model, mass, qs[n - 1, at], qs[n, at], dt, False)
            ok = torch.isfinite(nxt).all(-1)
            why = "NaN/Inf position"
        else:
            result = solve_eq12(model, mass, qs[n - 1, at], qs[n, at], dt, dg, tol, max_iter,
                                on_fail="record")  # fmt: skip
            nxt, ok = result.q_next, result.converged
            iterations.append(result.iterations[ok])
            why = f"Newton's method did not converge in {max_iter} iterations (or diverged)"
        if every and bool(ok.all()):
            qs[n + 1] = nxt
            continue
        qs[n + 1, idx.to(q0.device)[ok]] = nxt[ok]
        for j in torch.nonzero(~ok).flatten().tolist():
            b = int(idx[j])
            fail_step[b], reasons[b], alive[b] = n + 1, why, False
    its = torch.cat(iterations).cpu() if iterations else torch.zeros(0, dtype=torch.long)
    return PositionRollout(qs, fail_step, reasons, its)


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    return float(x[mask].mean()) if bool(mask.any()) else math.nan


def _masked_max(x: Tensor, mask: Tensor) -> float:
    return float(x[mask].max()) if bool(mask.any()) else math.nan


def potential_error(system: System, model: nn.Module, q: Tensor) -> dict[str, float]:
    """v_l1, v_l1_rel, v_offset: V_θ·(m/M_θ) against the true V on ``V_GRID`` points spanning the
    positions ``q`` (..., 1) (d = 1 only; NaN otherwise or without a true potential)."""
    keys = ("v_l1", "v_l1_rel", "v_offset")
    if system.dim != 1 or system.mass is None or not system.separable:
        return dict.fromkeys(keys, math.nan)
    finite = q[torch.isfinite(q)]
    grid = torch.linspace(float(finite.min()), float(finite.max()), V_GRID, dtype=q.dtype,
                          device=q.device)[:, None]  # fmt: skip
    scale = system.mass / float(model.mass_matrix().detach()[0, 0])
    with torch.no_grad():
        err = hamiltonian_error(system.potential(grid), scale * model(grid))
    return {"v_l1": err["h_l1"], "v_l1_rel": err["h_l1_rel"], "v_offset": err["h_offset"]}


@dataclass
class PositionEvaluation:
    """The metrics (summary scalars and notes), the per-step curves and the per-trajectory
    series that the figures draw."""

    metrics: dict
    curves: pd.DataFrame
    series: dict[str, Tensor]


def position_metrics(
    roll: PositionRollout,
    truth: Tensor,
    t: Tensor,
    dt: float,
    system: System,
    model: nn.Module,
    scheme: str,
    threshold: float,
) -> PositionEvaluation:
    """Metrics of a position rollout against the clean states ``truth`` (T+1, B, 2d)."""
    d = system.dim
    q_hat, q_true = roll.positions, truth[..., :d]
    T = q_hat.shape[0] - 1
    valid = roll.valid()
    predicted = valid.clone()
    predicted[:2] = False  # q_0, q_1 are given
    sq = ((q_hat - q_true) ** 2).mean(-1)
    l2 = (q_hat - q_true).norm(dim=-1)
    rel = relative_error(q_hat, q_true).where(valid, 1.0)
    gmean = geometric_mean_over_time(rel[1:], t[1:])  # from n = 2: q_0 and q_1 are given
    vpt, censored = valid_prediction_time(rel, t, threshold)

    mass = model.mass_matrix().detach()
    v_hat = velocities(scheme, q_hat, dt, model, mass, discrete_gradient_of(model))
    e_model = model_energy(model, mass, q_hat, v_hat)  # (T+1, B)
    e_data = system(truth.reshape(-1, truth.shape[-1])).reshape(truth.shape[:-1])
    if system.mass is not None:
        p_hat = system.mass * v_hat
        states = torch.cat([q_hat, p_hat], -1)
        e_true = system(states.reshape(-1, 2 * d)).reshape(q_hat.shape[:-1])
    else:
        e_true = torch.full_like(e_model, math.nan)
    window = torch.zeros_like(valid)
    window[1:T] = True  # n = 1..T-1: where every scheme defines its velocity
    energy_ok = window & valid & torch.isfinite(e_model)
    if T >= 2:  # a trajectory's energy step n needs q_{n+1} (leapfrog, Euler) too
        energy_ok[:-1] &= valid[1:]
    e_model_masked = torch.where(energy_ok, e_model, math.nan)
    var_model = torch.nanmean(
        (e_model_masked - torch.nanmean(e_model_masked, 0, keepdim=True)) ** 2, 0
    )
    first = e_model[1]
    drift_model = (e_model - first).abs()
    drift_true = (e_true - e_true[1]).abs()
    drift_data = (e_data - e_data[0]).abs()
    fail = roll.fail_step
    failed = fail >= 0
    its = roll.newton_iterations.double()

    summary = {
        "q_mse": _masked_mean(sq, predicted),
        "traj_mse": _masked_mean(sq, predicted),
        "traj_l2_mean": _masked_mean(l2, predicted),
        "traj_l2_final": _masked_mean(l2[-1], valid[-1]),
        "energy_mse": _masked_mean((e_true - e_data) ** 2, energy_ok),
        "energy_var_model": float(torch.nanmean(var_model)) if bool(energy_ok.any()) else math.nan,
        "energy_drift_true_max": _masked_max(drift_true, energy_ok),
        "energy_drift_true_mean": _masked_mean(drift_true, energy_ok),
        "energy_drift_pred_max": _masked_max(drift_model, energy_ok),
        "energy_drift_pred_mean": _masked_mean(drift_model, energy_ok),
        "energy_drift_data_max": float(drift_data.max()),
        "rel_err_gmean": float(gmean.mean()),
        "rel_err_final": float(rel[-1].mean()),
        "vpt_mean": float(vpt.mean()),
        "vpt_censored": float(censored.double().mean()),
        "vpt_threshold": float(threshold),
        "rollout_trajectories": int(q_hat.shape[1]),
        "rollout_steps": int(T),
        "rollout_horizon": float(t[-1] - t[0]),
        "rollout_dt": float(dt),
        "rollout_substeps": 1,
        "rollout_failed": float(failed.double().mean()),
        "rollout_fail_time_mean": (
            float((t[fail[failed]] - t[0]).mean()) if bool(failed.any()) else math.nan
        ),
        "newton_iterations_mean": float(its.mean()) if its.numel() else math.nan,
        "newton_iterations_max": int(its.max()) if its.numel() else None,
    }
    n_valid = valid.sum(1)

    def per_time(x: Tensor, mask: Tensor) -> Tensor:
        count = mask.sum(1)
        return (torch.where(mask, x, 0.0).sum(1) / count.clamp_min(1)).where(count > 0, math.nan)

    curves = pd.DataFrame(
        {
            "step": range(T + 1),
            "t": (t - t[0]).cpu().numpy(),
            "n_valid": n_valid.cpu().numpy(),
            "q_mse": per_time(sq, valid).cpu().numpy(),
            "l2_mean": per_time(l2, valid).cpu().numpy(),
            "rel_err_mean": rel.mean(1).cpu().numpy(),
            "rel_err_median": rel.median(1).values.cpu().numpy(),
            "energy_sq_err_mean": per_time((e_true - e_data) ** 2, energy_ok).cpu().numpy(),
            "energy_model_drift_mean": per_time(drift_model, energy_ok).cpu().numpy(),
        }
    )
    series = {"l2": l2, "rel_err": rel, "energy_true": torch.where(energy_ok, e_true, math.nan),
              "energy_data": e_data, "energy_model": e_model_masked}  # fmt: skip
    return PositionEvaluation(summary, curves, series)


def prediction_scheme(cfg: DictConfig) -> tuple[str, float | None, int]:
    """(scheme, Newton tol, Newton max_iter) of ``method.predict`` / ``method.newton``."""
    method = cfg.get("method") or {}
    scheme = method.get("predict", "eq12")
    if scheme not in SCHEMES:
        raise UserError(f"method.predict must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    newton = OmegaConf.to_container(method.get("newton") or {}, resolve=True)
    tol, max_iter = newton.get("tol"), newton.get("max_iter", 30)
    if tol is not None and not (isinstance(tol, (int, float)) and tol > 0):
        raise UserError(f"method.newton.tol must be a number > 0 or null, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise UserError(f"method.newton.max_iter must be a whole number >= 1, got {max_iter!r}")
    return scheme, tol, max_iter


class PositionPart:
    """A model learned from positions only, on a system with a true H (module doc)."""

    starts = False

    def roll_out(self, p: Problem) -> Rolled:
        scheme, tol, max_iter = prediction_scheme(p.cfg)
        truth = p.truth
        if truth.shape[0] < 3:
            raise UserError("a position prediction needs test trajectories of at least 2 steps")
        d = p.system.dim
        try:
            roll = rollout_positions(p.model, truth[0, :, :d], truth[1, :, :d], p.obs_dt,
                                     truth.shape[0] - 1, scheme, tol, max_iter)  # fmt: skip
        except ConvergenceError as err:  # not raised with on_fail="record"; kept for safety
            raise UserError(str(err)) from err
        return Rolled(truth, p.model, None, {"roll": roll, "scheme": (scheme, tol, max_iter)})

    def metrics(self, p: Problem, r: Rolled) -> tuple[dict, pd.DataFrame]:
        system, model, truth, d = p.system, p.model, p.truth, p.system.dim
        roll, (scheme, tol, max_iter) = r.detail["roll"], r.detail["scheme"]
        found = position_metrics(roll, truth, p.t, p.obs_dt, system, model, scheme,
                                 p.e.valid_threshold)  # fmt: skip
        r.detail["found"] = found
        metrics = dict.fromkeys(H_KEYS, math.nan)
        metrics |= potential_error(system, model, truth[..., :d])
        metrics |= found.metrics
        metrics |= {
            "grid_size": None,
            "grid_points_per_axis": None,
            "rollout_integrator": scheme,
            "rollout_reference": "clean",
            "rollout_failures": sorted({why for why in roll.fail_reason if why}),
            "prediction": {
                "scheme": scheme,
                "discrete_gradient": getattr(model, "discrete_gradient", None),
                "from": "the clean q_0 and q_1 of each test trajectory",
                "newton_tol": tol,
                "newton_max_iter": max_iter,
            },
        }
        notes = [
            "learned from positions only (V_θ(q) and a mass matrix): the H grid errors (h_l1, "
            "h_l1_raw, h_l1_rel) and the vector-field errors (vf_l1, vf_rel) are not applicable "
            "and null; v_l1 compares V_θ with the true potential up to a constant on a q grid "
            "over the test positions; the rollout metrics are on positions",
        ]
        if math.isnan(metrics["v_l1"]):
            notes.append("v_l1 is null: it is defined for one degree of freedom with a known V(q)")
        if system.mass is None:
            notes.append(f"{system.name} has no mass: the true energies are null")
        metrics["notes"] = notes
        return metrics, found.curves

    def baselines(self, p: Problem, r: Rolled, metrics: dict) -> tuple[dict, dict]:
        return {}, {}

    def figures(self, p: Problem, r: Rolled, curves: pd.DataFrame) -> list[str]:
        return draw_position_figures(p.cfg, p.out, p.system, p.model, p.truth, p.t,
                                     r.detail["roll"], r.detail["found"])  # fmt: skip

    def wrote(self, m: dict) -> bool:
        return bool(m.get("prediction"))

    def summary(self, m: dict, out: Path) -> str:
        return position_summary(m, out)


def draw_position_figures(
    cfg: DictConfig,
    out: Path,
    system: System,
    model: nn.Module,
    truth: Tensor,
    t: Tensor,
    roll: PositionRollout,
    found: PositionEvaluation,
) -> list[str]:
    """positions.png, energy.png, rollout_error.png and (d = 1) potential.png into ``out``."""
    e = cfg.eval
    d = system.dim
    k = min(int(e.plot_trajectories), truth.shape[1])
    s = found.series
    figures = []
    if k:
        plots.plot_positions(
            t - t[0], truth[:, :k, :d], roll.positions[:, :k], out / "positions.png"
        )
        plots.plot_energy(t - t[0], s["energy_true"][:, :k], s["energy_data"][:, :k],
                          s["energy_model"][:, :k], out / "energy.png",
                          model_label="modelled energy $E_n - E_1$ along the prediction",
                          start=1)  # fmt: skip
        figures += ["positions", "energy"]
    plots.plot_rollout_error(t - t[0], s["l2"], s["rel_err"], e.valid_threshold,
                             out / "rollout_error.png")  # fmt: skip
    figures.append("rollout_error")
    if d == 1 and system.mass is not None and system.separable:
        q = truth[..., :d]
        finite = q[torch.isfinite(q)]
        grid = torch.linspace(float(finite.min()), float(finite.max()), 401, dtype=q.dtype,
                              device=q.device)[:, None]  # fmt: skip
        scale = system.mass / float(model.mass_matrix().detach()[0, 0])
        with torch.no_grad():
            v_true, v_pred = system.potential(grid), scale * model(grid)
        plots.plot_potential(grid[:, 0], v_true, v_pred, out / "potential.png")
        figures.append("potential")
    return figures


def position_summary(m: dict, out: Path) -> str:
    """A few lines for the terminal about a position-only evaluation (``PositionPart``)."""

    f = partial(number, m)  # f(key): the metric for the terminal

    body = (
        f"  predicted {m['rollout_trajectories']} {split_name(m)} trajectories from their first two positions "
        f"to t = {m['rollout_horizon']:g} ({m['prediction']['scheme']}, dt = {m['rollout_dt']:g}; "
        f"Newton iterations mean {f('newton_iterations_mean')}): position mse {f('q_mse')}, "
        f"energy mse {f('energy_mse')}, modelled-energy variance {f('energy_var_model')} "
        f"(drift max {f('energy_drift_pred_max')}), failed {100 * m['rollout_failed']:.3g} %\n"
        f"  potential: v_l1 {f('v_l1')} (rel {f('v_l1_rel')}) up to a constant"
    )
    return summary_text(m, out, body)
