"""Learned Hamiltonians: nn.Modules mapping states (B, 2d) -> energies (B,).

``NODE`` is the exception: an unstructured vector field (B, 2d) -> (B, 2d) with no H, for
comparison (``has_hamiltonian = False``; ``hnnsym.ode.dynamics.vector_field`` calls its own
``vector_field``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

ACTIVATIONS = {"tanh": nn.Tanh, "softplus": nn.Softplus, "sin": None, "gelu": nn.GELU}


class Sin(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(x)


def mlp(
    n_in: int, hidden: Sequence[int], activation: str = "tanh", n_out: int = 1
) -> nn.Sequential:
    """n_in -> hidden... -> n_out, smooth activation (H must be twice differentiable)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = n_in
    for h in hidden:
        layers += [nn.Linear(width, h), Sin() if activation == "sin" else ACTIVATIONS[activation]()]
        width = h
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


class HNN(nn.Module):
    """H_θ(q, p) as one MLP over the whole state (seed 000: 2d -> 16 -> 32 -> 16 -> 1, tanh)."""

    separable = False

    def __init__(self, dim: int, hidden: Sequence[int] = (16, 32, 16), activation: str = "tanh"):
        super().__init__()
        self.dim = dim
        self.net = mlp(2 * dim, hidden, activation)

    def forward(self, y: Tensor) -> Tensor:
        return self.net(y).squeeze(-1)


class SeparableHNN(nn.Module):
    """H_θ(q, p) = T_θ(p) + V_θ(q).

    ``kinetic="mlp"`` learns T with its own MLP; ``kinetic="mass"`` fixes T = |p|^2 / (2m) with a
    learned mass m = exp(log_mass). Separability lets leapfrog and symplectic Euler run explicitly.
    """

    separable = True

    def __init__(
        self,
        dim: int,
        hidden: Sequence[int] = (16, 32, 16),
        activation: str = "tanh",
        kinetic: str = "mlp",
    ):
        super().__init__()
        if kinetic not in ("mlp", "mass"):
            raise ValueError(f"kinetic must be 'mlp' or 'mass', got {kinetic!r}")
        self.dim = dim
        self.kinetic_kind = kinetic
        self.potential_net = mlp(dim, hidden, activation)
        if kinetic == "mlp":
            self.kinetic_net = mlp(dim, hidden, activation)
        else:
            self.log_mass = nn.Parameter(torch.zeros(()))

    def kinetic(self, p: Tensor) -> Tensor:
        if self.kinetic_kind == "mlp":
            return self.kinetic_net(p).squeeze(-1)
        return 0.5 * (p**2).sum(-1) * torch.exp(-self.log_mass)

    def potential(self, q: Tensor) -> Tensor:
        return self.potential_net(q).squeeze(-1)

    def forward(self, y: Tensor) -> Tensor:
        return self.kinetic(y[..., self.dim :]) + self.potential(y[..., : self.dim])


class NODE(nn.Module):
    """An unstructured vector field f_θ(y) = MLP(y), 2d -> hidden -> 2d: a neural ODE, no H.

    ``forward`` and ``vector_field`` both return f_θ(y) (B, 2d); integrators step it like any other
    field, but it conserves nothing and has no energy to compare on a grid.
    """

    separable = False
    has_hamiltonian = False

    def __init__(self, dim: int, hidden: Sequence[int] = (16, 32, 16), activation: str = "tanh"):
        super().__init__()
        self.dim = dim
        self.net = mlp(2 * dim, hidden, activation, n_out=2 * dim)

    def forward(self, y: Tensor) -> Tensor:
        return self.net(y)

    def vector_field(self, y: Tensor) -> Tensor:
        return self.net(y)


# The networks by the names configs written before ``_target_`` used (model.name / model.arch);
# hnnsym.config.build maps such configs, e.g. in older checkpoints, to their class.
MODELS = {"hnn": HNN, "separable_hnn": SeparableHNN, "node": NODE}
