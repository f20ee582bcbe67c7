"""Scoring a recording of a tracked chain (in joint angles, or as its points) in its tracked
points.

A film of a chain ingested as joint angles (``ingest.chain``, ``ingest.coordinates=angles``;
``hnnsym.data.chains``) keeps the chain's geometry in the file's ``chain`` attribute: the origin
(the fixed point) and the link lengths l_k in the recording's units, the angles θ_k from the
image's x axis. The moving points are

    x_k = origin + Σ_{j≤k} l_j (cos θ_j, sin θ_j)        k = 1..n

so predictions and baselines of the angles can be compared where the tracker measured them:
``mse_points_h<h>`` (units², e.g. px²) beside ``mse_angles_h<h>`` (rad², wrapped), over the
same windows, steps 1..h, and the points' x, y (or the angles) as components.

``learned_chain``: the mass matrix and friction of a model with the chain mass matrix
(``hnnsym.physics.lagrangian_models``), in the compound pendulum's terms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from hnnsym.evaluation import horizons
from hnnsym.physics.lagrangian_models import LagrangianModel


def chain_points(chain: Mapping, theta: np.ndarray) -> np.ndarray:
    """Joint angles (…, n) → the moving points (…, 2n) (x₁, y₁, …, x_n, y_n) in the
    recording's units: x_k = origin + Σ_{j≤k} l_j (cos θ_j, sin θ_j)."""
    lengths = np.asarray(chain["lengths"], dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64)
    steps = lengths[:, None] * np.stack([np.cos(theta), np.sin(theta)], -1)  # (…, n, 2)
    points = np.asarray(chain["origin"], dtype=np.float64) + np.cumsum(steps, -2)
    return points.reshape(*theta.shape[:-1], 2 * len(lengths))


def tracked_points_of(chain: Mapping, states: np.ndarray) -> np.ndarray:
    """The moving points (…, 2n) in the recording's units (the image) of states (…, w) of a
    file with a chain: joint angles mapped by its geometry (``chain_points``), or its first 2n
    components, points relative to the origin, shifted back by the origin."""
    n = len(chain["lengths"])
    if chain.get("coordinates") == "angles":
        return chain_points(chain, states[..., :n])
    return np.asarray(states[..., : 2 * n], dtype=np.float64) + np.tile(chain["origin"], n)


def chain_horizon_metrics(
    chain: Mapping,
    pred: np.ndarray,
    observed: np.ndarray,
    base: Mapping[str, np.ndarray],
    hs: Sequence[int],
) -> dict[str, float]:
    """``mse_points_h<h>`` of the model's predictions (B, H, w) and, with the suffix ``_<b>``, of
    each baseline's, against the observed windows (B, H, w), in the recording's units, in the
    tracked points (``tracked_points_of``: without the velocities); for a chain in joint angles
    also ``mse_angles_h<h>`` (wrapped)."""
    n = len(chain["lengths"])
    in_angles = chain.get("coordinates") == "angles"
    truth_points = tracked_points_of(chain, observed)
    out: dict[str, float] = {}
    for suffix, p in [("", pred), *((f"_{b}", q) for b, q in base.items())]:
        pts = horizons.horizon_mse(tracked_points_of(chain, p), truth_points, hs, [], model=pred)
        for h in hs:
            out[f"mse_points_h{h}{suffix}"] = pts[h]
        if in_angles:
            ang = horizons.horizon_mse(p[..., :n], observed[..., :n], hs, list(range(n)),
                                       model=pred)  # fmt: skip
            for h in hs:
                out[f"mse_angles_h{h}{suffix}"] = ang[h]
    return out


def learned_chain(model: nn.Module, time_scale: float) -> dict | None:
    """The mass matrix and friction a ``LagrangianModel(mass="chain")`` learned, in the form of
    a compound pendulum's, or None for any other model.

    With w_j = x_j − x_{j−1} the unit links' velocities, the kinetic form A over the points
    becomes Ã = Tᵀ A T over the links (T: x = T w), and M_ij(θ) = n_iᵀ Ã_ij n_j (n_j = (−sin θ_j,
    cos θ_j)) = a_ij cos(θ_i − θ_j) + b_ij sin(θ_i − θ_j) + terms in θ_i + θ_j, with
    a_ij = ½ tr Ã_ij and b_ij = ½ (Ã_ij[1, 0] − Ã_ij[0, 1]). Rigid bodies in a plane have no
    terms in θ_i + θ_j (their blocks are scaled rotations): ``anisotropy`` is the size of those
    terms relative to the rest (Frobenius norms). Reported divided by a_11 (the first arm's
    moment of inertia about the pivot, as the physical fit's β, γ are): ``inertia`` (a/a_11;
    for two links [[1, β], [β, γ]]), ``offsets`` (b/a_11: a centre of mass off a link's line)
    and ``friction`` R/a_11 in 1/time of the recording (``time_scale``: its τ; for
    ``damping=state``, R at θ = 0)."""
    if not (isinstance(model, LagrangianModel) and model.mass_kind == "chain"):
        return None
    with torch.no_grad():
        A = model.chain_mass().double()
        n = A.shape[0] // 2
        T = torch.kron(torch.ones(n, n, dtype=A.dtype).tril(), torch.eye(2, dtype=A.dtype))
        blocks = (T.mT @ A @ T).reshape(n, 2, n, 2).permute(0, 2, 1, 3)  # (n, n, 2, 2)
        a = 0.5 * (blocks[..., 0, 0] + blocks[..., 1, 1])
        b = 0.5 * (blocks[..., 1, 0] - blocks[..., 0, 1])
        eye = torch.eye(2, dtype=A.dtype)
        rot = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=A.dtype)
        rest = blocks - a[..., None, None] * eye - b[..., None, None] * rot
        regular = a[..., None, None] * eye + b[..., None, None] * rot
        scale = a[0, 0]
        q = torch.zeros(1, n, dtype=next(model.parameters()).dtype)
        R = model.rayleigh_matrix(q)[0].double()
    return {
        "inertia": (a / scale).tolist(),
        "offsets": (b / scale).tolist(),
        "anisotropy": float(rest.norm() / regular.norm()),
        "friction": (R / scale / time_scale).tolist(),
    }
