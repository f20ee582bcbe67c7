"""Evaluating a model of a constrained system (Finzi et al.: the chain pendulum, in Cartesian or angle
coordinates, and the 3-D coupled pendulum). The H grid errors over a box make no sense here (most
of the box is off the constraint manifold); instead, from the clean test initial conditions (for a
constrained model projected onto its own manifold: its learned mass changes Φ̇), the model is
rolled out through the integrator group and compared in Cartesian coordinates [x, p] (angle
states are mapped by ``from_angles``, so models in either coordinates are compared on the same
states):

    rel_err_gmean        mean over trajectories of the geometric mean over t ∈ [t_1, T] of
                         e(t) = ‖ẑ − z‖ / (‖ẑ‖ + ‖z‖) (Finzi et al.; 1 after a failed rollout)
    rel_err_gmean_pooled exp(mean of log e over trajectories and t_1..T) (the reference code's
                         summary, a geometric mean over trajectories too)
    floor_*              the same for the ground truth from initial states perturbed by 1e-4·N(0, 1)
                         and projected back onto the manifold (Newton): the chaos floor
    constraint_phi_max / _mean, constraint_phidot_max   |Φ| and |Φ̇| (true masses) along the
                         learned rollout (Cartesian models; 0 by construction in angles)
    energy_drift_true_max / _mean   |E(ẑ_t) − E(ẑ_0)| of the true H along the rollout, and
    energy_drift_rel_mean           the same divided by |E(z_0)|
    mass_learned, mass_true         the per-body masses of a model declaring them (CHNN; an
                                    extra, ``hnnsym.evaluation.extras.EXTRAS``)
The chaos floor is this part's baseline, written after the model's metrics.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import Tensor

from hnnsym.artifacts import save_figure
from hnnsym.errors import UserError
from hnnsym.evaluation.hamiltonian import run_integrator
from hnnsym.evaluation.metrics import (
    geometric_mean_over_time,
    relative_error,
    valid_prediction_time,
)
from hnnsym.evaluation.problem import Problem, Rolled
from hnnsym.evaluation.rollout import model_rollout
from hnnsym.evaluation.summary import number, split_name, summary_text
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import integrate
from hnnsym.physics.constraints import onto_manifold, project_onto_manifold
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS, from_angles
from hnnsym.physics.systems import System, get_system

FLOOR_EPS = 1e-4
PHI_PLOT_MAX = 1e30  # constraints.png draws |Φ| up to this


def cartesian(system: System, states: Tensor) -> tuple[System, Tensor]:
    """(the Cartesian system, states mapped to it) for either coordinate system (angles: the
    chain's)."""
    if system.name in CARTESIAN_SYSTEMS:
        return system, states
    params = {k: v for k, v in system.params.items()}
    cart = get_system("chain_pendulum", **params)
    m = torch.tensor(cart.masses, dtype=states.dtype, device=states.device)
    lengths = torch.tensor(params["lengths"], dtype=states.dtype, device=states.device)
    return cart, from_angles(states, m, lengths)


def chaos_floor(cart: System, z0: Tensor, obs_dt: float, steps: int, fine_dt: float,
                seed: int) -> Tensor:  # fmt: skip
    """Ground truth (steps+1, B, 2n) from z0 + 1e-4·N(0, 1) projected onto the manifold."""
    n = cart.dim
    g = torch.Generator().manual_seed(seed)
    noise = FLOOR_EPS * torch.randn(z0.shape, generator=g, dtype=torch.float64).to(z0)
    inv = cart.inverse_mass.to(z0)
    x, v, ok = project_onto_manifold(cart.constraints, z0[:, :n] + noise[:, :n],
                                     (z0[:, n:] + noise[:, n:]) * inv)  # fmt: skip
    if not bool(ok.all()):
        raise UserError("the perturbed initial states of the chaos floor did not project")
    every = max(1, round(obs_dt / fine_dt))
    integ = get_integrator("gauss_legendre6", tol=1e-14, max_iter=50)
    with torch.no_grad():
        y = torch.cat([x, v / inv], -1)
        ys = [y]
        for _ in range(steps):
            y = integrate(cart, y, obs_dt / every, every, integ, "backprop")[-1]
            ys.append(y)
    return torch.stack(ys)


class ConstrainedPart:
    """A constrained mechanism, compared in Cartesian coordinates (module doc)."""

    starts = False

    def roll_out(self, p: Problem) -> Rolled:
        start = onto_manifold(
            p.model, p.truth[0]
        )  # the model's own mass may differ from the data's
        integ = run_integrator(p)
        # a model with momenta of its own: through its states, back to the data's (q, p)
        result = model_rollout(p.model, start, p.obs_dt, p.steps, integ, substeps=p.substeps,
                               segment=p.e.segment, velocities=p.velocities)  # fmt: skip
        cart, truth_c = cartesian(p.system, p.truth)
        _, pred_c = cartesian(p.system, result.states)
        detail = {"result": result, "integrator": integ, "cart": cart, "truth_c": truth_c,
                  "pred_c": pred_c}  # fmt: skip
        return Rolled(p.truth, p.model, None, detail)

    def metrics(self, p: Problem, r: Rolled) -> tuple[dict, pd.DataFrame]:
        e, t, steps = p.e, p.t, p.steps
        result, cart = r.detail["result"], r.detail["cart"]
        truth_c, pred_c = r.detail["truth_c"], r.detail["pred_c"]
        valid = result.valid()
        rel = relative_error(pred_c, truth_c).where(valid, 1.0)
        gmean = geometric_mean_over_time(rel, t)
        pooled = rel[1:].clamp_min(1e-300).log().mean().exp()
        vpt, censored = valid_prediction_time(rel, t, e.valid_threshold)
        n = cart.dim
        inv = cart.inverse_mass.to(pred_c)
        phi = cart.constraints.phi(pred_c[..., :n]).abs().amax(-1)  # (T+1, B)
        phidot = cart.constraints.velocity(pred_c[..., :n], pred_c[..., n:] * inv).abs().amax(-1)
        energy = cart(pred_c)
        drift = (energy - energy[0]).abs()
        e0 = cart(truth_c[0]).abs()

        def over_valid(x: Tensor, reduce: str) -> float:
            if not bool(valid[1:].any()):  # no state predicted (the starts are given)
                return math.nan
            x = x[valid]
            return float(x.mean() if reduce == "mean" else x.max())

        core = {
            "notes": [
                "constrained system: states compared in Cartesian coordinates [x, p]; no H grid "
                "errors (the box is mostly off the constraint manifold)"
            ],
            "rollout_trajectories": int(p.truth.shape[1]),
            "rollout_steps": int(steps),
            "rollout_horizon": float(t[-1] - t[0]),
            "rollout_dt": p.obs_dt / p.substeps,
            "rollout_substeps": p.substeps,
            "rollout_integrator": r.detail["integrator"].name,
            "rollout_failed": float(result.failed.double().mean()),
            "rollout_failures": sorted({why for why in result.fail_reason if why}),
            "rel_err_gmean": float(gmean.mean()),
            "rel_err_gmean_pooled": float(pooled),
            "rel_err_final": float(rel[-1].mean()),
            "vpt_mean": float(vpt.mean()),
            "vpt_censored": float(censored.double().mean()),
            "vpt_threshold": float(e.valid_threshold),
            "constraint_phi_max": over_valid(phi, "max"),
            "constraint_phi_mean": over_valid(phi, "mean"),
            "constraint_phidot_max": over_valid(phidot, "max"),
            "energy_drift_true_max": over_valid(drift, "max"),
            "energy_drift_true_mean": over_valid(drift, "mean"),
            "energy_drift_rel_mean": over_valid(drift / e0.clamp_min(1e-300), "mean"),
            "mass_true": list(cart.masses),
            "mass_learned": None,  # a model declaring its masses reports them (an extra)
        }
        curves = pd.DataFrame({
            "step": np.arange(steps + 1),
            "t": (t - t[0]).cpu().numpy(),
            "rel_err_mean": rel.mean(1).cpu().numpy(),
            "rel_err_median": rel.median(1).values.cpu().numpy(),
            "constraint_phi_max": phi.where(valid, math.nan).nan_to_num(0).amax(1).cpu().numpy(),
            "energy_drift_true_mean": drift.where(valid, 0).mean(1).cpu().numpy(),
        })  # fmt: skip
        return core, curves

    def baselines(self, p: Problem, r: Rolled, metrics: dict) -> tuple[dict, dict]:
        """The chaos floor: the ground truth from perturbed starts against the ground truth."""
        truth_c = r.detail["truth_c"]
        fine_dt = p.data.attrs.get("fine_dt") or p.obs_dt / 6
        floor = chaos_floor(r.detail["cart"], truth_c[0], p.obs_dt, p.steps, fine_dt,
                            int(p.cfg.seed))  # fmt: skip
        rel_floor = relative_error(floor, truth_c)
        found = {
            "floor_rel_err_gmean": float(geometric_mean_over_time(rel_floor, p.t).mean()),
            "floor_rel_err_gmean_pooled": float(rel_floor[1:].clamp_min(1e-300).log().mean().exp()),
            "floor_perturbation": FLOOR_EPS,
        }
        return found, {"floor_rel_err_mean": rel_floor.mean(1).cpu().numpy()}

    def figures(self, p: Problem, r: Rolled, curves: pd.DataFrame) -> list[str]:
        draw(p.out, curves, r.detail["pred_c"], r.detail["truth_c"], r.detail["cart"],
             int(p.e.plot_trajectories))  # fmt: skip
        return ["rollout_error", "constraints", "chain"]

    def wrote(self, m: dict) -> bool:
        return "floor_rel_err_gmean" in m

    def summary(self, m: dict, out: Path) -> str:
        return constrained_summary(m, out)


def draw(out: Path, curves: pd.DataFrame, pred: Tensor, truth: Tensor, cart: System,
         k: int) -> None:  # fmt: skip
    """rollout_error.png (log scale, with the chaos floor), constraints.png (|Φ| over time),
    chain.png (the bodies' positions over time, true vs learned, for the first trajectory)."""
    t = curves["t"].to_numpy()
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot(t[1:], curves["rel_err_mean"][1:], label="model (mean)")
    ax.plot(t[1:], curves["rel_err_median"][1:], ls=":", label="model (median)")
    ax.plot(t[1:], curves["floor_rel_err_mean"][1:], color="k", ls="--",
            label=f"chaos floor ({FLOOR_EPS:g} perturbation)")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("$t$")
    ax.set_ylabel("relative error")
    ax.legend(fontsize=8)
    save_figure(fig, out / "rollout_error.png")
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    # a diverging rollout reaches |Φ| ~ 1e279 while finite, which matplotlib's log ticks cannot
    # take: drawn clipped to [1e-18, PHI_PLOT_MAX] (the metrics keep the values)
    phi = np.nan_to_num(curves["constraint_phi_max"].to_numpy(), nan=PHI_PLOT_MAX)
    ax.plot(t, np.clip(phi, 1e-18, PHI_PLOT_MAX))
    ax.set_yscale("log")
    ax.set_xlabel("$t$")
    clipped = f" (clipped at {PHI_PLOT_MAX:g})" if (phi > PHI_PLOT_MAX).any() else ""
    ax.set_ylabel(f"max $|\\Phi(x)|$ of the learned rollout{clipped}")
    save_figure(fig, out / "constraints.png")
    s = cart.spatial
    N = cart.dim // s
    up = s - 1  # the vertical coordinate: y in the plane, z in 3-D (drawn as the x–z projection)
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for i in range(N):
        ax.plot(truth[:, 0, s * i].cpu(), truth[:, 0, s * i + up].cpu(), color=f"C{i}",
                label=f"body {i + 1} true")  # fmt: skip
        ax.plot(pred[:, 0, s * i].cpu(), pred[:, 0, s * i + up].cpu(), color=f"C{i}", ls="--",
                label=f"body {i + 1} learned")  # fmt: skip
    # the bodies' reach around their tethers' anchors (a chain: all lengths; tethers alone: the
    # longest); a diverging path leaves the frame
    c = cart.constraints
    tether = c.incidence.sum(-1) != 0  # a link's row sums to 0
    reach = 1.1 * float(c.lengths.max() if bool(tether.all()) else c.lengths.sum())
    anchors = c.anchors[tether]
    ax.set_xlim(float(anchors[:, 0].min()) - reach, float(anchors[:, 0].max()) + reach)
    ax.set_ylim(float(anchors[:, up].min()) - reach, float(anchors[:, up].max()) + reach)
    ax.set_aspect("equal")
    ax.set_xlabel("$x$")
    ax.set_ylabel("$y$" if s == 2 else "$z$ (x–z projection)")
    ax.legend(fontsize=7)
    save_figure(fig, out / "chain.png")


def constrained_summary(m: dict, out: Path) -> str:
    """Terminal lines of a constrained evaluation."""

    f = partial(number, m)  # f(key): the metric for the terminal

    body = (
        f"  rollout of {m['rollout_trajectories']} {split_name(m)} trajectories to t = "
        f"{m['rollout_horizon']:g} ({m['rollout_integrator']}): rel. error gmean "
        f"{f('rel_err_gmean')} (pooled {f('rel_err_gmean_pooled')}), chaos floor "
        f"{f('floor_rel_err_gmean')}; max |Phi| {f('constraint_phi_max')}, true-energy drift "
        f"mean {f('energy_drift_true_mean')}, failed {100 * m['rollout_failed']:.3g} %"
    )
    if m.get("mass_learned"):
        body += (f"\n  masses learned {[round(v, 4) for v in m['mass_learned']]} vs true "
                 f"{[round(v, 4) for v in m['mass_true']]}")  # fmt: skip
    return summary_text(m, out, body)
