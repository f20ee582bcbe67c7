"""Running losses folded into the backward sweep (``solve_loss``), in float64.

checkpoint and symplectic_adjoint add ℓ_n(y_n) in their forward and ∂ℓ_n/∂y_n in their backward
(states recomputed from the ``keep_every`` checkpoints) instead of returning the trajectory: the
loss value and the gradients (θ, y0, and through the returned final state) must equal backprop's
of the plain loss on the trajectory, to 1e-10 relative, and no trajectory-sized tensor may be kept.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import make_model
from torch import Tensor

from hnnsym import RunningLoss, StepLoss, integrate, solve_loss
from hnnsym.ode.gradients import get_gradient
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.models import HNN
from hnnsym.profiling.meter import SavedTensorMeter
from hnnsym.training.losses import WindowLoss

F64 = torch.float64
D, B = 2, 4
FUSED = {
    "symplectic_adjoint": ("symplectic_adjoint", {}),
    "symplectic_adjoint/sqrt": ("symplectic_adjoint", {"keep_every": "sqrt"}),
    "symplectic_adjoint/fixed_point/sqrt": (
        "symplectic_adjoint",
        {"keep_every": "sqrt", "adjoint_solve": "fixed_point"},
    ),
    "checkpoint": ("checkpoint", {}),
    "checkpoint/sqrt": ("checkpoint", {"keep_every": "sqrt"}),
}


def _draw(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _step_loss(steps: int, every: int) -> StepLoss:
    T = steps // every + 1
    weights = torch.rand(T, dtype=F64, generator=torch.Generator().manual_seed(5)) + 0.5
    return StepLoss(_draw(T, B, 2 * D, seed=4), weights, every=every, scale=1 / (T * B))


def _fused(H, y0, steps, loss, integrator, gradient):
    """(L, dL/dy0, dL/dθ...) of L = loss + Σ y_N³ through ``solve_loss``."""
    y = y0.clone().requires_grad_(True)
    sol = solve_loss(H, y, 0.1, steps, loss, integrator, gradient)
    total = sol.value + (sol.last**3).sum()
    return sol.value.detach(), torch.autograd.grad(total, [y, *H.parameters()], allow_unused=True)


def _plain(H, y0, steps, loss_of, integrator):
    """The same by backprop through the whole trajectory, the loss written out by hand."""
    y = y0.clone().requires_grad_(True)
    ys = integrate(H, y, 0.1, steps, integrator, "backprop")
    value = loss_of(ys)
    total = value + (ys[-1] ** 3).sum()
    return value.detach(), torch.autograd.grad(total, [y, *H.parameters()], allow_unused=True)


def _assert_same(fused, plain, rtol: float = 1e-10) -> None:
    (v, grads), (v_ref, refs) = fused, plain
    assert abs(float(v - v_ref)) <= rtol * abs(float(v_ref))
    for g, ref in zip(grads, refs, strict=True):
        if ref is None:  # the output bias: H is defined up to a constant
            assert g is None or not g.any()
            continue
        assert float((g - ref).abs().max()) <= rtol * float(ref.abs().max()), (g, ref)


@pytest.mark.parametrize("variant", list(FUSED))
@pytest.mark.parametrize(
    "integrator, every",
    [("implicit_midpoint", 1), ("implicit_midpoint", 3), ("gauss_legendre4", 2)],
)
def test_fused_loss_equals_backprop_of_the_plain_loss(variant, integrator, every):
    """L = scale Σ_t w_t |y_{t·every} − target_t|² (+ Σ y_N³ on the returned final state): value
    and gradients w.r.t. θ and y0 equal backprop's through the trajectory."""
    steps = 21
    H = make_model(HNN, D, seed=3, gain=5.0)
    y0 = _draw(B, 2 * D, seed=1)
    loss = _step_loss(steps, every)

    def by_hand(ys: Tensor) -> Tensor:
        return loss.scale * (loss.weights[:, None, None] * (ys[::every] - loss.targets) ** 2).sum()

    name, options = FUSED[variant]
    fused = _fused(H, y0, steps, loss, integrator, get_gradient(name, **options))
    _assert_same(fused, _plain(H, y0, steps, by_hand, integrator))


def test_a_running_loss_with_autograd_jumps_equals_backprop():
    """A RunningLoss that defines only ``terms`` (its jumps by autograd), nonlinear and different
    at every step: the fused symplectic adjoint equals backprop of the same loss."""

    class SinLoss(RunningLoss):
        def terms(self, states: Tensor, start: int) -> Tensor:
            n = torch.arange(start, start + states.shape[0], dtype=F64)[:, None, None]
            return (torch.sin(states * (1 + 0.1 * n)) ** 2).sum()

    steps = 17
    H = make_model(HNN, D, seed=2, gain=5.0)
    y0 = _draw(B, 2 * D, seed=6)
    loss = SinLoss()
    gradient = get_gradient("symplectic_adjoint", keep_every=5)
    fused = _fused(H, y0, steps, loss, "gauss_legendre4", gradient)
    _assert_same(fused, _plain(H, y0, steps, loss.value, "gauss_legendre4"))


