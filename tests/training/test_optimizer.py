"""The trainer's optimizer (train.optimizer): torch's fused Adam step by default, the same
iterates as its per-parameter loop to rounding, and a one-line error for a class without it."""

from __future__ import annotations

import pytest
import torch

from hnnsym.config.build import build_optimizer
from hnnsym.errors import UserError
from hnnsym.physics.models import HNN


def _model() -> HNN:
    """float64: the two steps differ by rounding only, which Adam's normalised steps would
    amplify over many steps in float32."""
    torch.manual_seed(0)
    return HNN(dim=2, hidden=[16, 32, 16], activation="tanh").double()


def _iterate(optimizer: torch.optim.Optimizer, model: HNN, steps: int = 50) -> list[torch.Tensor]:
    """``steps`` steps on the gradients of a fixed regression, from the same weights."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g, dtype=torch.float64)
    target = torch.randn(64, generator=g, dtype=torch.float64)
    for _ in range(steps):
        optimizer.zero_grad()
        ((model(x).squeeze(-1) - target) ** 2).mean().backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def test_the_default_optimizer_is_fused_adam_with_the_loops_iterates(compose_config):
    cfg = compose_config("train", ["train.weight_decay=1e-4"])
    model = _model()
    fused = build_optimizer(cfg.train, model)
    assert isinstance(fused, torch.optim.Adam) and fused.defaults["fused"] is True
    assert fused.defaults["lr"] == cfg.train.lr and fused.defaults["weight_decay"] == 1e-4
    ours = _iterate(fused, model)
    other = _model()
    loop = torch.optim.Adam(other.parameters(), lr=cfg.train.lr, weight_decay=1e-4, foreach=False)
    theirs = _iterate(loop, other)
    moved = max(float((a - p.detach()).abs().max()) for a, p in zip(ours, _model().parameters()))
    assert moved > 0.1  # the steps did move the weights
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_class_without_a_fused_step_is_a_one_line_error(compose_config):
    cfg = compose_config("train", ["train.optimizer._target_=torch.optim.RMSprop"])
    with pytest.raises(
        UserError, match=r"unexpected keyword argument 'fused' \(without torch's fused step"
    ):
        build_optimizer(cfg.train, _model())
    cfg = compose_config(
        "train", ["train.optimizer._target_=torch.optim.RMSprop", "~train.optimizer.fused"]
    )
    assert isinstance(build_optimizer(cfg.train, _model()), torch.optim.RMSprop)
