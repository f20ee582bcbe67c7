"""Evaluating a model of a recording (system ``measured``, ``python -m hnnsym.ingest``): there is
no true H, so only what the data allow is measured, and every number and figure is in the
recording's units (the file's ``units`` attribute, ``hnnsym.data.units``: states converted with
``Units.to_recording``, times × τ, energies × the energy scale); angle coordinates are compared
through wrapped differences atan2(sin Δ, cos Δ).

Horizons (``hnnsym.evaluation.horizons``): the test trajectories are cut into non-overlapping
windows of the longest of ``eval.horizons`` (default 1, 4, 12 steps, clipped to the test length);
from each window's first state (positions only: its first two positions) the model and the
baselines predict, and

    horizons, horizon_times, main_horizon, windows   the steps, in recording time, the longest
                     (the one the warning is about) and the number of windows
    mse_h<h>         mean squared error over the windows, steps 1..h and components
    mse_h<h>_<b>     the same for baseline b (no_motion, constant_velocity, linear) on the same
                     windows; ``ratio_h<h>_<b>`` = mse_h<h> / mse_h<h>_<b> (< 1: the model is better)
    mse_per_coordinate  {model and baselines: {column: MSE at the main horizon}}
    learned_chain    a model with the chain mass matrix: its mass matrix and friction as a
                     compound pendulum's (``hnnsym.evaluation.chains.learned_chain``)
    mse_points_h<h>, mse_angles_h<h>   (with ``_<b>`` for the baselines) for a tracked chain
                     (the file's ``chain`` attribute): the error in the tracked points, in the
                     recording's units² (px²), and for a chain in joint angles in the wrapped
                     angles (rad²)
                     (``hnnsym.evaluation.chains``)
    warning          a sentence when the model is not below the best trivial predictor there

The whole test trajectories are also rolled out from their first state(s) (as far as
``eval.rollout_steps``): ``traj_mse`` (over the predicted steps, wrapped; ``traj_mse_<b>`` beside),
``traj_l2_*``, ``rel_err_*``, ``vpt_*``, ``short_horizon_steps`` (the training window) with
``traj_l2_short``, ``rel_err_short``; ``learned_energy_data_drift_{mean,max,rel}`` (H_θ along
the observed test trajectories, in energy units; rel: relative to its spread over the training
data), ``energy_drift_pred_*`` (H_θ along its rollouts). A dissipative model adds
``damping_learned``, ``damping_eigenvalues``, ``damping_off_p`` of R = D R̃ D / c in the
recording's units (1/time when p is mass × velocity with unit mass). ``h_l1`` … ``vf_rel`` are null:
no true H.

Figures: ``horizons.png``, ``rollout_error.png``, ``phase_portrait.png`` (states) or
``positions.png`` (positions only), ``learned_hamiltonian.png``, ``energy.png``,
``training_data.png``, axes named by the file's columns and units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from hnnsym.checkpoints import trained_options
from hnnsym.config.build import build_integrator
from hnnsym.data.chains import recorded_chain
from hnnsym.data.units import Units
from hnnsym.data.velocities import VelocityMap
from hnnsym.errors import UserError
from hnnsym.evaluation import horizons, plots
from hnnsym.evaluation.chains import chain_horizon_metrics, learned_chain, tracked_points_of
from hnnsym.evaluation.metrics import energies, rollout_metrics
from hnnsym.evaluation.positions import prediction_scheme, rollout_positions
from hnnsym.evaluation.problem import Problem, Rolled
from hnnsym.evaluation.rollout import RolloutResult, in_data_coordinates, model_rollout
from hnnsym.evaluation.summary import number, split_name, summary_text
from hnnsym.ode.capabilities import has
from hnnsym.ode.dynamics import has_hamiltonian
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.systems import MEASURED

DAMPING, POSITION_ONLY = ModelCapability.DAMPING, ModelCapability.POSITION_ONLY
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


class NoEnergy:
    """A stand-in for rollout_metrics' model where the energies are not wanted."""

    has_hamiltonian = False


