"""A learned energy with learned damping: ż = (J⁻¹ − R_θ(z)) ∇H_θ(z) (port-Hamiltonian, no input).

H_θ is the paper's MLP (``HNN``); R_θ is symmetric positive semi-definite by construction,
R = L Lᵀ with L lower triangular, so dH_θ/dt = −∇H_θᵀ R ∇H_θ ≤ 0: the learned energy can only
decrease. ``damping``:

- ``constant``: L a free lower-triangular matrix;
- ``state``: L(z) from a small MLP of the state (its entries filled row by row into the lower
  triangle), so R(z) = L(z) L(z)ᵀ varies over phase space.

``damping_on``: ``p`` (R acts on the momenta only, R = diag(0_d, L Lᵀ) with L d×d: ṗ gains
−R_pp ∂H/∂p, the friction of mechanics, and q̇ = ∂H/∂p stays exact) or ``all`` (L 2d×2d).
``periodic`` angles enter H_θ and R_θ(z) through (cos q_i, sin q_i) (``HNN``).
At initialisation L = √damping_init · I (for ``state``: the MLP's last layer is zero and its bias
gives that L), so R starts at damping_init on its block.

The model has a Hamiltonian (it declares ``HAMILTONIAN``, ``forward`` = H_θ, the grid H errors of
``evaluate`` apply to it), but its flow is not Hamiltonian: ``vector_field`` returns the damped
field (``OWN_FIELD``), so integrators that step the split Hamiltonian flow (tao, reversible_leapfrog) refuse it,
and the Gauss–Legendre methods (implicit midpoint included) are well-defined but no longer
symplectic for it (there is no symplectic structure to preserve).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import dissipative_field, hamiltonian_gradient
from hnnsym.physics.capabilities import ModelCapability
from hnnsym.physics.models import HNN, mlp

DAMPING_KINDS = ("constant", "state")
DAMPING_ON = ("p", "all")


class DissipativeHNN(HNN):
    """H_θ (an ``HNN``) and a positive semi-definite damping R_θ: f = (J⁻¹ − R_θ)∇H_θ."""

    capabilities = (HNN.capabilities - {ModelCapability.LINEAR_HEAD}) | {
        Capability.OWN_FIELD, ModelCapability.DAMPING,
    }  # fmt: skip

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (16, 32, 16),
        activation: str = "tanh",
        damping: str = "constant",
        damping_on: str = "p",
        damping_hidden: Sequence[int] = (16,),
        damping_init: float = 0.01,
        periodic: Sequence[int] | None = (),
        output_gain: float = 1.0,
    ):
        super().__init__(dim, hidden, activation, periodic, output_gain)
        if damping not in DAMPING_KINDS:
            raise ValueError(f"damping must be one of {DAMPING_KINDS}, got {damping!r}")
        if damping_on not in DAMPING_ON:
            raise ValueError(f"damping_on must be one of {DAMPING_ON}, got {damping_on!r}")
        if not (math.isfinite(damping_init) and damping_init > 0):
            raise ValueError(f"damping_init must be finite and > 0, got {damping_init}")
        self.damping_kind = damping
        self.damping_on = damping_on
        n = dim if damping_on == "p" else 2 * dim  # the damped block is n x n
        self.damped = n
        rows, cols = torch.tril_indices(n, n)
        self.register_buffer("_rows", rows, persistent=False)
        self.register_buffer("_cols", cols, persistent=False)
        scale = math.sqrt(damping_init)
        if damping == "constant":
            self.damping_factor = nn.Parameter(scale * torch.eye(n))
        else:
            self.damping_net = mlp(self.inputs.n_out, damping_hidden, activation, n_out=len(rows))
            last = self.damping_net[-1]
            with torch.no_grad():
                last.weight.zero_()
                last.bias.copy_(scale * (rows == cols).to(last.bias.dtype))

    def damping_factor_matrix(self, y: Tensor | None = None) -> Tensor:
        """L, lower triangular: (n, n) for constant damping, (..., n, n) at states y for
        state-dependent damping (n = d for ``damping_on=p``, 2d for ``all``)."""
        if self.damping_kind == "constant":
            return torch.tril(self.damping_factor)
        if y is None:
            raise ValueError("state-dependent damping needs the states y")
        entries = self.damping_net(self.inputs(y))
        L = entries.new_zeros(*y.shape[:-1], self.damped, self.damped)
        L[..., self._rows, self._cols] = entries
        return L

    def damping_block(self, y: Tensor | None = None) -> Tensor:
        """R's damped block L Lᵀ: (n, n), or (..., n, n) for state-dependent damping."""
        L = self.damping_factor_matrix(y)
        return L @ L.mT

    def damping_matrix(self, y: Tensor | None = None) -> Tensor:
        """R (2d, 2d), or (..., 2d, 2d) at states y for state-dependent damping: symmetric positive
        semi-definite; zero outside the p block for ``damping_on=p``."""
        block = self.damping_block(y)
        if self.damping_on == "all":
            return block
        d = self.dim
        R = block.new_zeros(*block.shape[:-2], 2 * d, 2 * d)
        R[..., d:, d:] = block
        return R

    def vector_field(self, y: Tensor) -> Tensor:
        """f(y) = (J⁻¹ − R_θ(y)) ∇H_θ(y): (..., 2d) -> (..., 2d)."""
        return dissipative_field(hamiltonian_gradient(self, y), self.damping_matrix(y))


def is_dissipative_model(model: object) -> bool:
    """Whether ``model`` learns a damping matrix (``DissipativeHNN``)."""
    return has(model, ModelCapability.DAMPING)
