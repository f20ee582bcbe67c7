"""``train.refit=last_layer``: H's last layer fitted by linear least squares after training.

A model that declares ``LINEAR_HEAD`` is H(y) = c·ψ(y) + b: ψ (K features) its last hidden
layer (for a separable H with T = |p|²/2m, |p|²/2 too, with c₀ = 1/m), c its last layer. The
implicit midpoint step y_{k+1} = y_k + h J⁻¹∇H(ȳ_k), ȳ_k = (y_k + y_{k+1})/2, is linear in c
once the states are given. Summed from a trajectory's first state,

    y_k − y_0 = h Σ_{i<k} J⁻¹∇ψ(ȳ_i) c,     k = 0 … T,

with y_0 left free per trajectory: each trajectory's mean over k is taken out of both sides, so
no observation is taken as exact. With the trained features ψ held fixed, c is the least-squares
solution over every state of the training trajectories. The observed, noisy states enter ȳ as
they are: errors in variables, a bias of order σ² in c. The same least squares with a Legendre series in place of ψ is
``benchmarks/potential_floor.py``.

The fit is made and kept in float64. Where the features are nearly redundant, the coefficients
that resolve the data's small directions are large and cancel (on the double well up to about
200 where the trained ones are about 1); float32 rounds them to a field too coarse for the stage
solver's tolerance, so the refit model stays in float64. Directions of R below ``RCOND`` of its
largest singular value are left as trained (the change from the trained c is the least-squares
one of smallest norm), which bounds how far the coefficients can cancel.

The rows are built a block of trajectories at a time and reduced by QR as they come (the
augmented R of [A | b], (K+1) × (K+1)), so memory is one block's, whatever the data. Every
residual ‖A c − b‖² follows from R alone: ‖R c − z‖² + ρ², with z and ρ R's last column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hnnsym.ode.capabilities import has
from hnnsym.ode.dynamics import hamiltonian_flow, symplectic_gradient
from hnnsym.ode.integrators.tableaux import IMPLICIT_MIDPOINT, Tableau
from hnnsym.physics.capabilities import ModelCapability

ROWS_PER_BLOCK = 1 << 18  # rows of the least-squares system reduced at a time
RCOND = 1e-6  # directions of R with singular values below this fraction of the largest: as trained


@dataclass(frozen=True)
class RefitResult:
    """What a refit did: the mean squared residual of the summed steps (per row, in the
    training data's units, each component weighted as the loss weighs it) before and after, the
    least-squares system's numerical rank among its K coefficients, and its rows."""

    residual_before: float
    residual_after: float
    rank: int
    coefficients: int
    rows: int

    def as_dict(self) -> dict:
        return {"method": "last_layer", **self.__dict__}


@dataclass(frozen=True)
class LastLayerRefit:
    """``train.refit=last_layer`` as a run sets it up: the observation interval h, the loss's
    weight per state component (None: 1), and ``loss``, the run's loss with an eager integrator,
    which validates the float64 refit model (a compiled one would compile float64 programs for
    it first, minutes with a fresh cache)."""

    h: float
    weights: tuple[float, ...] | None
    loss: Callable[[nn.Module, Tensor], Tensor]

    def __call__(self, model: nn.Module, trajectories: Tensor) -> RefitResult:
        return refit_last_layer(model, trajectories, self.h, self.weights)


def refit_problem(model: nn.Module, integrator: object, substeps: int, width: int) -> str | None:
    """Why ``train.refit=last_layer`` cannot serve this run (None: it can). ``width``: the
    training states' width (2d for (q, p))."""
    if not has(model, ModelCapability.LINEAR_HEAD) or not hamiltonian_flow(model):
        return (f"train.refit=last_layer needs a model H = c·ψ(y) + b with a last layer of its "
                f"own (model=hnn or separable_hnn), not {type(model).__name__}")  # fmt: skip
    tableau = getattr(integrator, "tableau", None)
    if not (
        getattr(integrator, "has_stages", False)
        and tableau is not None
        and _coefficients(tableau) == _coefficients(IMPLICIT_MIDPOINT)
    ):
        name = getattr(tableau, "name", type(integrator).__name__)
        return (f"train.refit=last_layer fits the implicit midpoint step: it needs "
                f"integrator=implicit_midpoint, not {name}")  # fmt: skip
    if substeps != 1:
        return (f"train.refit=last_layer fits one step per observation: it needs "
                f"train.substeps=1, not {substeps}")  # fmt: skip
    if width != 2 * model.dim:
        return "train.refit=last_layer needs (q, p) states, not positions alone"
    return None


def _coefficients(tableau: Tableau) -> tuple:
    return tableau.a_q, tableau.b_q, tableau.a_p, tableau.b_p


def refit_last_layer(
    model: nn.Module, trajectories: Tensor, h: float, weights: tuple[float, ...] | None = None
) -> RefitResult:
    """Set the head c of ``model``, a float64 model, to the least-squares fit (module doc) to
    ``trajectories`` (N, T+1, 2d, any float dtype: each block is taken to float64 as it is
    reduced) observed every h. ``weights``: per state component, as the
    loss weighs the squared error (None: 1). Raises ValueError where the data are not finite or
    the fit is not a model (a mass that is not > 0), and then leaves the model as it was."""
    if next(model.parameters()).dtype != torch.float64:
        raise TypeError("refit_last_layer refits a float64 model (module doc)")
    if not torch.isfinite(trajectories).all():
        raise ValueError("the training trajectories hold values that are not finite")
    n, width = trajectories.shape[0], trajectories.shape[-1]
    scale = torch.ones(width, dtype=torch.float64, device=trajectories.device)
    if weights is not None:
        scale = torch.tensor(weights, dtype=torch.float64, device=trajectories.device).sqrt()
    old = model.head_coefficients().detach().clone()
    K = old.shape[0]
    R = torch.zeros(0, K + 1, dtype=torch.float64, device=trajectories.device)
    per_block = max(1, ROWS_PER_BLOCK // (trajectories.shape[1] * width))
    for start in range(0, n, per_block):
        rows, target = _rows(model, trajectories[start : start + per_block], h, scale)
        R = torch.linalg.qr(torch.cat([R, torch.cat([rows, target[:, None]], 1)]), mode="r")[1]
        R = R[: K + 1]
    R, z, rho2 = R[:K, :K].cpu(), R[:K, K].cpu(), float(R[K:, K].square().sum())
    old = old.cpu()
    # the change from the trained c, smallest where the rows do not resolve it
    change = torch.linalg.lstsq(R, (z - R @ old)[:, None], rcond=RCOND, driver="gelsd")
    new = old + change.solution[:, 0]
    rows = n * trajectories.shape[1] * width
    before = (float((R @ old - z).square().sum()) + rho2) / rows
    after = (float((R @ new - z).square().sum()) + rho2) / rows
    model.set_head_coefficients(new.to(device=trajectories.device))  # ValueError: unchanged
    return RefitResult(before, after, int(change.rank), K, rows)


def _rows(model: nn.Module, trajectories: Tensor, h: float, scale: Tensor) -> tuple[Tensor, Tensor]:
    """The least-squares rows of a block of trajectories (B, T+1, 2d): A (B·(T+1)·2d, K) with
    A[b, k, j, :] = h Σ_{i<k} J⁻¹∇ψ(ȳ_i)_j minus its mean over k, and the target y_k − its
    mean over k, each component j times ``scale[j]``."""
    y = trajectories.to(torch.float64)
    d = y.shape[-1] // 2
    mid = 0.5 * (y[:, :-1] + y[:, 1:]).reshape(-1, 2 * d)
    with torch.no_grad():
        columns = []  # ∂ψ/∂y_j: one forward tangent per state component
        for j in range(2 * d):
            tangent = torch.zeros_like(mid)
            tangent[:, j] = 1
            columns.append(torch.func.jvp(model.head_features, (mid,), (tangent,))[1])
        grad = torch.stack(columns, 1)  # (M, 2d, K): ∇ψ, component by component
        field = symplectic_gradient(grad, dim=1)  # J⁻¹∇ψ = [∂ψ/∂p, −∂ψ/∂q]
        field = field.reshape(y.shape[0], y.shape[1] - 1, 2 * d, -1)
        summed = torch.cat([torch.zeros_like(field[:, :1]), h * field.cumsum(1)], 1)
        summed = (summed - summed.mean(1, keepdim=True)) * scale[:, None]
        target = (y - y.mean(1, keepdim=True)) * scale
    return summed.reshape(-1, summed.shape[-1]), target.reshape(-1)