@pytest.mark.parametrize("gradient", ["backprop", "adjoint"])
def test_other_methods_take_the_plain_path(gradient):
    """Methods without a fused sweep give loss.value of their own trajectory, gradient included."""
    steps, loss = 6, _step_loss(6, 2)
    H = make_model(HNN, D, seed=3, gain=5.0)
    y0 = _draw(B, 2 * D, seed=1)

    y = y0.clone().requires_grad_(True)
    ys = integrate(H, y, 0.1, steps, "gauss_legendre4", gradient)
    total = loss.value(ys) + (ys[-1] ** 3).sum()
    ref = torch.autograd.grad(total, [y, *H.parameters()], allow_unused=True)
    fused = _fused(H, y0, steps, loss, "gauss_legendre4", gradient)
    assert torch.equal(fused[0], loss.value(ys).detach())
    for g, r in zip(fused[1], ref, strict=True):
        assert (g is None and r is None) or torch.equal(g, r)


def test_zero_steps():
    H = make_model(HNN, D, seed=3, gain=5.0)
    y0 = _draw(B, 2 * D, seed=1)
    loss = _step_loss(0, 1)
    for keep in (1, 4):
        fused = _fused(
            H, y0, 0, loss, "implicit_midpoint", get_gradient("checkpoint", keep_every=keep)
        )
        _assert_same(fused, _plain(H, y0, 0, loss.value, "implicit_midpoint"))


def test_no_trajectory_is_kept():
    """With keep_every=sqrt the fused symplectic adjoint keeps ⌈N/k⌉ + 1 states, the stage
    predictor's history at each (three stages), and one step's graph (chunk=1): its peak saved
    bytes (forward and backward) stay below a third of the trajectory's at 512 steps (measured:
    0.21 of it; 0.46 at 128 steps, where the histories are 33 of ~44 state-sized tensors), while
    the same method returning the trajectory for the same loss holds more than a whole trajectory
    (the loss's own ŷ − y)."""
    steps, d, batch = 512, 1, 64
    with torch.random.fork_rng():
        torch.manual_seed(0)
        H = HNN(d, hidden=(8,)).to(F64)
    y0 = _draw(batch, 2 * d, seed=1)
    loss = StepLoss(_draw(steps + 1, batch, 2 * d, seed=2), scale=1.0 / batch)
    traj_bytes = (steps + 1) * batch * 2 * d * 8
    gradient = get_gradient("symplectic_adjoint", keep_every="sqrt", chunk=1)
    peaks = {}
    for fused in (True, False):
        meter = SavedTensorMeter(exclude=[*H.parameters(), y0, loss.targets])
        with meter:
            if fused:
                value = solve_loss(H, y0, 0.01, steps, loss, "implicit_midpoint", gradient).value
            else:
                value = loss.value(integrate(H, y0, 0.01, steps, "implicit_midpoint", gradient))
            torch.autograd.grad(value, list(H.parameters()), allow_unused=True)
        peaks[fused] = meter.peak
    assert peaks[True] < traj_bytes / 3 < traj_bytes < peaks[False]
    assert math.isfinite(float(value.detach()))


def test_bad_step_losses_are_refused():
    H = make_model(HNN, D, seed=3, gain=5.0)
    y0 = _draw(B, 2 * D, seed=1)
    with pytest.raises(ValueError, match=r"targets must have shape \(4, 4, 4\) for 6 steps"):
        solve_loss(H, y0, 0.1, 6, StepLoss(_draw(7, B, 2 * D, seed=0), every=2))
    with pytest.raises(ValueError, match="data: detach"):
        StepLoss(_draw(3, B, 2 * D, seed=0).requires_grad_(True))
    with pytest.raises(ValueError, match="weights must have shape"):
        StepLoss(_draw(3, B, 2 * D, seed=0), torch.ones(2, dtype=F64))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="every"):
            StepLoss(_draw(3, B, 2 * D, seed=0), every=bad)


@pytest.mark.parametrize("learned, continuity", [(False, 0.0), (True, 0.0), (True, 4.0)])
def test_window_loss_fused_equals_the_plain_window_loss(learned, continuity):
    """WindowLoss(fused=True) (training: +method.loss.fused=true) with substeps and segments: the
    same value and gradients (θ, and the learned starts, whose loss counts t = 0, with the
    continuity penalty on the segments' last states) as the plain WindowLoss, through the
    symplectic adjoint with keep_every=sqrt."""
    H = make_model(HNN, D, seed=3, gain=5.0)
    windows = _draw(9, B, 2 * D, seed=7)  # τ = 8: two segments of 4 observations, 2 substeps
    gradient = get_gradient("symplectic_adjoint", keep_every="sqrt")
    integ = get_integrator("gauss_legendre4")
    results = []
    for fused in (False, True):
        loss = WindowLoss(integ, gradient, 0.1, substeps=2, segments=2, fused=fused,
                          init="learned" if learned else "observed", continuity=continuity)  # fmt: skip
        y0 = _draw(2 * B, 2 * D, seed=8).requires_grad_(True) if learned else None
        result = loss.evaluate(H, windows, y0)
        value = result.value
        if learned:
            assert result.defect is not None and result.defect > 0
        wrt = [*([y0] if learned else []), *H.parameters()]
        results.append((value.detach(), torch.autograd.grad(value, wrt, allow_unused=True)))
    _assert_same(results[1], results[0])
