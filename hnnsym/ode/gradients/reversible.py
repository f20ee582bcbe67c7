"""O(1)-memory exact gradients by rebuilding states bit for bit (Stam).

Needs ``integrator=reversible_leapfrog`` and a separable H = T(p) + V(q). Forward runs without a
graph and keeps only the initial and final int64 states (and H's parameters); memory does not grow
with the number of steps. Backward walks the steps n = N-1 ... 0 in reverse, substep by substep:

  undo drift   q_½ = q_{n+1} + R(g),  g = -h/2 T'(p_{n+1})   λ_p -= (∂g/∂p)ᵀ λ_q,  dθ -= (∂g/∂θ)ᵀ λ_q
  undo kick    p_n = p_{n+1} + R(k),   k =  h   V'(q_½)      λ_q -= (∂k/∂q)ᵀ λ_p,  dθ -= (∂k/∂θ)ᵀ λ_p
  undo drift   q_n = q_½ + R(g'),      g' = -h/2 T'(p_n)     λ_p -= (∂g'/∂p)ᵀ λ_q, dθ -= ...
  jump         λ += ∂L/∂y_n

The undo substeps are the forward step with -h, so the integers are rebuilt exactly; the increment
of the undo is minus the forward one as a function, hence the minus signs: together these are the
vector-Jacobian products of the forward float map (rounding straight-through), so the result equals
``gradient=backprop`` through the same fixed-point integrator up to float rounding (the adjoint
position Verlet of Stam, eq. 16). Each force is evaluated once, with its graph, and serves both
the undo (its value) and the VJP; T'(p_n) serves the two half drifts around y_n with one VJP on the
summed cotangent. At most one force graph is alive at a time. At the end the rebuilt initial state
is compared with the saved one, and a mismatch (forces that do not repeat bit for bit) raises.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from hnnsym.ode.gradients.base import GradientMethod
from hnnsym.ode.integrators.reversible import ReversibleLeapfrog, as_separable
from hnnsym.ode.problem import Problem


class Reversible(GradientMethod):
    name = "reversible"
    needs = ("reversible",)

    def check(self, problem: Problem) -> None:
        super().check(problem)
        as_separable(problem.H, "gradient=reversible")

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        return _ReversibleFunction.apply(problem, y0, *problem.params())


def _vjp(out: Tensor, x: Tensor, params: list[Tensor], cot: Tensor, retain: bool = False):
    """(∂out/∂x)ᵀ cot and (∂out/∂θ)ᵀ cot (None where θ is unused)."""
    if not out.requires_grad:  # a force that depends on neither x nor θ (e.g. constant)
        return torch.zeros_like(x), [None] * len(params)
    grads = torch.autograd.grad(out, [x, *params], cot, retain_graph=retain, allow_unused=True)
    return grads[0], grads[1:]


def _accumulate(total: list[Tensor | None], grads, sign: float = -1.0) -> None:
    for i, g in enumerate(grads):
        if g is not None:
            total[i] = sign * g if total[i] is None else total[i] + sign * g


class _ReversibleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, problem: Problem, y0: Tensor, *params: Tensor):
        integ: ReversibleLeapfrog = problem.integrator
        x0 = integ.quantize(y0)
        with torch.no_grad():
            traj, xq, xp = integ._run(
                problem.H, x0, None, problem.h, problem.steps, False, True, y0.dtype
            )
        ctx.problem = problem
        ctx.save_for_backward(x0, torch.cat([xq, xp], -1), *params)  # O(1) in steps
        return traj

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_traj: Tensor):
        x0, xN, *params = ctx.saved_tensors
        problem = ctx.problem
        integ: ReversibleLeapfrog = problem.integrator
        dT, dV = integ.forces(problem.H)
        h, a, N = problem.h, 0.5 * problem.h, problem.steps
        d = x0.shape[-1] // 2
        dtype = grad_traj.dtype
        xq, xp = xN[:, :d], xN[:, d:]
        lam_q, lam_p = grad_traj[N, :, :d], grad_traj[N, :, d:]
        grad_params: list[Tensor | None] = [None] * len(params)

        def leaf(x: Tensor) -> Tensor:
            return integ.dequantize(x, dtype).requires_grad_(True)

        with torch.enable_grad():
            if N:
                P = leaf(xp)
                g = -a * dT(P, True)  # undo the last half drift of step N-1
                inc = integ.to_fixed(g, N - 1)
                xq = integ.add(xq, inc, N - 1)
                cot = lam_q
            for n in reversed(range(N)):
                # state (q_½ of step n, p_{n+1}); g = -h/2 T'(p_{n+1}) waits for its VJP
                vjp_p, vjp_th = _vjp(g, P, params, cot)
                lam_p = lam_p - vjp_p
                _accumulate(grad_params, vjp_th)
                Q = leaf(xq)
                k = h * dV(Q, True)  # undo the kick: p_n = p_{n+1} + R(h V'(q_½))
                xp = integ.add(xp, integ.to_fixed(k, n), n)
                vjp_q, vjp_th = _vjp(k, Q, params, lam_p)
                lam_q = lam_q - vjp_q
                _accumulate(grad_params, vjp_th)
                del Q, k
                P = leaf(xp)
                g = -a * dT(P, True)  # undo the first half drift: q_n = q_½ + R(-h/2 T'(p_n))
                inc = integ.to_fixed(g, n)
                xq = integ.add(xq, inc, n)
                cot = lam_q  # λ of q_½ of step n
                lam_q = lam_q + grad_traj[n, :, :d]
                lam_p = lam_p + grad_traj[n, :, d:]
                if n:  # undo the last half drift of step n-1: same force T'(p_n)
                    xq = integ.add(xq, inc, n - 1)
                    cot = cot + lam_q  # plus λ of q_n
            if N:
                vjp_p, vjp_th = _vjp(g, P, params, cot)
                lam_p = lam_p - vjp_p
                _accumulate(grad_params, vjp_th)
        if not (torch.equal(xq, x0[:, :d]) and torch.equal(xp, x0[:, d:])):
            raise RuntimeError(
                "gradient=reversible did not rebuild the initial state bit for bit: the forces "
                "are not deterministic (enable torch.use_deterministic_algorithms(True), keep the "
                "thread count fixed; on CUDA set CUBLAS_WORKSPACE_CONFIG=:4096:8)"
            )
        return (None, torch.cat([lam_q, lam_p], -1), *grad_params)
