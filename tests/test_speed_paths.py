"""The fast paths of issue 16 compute the same thing: tanh as 2σ(2z) − 1 in the closed-form ∇H, and
the implicit midpoint iteration stopped on the contraction estimate (one evaluation fewer)."""

import pytest
import torch

from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import solve
from hnnsym.physics.models import HNN, _tanh_and_slope


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tanh_and_slope_equal_torch_to_rounding(dtype):
    z = torch.linspace(-25, 25, 200_001, dtype=dtype)
    a, slope = _tanh_and_slope(z)
    ref = torch.tanh(z)
    eps = torch.finfo(dtype).eps
    assert (a - ref).abs().max() <= 2 * eps
    assert (slope - (1 - ref * ref)).abs().max() <= 4 * eps
    assert a.abs().max() <= 1 and slope.min() >= 0


def _midpoint_rollout(model, y0, tol=None, grad=False):
    integrator = get_integrator("implicit_midpoint", tol=tol)
    with torch.set_grad_enabled(grad):
        sol = solve(model, y0, 0.01, 20, integrator, "backprop")
    return sol.ys.detach(), sol.stats


def test_midpoint_contraction_stop_saves_an_iteration_within_tolerance():
    torch.manual_seed(0)
    model = HNN(1).double()
    y0 = torch.randn(64, 2, dtype=torch.float64)
    fast, fast_stats = _midpoint_rollout(model, y0)  # no graph: contraction estimate
    full, full_stats = _midpoint_rollout(model, y0, grad=True)  # backprop: |ΔK| alone
    assert (fast_stats.mean_iterations, full_stats.mean_iterations) == (1.0, 2.0)
    assert fast_stats.unconverged == 0
    # one iteration fewer, the same states to within the default tolerance (1e-12 on h|ΔK| per
    # step, 20 steps): measured 3.9e-15
    assert 0 < (fast - full).abs().max() <= 20 * 1e-12
