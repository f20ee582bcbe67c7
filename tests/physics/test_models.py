"""The networks: ∇H in closed form (``energy_gradient``) against autograd, for every activation."""

from __future__ import annotations

import pytest
import torch

from hnnsym.config.build import same_model
from hnnsym.ode.dynamics import FieldLinearization, vector_field
from hnnsym.physics.models import ACTIVATIONS, HNN, NODE, SeparableHNN, has_closed_gradient

F64 = torch.float64


def autograd_gradient(H, y: torch.Tensor) -> torch.Tensor:
    y = y.detach().requires_grad_(True)
    return torch.autograd.grad(H(y).sum(), y)[0]


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_closed_form_gradient_is_autograds(activation):
    torch.manual_seed(0)
    H = HNN(2, hidden=(8, 16), activation=activation).double()
    assert has_closed_gradient(H.net)
    y = 3 * torch.randn(3, 5, 4, dtype=F64)  # leading dims as the stage solver passes them
    got = H.energy_gradient(y)
    torch.testing.assert_close(got, autograd_gradient(H, y), rtol=1e-13, atol=1e-14)


def test_closed_form_gradient_is_differentiable_like_autograds():
    """Its vector–Jacobian products (what the gradient methods take) equal double backward."""
    torch.manual_seed(1)
    H = HNN(1, hidden=(8, 8)).double()
    y = torch.randn(6, 2, dtype=F64, requires_grad=True)
    v = torch.randn(6, 2, dtype=F64)
    params = [y, *H.parameters()]
    closed = torch.autograd.grad((H.energy_gradient(y) * v).sum(), params, allow_unused=True)
    g = torch.autograd.grad(H(y).sum(), y, create_graph=True)[0]
    double = torch.autograd.grad((g * v).sum(), params, allow_unused=True)
    for a, b in zip(closed, double, strict=True):
        if b is None:  # the output bias does not enter ∇H
            assert a is None or torch.count_nonzero(a) == 0
        else:
            torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("kinetic", ["mlp", "mass"])
def test_separable_closed_form_gradient(kinetic):
    torch.manual_seed(2)
    H = SeparableHNN(2, hidden=(8,), kinetic=kinetic).double()
    if kinetic == "mass":
        with torch.no_grad():
            H.log_mass.fill_(0.3)
    y = torch.randn(7, 4, dtype=F64)
    torch.testing.assert_close(
        H.energy_gradient(y), autograd_gradient(H, y), rtol=1e-13, atol=1e-14
    )


# ---- second order in closed form: what the symplectic adjoint's direct solve takes ------------
@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("d", [1, 2, 3])
def test_closed_form_hessian_and_parameter_vjp_are_autograds(activation, d, traced, monkeypatch):
    """∇²H and ∂/∂θ Σ ν·∇H of ``MLPLinearization`` against autograd's double backward, to
    rounding in float64; large inputs put softplus above its threshold and tanh near saturation.
    ``traced``: the form a compiled chunk traces (the Hessian from forward tangents alone, which
    the parameter VJP reuses), run eagerly here."""
    torch.manual_seed(d)
    H = HNN(d, hidden=(8, 16, 8), activation=activation).double()
    y = 3 * torch.randn(40, 2 * d, dtype=F64)
    nu = torch.randn(40, 2 * d, dtype=F64)
    with monkeypatch.context() as patch:
        patch.setattr(torch.compiler, "is_compiling", lambda: traced)
        closed = H.energy_linearization(y)
    assert (closed._unit_tangents is not None) == traced
    y_ = y.clone().requires_grad_(True)
    grad = torch.autograd.grad(H(y_).sum(), y_, create_graph=True)[0]
    hessian = torch.stack(
        [torch.autograd.grad(grad[:, k].sum(), y_, retain_graph=True)[0] for k in range(2 * d)], 1
    )
    torch.testing.assert_close(closed.hessian, hessian, rtol=1e-12, atol=1e-13)
    params = list(H.parameters())
    expected = torch.autograd.grad((grad * nu).sum(), params, allow_unused=True)
    got = closed.directional_gradient_vjp(nu)
    assert len(got) == len(params)
    for a, b in zip(got, expected, strict=True):
        if b is None:  # the output bias does not enter ∇H
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


class _AutogradOnly(torch.nn.Module):
    """The same H without its closed forms: FieldLinearization falls back to autograd."""

    def __init__(self, H):
        super().__init__()
        self.H = H

    def forward(self, y):
        return self.H(y)


