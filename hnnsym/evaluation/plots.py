"""Figures of an evaluation (matplotlib, Agg canvas, no pyplot state); every file written atomically.

Inputs are tensors or arrays; states are ordered [q, p] (time-major trajectories (T+1, B, 2d)).
The learned H is always drawn shifted by the grid offset c = mean(H_true - H_pred), so that true
and learned energies share one scale.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure
from torch import Tensor

from hnnsym.artifacts import save_figure
from hnnsym.evaluation.metrics import energies
from hnnsym.physics.systems import System

TRUE_STYLE = {"lw": 1.4}
PRED_STYLE = {"lw": 1.2, "ls": "--"}


def coordinate_names(dim: int) -> list[str]:
    """Axis labels: q, p for one degree of freedom; q_x, q_y, p_x, p_y for two; q_1.. otherwise."""
    if dim == 1:
        return ["$q$", "$p$"]
    sub = ["x", "y", "z"][:dim] if dim <= 3 else [str(i + 1) for i in range(dim)]
    return [f"$q_{s}$" for s in sub] + [f"$p_{s}$" for s in sub]


def slice_axes(dim: int) -> tuple[int, int]:
    """The 2-D slice of phase space drawn for H: (q, p) for d = 1; the last degree of freedom
    (q_d, p_d) with the others at 0 otherwise — (q_y, p_y) at q_x = p_x = 0 for Hénon–Heiles,
    as the paper's Fig. 4."""
    return (dim - 1, 2 * dim - 1)


def solid_dashed_legend(
    ax, solid: str, dashed: str, color: str = "k", loc: str = "best", fontsize: int = 8
) -> None:
    """The legend of a figure whose lines come in pairs: ``solid`` (TRUE_STYLE) and ``dashed``
    (PRED_STYLE) in ``color``, beside the axes' own labelled artists."""
    ax.plot([], [], color=color, label=solid, **TRUE_STYLE)
    ax.plot([], [], color=color, label=dashed, **PRED_STYLE)
    ax.legend(loc=loc, fontsize=fontsize)


