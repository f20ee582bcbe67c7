"""What a model offers beyond the kernel's capabilities (``hnnsym.ode.capabilities``), declared
in the same ``capabilities`` attribute: read by training (what it observes) and evaluation (what
it reports)."""

from __future__ import annotations

from enum import StrEnum

from hnnsym.ode.capabilities import check_declared


class ModelCapability(StrEnum):
    DAMPING = "damping"  # damping_matrix(y) -> D (2d, 2d) or (B, 2d, 2d), PSD: ẏ = (J⁻¹ − D)∇H
    POSITION_ONLY = "position_only"  # learns from positions alone (observes q, not (q, p))
    MASSES = "masses"  # masses() -> learned body masses (N,)


MODEL_REQUIRES: dict[str, tuple[str, ...]] = {
    ModelCapability.DAMPING: ("damping_matrix",),
    ModelCapability.POSITION_ONLY: (),
    ModelCapability.MASSES: ("masses",),
}


def check_model(model: object) -> None:
    """``check_declared`` with the model capabilities' requirements: call where a model is built."""
    check_declared(model, MODEL_REQUIRES)
