"""The stage solver without a host sync per iteration (its batched sweeps stop at the same sweep,
bit for bit, as checking after every sweep would), and the exact gradients on every device
(``make gpu-check`` runs the CUDA cases)."""

from __future__ import annotations

import math

import pytest
import torch

from hnnsym.errors import ConvergenceError
from hnnsym.ode.integrators.stage_solver import FixedPoint
from hnnsym.ode.problem import SolverStats
from hnnsym.ode.running import StepLoss
from hnnsym.ode.solve import solve_loss
from hnnsym.physics.models import HNN


def _per_sweep(g, x, tol, max_iter, scale=1.0):
    """The reference: check after every sweep (the iteration as first written)."""
    for it in range(1, max_iter + 1):
        x_new = g(x)
        change = float(torch.linalg.vector_norm(x_new - x, math.inf) * scale)
        x = x_new
        if not change > tol:
            return x, it
    return x, max_iter


@pytest.mark.parametrize("hint", [1, 2, 5, 40])
def test_batched_sweeps_stop_where_per_sweep_checks_do(hint):
    gen = torch.Generator().manual_seed(0)
    A = 0.5 * torch.randn(6, 6, generator=gen, dtype=torch.float64) / 6**0.5
    b = torch.randn(6, generator=gen, dtype=torch.float64)

    def g(x):
        return torch.tanh(A @ x) + b

    x0 = torch.zeros(6, dtype=torch.float64)
    ref, ref_it = _per_sweep(g, x0, 1e-12, 50)
    solver = FixedPoint(tol=1e-12, max_iter=50)
    solver._sweeps[(False, False)] = hint  # the batch the previous call left
    stats = SolverStats()
    out = solver.iterate(g, x0, stats=stats)
    assert torch.equal(out, ref)
    assert stats.iterations == ref_it
    assert solver._sweeps[(False, False)] == ref_it  # the next call's batch


def test_one_read_back_per_call_when_the_batch_fits(monkeypatch):
    """With the batch of the previous call, a call reads the device once (``tolist``/``item``)."""
    calls = []
    for name in ("tolist", "item"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor, name, lambda t, original=original: calls.append(1) or original(t)
        )
    solver = FixedPoint(tol=1e-10, max_iter=50)

    def g(x):
        return 0.5 * x + 1.0

    solver.iterate(g, torch.zeros(3, dtype=torch.float64))
    first = len(calls)
    calls.clear()
    solver.iterate(g, torch.zeros(3, dtype=torch.float64))
    assert first > 1 and len(calls) == 1


def test_unconverged_iteration_still_raises():
    solver = FixedPoint(tol=1e-12, max_iter=3)
    with pytest.raises(ConvergenceError, match="after 3 iterations"):
        solver.iterate(lambda x: 0.9 * x + 1.0, torch.zeros(2, dtype=torch.float64))


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("integrator", ["implicit_midpoint", "gauss_legendre4"])
def test_exact_gradients_agree_on_the_device(device, integrator):
    """backprop = checkpoint = symplectic_adjoint to 1e-10 in float64 on ``device`` (what
    ``make gpu-check`` runs on CUDA), through the fused running loss of training."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = HNN(1, hidden=(16, 16)).to(device=device, dtype=torch.float64)
        y0 = torch.randn(32, 2, dtype=torch.float64, device=device)
        target = torch.randn(17, 32, 2, dtype=torch.float64, device=device)
    with torch.no_grad():
        model.net[-1].weight.mul_(5.0)  # states that move over the run
    params = list(model.parameters())
    grads = {}
    for method in ("backprop", "checkpoint", "symplectic_adjoint"):
        loss = StepLoss(target, scale=1.0 / target.numel())
        value = solve_loss(model, y0, 0.01, 16, loss, integrator, method).value
        g = torch.autograd.grad(value, params, allow_unused=True)
        grads[method] = torch.cat(
            [(torch.zeros_like(p) if x is None else x).flatten() for x, p in zip(g, params)]
        )
    ref = grads["backprop"]
    assert ref.device.type == device and ref.abs().max() > 0
    for method in ("checkpoint", "symplectic_adjoint"):
        err = (grads[method] - ref).norm() / ref.norm()
        assert err < 1e-10, (method, float(err))