@dataclass
class Predictor:
    """How a trained model predicts in the stored (scaled) units: (q, p) models through the
    integrator group from one state, position models (method=ddlm, ...) by their scheme from two
    positions (``hnnsym.evaluation.positions.rollout_positions``)."""

    model: nn.Module
    obs_dt: float  # the stored (scaled) observation interval
    integrator: Any = None
    substeps: int = 1
    segment: int = 100
    scheme: tuple[str, float | None, int] = ("eq12", None, 30)
    velocities: VelocityMap | None = None  # a model with momenta of its own: the file's q̇

    @property
    def given(self) -> int:
        """How many observations a prediction starts from (1: a state, 2: two positions)."""
        return 2 if has(self.model, POSITION_ONLY) else 1

    def predict(self, given: Tensor, steps: int) -> tuple[Tensor, list[str]]:
        """From the first ``given`` observations (g, B, w) the next ``steps`` (steps, B, w), NaN
        from a failure on; and the reasons of the failures."""
        if self.given == 2:
            scheme, tol, max_iter = self.scheme
            roll = rollout_positions(self.model, given[0], given[1], self.obs_dt, steps + 1,
                                     scheme, tol, max_iter)  # fmt: skip
            return roll.positions[2:], roll.fail_reason
        result = model_rollout(self.model, given[0], self.obs_dt, steps, self.integrator,
                               substeps=self.substeps, segment=self.segment,
                               velocities=self.velocities)  # fmt: skip
        return result.states[1:], result.fail_reason


def predictor_from_config(
    cfg: DictConfig, model: nn.Module, obs_dt: float, substeps: int,
    velocities: VelocityMap | None = None,
) -> Predictor:  # fmt: skip
    integ = None
    if not has(model, POSITION_ONLY):
        try:
            integ = build_integrator(cfg.integrator)
        except ValueError as err:
            raise UserError(str(err)) from err
    scheme = prediction_scheme(cfg) if has(model, POSITION_ONLY) else ("eq12", None, 30)
    return Predictor(model, obs_dt, integ, substeps, int(cfg.eval.segment), scheme, velocities)


def axis_labels(units: Units, dim: int) -> tuple[list[str], str]:
    """The 2d axis labels of a state's components, named by the file's columns and units
    (``q``, ``p`` when it names none), and the time axis label."""
    names = list(units.names[:dim]) if len(units.names) >= dim else None
    default = plots.coordinate_names(dim)
    if names is None:
        return default, "$t$"

    def unit(name: str) -> str:
        return f" [{units.labels[name]}]" if units.labels.get(name) else ""

    q = [f"{n}{unit(n)}" for n in names]
    p = (
        list(units.names[dim : 2 * dim])
        if len(units.names) >= 2 * dim
        else [f"p({n})" for n in names]
    )
    p = [f"{n}{unit(n)}" for n in p]
    when = next((units.labels[k] for k in ("t", "time") if units.labels.get(k)), "")
    return q + p, f"t [{when}]" if when else "$t$"


class RecordingEnergy(nn.Module):
    """H(y) = energy · H̃(y / scales) of a model of scaled states, for states in the recording's
    units (figures of the learned landscape)."""

    def __init__(self, model: nn.Module, units: Units) -> None:
        super().__init__()
        self.model, self.energy = model, units.energy
        self.register_buffer("scales", torch.as_tensor(units.state_scales(2 * units.dim)))

    def forward(self, y: Tensor) -> Tensor:
        return self.energy * self.model(y / self.scales.to(y))


class RecordingDamping:
    """R(y) = D R̃(D⁻¹ y) D / c in the recording's units (D the state scales, c the action): the
    damping of f = (J⁻¹ − R)∇H, for ``damping_metrics``."""

    capabilities = frozenset({ModelCapability.DAMPING})

    def __init__(self, model: nn.Module, units: Units) -> None:
        self.model, self.action = model, units.action
        self.scales = torch.as_tensor(units.state_scales(2 * units.dim))

    def damping_matrix(self, y: Tensor) -> Tensor:
        D = self.scales.to(y)
        R = self.model.damping_matrix(y / D)
        return R * D[:, None] * D[None, :] / self.action


def _tensor(x: np.ndarray, like: Tensor) -> Tensor:
    return torch.as_tensor(x).to(like)


@dataclass
class Windows:
    """The model's predictions on the test windows (``window_predictions``): horizons ``hs``
    (the longest, ``hs[-1]``, the windows' length), the windows (B, g + H, w) and the predictions
    (B, H, w) in the stored (scaled) units, the failures' reasons."""

    hs: list[int]
    scaled: np.ndarray
    pred_scaled: np.ndarray
    reasons: list[str]


