"""Models with momenta of their own (``ModelCapability.OWN_MOMENTA``): the window loss maps each
window's observed start (q, q̇) by ``to_state`` and compares ``to_observation`` of the rollout
with the observations; a data file's q̇ (``hnnsym.data.velocities``); the declaration is checked."""

from __future__ import annotations

import pytest
import torch

from hnnsym.compatibility import momenta_problem
from hnnsym.data.velocities import VelocityMap, check_quadratic, velocity_map
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.capabilities import ModelCapability, check_model
from hnnsym.physics.lagrangian_models import LagrangianModel, observed_rollout
from hnnsym.physics.models import HNN
from hnnsym.physics.systems import get_system, measured
from hnnsym.training.losses import LossContext, WindowLoss


class Spy(LagrangianModel):
    """Records the arguments of every to_state call."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def to_state(self, q, qdot):
        self.calls.append((q.detach().clone(), qdot.detach().clone()))
        return super().to_state(q, qdot)


def windows(tau: int = 3, batch: int = 5, d: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return 0.5 * torch.randn(tau + 1, batch, 2 * d, generator=g, dtype=torch.float64)


def loss(**kw) -> WindowLoss:
    return WindowLoss(
        **vars(LossContext(get_integrator("implicit_midpoint"), "backprop", 0.1)) | kw
    )


def test_window_starts_go_through_to_state_and_the_loss_is_in_q_qdot():
    torch.manual_seed(0)
    model = Spy(2, damping="constant").double()
    w = windows()
    value = loss()(model, w)
    q0, qdot0 = model.calls[0]
    assert torch.equal(q0, w[0, :, :2]) and torch.equal(qdot0, w[0, :, 2:])
    q, qdot = observed_rollout(model, w[0, :, :2], w[0, :, 2:], 0.1, 3, gradient="backprop")
    expected = ((torch.cat([q, qdot], -1)[1:] - w[1:]) ** 2).sum(dim=(0, 2)).mean()
    torch.testing.assert_close(value, expected)


def test_segments_and_smoothed_starts_also_start_from_to_state():
    model = Spy(2).double()
    w = windows(tau=4)
    loss(segments=2)(model, w)
    assert model.calls[-1][0].shape == (10, 2)  # 2 segments x 5 windows
    starts = torch.cat([w[0], w[2]])
    torch.testing.assert_close(torch.cat(model.calls[-1], -1), starts)
    model.calls.clear()
    assert torch.isfinite(loss(init="smoothed", init_iterations=2)(model, w))
    assert len(model.calls) == 3  # two Gauss-Newton rollouts and the loss's


def test_a_model_without_own_momenta_is_compared_in_its_own_states():
    torch.manual_seed(0)
    model = HNN(2).double()
    w = windows()
    pred, _ = loss().rollout(model, w[0], w, "backprop")
    torch.testing.assert_close(pred[0], w[0])  # no map at the start


def test_fused_loss_refuses_a_model_with_own_momenta():
    with pytest.raises(UserError, match="fused"):
        loss(fused=True)(LagrangianModel(2).double(), windows())


def test_declaring_own_momenta_needs_the_maps():
    class Bad(torch.nn.Module):
        capabilities = frozenset({ModelCapability.OWN_MOMENTA})

    with pytest.raises(TypeError, match="to_state"):
        check_model(Bad())
    check_model(LagrangianModel(2))


@pytest.mark.parametrize("name", ["pendulum", "chain_pendulum_angles"])
def test_velocities_of_a_known_system_are_dH_dp_and_map_back(name):
    system = get_system(name)
    g = torch.Generator().manual_seed(1)
    y = torch.randn(7, 2 * system.dim, generator=g, dtype=torch.float64)
    mapping = velocity_map(system, {})
    x = mapping.to_velocities(y)
    yy = y.clone().requires_grad_(True)
    (dH,) = torch.autograd.grad(system(yy).sum(), yy)
    torch.testing.assert_close(x[:, system.dim :], dH[:, system.dim :])
    torch.testing.assert_close(x[:, : system.dim], y[:, : system.dim])
    torch.testing.assert_close(mapping.to_momenta(x), y)
    assert check_quadratic(mapping, system, y, "f.h5") is None


def test_an_H_not_quadratic_in_p_is_refused():
    system = get_system("custom", hamiltonian="q**2/2 + p**4/4")
    y = torch.tensor([[0.1, 0.5], [0.3, -1.2]], dtype=torch.float64)
    problem = check_quadratic(velocity_map(system, {}), system, y, "f.h5")
    assert problem is not None and "not quadratic in p" in problem


def recording_attrs(**ingest) -> dict:
    config = "\n".join(f"{k}: {v}" for k, v in ({"mass": 2.0} | ingest).items())
    return {"ingest_config": config,
            "units": {"time": 0.5, "q": [4.0], "action": 8.0, "periodic": []}}  # fmt: skip


def test_recording_velocities_are_p_over_the_scaled_mass():
    attrs = recording_attrs(velocities="[v]")
    mapping = velocity_map(measured(1), attrs)
    assert isinstance(mapping, VelocityMap)
    # p̃ = m v a / c, q̃̇ = v τ / a  ->  q̃̇ = p̃ c τ / (m a²) = p̃ · 8 · 0.5 / (2 · 16)
    y = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    torch.testing.assert_close(
        mapping.to_velocities(y), torch.tensor([[1.0, 3.0 / 8]], dtype=torch.float64)
    )


@pytest.mark.parametrize(
    ("attrs", "width", "fragment"),
    [
        (recording_attrs(momenta="[p]"), 2, "not ingested with velocities"),
        (recording_attrs(velocities="[v]"), 1, "positions only"),
    ],
)
def test_recordings_without_velocities_are_refused_in_one_sentence(attrs, width, fragment):
    states = torch.zeros(3, width, dtype=torch.float64)
    problem = momenta_problem(LagrangianModel(1), measured(1), attrs, states, "r.h5")
    assert problem is not None and fragment in problem and "\n" not in problem
    assert momenta_problem(HNN(1), measured(1), attrs, states, "r.h5") is None