def test_field_linearization_closed_form_equals_its_autograd_path():
    """Df = J⁻¹∇²H and Σ μ·∂f/∂θ, closed form against the autograd path, with one parameter
    frozen (the result lists the trainable ones only, in order)."""
    torch.manual_seed(5)
    H = HNN(2, hidden=(8, 8)).double()
    H.net[2].weight.requires_grad_(False)
    params = [p for p in H.parameters() if p.requires_grad]
    y, mu = torch.randn(30, 4, dtype=F64), torch.randn(30, 4, dtype=F64)
    closed = FieldLinearization(H, y, params)
    generic = FieldLinearization(_AutogradOnly(H), y, params)
    assert closed._closed is not None and generic._closed is None
    torch.testing.assert_close(closed.jacobian, generic.jacobian, rtol=1e-12, atol=1e-13)
    # f is per state, so its Jacobian over the batch is block diagonal: the blocks are Df
    full = torch.autograd.functional.jacobian(lambda z: vector_field(H, z, True), y)
    jac = torch.stack([full[m, :, m, :] for m in range(len(y))])
    torch.testing.assert_close(closed.jacobian, jac, rtol=1e-12, atol=1e-13)
    for a, b in zip(closed.param_vjp(mu), generic.param_vjp(mu), strict=True):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_closed_form_linearization_only_where_the_parameter_lists_match():
    """A subclass with parameters of its own (DissipativeHNN's damping) gets none: its parameter
    gradients would not line up with the net's."""
    from hnnsym.physics.dissipative import DissipativeHNN

    y = torch.randn(5, 2, dtype=F64)
    assert HNN(1).double().energy_linearization(y) is not None
    assert DissipativeHNN(1).double().energy_linearization(y) is None


@pytest.mark.parametrize("cls", [HNN, SeparableHNN, NODE])
def test_output_gain_scales_only_the_last_layers_with_the_same_draws(cls):
    torch.manual_seed(3)
    plain = cls(1, (8, 8))
    torch.manual_seed(3)
    scaled = cls(1, (8, 8), output_gain=4.0)
    last = {f"{name}.{len(net) - 1}" for name, net in scaled.named_children()
            if isinstance(net, torch.nn.Sequential)}  # fmt: skip
    assert last, "no MLP found"
    for name, value in plain.state_dict().items():
        factor = 4.0 if name.rsplit(".", 1)[0] in last else 1.0
        assert torch.equal(scaled.state_dict()[name], value * factor), name


@pytest.mark.parametrize("gain", [0.0, -1.0, float("nan"), float("inf"), "4", True])
def test_output_gain_must_be_positive_and_finite(gain):
    with pytest.raises(ValueError, match="output_gain"):
        HNN(1, (8,), output_gain=gain)


def test_a_checkpoint_matches_a_config_whatever_its_output_gain():
    """output_gain sets only the initial weights: a run trained with any gain (or before the
    option) evaluates with any."""
    ckpt = {"_target_": "hnnsym.physics.models.HNN", "hidden": (8,), "periodic": []}
    assert same_model(ckpt, {**ckpt, "output_gain": 4.0})
    assert same_model({**ckpt, "output_gain": 10.0}, {**ckpt, "output_gain": 1.0})
    assert not same_model(ckpt, {**ckpt, "hidden": (16,), "output_gain": 1.0})


def test_separable_tanh_potential_learns_the_double_well_barrier_with_a_gain():
    """V' = q³ − q over q ∈ [−2.2, 2.2] fitted by Adam: with PyTorch's default init a tanh V of
    one coordinate stalls at V' ≈ 0 between the wells (the walls' ±10 dominate the loss); with
    the last layer 10× larger it fits the barrier (V'(±½) = ∓0.375)."""
    torch.manual_seed(0)
    model = SeparableHNN(1, (32, 32, 32), "tanh", "mass", output_gain=10.0)
    optimizer = torch.optim.Adam(model.potential_net.parameters(), 1e-2)
    draws = torch.Generator().manual_seed(0)
    for _ in range(800):
        q = torch.rand(256, 1, generator=draws) * 4.4 - 2.2
        loss = ((model.potential_grad(q) - (q**3 - q)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        slope = model.potential_grad(torch.tensor([[-0.5], [0.5]]))[:, 0]
    assert torch.allclose(slope, torch.tensor([0.375, -0.375]), atol=0.03), slope
