"""The networks: ∇H in closed form (``energy_gradient``) against autograd, for every activation."""

from __future__ import annotations

import pytest
import torch

from hnnsym.physics.models import ACTIVATIONS, HNN, SeparableHNN, has_closed_gradient

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
