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
    # momenta of its own (p = M_θ(q) q̇): observes (q, q̇), mapped by to_state(q, q̇) -> y and
    # to_observation(y) -> (q, q̇) (hnnsym.data.velocities gives a data file's q̇)
    OWN_MOMENTA = "own_momenta"
    # H(y) = c·ψ(y) + b with c its last layer: head_features(y) -> ψ (..., K),
    # head_coefficients() -> c (K,), set_head_coefficients(c) (hnnsym.training.refit)
    LINEAR_HEAD = "linear_head"


MODEL_REQUIRES: dict[str, tuple[str, ...]] = {
    ModelCapability.DAMPING: ("damping_matrix",),
    ModelCapability.POSITION_ONLY: (),
    ModelCapability.MASSES: ("masses",),
    ModelCapability.OWN_MOMENTA: ("to_state", "to_observation"),
    ModelCapability.LINEAR_HEAD: ("head_features", "head_coefficients", "set_head_coefficients"),
}


def check_model(model: object) -> None:
    """``check_declared`` with the model capabilities' requirements: call where a model is built."""
    check_declared(model, MODEL_REQUIRES)
