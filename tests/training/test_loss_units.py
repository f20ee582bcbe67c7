"""train.loss_units=recording: the rollout loss's squared error weighted per state component by the
square of the component's scale, so that it is the error in the recording's units that evaluate
reports, not in the data file's scaled units."""

from __future__ import annotations

import functools

import pytest
import torch

from hnnsym.config.schemas import validated
from hnnsym.data.units import Units
from hnnsym.errors import UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.models import HNN
from hnnsym.training.losses import FiniteDifferenceLoss, LossContext, WindowLoss, build_loss
from hnnsym.training.stage import build_trainer, recording_weights

MIDPOINT = get_integrator("implicit_midpoint")
OBS_DT = 0.1


def windows(tau: int = 4, batch: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return 0.5 * torch.randn(tau + 1, batch, 2, generator=g, dtype=torch.float64)


def model() -> HNN:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return HNN(1, hidden=(8,)).double()


@pytest.mark.parametrize("segments", [1, 2])
def test_the_weighted_loss_is_the_squared_error_in_the_recordings_units(segments):
    """With weights (a², b²), the loss equals the plain loss of the prediction and the windows
    both taken to the recording's units (times (a, b)), in one window or in segments."""
    scales = torch.tensor([3.0, 0.5], dtype=torch.float64)
    weights = tuple(float(s) ** 2 for s in scales)
    w, H = windows(), model()
    weighted = WindowLoss(MIDPOINT, "backprop", OBS_DT, segments=segments, weights=weights)
    pieces = torch.cat([w[k * 2 : k * 2 + 5 - 2 * (segments - 1)] for k in range(segments)], 1)
    pred, _ = weighted.rollout(H, pieces[0], pieces, "backprop")
    in_recording = ((pred[1:] * scales - pieces[1:] * scales) ** 2).sum(dim=(0, 2)).mean()
    torch.testing.assert_close(weighted(H, w), in_recording, rtol=1e-13, atol=0)
    plain = WindowLoss(MIDPOINT, "backprop", OBS_DT, segments=segments)(H, w)
    assert not torch.isclose(plain, in_recording)  # the weights change the value


def test_recording_weights_of_states_and_of_rates():
    """(q, p) states: the squares of Units.state_scales, (a, action/a); the (q, q̇) a model with
    momenta of its own observes: (a, a/time)."""
    units = Units(time=0.5, q=(2.0,), action=3.0)
    assert recording_weights(units, 2, velocities=False) == (4.0, 2.25)
    assert recording_weights(units, 2, velocities=True) == (4.0, 16.0)
    assert recording_weights(units, 1, velocities=False) == (4.0,)
    assert recording_weights(Units.identity(2), 4, velocities=True) == (1.0,) * 4


def test_weights_are_refused_where_they_do_not_apply():
    weights = (1.0, 256.0)
    context = LossContext(MIDPOINT, "backprop", OBS_DT, weights=weights)
    with pytest.raises(ValueError, match=r"train.loss_units=recording applies to losses that"):
        build_loss(functools.partial(FiniteDifferenceLoss), context)
    with pytest.raises(ValueError, match="fused=true takes no per-component weights"):
        WindowLoss(MIDPOINT, "backprop", OBS_DT, weights=weights, fused=True)
    with pytest.raises(ValueError, match="init=learned"):  # its starts take unweighted steps
        WindowLoss(MIDPOINT, "backprop", OBS_DT, weights=weights, init="learned")
    with pytest.raises(ValueError, match="finite and > 0"):
        WindowLoss(MIDPOINT, "backprop", OBS_DT, weights=(1.0, 0.0))


def test_the_train_stage_weights_the_loss_by_the_files_units(
    compose_config, tiny_dataset, tmp_path
):
    path = tiny_dataset()
    base = [f"data_dir={path.parents[2]}", "system=double_well", f"run_dir={tmp_path / 'run'}",
            "train.batch_size=4", "train.window=4", "train.progress=false", "device=cpu"]  # fmt: skip
    data = torch.randn(8, 7, 2, dtype=torch.float64)
    attrs = {"units": Units(time=0.25, q=(2.0,), action=8.0).as_attr()}
    system = {"name": "double_well", "params": {}}
    for option, expected in (("stored", None), ("recording", (4.0, 16.0))):
        cfg = validated(compose_config("train", [*base, f"train.loss_units={option}"]), "train")
        trainer = build_trainer(
            cfg, tmp_path / "run", data, data[:4], OBS_DT, 1, path, system, attrs
        )
        assert trainer.loss.weights == expected
    with pytest.raises(UserError, match="loss_units"):
        validated(compose_config("train", [*base, "train.loss_units=pixels"]), "train")