def window_predictions(
    e: DictConfig, predictor: Predictor, test: np.ndarray, like: Tensor
) -> Windows:
    """Cut the test trajectories (N, T+1, w) into non-overlapping windows of the longest of
    ``eval.horizons`` (``hnnsym.evaluation.horizons``) and predict each from its first state(s)."""
    g = predictor.given
    asked = None if e.get("horizons") is None else list(e.horizons)
    try:
        hs = horizons.choose_horizons(asked, test.shape[1] - g)
    except ValueError as err:
        raise UserError(str(err)) from err
    windows_scaled = horizons.tile_windows(test, hs[-1] + g - 1)  # (B, g + H, w)
    given = _tensor(windows_scaled[:, :g], like).transpose(0, 1)
    pred_scaled, reasons = predictor.predict(given, hs[-1])
    return Windows(hs, windows_scaled, pred_scaled.transpose(0, 1).cpu().numpy(), reasons)


def horizon_metrics(
    w: Windows, predictor: Predictor, units: Units, train: np.ndarray, chain: dict | None = None
) -> tuple[dict, dict]:
    """The horizon metrics of the window predictions ``w`` beside the baselines' (the linear one
    fitted on the training trajectories), all in recording units, with those in the tracked
    points (and angles) of a recorded ``chain`` (``recorded_chain``); and what the figure
    needs."""
    d, g = units.dim, predictor.given
    periodic = list(units.periodic)
    hs, H = w.hs, w.hs[-1]
    pred = units.to_recording(w.pred_scaled)
    windows = units.to_recording(w.scaled)
    observed = windows[:, g:]
    dt = predictor.obs_dt * units.time
    coef = horizons.fit_linear(units.to_recording(train), periodic, order=g)
    base = horizons.baselines(windows, d, dt, coef, periodic)
    model_mse = horizons.horizon_mse(pred, observed, hs, periodic)
    base_mse = {b: horizons.horizon_mse(p, observed, hs, periodic, model=pred)
                for b, p in base.items()}  # fmt: skip
    out: dict[str, Any] = {
        "horizons": hs,
        "horizon_times": [h * dt for h in hs],
        "main_horizon": H,
        "windows": int(windows.shape[0]),
        "windows_failed": int((~np.isfinite(pred).all(axis=(1, 2))).sum()),
        "baselines": list(horizons.BASELINES),
    }
    for h in hs:
        out[f"mse_h{h}"] = model_mse[h]
        for b in horizons.BASELINES:
            out[f"mse_h{h}_{b}"] = base_mse[b][h]
        for b in horizons.BASELINES:
            ref = base_mse[b][h]
            out[f"ratio_h{h}_{b}"] = model_mse[h] / ref if ref > 0 else math.nan
    if chain is not None:
        out["points_units"] = chain.get("units")
        out |= chain_horizon_metrics(chain, pred, observed, base, hs)
    labels, _ = axis_labels(units, d)
    names = labels[: w.scaled.shape[-1]]
    per = {"model": horizons.per_coordinate_mse(pred, observed, H, periodic)}
    per |= {b: horizons.per_coordinate_mse(p, observed, H, periodic) for b, p in base.items()}
    out["mse_per_coordinate"] = {k: dict(zip(names, map(float, v), strict=True))
                                 for k, v in per.items()}  # fmt: skip
    curve = {"times": out["horizon_times"], "model": [model_mse[h] for h in hs],
             "baselines": {b: [base_mse[b][h] for h in hs] for b in base}}  # fmt: skip
    return out, {"curve": curve, "reasons": w.reasons}


def not_learned_warning(m: dict) -> str | None:
    """The sentence when the model's error at the main horizon is not below the best trivial
    predictor's (or could not be computed); None when it is."""
    h = m["main_horizon"]
    model = m[f"mse_h{h}"]
    best = min(horizons.TRIVIAL, key=lambda b: m[f"mse_h{h}_{b}"])
    ref = m[f"mse_h{h}_{best}"]
    if model is not None and math.isfinite(model) and model < ref:
        return None
    shown = "n/a (rollouts failed)" if not math.isfinite(model) else f"{model:.4g}"
    damped = (
        ""
        if m.get("damping_learned") is not None
        else ", a dissipative model (model=dissipative_hnn)"
    )
    return (
        f"the model's {h}-step error ({shown}) is not below the best trivial predictor's "
        f"({best.replace('_', ' ')}, {ref:.4g}): it has not learned the dynamics; try scaling "
        f"the recording (ingest.scale=auto), more epochs (train.epochs){damped} or a shorter "
        "training window (train.window)"
    )


