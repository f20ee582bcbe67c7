"""What q̇ is for a data file's (q, p) states: the map (q, p) ↔ (q, q̇), q̇ = M⁻¹(q) p, for models
with momenta of their own (``ModelCapability.OWN_MOMENTA``), which observe (q, q̇).

- A generated file of a known system H: q̇ = ∂H/∂p (Hamilton's equation). For H quadratic in
  p (kinetic energy ½ pᵀ M⁻¹(q) p, every mechanical system here, angle chains included) the
  column j of M⁻¹(q) is ∂H/∂p(q, e_j) − ∂H/∂p(q, 0), and p = M(q) q̇ maps back.
  ``velocity_problem`` refuses an H that is not of that form at the file's states.
- A recording (system ``measured``) ingested with velocities (columns, or estimated from the
  positions: ``finite_difference``, ``smoothing``): ingest stored p̃ = p/b with p = m·v
  (``ingest.mass``), so in the stored units q̃̇ = dq̃/dt̃ = p̃ / m̃ with
  m̃_i = m_i a_i² / (action · time) (``hnnsym.data.units.Units``). Recordings of momenta
  (``ingest.momenta``: no mass known) or positions only have no q̇ here, and are refused.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import Tensor

from hnnsym.data.units import Units
from hnnsym.physics.systems import MEASURED, System

InverseMass = Callable[[Tensor], Tensor]  # q (..., d) -> M⁻¹(q) (..., d, d)


class VelocityMap:
    """(q, p) (..., 2d) of a data file ↔ observations (q, q̇) (..., 2d), q̇ = M⁻¹(q) p.
    Differentiable (the evaluation's fields are taken through it)."""

    def __init__(self, dim: int, inverse_mass: InverseMass):
        self.dim, self.inverse_mass = dim, inverse_mass

    def to_velocities(self, y: Tensor) -> Tensor:
        q, p = y[..., : self.dim], y[..., self.dim :]
        return torch.cat([q, (self.inverse_mass(q) @ p.unsqueeze(-1)).squeeze(-1)], -1)

    def to_momenta(self, x: Tensor) -> Tensor:
        q, v = x[..., : self.dim], x[..., self.dim :]
        p = torch.linalg.solve(self.inverse_mass(q), v.unsqueeze(-1)).squeeze(-1)
        return torch.cat([q, p], -1)


def _p_gradient(H: Callable[[Tensor], Tensor], q: Tensor, p: Tensor) -> Tensor:
    """∂H/∂p at (q, p) (..., d), with a graph when q or p carry one."""
    y = torch.cat([q, p], -1)
    if not y.requires_grad:
        y = y.detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(H(y).sum(), y, create_graph=True)
    return g[..., q.shape[-1] :]


def system_inverse_mass(system: System) -> InverseMass:
    """M⁻¹(q) of a known H quadratic in p: columns ∂H/∂p(q, e_j) − ∂H/∂p(q, 0)."""

    def inverse_mass(q: Tensor) -> Tensor:
        d = q.shape[-1]
        zero = _p_gradient(system, q, torch.zeros_like(q))
        eye = torch.eye(d, dtype=q.dtype, device=q.device)
        cols = [_p_gradient(system, q, eye[j].expand_as(q)) - zero for j in range(d)]
        return torch.stack(cols, -1)

    return inverse_mass


def recording_mass(attrs: dict, dim: int) -> np.ndarray | None:
    """The masses m̃ (d,) of a recording in its stored units (module doc), or None when it was
    not ingested with velocities."""
    config = OmegaConf.to_container(OmegaConf.create(attrs.get("ingest_config") or "{}"))
    if config.get("momenta") or config.get("velocities") is None:
        return None
    units = Units.from_attrs(attrs, dim)
    mass = np.broadcast_to(np.asarray(config.get("mass", 1.0), dtype=np.float64), (dim,))
    scales = np.asarray(units.q, dtype=np.float64)
    return mass * scales**2 / (units.action * units.time)


def velocity_problem(system: System, attrs: dict, width: int, source: str) -> str | None:
    """Why the states of ``source`` have no q̇ (one sentence), or None (module doc)."""
    if width != 2 * system.dim:
        return (f"{source} holds positions only: a model with its own momenta observes (q, q̇), "
                "and q̇ needs velocities; ingest the recording with ingest.velocities=[...]")  # fmt: skip
    if system.name == MEASURED:
        if recording_mass(attrs, system.dim) is None:
            return (f"{source} was not ingested with velocities (ingest.velocities=[...] or smoothing): "
                    "its p is not mass × velocity, so a model with its own momenta has no q̇ "
                    "to observe")  # fmt: skip
        return None
    if not system.known:
        return f"system {system.name} has no known H to give q̇ = ∂H/∂p of {source}'s states"
    return None


def velocity_map(system: System, attrs: dict) -> VelocityMap:
    """The map of a file that ``velocity_problem`` accepts."""
    if system.name == MEASURED:
        inverse = torch.as_tensor(1.0 / recording_mass(attrs, system.dim))

        def inverse_mass(q: Tensor) -> Tensor:
            m = torch.diag(inverse.to(q.dtype).to(q.device))
            return m.expand(*q.shape[:-1], system.dim, system.dim)

        return VelocityMap(system.dim, inverse_mass)
    return VelocityMap(system.dim, system_inverse_mass(system))


def check_quadratic(
    mapping: VelocityMap, system: System, states: Tensor, source: str
) -> str | None:
    """Why ∂H/∂p is not M⁻¹(q) p at ``states`` (N, 2d) of a known system (H not quadratic in
    p: q̇ is then not linear in p), or None."""
    if system.name == MEASURED:
        return None
    d = system.dim
    q, p = states[..., :d], states[..., d:]
    exact = _p_gradient(system, q, p).detach()
    linear = mapping.to_velocities(states)[..., d:].detach()
    err = float((exact - linear).abs().max())
    if err > 1e-6 * (1.0 + float(exact.abs().max())):
        return (f"system {system.name}'s H is not quadratic in p (q̇ = ∂H/∂p differs from "
                f"M⁻¹(q) p by {err:.3g} at {source}'s states): a model with its own momenta "
                "needs p = M(q) q̇")  # fmt: skip
    return None
