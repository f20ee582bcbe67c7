"""The learned damping of a dissipative model beside the true rate: the extra that evaluation
reports for a model declaring ``ModelCapability.DAMPING`` (or data with a known damping rate)."""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.ode.capabilities import has
from hnnsym.physics.capabilities import ModelCapability


def damping_metrics(
    model: object, states: Tensor, true_rate: float | None, chunk: int = 65536
) -> dict[str, object]:
    """The learned damping beside the true one, for a model with ``damping_matrix(y)``
    (``hnnsym.physics.dissipative.DissipativeHNN``: f = (J⁻¹ − R)∇H) and states (..., 2d).

    R_pp, R's momentum block, is averaged over ``states`` (constant R: R itself). A damped
    built-in system has R_pp = γ I (ṗ = −∂H/∂q − γ ∂H/∂p), so the learned rate is the mean
    diagonal of R_pp (``damping_learned``), also given as its eigenvalues; ``damping_off_p`` is the
    mean |entry| of R outside the p block (0 unless damping_on=all). ``damping_rel_err`` =
    |learned − true| / true when the true rate is known and > 0. For a model without damping the
    learned entries are None.
    """
    out: dict[str, object] = {"damping_true": true_rate}
    if not has(model, ModelCapability.DAMPING):
        return out | dict.fromkeys(
            ("damping_learned", "damping_eigenvalues", "damping_off_p", "damping_rel_err")
        )
    n = states.shape[-1]
    flat = states.reshape(-1, n)
    R = flat.new_zeros(n, n)
    with torch.no_grad():
        for part in flat.split(chunk):  # constant R: (n, n), state-dependent: (B, n, n)
            R += model.damping_matrix(part).to(R).expand(len(part), n, n).sum(0)
    R /= max(len(flat), 1)
    d = n // 2
    block = R[d:, d:]
    learned = float(torch.diagonal(block).mean())
    off = R.clone()
    off[d:, d:] = 0
    out |= {
        "damping_learned": learned,
        "damping_eigenvalues": torch.linalg.eigvalsh(0.5 * (block + block.T)).tolist(),
        "damping_off_p": float(off.abs().mean()),
        "damping_rel_err": (
            abs(learned - true_rate) / true_rate
            if true_rate is not None and true_rate > 0
            else None
        ),
    }
    return out
