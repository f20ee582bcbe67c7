"""The training speed-ups' fast paths compute the same thing: tanh as 2σ(2z) − 1 in the closed-form ∇H, and
its one-node graph."""

import pytest
import torch

from hnnsym.physics.models import _tanh_and_slope


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tanh_and_slope_equal_torch_to_rounding(dtype):
    z = torch.linspace(-25, 25, 200_001, dtype=dtype)
    a, slope = _tanh_and_slope(z)
    ref = torch.tanh(z)
    eps = torch.finfo(dtype).eps
    assert (a - ref).abs().max() <= 2 * eps
    assert (slope - (1 - ref * ref)).abs().max() <= 4 * eps
    assert a.abs().max() <= 1 and slope.min() >= 0


def test_tanh_and_slope_graph_node_differentiates_like_torch():
    """With a graph, (a, s) = (tanh z, 1 − tanh² z) is one node with a hand-written backward:
    its first and second derivatives pass gradcheck (float64 finite differences), equal autograd's
    through torch.tanh to rounding for either output alone and both, and the values equal the
    graph-free path's bit for bit."""
    z = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    z.requires_grad_(True)
    assert torch.autograd.gradcheck(_tanh_and_slope, (z,))
    assert torch.autograd.gradgradcheck(_tanh_and_slope, (z,))
    a, slope = _tanh_and_slope(z)
    with torch.no_grad():
        plain = _tanh_and_slope(z)
    assert torch.equal(a, plain[0]) and torch.equal(slope, plain[1])
    ref_a = torch.tanh(z)
    ref_s = 1 - ref_a * ref_a
    wa, ws = torch.randn(2, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for loss, ref in [
        ((wa * a).sum(), (wa * ref_a).sum()),
        ((ws * slope).sum(), (ws * ref_s).sum()),
        ((wa * a + ws * slope).sum(), (wa * ref_a + ws * ref_s).sum()),
    ]:
        (got,) = torch.autograd.grad(loss, z, create_graph=True)
        (want,) = torch.autograd.grad(ref, z, create_graph=True)
        torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-15)
        second = torch.autograd.grad(got.sum(), z, retain_graph=True)[0]
        torch.testing.assert_close(
            second, torch.autograd.grad(want.sum(), z, retain_graph=True)[0], rtol=1e-12, atol=1e-14
        )
