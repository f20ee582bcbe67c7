"""What every gradient method shares: the capability check and the stepwise backward loop."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from hnnsym.errors import IncompatibleError
from hnnsym.ode.integrators import Previous, advance
from hnnsym.ode.problem import Problem
from hnnsym.ode.running import RunningLoss

# What an integrator capability means, for the message when a gradient method needs it.
CAPABILITIES = {
    "has_stages": "Runge–Kutta stage equations (integrator=tao, reversible_leapfrog, rattle and "
    "discrete_gradient have none: use gradient=backprop, or gradient=reversible with "
    "reversible_leapfrog, or checkpoint with rattle or discrete_gradient, or symplectic_adjoint "
    "with rattle)",
    "step_of": "a one-step map step_of (integrator=tao and reversible_leapfrog step whole "
    "trajectories: use gradient=backprop, or gradient=reversible with reversible_leapfrog)",
    "reversible": "a bitwise-reversible step: integrator=reversible_leapfrog",
}


class GradientMethod:
    """How a problem is differentiated. Subclasses implement ``integrate`` and list the integrator
    capabilities they need in ``needs``."""

    name = "base"
    needs: tuple[str, ...] = ()

    def check(self, problem: Problem) -> None:
        """Raise IncompatibleError when this method cannot differentiate this problem."""
        for capability in self.needs:
            if not getattr(problem.integrator, capability, False):
                raise IncompatibleError(
                    f"gradient={self.name} needs an integrator with {CAPABILITIES[capability]}; "
                    f"integrator={problem.integrator.name} has none"
                )

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        raise NotImplementedError

    def integrate_loss(
        self, problem: Problem, y0: Tensor, loss: RunningLoss
    ) -> tuple[Tensor, Tensor]:
        """(L, y_N) of a running loss, both differentiable. The plain path: the whole trajectory,
        then ``loss.value``; the stepwise methods fold the loss into their sweeps instead."""
        ys = self.integrate(problem, y0)
        return loss.value(ys), ys[-1]


class StepwiseAdjoint(GradientMethod):
    """Forward without a graph; backward one step at a time: for n = N-1 ... 0, ``step_vjp`` turns
    λ = dL/dy_{n+1} into dL/dy_n and step n's dL/dθ, and the loss's own jump ∂L/∂y_n is added.
    Needs an integrator with stages.

    ``keep_every`` = k: the states kept for backward. k = 1 keeps all N+1; k > 1 keeps every k-th
    and recomputes the k states after a kept one, without a graph, when backward reaches them
    (one more forward pass; the same steps from the same state, so the same bits); "sqrt" takes
    k = ⌈√N⌉. Memory: N/k + k states plus one step's graph, O(√N) with "sqrt".
    """

    needs = ("has_stages",)

    def __init__(self, keep_every: int | str = 1):
        if keep_every != "sqrt" and not (
            isinstance(keep_every, int) and not isinstance(keep_every, bool) and keep_every >= 1
        ):
            raise ValueError(
                f"keep_every must be a whole number >= 1 or 'sqrt', got {keep_every!r}"
            )
        self.keep_every = keep_every

    def stride(self, steps: int) -> int:
        """k for a rollout of ``steps`` steps."""
        if self.keep_every == "sqrt":
            return max(1, math.ceil(math.sqrt(steps)))
        return int(self.keep_every)

    def advance(
        self, problem: Problem, y: Tensor, start: int, end: int, previous: Previous = ()
    ) -> tuple[list[Tensor], Previous]:
        """[y_{start+1}, …, y_end] from y = y_start, without a graph, continuing the run whose
        stage predictor history is ``previous``; and the history after y_end (see ``advance``)."""
        return advance(problem, y, start, end, previous)

    def integrate(self, problem: Problem, y0: Tensor) -> Tensor:
        return _StepwiseFunction.apply(self, problem, y0, *problem.params())

    def integrate_loss(
        self, problem: Problem, y0: Tensor, loss: RunningLoss
    ) -> tuple[Tensor, Tensor]:
        """(L, y_N) with the loss folded into the sweeps: the forward adds ℓ_n(y_n) as it steps
        and keeps only every k-th state; the backward adds ∂ℓ_n/∂y_n to λ at step n, on states
        recomputed block by block. Memory: N/k + k states, never the trajectory."""
        return _StepwiseLossFunction.apply(self, problem, loss, y0, *problem.params())

    def step_vjp(
        self, problem: Problem, y: Tensor, y_next: Tensor, lam: Tensor, params: list[Tensor], n: int
    ) -> tuple[Tensor, list[Tensor | None]]:
        raise NotImplementedError

    def block_vjp(
        self, problem: Problem, states: Tensor, jumps: Tensor, lam: Tensor, params: list[Tensor],
        start: int, grads: list[Tensor | None],
    ) -> Tensor:  # fmt: skip
        """Back over the steps of one block: ``states`` y_start..y_end (end-start+1, B, 2d),
        λ = dL/dy_end, ``jumps`` the loss's ∂L/∂y_n for n = start..end-1. Returns dL/dy_start
        and adds the block's dL/dθ to ``grads``, step by step (so the sum is the same whatever the
        blocks). One ``step_vjp`` per step; subclasses may take the block at once."""
        for n in reversed(range(start, start + len(states) - 1)):
            i = n - start
            lam, step_grads = self.step_vjp(problem, states[i], states[i + 1], lam, params, n)
            lam = lam + jumps[i]
            accumulate(grads, step_grads)
        return lam


def accumulate(total: list[Tensor | None], grads) -> None:
    """total += grads, entry by entry (None: no contribution)."""
    for i, g in enumerate(grads):
        if g is not None:
            total[i] = g if total[i] is None else total[i] + g


def _blocks(steps: int, stride: int) -> list[tuple[int, int]]:
    """The blocks [a, b) of ``stride`` steps that the stepwise functions step and recompute as
    units (one block of all steps for stride 1; none for no steps)."""
    size = stride if stride > 1 else max(steps, 1)
    return [(a, min(a + size, steps)) for a in range(0, steps, size)]


def _forward(
    method: StepwiseAdjoint, problem: Problem, y0: Tensor, stride: int
) -> Iterator[tuple[int, list[Tensor], Previous]]:
    """The forward without a graph, one run of all steps, yielded block by block: (a, [y_a, …,
    y_b], the predictor history at y_a) for the blocks [a, b) of ``stride`` steps (one block of
    all steps for stride 1). The backward recomputes a block from y_a and that history, so it
    repeats the forward's bits."""
    y, previous = y0.detach(), ()
    with torch.no_grad():
        for a, b in _blocks(problem.steps, stride) or [(0, 0)]:
            states, after = method.advance(problem, y, a, b, previous)
            yield a, [y, *states], previous
            y, previous = (states[-1] if states else y), after


