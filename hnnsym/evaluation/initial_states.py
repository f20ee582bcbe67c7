"""Start states fitted to the first observations of noisy test trajectories (``eval.init=fitted``):
a Levenberg–Marquardt least-squares fit through ``hnnsym.evaluation.rollout.rollout``."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from hnnsym.evaluation.rollout import Hamiltonian, rollout
from hnnsym.ode.integrators import Integrator


def fit_initial_states(
    H: Hamiltonian,
    observed: Tensor,
    dt: float,
    integrator: str | Integrator = "implicit_midpoint",
    *,
    substeps: int = 1,
    iterations: int = 10,
    segment: int = 100,
) -> tuple[Tensor, Tensor]:
    """The start states z (B, 2d) whose rollouts under H fit the observations ``observed``
    (K+1, B, 2d) at the observation times best in least squares,
    z_b = argmin Σ_{t=0..K} ||Φ_t(z) − y_{t,b}||², Φ_t the flow of ``rollout`` (same integrator,
    dt and substeps as the evaluation's rollout). Levenberg–Marquardt per trajectory from z = y_0:
    (JᵀJ + λ diag JᵀJ) δ = −Jᵀr with J = ∂Φ_t/∂z by central differences (step ε(1 + |z_j|),
    ε = eps^(1/3) of the dtype; 4d + 1 rollouts per iteration, no graph), a step kept only where it
    lowers that trajectory's cost (λ /10, else λ ×10), ``iterations`` times. A trajectory whose
    rollout fails keeps its last good z. Returns z and the RMS residual per observation (B,)."""
    if int(iterations) != iterations or iterations < 1:
        raise ValueError(f"iterations must be a whole number >= 1, got {iterations}")
    steps, (B, width) = observed.shape[0] - 1, observed.shape[1:]
    eps = torch.finfo(observed.dtype).eps ** (1 / 3)
    eye = torch.eye(width, dtype=observed.dtype, device=observed.device)

    def residuals_and_jacobian(z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """r (K+1, B, 2d), J (K+1, B, 2d, 2d) and cost (B,) (inf where a rollout failed)."""
        step = eps * (1 + z.abs())  # (B, 2d)
        shifts = (step[None] * eye[:, None, :]).repeat_interleave(2, 0)  # (4d, B, 2d): ±e_j
        shifts[1::2] *= -1
        starts = torch.cat([z[None], z[None] + shifts]).reshape(-1, width)
        states = rollout(H, starts, dt, steps, integrator, substeps=substeps, segment=segment)
        ys = states.states.reshape(steps + 1, 2 * width + 1, B, width)
        r = ys[:, 0] - observed
        jac = (ys[:, 1::2] - ys[:, 2::2]) / (2 * step.T[None, :, :, None])  # (K+1, 2d_j, B, 2d_i)
        jac = jac.permute(0, 2, 3, 1)  # (K+1, B, 2d_i, 2d_j)
        cost = (r**2).sum(dim=(0, 2))
        bad = ~(torch.isfinite(cost) & torch.isfinite(jac).all(dim=(0, 2, 3)))
        return r, jac, torch.where(bad, math.inf, cost)

    z = observed[0].clone()
    r, jac, cost = residuals_and_jacobian(z)
    lam = torch.full((B,), 1e-3, dtype=z.dtype, device=z.device)
    for _ in range(int(iterations)):
        if not bool(torch.isfinite(cost).any()):
            break
        normal = torch.einsum("tbij,tbik->bjk", jac, jac)
        damped = normal + lam[:, None, None] * torch.diag_embed(normal.diagonal(dim1=1, dim2=2))
        grad = torch.einsum("tbij,tbi->bj", jac, r)
        ok = torch.isfinite(cost)
        delta = torch.zeros_like(z)
        delta[ok] = -torch.linalg.solve(damped[ok], grad[ok])
        r_new, jac_new, cost_new = residuals_and_jacobian(z + delta)
        better = cost_new < cost
        z = torch.where(better[:, None], z + delta, z)
        r = torch.where(better[None, :, None], r_new, r)
        jac = torch.where(better[None, :, None, None], jac_new, jac)
        cost = torch.where(better, cost_new, cost)
        lam = torch.where(better, lam / 10, lam * 10)
    return z, (cost / ((steps + 1) * width)).sqrt()
