"""The training speed-ups' fast paths compute the same thing: tanh as 2σ(2z) − 1 in the closed-form ∇H, and
its one-node graph; ∇H of an MLP as one node with a hand-written backward (``_MLPGradient``)."""

import pytest
import torch

from hnnsym.physics.models import (
    ACTIVATIONS,
    _gradient_parameters,
    _MLPGradient,
    _tanh_and_slope,
    mlp,
    mlp_gradient,
)


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


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shape", [(7, 3), (3,), (2, 4, 3)])
def test_mlp_gradient_node_passes_gradcheck(activation, shape):
    """The hand-written backward of ∇H (∇²H ν for x, ∂/∂θ Σ ν·∇H for the weights) and the double
    backward (through the plain ops) against float64 finite differences, for 2-D, 1-D and 3-D x."""
    torch.manual_seed(0)
    net = mlp(3, (5, 4), activation).double()
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    params = _gradient_parameters(net)

    def grad_h(x, *params):
        return _MLPGradient.apply(net, x, *params)

    assert torch.autograd.gradcheck(grad_h, (x, *params))
    assert torch.autograd.gradgradcheck(grad_h, (x, *params))


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_mlp_gradient_node_equals_autograds_double_backward(activation):
    """Values equal the graph-free path's bit for bit; the vector–Jacobian products with respect
    to x and every parameter equal autograd's double backward of the network to rounding, also
    with some weights frozen and with an x that needs no gradient."""
    torch.manual_seed(1)
    net = mlp(4, (8, 16, 8), activation).double()
    x = 2 * torch.randn(64, 4, dtype=torch.float64)
    v = torch.randn(64, 4, dtype=torch.float64)
    with torch.no_grad():
        plain = mlp_gradient(net, x)
    for frozen, x_grad in [((), True), ((0, 3), True), ((), False)]:
        for i, p in enumerate(net.parameters()):
            p.requires_grad_(i not in frozen)
        xx = x.clone().requires_grad_(x_grad)
        wanted = [t for t in (xx, *net.parameters()) if t.requires_grad]
        g = mlp_gradient(net, xx)
        assert g.grad_fn is not None and torch.equal(g, plain)
        closed = torch.autograd.grad((g * v).sum(), wanted, allow_unused=True)
        y = x.clone().requires_grad_(True)
        ref = torch.autograd.grad(net(y).sum(), y, create_graph=True)[0]
        double = torch.autograd.grad(
            (ref * v).sum(), [y if t is xx else t for t in wanted], allow_unused=True
        )
        for a, b in zip(closed, double, strict=True):
            if b is None:  # the output bias does not enter ∇H
                assert a is None
            else:
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_mlp_gradient_of_a_net_without_hidden_layers_is_its_weight_at_every_x():
    """``mlp(n, [])`` is affine (the potential of a uniform field over points): ∇H = w at every x,
    with autograd's first and second derivatives (zero in x, ν summed for the weight)."""
    torch.manual_seed(2)
    net = mlp(4, [], "tanh").double()
    x = torch.randn(5, 3, 4, dtype=torch.float64, requires_grad=True)
    g = mlp_gradient(net, x)
    ref = torch.autograd.grad(net(x).sum(), x, create_graph=True)[0]
    assert g.shape == x.shape and torch.equal(g, ref.detach())
    v = torch.randn_like(x)
    by_x, by_w = torch.autograd.grad((g * v).sum(), [x, net[0].weight])
    assert torch.equal(by_x, torch.zeros_like(x))
    torch.testing.assert_close(by_w, v.sum((0, 1))[None], rtol=1e-14, atol=0)
    with torch.no_grad():
        assert torch.equal(mlp_gradient(net, x), ref.detach())