def _save(ctx, kept: Tensor, last: Tensor | None, params, histories: list[Previous]) -> None:
    """save_for_backward the kept states, y_N (or None), the parameters and each kept state's
    predictor history (so that the memory meters see it)."""
    ctx.history_lengths = [len(h) for h in histories]
    ctx.has_last = last is not None
    flat = [t for h in histories for t in h]
    ctx.save_for_backward(kept, *([last] if last is not None else []), *params, *flat)


def _load(ctx) -> tuple[Tensor, Tensor | None, list[Tensor], list[Previous]]:
    kept, *rest = ctx.saved_tensors
    last = rest.pop(0) if ctx.has_last else None
    n_flat = sum(ctx.history_lengths)
    params, flat = rest[: len(rest) - n_flat], rest[len(rest) - n_flat :]
    histories, i = [], 0
    for length in ctx.history_lengths:
        histories.append(tuple(flat[i : i + length]))
        i += length
    return kept, last, params, histories


def _sweep(
    method: StepwiseAdjoint, problem: Problem, kept: Tensor, histories: list[Previous],
    stride: int, lam: Tensor, jumps_of: Callable[[Tensor, int, int], Tensor], params: list[Tensor],
) -> tuple[Tensor, list[Tensor | None]]:  # fmt: skip
    """The backward sweep shared by both stepwise functions: λ = dL/dy_N back to dL/dy_0, block by
    block (states recomputed from the kept ones and their predictor histories when stride > 1),
    with ``jumps_of(states, start, end)`` the loss's ∂L/∂y_n for n = start..end−1 of a block.
    Returns (dL/dy_0, dL/dθ)."""
    grad_params: list[Tensor | None] = [None] * len(params)
    for start, end in reversed(_blocks(problem.steps, stride)):
        if stride == 1:
            states = kept
        else:
            y, previous = kept[start // stride], histories[start // stride]
            with torch.no_grad():
                states = torch.stack([y, *method.advance(problem, y, start, end, previous)[0]])
        jumps = jumps_of(states, start, end)
        lam = method.block_vjp(problem, states, jumps, lam, params, start, grad_params)
    return lam, grad_params


class _StepwiseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, method: StepwiseAdjoint, problem: Problem, y0: Tensor, *params: Tensor):
        ctx.method, ctx.problem = method, problem
        ctx.stride = method.stride(problem.steps)
        states, starts, histories = [], [], []
        for _, block, previous in _forward(method, problem, y0, ctx.stride):
            states += block[:-1]
            starts.append(block[0])
            histories.append(previous)
        states.append(block[-1])
        traj = torch.stack(states)
        kept = traj if ctx.stride == 1 else torch.stack(starts)
        _save(ctx, kept, None, params, histories if ctx.stride > 1 else [])
        return traj

    @staticmethod
    def backward(ctx, grad_traj: Tensor):
        kept, _, params, histories = _load(ctx)
        lam, grad_params = _sweep(
            ctx.method, ctx.problem, kept, histories, ctx.stride, grad_traj[-1],
            lambda states, start, end: grad_traj[start:end], params,
        )  # fmt: skip
        return (None, None, lam, *grad_params)


