"""The fast path of issue 16 computes the same thing: tanh as 2σ(2z) − 1 in the closed-form ∇H."""

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