class MeasuredPart:
    """A recording: no true H, compared with its observations in its own units (module doc)."""

    starts = False

    def roll_out(self, p: Problem) -> Rolled:
        """The window predictions, and the whole test trajectories from their first
        observation(s); ``truth`` (T+1, B, w) are the observed test trajectories (stored units;
        w = 2d states or d positions)."""
        e, truth, d = p.e, p.truth, p.system.dim
        units = Units.from_attrs(p.data.attrs, d)
        periodic = list(units.periodic)
        predictor = predictor_from_config(p.cfg, p.model, p.obs_dt, p.substeps, p.velocities)
        g = predictor.given
        if truth.shape[0] < g + 1:
            raise UserError(f"the test trajectories need at least {g} steps to predict from {g} "
                            "observation(s)")  # fmt: skip
        test = p.data.splits["test"].observed[: truth.shape[1]]
        windows = window_predictions(e, predictor, test, truth)
        pred_scaled, reasons = predictor.predict(truth[:g], p.steps + 1 - g)
        pred_scaled = torch.cat([truth[:g], pred_scaled])
        fail = torch.tensor([-1] * truth.shape[1])
        bad = ~torch.isfinite(pred_scaled).all(-1).cpu()
        fail = torch.where(bad.any(0), bad.long().argmax(0), fail)
        pred = _tensor(units.to_recording(pred_scaled.cpu().numpy()), truth)
        obs = _tensor(units.to_recording(truth.cpu().numpy()), truth)
        # wrapped: the truth's angles to (−π, π] and the prediction at the wrapped difference
        obs_w = obs.clone()
        if periodic:
            obs_w[..., periodic] = torch.atan2(torch.sin(obs[..., periodic]),
                                               torch.cos(obs[..., periodic]))  # fmt: skip
        pred_w = obs_w + _tensor(horizons.differences(pred.cpu().numpy(), obs.cpu().numpy(),
                                                      periodic), truth)  # fmt: skip
        dt = p.obs_dt * units.time
        result = RolloutResult(pred_w, fail, reasons, dt, 1 if g == 2 else p.substeps)
        detail = {"units": units, "periodic": periodic, "predictor": predictor, "test": test,
                  "windows": windows, "pred": pred, "obs": obs, "obs_w": obs_w, "pred_w": pred_w,
                  "result": result, "tt": (p.t - p.t[0]) * units.time}  # fmt: skip
        damped = RecordingDamping(p.model, units) if has(p.model, DAMPING) else p.model
        return Rolled(obs, damped, None, detail)

    def metrics(self, p: Problem, r: Rolled) -> tuple[dict, pd.DataFrame]:
        e, steps, x = p.e, p.steps, r.detail
        units, predictor, result = x["units"], x["predictor"], x["result"]
        obs, pred, obs_w, pred_w = x["obs"], x["pred"], x["obs_w"], x["pred_w"]
        g = predictor.given
        train = p.data.splits["train"].observed
        metrics: dict[str, Any] = dict.fromkeys(UNAVAILABLE)
        roll = rollout_metrics(result, obs_w, x["tt"], None, NoEnergy(), e.valid_threshold,
                               e.chunk)  # fmt: skip
        per = roll.per_trajectory
        window = int(trained_options(p.payload).get("window") or 1)
        short = min(window, steps)
        valid = result.valid()
        l2_short = per["l2"][short][valid[short]]
        sq = ((pred_w - obs_w) ** 2)[g:].transpose(0, 1).cpu().numpy()  # (B, T+1-g, w)
        ok = np.isfinite(sq).all(axis=(1, 2))
        metrics |= {
            **roll.summary,
            "traj_mse": float(sq[ok].mean()) if ok.any() else math.nan,
            "short_horizon_steps": short,
            "traj_l2_short": float(l2_short.mean()) if l2_short.numel() else math.nan,
            "rel_err_short": float(per["rel_err"][short].mean()),
            "rollout_substeps": result.substeps,
            "rollout_integrator": predictor.scheme[0] if g == 2 else predictor.integrator.name,
            "rollout_reference": "observed",
            "rollout_failures": sorted({why for why in result.fail_reason if why}),
            "units": units.as_attr(),
        }
        x |= {"per": per, "ok": ok}
        if (chain := learned_chain(p.model, units.time)) is not None:
            metrics["learned_chain"] = chain
        notes = [
            "no true H (system measured): the H and vector-field errors (h_l1, h_l1_raw, "
            "h_l1_rel, vf_l1, vf_rel), energy_drift_true_* and energy_drift_data_max are "
            "unavailable (null)",
            "every number is in the recording's units (times × τ, states by Units.to_recording); "
            "the predictions start from observed test states and are compared with them, so the "
            "errors include the measurement noise",
        ]
        if x["periodic"]:
            notes.append(f"angle coordinates {x['periodic']}: errors of wrapped differences")

        learned = None
        energy_model = (
            RecordingEnergy(in_data_coordinates(p.model, p.velocities), units)
            if g == 1 and has_hamiltonian(p.model)
            else None
        )
        e_pred = torch.full(pred.shape[:2], math.nan, dtype=pred.dtype)
        if energy_model is not None:
            train_rec = _tensor(units.to_recording(train.reshape(-1, train.shape[-1])), obs)
            learned = learned_energy_along(energy_model, obs, e.chunk, train_rec)
            e_pred = energies(energy_model, pred, e.chunk)
            drift_pred = (e_pred - e_pred[0]).abs()
            valid_pred = valid & torch.isfinite(drift_pred)
            metrics |= {
                "learned_energy_data_drift_mean": float(learned["drift"].mean()),
                "learned_energy_data_drift_max": float(learned["drift"].max()),
                "learned_energy_data_drift_rel": float(learned["rel"]),
                "energy_drift_pred_max": float(drift_pred[valid_pred].max()),
                "energy_drift_pred_mean": float(drift_pred[valid_pred].mean()),
            }
        else:
            why = "positions only" if g == 2 else "it has no Hamiltonian"
            notes.append(f"model {p.payload['model_config'].get('name')}: {why}; the "
                         "learned-energy metrics are null")  # fmt: skip
            metrics |= dict.fromkeys(("learned_energy_data_drift_mean",
                                      "learned_energy_data_drift_max",
                                      "learned_energy_data_drift_rel", "energy_drift_pred_max",
                                      "energy_drift_pred_mean"))  # fmt: skip
        x |= {"learned": learned, "e_pred": e_pred, "energy_model": energy_model, "train": train}
        metrics["notes"] = notes
        curves = pd.DataFrame({key: v.detach().cpu().numpy() for key, v in roll.curves.items()
                               if key not in ("energy_drift_true_mean", "energy_drift_true_max",
                                              "energy_drift_data_mean",
                                              "energy_drift_pred_mean")})  # fmt: skip
        if learned is not None:
            curves["learned_energy_data_drift_mean"] = learned["drift"].mean(1).cpu().numpy()
        curves.insert(0, "step", range(len(curves)))
        return metrics, curves

    def baselines(self, p: Problem, r: Rolled, metrics: dict) -> tuple[dict, dict]:
        """The baselines (no motion, constant velocity, linear) on the same windows and whole
        trajectories; the warning when the model is not below the trivial ones."""
        x, d, steps = r.detail, p.system.dim, p.steps
        units, periodic, predictor, ok = x["units"], x["periodic"], x["predictor"], x["ok"]
        g = predictor.given
        chain = recorded_chain(p.data.attrs)
        found, x["drawn"] = horizon_metrics(x["windows"], predictor, units, x["train"], chain)
        dt = p.obs_dt * units.time
        whole = horizons.tile_windows(units.to_recording(x["test"][:, : steps + 1]), steps)
        coef = horizons.fit_linear(units.to_recording(x["train"]), periodic, order=g)
        for b, pred in horizons.baselines(whole, d, dt, coef, periodic).items():
            sq_b = horizons.differences(pred, whole[:, g:], periodic) ** 2
            found[f"traj_mse_{b}"] = float(sq_b[ok].mean()) if ok.any() else math.nan
        notes = [f"mse_h<h> beside the baselines {', '.join(horizons.BASELINES)} on the same "
                 f"{found['windows']} windows of {found['main_horizon']} steps"]  # fmt: skip
        if found["windows_failed"]:
            notes.append(f"{found['windows_failed']} of {found['windows']} window rollouts "
                         "failed: mse_h<h> and the baselines' are over the others")  # fmt: skip
        if chain is not None and chain.get("coordinates") == "points":
            notes.append("a chain of tracked points: mse_points_h<h> is the error in its points "
                         f"({found['points_units'] or 'the recording units'}²), without the "
                         "velocities, beside the baselines'")  # fmt: skip
        elif chain is not None:
            notes.append("a chain in joint angles: mse_points_h<h> in its tracked points "
                         f"({found['points_units'] or 'the recording units'}², x_k = origin + "
                         "Σ l_j (cos θ_j, sin θ_j) by the file's chain attribute) and "
                         "mse_angles_h<h> in the wrapped angles (rad²), beside the baselines'")  # fmt: skip
        if found["windows"] < 5:
            notes.append(f"only {found['windows']} test windows: the errors are rough")
        if metrics.get("damping_learned") is not None:
            notes.append("damping: R = D R̃ D / c in the recording's units (1/time where p is "
                         "velocity × unit mass); damping_learned is its mean p diagonal")  # fmt: skip
        found["notes"] = [*metrics["notes"], *notes]
        found["warning"] = not_learned_warning(metrics | found)
        return found, {}

    def figures(self, p: Problem, r: Rolled, curves: pd.DataFrame) -> list[str]:
        x, d = r.detail, p.system.dim
        labels, time_label = axis_labels(x["units"], d)
        return draw_measured_figures(p.cfg, p.out, d, x["units"], labels, time_label, x["obs"],
                                     x["pred"], x["tt"], x["per"], x["learned"], x["e_pred"],
                                     x["energy_model"], x["train"], x["drawn"],
                                     recorded_chain(p.data.attrs))  # fmt: skip

    def wrote(self, m: dict) -> bool:
        return m.get("system", {}).get("name") == MEASURED

    def summary(self, m: dict, out: Path) -> str:
        return measured_summary(m, out)