class _StepwiseLossFunction(torch.autograd.Function):
    """(L, y_N) of a running loss. Saves every k-th state (all N+1 with k = 1), its predictor
    history, and y_N; the loss terms are summed block by block as the forward steps (k states at
    a time)."""

    @staticmethod
    def forward(ctx, method: StepwiseAdjoint, problem: Problem, loss: RunningLoss, y0: Tensor,
                *params: Tensor):  # fmt: skip
        N, k = problem.steps, method.stride(problem.steps)
        value = torch.zeros((), dtype=y0.dtype, device=y0.device)
        starts, histories = [], []
        for a, block, previous in _forward(method, problem, y0, k):
            last = block[-1]
            with torch.no_grad():  # y_a … y_{b-1}, and y_N with the last block
                value = value + loss.terms(
                    torch.stack(block if a + len(block) > N else block[:-1]), a
                )
            starts.append(block if k == 1 else block[0])
            histories.append(previous)
        kept = torch.stack(starts[0]) if k == 1 else torch.stack(starts)
        ctx.method, ctx.problem, ctx.loss, ctx.stride = method, problem, loss, k
        _save(ctx, kept, last, params, histories if k > 1 else [])
        return value, last

    @staticmethod
    def backward(ctx, grad_value: Tensor, grad_last: Tensor):
        kept, last, params, histories = _load(ctx)
        loss, N = ctx.loss, ctx.problem.steps

        def jumps_of(states: Tensor, start: int, end: int) -> Tensor:
            return grad_value * loss.jumps(states[: end - start], start)

        lam = grad_last + grad_value * loss.jumps(last.unsqueeze(0), N)[0]
        lam, grad_params = _sweep(
            ctx.method, ctx.problem, kept, histories, ctx.stride, lam, jumps_of, params
        )
        return (None, None, None, lam, *grad_params)
