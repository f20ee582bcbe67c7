"""The units of the position-only losses (Aoshima et al.): ``method.loss.units`` scales the residual by
a power of Δt only, so the loss and its gradient change by the factor Δt⁴ and nothing else (the
same minimiser, the same gradient direction); the acceleration-unit baseline loss is Eq. 13's
residual computed independently; the default bits and ``experiment=ddlm_two_body``'s choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from hnnsym.config import CONF_DIR
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.models import Potential
from hnnsym.training.losses import Eq12Loss, LossContext, PositionStepLoss, build_run_loss

REPO = Path(__file__).resolve().parents[2]
F64 = torch.float64
H = 0.05


def potential(d: int, mass: str = "identity", seed: int = 0) -> Potential:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        V = Potential(d, hidden=(16, 16), mass=mass).double()
        if mass == "learned":  # away from M = I, so that M⁻¹ matters
            with torch.no_grad():
                V.mass_factor.add_(0.3 * torch.randn_like(V.mass_factor))
    return V


def windows(d: int, seed: int = 1) -> torch.Tensor:
    """Smooth position windows (τ+1 = 7, B = 5, d) near orbits, as the 2-body data are."""
    g = torch.Generator().manual_seed(seed)
    t = H * torch.arange(7, dtype=F64)[:, None, None]
    phase = torch.rand(1, 5, d, generator=g, dtype=F64) * 6
    return torch.cos(t + phase) + 0.1 * torch.randn(1, 5, d, generator=g, dtype=F64)


def value_and_grad(loss, V, w) -> tuple[torch.Tensor, torch.Tensor]:
    V.zero_grad()
    value = loss(V, w)
    value.backward()
    grads = [p.grad.flatten() for p in V.parameters() if p.grad is not None]  # V's output bias
    return value.detach(), torch.cat(grads)  # has none: ∇V does not see it


@pytest.mark.parametrize("scheme", ["leapfrog", "symplectic_euler", "euler"])
@pytest.mark.parametrize("mass", ["identity", "learned"])
def test_acceleration_units_scale_the_baseline_loss_and_gradient_by_dt4(scheme, mass):
    V, w = potential(4, mass), windows(4)
    pos, g_pos = value_and_grad(PositionStepLoss(H, scheme), V, w)
    acc, g_acc = value_and_grad(PositionStepLoss(H, scheme, units="acceleration"), V, w)
    assert float(pos) > 1e-8  # a residual to scale
    torch.testing.assert_close(acc * H**4, pos, rtol=1e-12, atol=0)
    torch.testing.assert_close(
        g_acc * H**4, g_pos, rtol=1e-10, atol=1e-12 * float(g_pos.abs().max())
    )
    cosine = torch.dot(g_acc, g_pos) / (g_acc.norm() * g_pos.norm())
    assert abs(float(cosine) - 1) < 1e-12


def test_acceleration_units_are_eq13s_residual_computed_independently():
    """Leapfrog (Eq. 13): M⁻¹[M(q⁺ − 2q + q⁻)/Δt² + ∇V(q)], with ∇V by autograd here and M⁻¹
    by a dense inverse, against the loss (which predicts q⁺ through ``explicit_step``)."""
    V, w = potential(3, "learned"), windows(3)
    q = w[1:-1].reshape(-1, 3).detach().requires_grad_(True)
    (grad_v,) = torch.autograd.grad(V(q).sum(), q)
    M = V.mass_matrix().detach()
    second = (w[2:] - 2 * w[1:-1] + w[:-2]).reshape(-1, 3)
    residual = (second @ M.T / H**2 + grad_v) @ torch.linalg.inv(M).T
    expected = (residual**2).mean()
    with torch.no_grad():
        got = PositionStepLoss(H, "leapfrog", units="acceleration")(V, w)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=0)


def test_eq12_in_position_units_is_dt4_times_its_default():
    V, w = potential(4), windows(4)
    acc, g_acc = value_and_grad(Eq12Loss(H), V, w)
    pos, g_pos = value_and_grad(Eq12Loss(H, units="position"), V, w)
    torch.testing.assert_close(pos, acc * H**4, rtol=1e-12, atol=0)
    torch.testing.assert_close(
        g_pos, g_acc * H**4, rtol=1e-10, atol=1e-12 * float(g_pos.abs().max())
    )


def test_the_default_units_keep_the_baselines_bits():
    """Default PositionStepLoss: bit for bit the MSE of q̂⁺ − q⁺ (what every table before the option
    was trained on), and Eq12Loss bit for bit its residual's MSE in acceleration units."""
    from hnnsym.ode.lagrangian import explicit_step

    V, w = potential(2).float(), windows(2).float()
    d = 2
    pred = explicit_step(
        "leapfrog", V, V.mass_matrix(), w[:-2].reshape(-1, d), w[1:-1].reshape(-1, d), H
    )
    before = ((pred - w[2:].reshape(-1, d)) ** 2).mean()
    assert torch.equal(PositionStepLoss(H)(V, w), before)
    assert torch.equal(Eq12Loss(H, units="acceleration")(V, w), Eq12Loss(H)(V, w))


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", list(overrides))


@pytest.mark.parametrize(
    "experiment, method, units",
    [
        ("ddlm_two_body", "ddlm_leapfrog", "acceleration"),
        ("ddlm_two_body", "ddlm_leapfrog_proposed", "acceleration"),
        ("ddlm_two_body", "ddlm_euler", "acceleration"),
        ("ddlm_two_body", "ddlm", "acceleration"),
        ("ddlm_pendulum", "ddlm_leapfrog", "position"),  # Tables 2-3 as measured: unchanged
        ("ddlm_mass_spring", "ddlm_symplectic_euler", "position"),
        ("ddlm_pendulum", "ddlm", "acceleration"),
    ],
)
def test_experiments_choose_the_units(experiment, method, units):
    cfg = composed(f"experiment={experiment}", f"method={method}")
    context = LossContext(get_integrator("implicit_midpoint"), "backprop", H)
    assert build_run_loss(cfg.method, context).units == units


def test_unknown_units_are_a_one_line_user_error():
    cfg = composed("experiment=ddlm_two_body", "method=ddlm_leapfrog", "method.loss.units=metres")
    context = LossContext(get_integrator("implicit_midpoint"), "backprop", H)
    with pytest.raises(UserError, match=r"method.loss: units must be one of .*'metres'"):
        build_run_loss(cfg.method, context)