ARMS_FRAMES = 26  # the chain figure: the first 25 steps of a test trajectory


def image_points(chain: dict, states: Tensor | np.ndarray) -> np.ndarray:
    """The moving points (T, n, 2) in the image of states (T, w) of a recorded chain."""
    states = np.asarray(torch.as_tensor(states).detach().cpu(), dtype=np.float64)
    flat = tracked_points_of(chain, states)
    return flat.reshape(*flat.shape[:-1], -1, 2)


def draw_measured_figures(
    cfg: DictConfig,
    out: Path,
    d: int,
    units: Units,
    labels: list[str],
    time_label: str,
    obs: Tensor,
    pred: Tensor,
    tt: Tensor,
    per: dict,
    learned: dict | None,
    e_pred: Tensor,
    energy_model: nn.Module | None,
    train: np.ndarray,
    drawn: dict,
    chain: dict | None = None,
) -> list[str]:
    """The figures of a measured evaluation, in the recording's units, into ``out``; for a
    recorded ``chain``, its arms in motion over the first test trajectory (``chain_motion``)."""
    e = cfg.eval
    k = min(int(e.plot_trajectories), obs.shape[1])
    figures = []
    c = drawn["curve"]
    plots.plot_horizons(c["times"], c["model"], c["baselines"], out / "horizons.png", time_label)
    figures.append("horizons")
    train_rec = torch.as_tensor(units.to_recording(train.reshape(-1, train.shape[-1])))
    if energy_model is not None and learned is not None:
        plots.plot_learned_landscape(
            energy_model, train_rec.to(obs), obs[:, :k], pred[:, :k],
            out / "learned_hamiltonian.png", e.slice_points, e.chunk, e.scatter_points,
            torch.Generator().manual_seed(cfg.seed), names=labels,
        )  # fmt: skip
        figures.append("learned_hamiltonian")
    if k:
        if obs.shape[-1] == 2 * d:
            plots.plot_phase_portraits(obs[:, :k], pred[:, :k], d, out / "phase_portrait.png",
                                       names=labels)  # fmt: skip
            figures.append("phase_portrait")
        else:
            plots.plot_positions(tt, obs[:, :k], pred[:, :k], out / "positions.png",
                                 names=labels[:d], time_label=time_label)  # fmt: skip
            figures.append("positions")
        if learned is not None:
            plots.plot_learned_energy(tt, learned["energy"][:, :k], e_pred[:, :k],
                                      out / "energy.png", time_label)  # fmt: skip
            figures.append("energy")
    if chain is not None and k:
        plots.plot_chain_motion(tt[:ARMS_FRAMES], image_points(chain, obs[:ARMS_FRAMES, 0]),
                                image_points(chain, pred[:ARMS_FRAMES, 0]), chain["origin"],
                                out / "chain_motion.png", chain.get("units"))  # fmt: skip
        figures.append("chain_motion")
    plots.plot_rollout_error(tt, per["l2"], per["rel_err"], e.valid_threshold,
                             out / "rollout_error.png", time_label)  # fmt: skip
    figures.append("rollout_error")
    if e.plot_training_data and train_rec.shape[-1] == 2 * d:
        plots.plot_training_data(train_rec, d, out / "training_data.png",
                                 max_points=e.scatter_points,
                                 generator=torch.Generator().manual_seed(cfg.seed),
                                 names=labels)  # fmt: skip
        figures.append("training_data")
    return figures