def _numpy(x: Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def plot_hamiltonian_slice(
    system: System,
    H_pred,
    offset: float,
    path: str | os.PathLike,
    points: int = 101,
    chunk: int = 65536,
    device: torch.device | str = "cpu",
) -> None:
    """True H, learned H + c, and |H_true - H_pred - c| on the 2-D slice ``slice_axes`` (other
    coordinates 0), blank outside the system's domain (its energy filter). The slice is float64
    on ``device``: H_pred must accept that."""
    axes = slice_axes(system.dim)
    grid = system.slice_grid(points, axes).to(device)  # (n, n, 2d)
    inside = system.in_domain(grid.reshape(-1, grid.shape[-1])).reshape(grid.shape[:2])
    h_true = energies(system, grid, chunk)
    h_pred = energies(H_pred, grid, chunk) + offset
    masked = [np.where(_numpy(inside), _numpy(v), np.nan) for v in
              (h_true, h_pred, (h_true - h_pred).abs())]  # fmt: skip
    extent = [*system.domain[axes[0]], *system.domain[axes[1]]]
    names = coordinate_names(system.dim)
    fig = Figure(figsize=(13, 3.8), layout="constrained")
    panels = fig.subplots(1, 3)
    vmin = np.nanmin(masked[:2])
    vmax = np.nanmax(masked[:2])
    titles = ["true $H$", "learned $H_\\theta + c$", "$|H - H_\\theta - c|$"]
    for ax, values, title, i in zip(panels, masked, titles, range(3)):
        kw = {"vmin": vmin, "vmax": vmax, "cmap": "viridis"} if i < 2 else {"cmap": "magma"}
        im = ax.imshow(values, origin="lower", extent=extent, aspect="auto", **kw)
        if i < 2:
            ax.contour(values, levels=12, colors="white", linewidths=0.4, origin="lower",
                       extent=extent)  # fmt: skip
        fig.colorbar(im, ax=ax)
        ax.set_title(title)
        ax.set_xlabel(names[axes[0]])
        ax.set_ylabel(names[axes[1]])
    if system.dim > 1:
        others = [names[i] for i in range(2 * system.dim) if i not in axes]
        fig.suptitle(f"{system.name}: slice at {' = '.join(others)} = 0")
    else:
        fig.suptitle(system.name)
    save_figure(fig, path)


def plot_phase_portraits(
    truth: Tensor | np.ndarray,
    pred: Tensor | np.ndarray,
    dim: int,
    path: str | os.PathLike,
    title: str = "",
    names: Sequence[str] | None = None,
) -> None:
    """True (solid) vs learned (dashed) trajectories (T+1, B, 2d) in each (q_i, p_i) plane;
    ``names``: the 2d axis labels (default ``coordinate_names``)."""
    truth, pred = _numpy(truth), _numpy(pred)
    names = list(names or coordinate_names(dim))
    fig = Figure(figsize=(4.6 * dim, 4.2), layout="constrained")
    panels = np.atleast_1d(fig.subplots(1, dim))
    colors = [f"C{k % 10}" for k in range(truth.shape[1])]
    for i, ax in enumerate(panels):
        for b, color in enumerate(colors):
            ax.plot(truth[:, b, i], truth[:, b, dim + i], color=color, **TRUE_STYLE)
            ax.plot(pred[:, b, i], pred[:, b, dim + i], color=color, **PRED_STYLE)
            ax.plot(truth[0, b, i], truth[0, b, dim + i], "o", color=color, ms=4)
        ax.set_xlabel(names[i])
        ax.set_ylabel(names[dim + i])
    solid_dashed_legend(panels[0], "true", "learned")
    fig.suptitle(title or "phase portraits: true (solid) vs learned (dashed)")
    save_figure(fig, path)


def plot_energy(
    t: Tensor | np.ndarray,
    energy_true_on_pred: Tensor | np.ndarray,
    energy_data: Tensor | np.ndarray,
    energy_pred_on_pred: Tensor | np.ndarray,
    path: str | os.PathLike,
    model_label: str = "learned energy drift $H_\\theta(\\hat y_t) - H_\\theta(\\hat y_0)$",
    start: int = 0,
) -> None:
    """Energy over time for a few trajectories (T+1, B): true H along the predicted path (solid)
    vs along the clean data (dashed), and the learned H along its own path minus its value at
    time index ``start`` (right; NaN points are left out)."""
    t = _numpy(t)
    e_tp, e_d, e_pp = (_numpy(x) for x in (energy_true_on_pred, energy_data, energy_pred_on_pred))
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    for b in range(e_tp.shape[1]):
        color = f"C{b % 10}"
        left.plot(t, e_tp[:, b], color=color, **TRUE_STYLE)
        left.plot(t, e_d[:, b], color=color, **PRED_STYLE)
        right.plot(t[start:], e_pp[start:, b] - e_pp[start, b], color=color, **TRUE_STYLE)
    solid_dashed_legend(left, "H along the learned path", "H along the data")
    left.set_title("true energy $H(y_t)$")
    right.set_title(model_label)
    for ax in (left, right):
        ax.set_xlabel("$t$")
    save_figure(fig, path)


def plot_positions(
    t: Tensor | np.ndarray,
    truth: Tensor | np.ndarray,
    pred: Tensor | np.ndarray,
    path: str | os.PathLike,
    names: Sequence[str] | None = None,
    time_label: str = "$t$",
) -> None:
    """Positions over time (T+1, B, d), true (solid) vs predicted (dashed), one panel per
    coordinate (Aoshima et al., Fig. 1 top); ``names``: the d axis labels."""
    t, truth, pred = _numpy(t), _numpy(truth), _numpy(pred)
    d = truth.shape[-1]
    names = list(names or coordinate_names(d)[:d])
    fig = Figure(figsize=(11, 2.6 * d + 0.6), layout="constrained")
    panels = np.atleast_1d(fig.subplots(d, 1, sharex=True))
    for i, ax in enumerate(panels):
        for b in range(truth.shape[1]):
            color = f"C{b % 10}"
            ax.plot(t, truth[:, b, i], color=color, **TRUE_STYLE)
            ax.plot(t, pred[:, b, i], color=color, **PRED_STYLE)
        ax.set_ylabel(names[i])
    solid_dashed_legend(panels[0], "true", "predicted")
    panels[-1].set_xlabel(time_label)
    fig.suptitle("positions predicted from the first two: true (solid) vs predicted (dashed)")
    save_figure(fig, path)


def plot_potential(
    q: Tensor | np.ndarray,
    v_true: Tensor | np.ndarray,
    v_pred: Tensor | np.ndarray,
    path: str | os.PathLike,
) -> None:
    """True potential V(q) and the learned one shifted by the mean offset c = mean(V − V_θ) on a
    1-D grid (left), and their difference (right)."""
    q, v_true, v_pred = _numpy(q), _numpy(v_true), _numpy(v_pred)
    shifted = v_pred + np.mean(v_true - v_pred)
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(q, v_true, label="true $V$", **TRUE_STYLE)
    left.plot(q, shifted, label="learned $V_\\theta + c$", **PRED_STYLE)
    left.legend(loc="best", fontsize=8)
    right.plot(q, v_true - shifted, **TRUE_STYLE)
    right.set_title("$V - V_\\theta - c$")
    for ax in (left, right):
        ax.set_xlabel("$q$")
    save_figure(fig, path)


def plot_rollout_error(
    t: Tensor | np.ndarray,
    l2: Tensor | np.ndarray,
    rel_err: Tensor | np.ndarray,
    threshold: float,
    path: str | os.PathLike,
    time_label: str = "$t$",
) -> None:
    """Trajectory error vs time over all test trajectories (T+1, B): ||ŷ - y|| (left) and the
    bounded relative error with the valid-prediction threshold (right); median and 10–90 % band."""
    t, l2, rel = _numpy(t), _numpy(l2), _numpy(rel_err)
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    panels = fig.subplots(1, 2)
    for ax, values, label in zip(panels, (l2, rel), ("$\\|\\hat y - y\\|$", "relative error")):
        lo, mid, hi = np.nanquantile(values[1:], [0.1, 0.5, 0.9], axis=1)
        ax.fill_between(t[1:], lo, hi, alpha=0.25, label="10–90 %")
        ax.plot(t[1:], mid, label="median")
        ax.plot(t[1:], np.nanmean(values[1:], axis=1), ls=":", label="mean")
        ax.set_yscale("log")
        ax.set_xlabel(time_label)
        ax.set_title(label)
    panels[1].axhline(threshold, color="k", lw=0.8, ls="--", label=f"threshold {threshold:g}")
    panels[1].legend(loc="best", fontsize=8)
    save_figure(fig, path)


def plot_training_data(
    observed: Tensor | np.ndarray,
    dim: int,
    path: str | os.PathLike,
    axes: Sequence[int] | None = None,
    max_points: int = 20000,
    generator: torch.Generator | None = None,
    names: Sequence[str] | None = None,
) -> None:
    """Scatter of observed training states (N, T+1, 2d) in the (q, p) plane ``axes`` (default
    ``slice_axes``), at most ``max_points`` of them drawn uniformly (with ``generator``)."""
    states = torch.as_tensor(_numpy(observed)).reshape(-1, 2 * dim)
    if states.shape[0] > max_points:
        pick = torch.randperm(states.shape[0], generator=generator)[:max_points]
        states = states[pick]
    i, j = axes if axes is not None else slice_axes(dim)
    names = list(names or coordinate_names(dim))
    fig = Figure(figsize=(4.6, 4.2), layout="constrained")
    ax = fig.subplots()
    dense = states.shape[0] > 5000
    ax.scatter(states[:, i].numpy(), states[:, j].numpy(), s=1 if dense else 4,
               alpha=0.3 if dense else 0.7, linewidths=0)  # fmt: skip
    ax.set_xlabel(names[i])
    ax.set_ylabel(names[j])
    ax.set_title(f"training data ({states.shape[0]} states)", fontsize=10)
    save_figure(fig, path)


def plot_learned_landscape(
    H_pred,
    data: Tensor | np.ndarray,
    observed: Tensor | np.ndarray,
    predicted: Tensor | np.ndarray,
    path: str | os.PathLike,
    points: int = 101,
    chunk: int = 65536,
    max_points: int = 20000,
    generator: torch.Generator | None = None,
    names: Sequence[str] | None = None,
) -> None:
    """The learned energy H_θ where there is no true H (measurements): H_θ on the 2-D slice
    ``slice_axes`` over the range of ``data`` (M, 2d: states, e.g. the training split) plus a 5 %
    margin, the other coordinates at the data's median, with the data scattered on it and a few
    test trajectories (T+1, B, 2d), observed (solid) and rolled out by H_θ (dashed)."""
    data = torch.as_tensor(_numpy(data), dtype=torch.float64)
    dim = data.shape[-1] // 2
    i, j = slice_axes(dim)
    low, high = data.amin(0), data.amax(0)
    pad = 0.05 * (high - low).clamp_min(1e-12)
    xs = torch.linspace(
        float(low[i] - pad[i]), float(high[i] + pad[i]), points, dtype=torch.float64
    )
    ys = torch.linspace(
        float(low[j] - pad[j]), float(high[j] + pad[j]), points, dtype=torch.float64
    )
    grid = data.median(0).values.repeat(points, points, 1)
    grid[..., i], grid[..., j] = xs[None, :], ys[:, None]
    param = next(iter(H_pred.parameters()), None) if hasattr(H_pred, "parameters") else None
    like = {"device": param.device, "dtype": param.dtype} if param is not None else {}
    h = _numpy(energies(H_pred, grid.reshape(-1, 2 * dim).to(**like), chunk)).reshape(
        points, points
    )
    if data.shape[0] > max_points:
        data = data[torch.randperm(data.shape[0], generator=generator)[:max_points]]
    obs, pred = _numpy(observed), _numpy(predicted)
    names = list(names or coordinate_names(dim))
    fig = Figure(figsize=(6.4, 5.0), layout="constrained")
    ax = fig.subplots()
    extent = [float(xs[0]), float(xs[-1]), float(ys[0]), float(ys[-1])]
    im = ax.imshow(h, origin="lower", extent=extent, aspect="auto", cmap="viridis")
    ax.contour(h, levels=16, colors="white", linewidths=0.4, origin="lower", extent=extent)
    fig.colorbar(im, ax=ax, label="$H_\\theta$")
    ax.scatter(data[:, i].numpy(), data[:, j].numpy(), s=1.5, c="k", alpha=0.35, linewidths=0,
               label=f"data ({data.shape[0]} states)")  # fmt: skip
    for b in range(obs.shape[1]):
        color = f"C{(b + 1) % 10}"
        ax.plot(obs[:, b, i], obs[:, b, j], color=color, **TRUE_STYLE)
        ax.plot(pred[:, b, i], pred[:, b, j], color=color, **PRED_STYLE)
    solid_dashed_legend(
        ax, "test: observed", "test: learned rollout", color="C1", loc="upper right", fontsize=7
    )
    ax.set_xlim(extent[:2])
    ax.set_ylim(extent[2:])
    ax.set_xlabel(names[i])
    ax.set_ylabel(names[j])
    where = "" if dim == 1 else " (other coordinates at the data's median)"
    ax.set_title(f"learned energy $H_\\theta$ and the data{where}", fontsize=10)
    save_figure(fig, path)


def plot_learned_energy(
    t: Tensor | np.ndarray,
    energy_data: Tensor | np.ndarray,
    energy_pred: Tensor | np.ndarray,
    path: str | os.PathLike,
    time_label: str = "$t$",
) -> None:
    """The learned H_θ (T+1, B) along the observed test trajectories (dashed) and along its own
    rollouts from their first states (solid), where no true H is known."""
    t, e_d, e_p = _numpy(t), _numpy(energy_data), _numpy(energy_pred)
    fig = Figure(figsize=(6.4, 3.8), layout="constrained")
    ax = fig.subplots()
    for b in range(e_d.shape[1]):
        color = f"C{b % 10}"
        ax.plot(t, e_p[:, b], color=color, **TRUE_STYLE)
        ax.plot(t, e_d[:, b], color=color, **PRED_STYLE)
    solid_dashed_legend(ax, "$H_\\theta$ along its rollout", "$H_\\theta$ along the data")
    ax.set_xlabel(time_label)
    ax.set_title("learned energy (no true H: measurements)", fontsize=10)
    save_figure(fig, path)


def plot_horizons(
    times: Sequence[float],
    model: Sequence[float],
    baselines: dict[str, Sequence[float]],
    path: str | os.PathLike,
    time_label: str = "$t$",
) -> None:
    """The mean squared rollout error up to each horizon (at ``times``) of the model beside the
    baselines' on the same windows (``hnnsym.evaluation.horizons``), log scale."""
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    ax.plot(times, model, "o-", color="k", label="model", lw=1.6)
    for b, (name, values) in enumerate(baselines.items()):
        ax.plot(times, values, "s--", color=f"C{b}", label=name.replace("_", " "), lw=1.0)
    ax.set_yscale("log")
    ax.set_xlabel(f"horizon {time_label}")
    ax.set_ylabel("MSE up to the horizon")
    ax.set_title("rollout error on the test windows (recording units)", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    save_figure(fig, path)


def plot_chain_motion(
    t: Tensor | np.ndarray,
    truth: Tensor | np.ndarray,
    pred: Tensor | np.ndarray,
    origin: Sequence[float],
    path: str | os.PathLike,
    unit: str | None = None,
    frames: int = 6,
) -> None:
    """The arms of a chain in motion over one window, true (solid) against predicted (dashed):
    ``truth``, ``pred`` (T+1, n, 2) the moving points' positions in the image plane (x, y; the
    chain attribute's units), drawn from the fixed ``origin`` at ``frames`` times spread over the
    window, lighter for earlier ones, with the last point's path. The image's y axis is drawn
    as the file has it (down for pixel coordinates of a film)."""
    t, truth, pred = _numpy(t), _numpy(truth), _numpy(pred)
    origin = np.asarray(origin, dtype=np.float64)
    fig = Figure(figsize=(6.5, 6.5), layout="constrained")
    ax = fig.subplots()
    picks = np.unique(np.linspace(0, truth.shape[0] - 1, frames).round().astype(int))
    for k, i in enumerate(picks):
        alpha = 0.25 + 0.75 * k / max(len(picks) - 1, 1)
        for points, style, color in ((truth, TRUE_STYLE, "C0"), (pred, PRED_STYLE, "C3")):
            arm = np.vstack([origin, points[i]])
            ax.plot(arm[:, 0], arm[:, 1], color=color, alpha=alpha, marker="o", ms=4, **style)
        ax.annotate(f"{t[i]:.3g}", truth[i, -1], fontsize=7, alpha=alpha,
                    xytext=(4, 4), textcoords="offset points")  # fmt: skip
    ax.plot(truth[:, -1, 0], truth[:, -1, 1], color="C0", lw=0.8, alpha=0.6)
    ax.plot(pred[:, -1, 0], pred[:, -1, 1], color="C3", lw=0.8, alpha=0.6, ls="--")
    ax.plot(*origin, "k+", ms=10)
    ax.set_aspect("equal")
    ax.invert_yaxis()  # image rows grow downward
    suffix = f" ({unit})" if unit else ""
    ax.set_xlabel(f"x{suffix}")
    ax.set_ylabel(f"y{suffix}")
    solid_dashed_legend(ax, "true", "predicted")
    fig.suptitle("arms in motion over one test window (times labelled at the last point)")
    save_figure(fig, path)