def horizon_table(m: dict, key: str = "mse") -> str:
    """The horizon lines of the terminal summary: the model's MSE (``<key>_h<h>``) beside each
    baseline's (and the model's ratio to it) per horizon."""
    f = partial(number, m)
    head = ["horizon", "model", *(b.replace("_", " ") for b in m["baselines"])]
    rows = []
    for h, when in zip(m["horizons"], m["horizon_times"], strict=True):
        model = m.get(f"{key}_h{h}")
        cells = [f"{h} ({when:.4g})", f(f"{key}_h{h}")]
        for b in m["baselines"]:
            ref = m.get(f"{key}_h{h}_{b}")
            ratio = model / ref if model is not None and ref else None
            shown = "" if ratio is None else f" (x{ratio:.3g})"
            cells.append(f"{f(f'{key}_h{h}_{b}')}{shown}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in [head, *rows])  # fmt: skip


def chain_lines(m: dict) -> str:
    """The summary's tables in the tracked points (and angles) of a recorded chain, and
    the learned chain's mass matrix and friction (empty for other files and models)."""
    text = ""
    if f"mse_points_h{m['main_horizon']}" in m:
        unit = m.get("points_units") or "recording units"
        text += f"  in the tracked points ({unit}²):\n{horizon_table(m, 'mse_points')}\n"
    if f"mse_angles_h{m['main_horizon']}" in m:
        text += f"  in the joint angles (rad², wrapped):\n{horizon_table(m, 'mse_angles')}\n"
    if c := m.get("learned_chain"):

        def show(rows: list) -> str:
            return str([[float(f"{v:.4g}") for v in r] for r in rows])

        text += (f"  learned chain: M / M₁₁ = {show(c['inertia'])} × cos(θᵢ − θⱼ), "
                 f"anisotropy {c['anisotropy']:.3g}; friction R / M₁₁ = {show(c['friction'])} "
                 "(1/time)\n")  # fmt: skip
    return text


def measured_summary(m: dict, out: Path) -> str:
    """The terminal lines of an evaluation of a recording; the last one the warning when the
    model is not below the trivial predictors."""

    f = partial(number, m)  # f(key): the metric for the terminal

    baselines = ", ".join(f"{b.replace('_', ' ')} {f(f'traj_mse_{b}')}" for b in m["baselines"])
    body = (
        f"  mean squared error (recording units) on {m['windows']} {split_name(m)} windows of "
        f"{m['main_horizon']} steps ({m['rollout_integrator']}, dt = {m['rollout_dt']:g}), "
        "up to each horizon (steps and time; model/baseline in brackets):\n"
        f"{horizon_table(m)}\n"
        f"{chain_lines(m)}"
        f"  whole {split_name(m)} trajectories ({m['rollout_trajectories']}, to t = "
        f"{m['rollout_horizon']:g}): mse {f('traj_mse')} ({baselines}); at "
        f"{m['short_horizon_steps']} steps (the training window) |error| {f('traj_l2_short')}; "
        f"valid time {f('vpt_mean')} (threshold {m['vpt_threshold']:g}), failed "
        f"{100 * m['rollout_failed']:.3g} %\n"
        f"  learned H along the data: drift mean {f('learned_energy_data_drift_mean')} "
        f"({f('learned_energy_data_drift_rel')} of its spread over the training data)"
    )
    if m.get("damping_learned") is not None:
        body += (f"\n  damping: learned {f('damping_learned')} (eigenvalues of R_pp "
                 f"{[float(f'{v:.4g}') for v in m['damping_eigenvalues']]})")  # fmt: skip
    text = summary_text(m, out, body, about=" (a recording: no true H)")
    if m.get("warning"):
        text += f"\nwarning: {m['warning']}"
    return text
