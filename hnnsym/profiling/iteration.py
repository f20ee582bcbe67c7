"""One iteration and what it is made of: the inputs and model drawn from the seed, the solver of a
method (``make_solver``), the timed forward + loss + backward (``iteration``), and the relative
gradient error (``relative_error``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from hnnsym.config.build import build_model
from hnnsym.ode.dynamics import vector_field
from hnnsym.ode.gradients import get_gradient
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.problem import SolverStats
from hnnsym.ode.running import StepLoss
from hnnsym.ode.solve import solve, solve_loss
from hnnsym.profiling.plan import Method, Setting, solver_options


def make_inputs(setting: Setting, steps: int) -> tuple[Tensor, Tensor]:
    """y0 (B, 2d) from the system's domain and a random target (steps+1, B, 2d), in float64 on CPU.

    Drawn from ``seed`` alone, so a subprocess reproduces them exactly.
    """
    system = setting.build_system()
    gen = torch.Generator().manual_seed(int(setting.seed))
    y0 = system.sample(setting.batch, gen, dtype=torch.float64)
    target = torch.randn((steps + 1, *y0.shape), generator=gen, dtype=torch.float64)
    return y0, target


def make_model(model_cfg: dict, dim: int, seed: int) -> nn.Module:
    """The model initialized from ``seed`` (float32 init, as training does), on CPU."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return build_model(model_cfg, dim)


class _TorchdiffeqField(nn.Module):
    """The same vector field J^-1 ∇H as torchdiffeq wants it: ``forward(t, y)``."""

    def __init__(self, H: nn.Module):
        super().__init__()
        self.H = H

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        return vector_field(self.H, y)


class Solver:
    """y0 -> trajectory (steps+1, B, 2d), differentiable by the method (see ``make_solver``), and
    ``loss``, the iteration's loss.

    ``stats`` are the fixed-point counts of the latest call: its forward pass, and once the
    gradient of that trajectory has been taken, its backward pass too (recomputation and adjoint
    solves). They stay empty for torchdiffeq, which has no stage solver.
    """

    def __init__(
        self,
        run: Callable[[Tensor], Tensor | tuple[Tensor, SolverStats]],
        run_loss: Callable[[Tensor, StepLoss], tuple[Tensor, SolverStats]] | None = None,
    ):
        self._run, self._run_loss = run, run_loss
        self.stats = SolverStats()

    def __call__(self, y0: Tensor) -> Tensor:
        out = self._run(y0)
        if isinstance(out, tuple):
            out, self.stats = out
        return out

    def loss(
        self, y0: Tensor, target: Tensor, every: int = 1, on_solve: Callable[[], None] | None = None
    ) -> Tensor:
        """mean((ŷ − target)²) over the states ŷ = trajectory[::every] (target (T, B, 2d)).
        Fused: ``solve_loss`` with the same loss as a ``StepLoss``, no trajectory; ``on_solve``
        (the trajectory is ready) is then called when the loss is."""
        if self._run_loss is None:
            traj = self(y0)[::every]
            if on_solve is not None:
                on_solve()
            return ((traj - target) ** 2).mean()
        value, self.stats = self._run_loss(
            y0, StepLoss(target, every=every, scale=1.0 / target.numel())
        )
        if on_solve is not None:
            on_solve()
        return value


def make_solver(
    method: Method,
    H: nn.Module,
    steps: int,
    dt: float,
    solver: dict,
    fused_loss: bool = False,
) -> Solver:
    """y0 -> trajectory (steps+1, B, 2d), differentiable by ``method``; the integrator is built
    with the stage-solver options ``solver`` overridden by ``method.solver`` (those it takes).
    ``fused_loss``: the Solver's loss goes through ``solve_loss`` (hnnsym methods; checkpoint and
    symplectic_adjoint fold it into their sweeps, the others take the plain path)."""
    if method.backend == "torchdiffeq":
        import torchdiffeq  # optional dependency: only torchdiffeq methods need it

        odeint = (
            torchdiffeq.odeint_adjoint
            if method.gradient == "odeint_adjoint"
            else torchdiffeq.odeint
        )
        func = _TorchdiffeqField(H)

        def run_torchdiffeq(y0: Tensor) -> Tensor:
            t = torch.arange(steps + 1, dtype=y0.dtype, device=y0.device) * dt
            return odeint(func, y0, t, method=method.integrator, options={"step_size": dt})

        return Solver(run_torchdiffeq)
    integrator = get_integrator(
        method.integrator, **solver_options(method.integrator, {**solver, **method.solver})
    )
    gradient = get_gradient(method.gradient, **method.options)

    def run(y0: Tensor) -> tuple[Tensor, SolverStats]:
        solution = solve(H, y0, dt, steps, integrator, gradient)
        return solution.ys, solution.stats

    def run_loss(y0: Tensor, loss: StepLoss) -> tuple[Tensor, SolverStats]:
        solution = solve_loss(H, y0, dt, steps, loss, integrator, gradient)
        return solution.value, solution.stats

    return Solver(run, run_loss if fused_loss else None)


def params_of(H: nn.Module) -> list[Tensor]:
    return [p for p in H.parameters() if p.requires_grad]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def iteration(
    solve: Solver,
    params: list[Tensor],
    y0: Tensor,
    target: Tensor,
    on_forward: Callable[[], None] | None = None,
    on_solve: Callable[[], None] | None = None,
    every: int = 1,
) -> tuple[list[Tensor], float, float]:
    """One training iteration: (parameter gradients, forward seconds, backward seconds), the loss
    ``solve.loss``: mean((ŷ − target)²) over the trajectory's every ``every``-th state.

    Gradients of parameters the loss does not reach (H's output bias) are zeros. ``on_solve`` and
    ``on_forward`` are called when the trajectory and when the loss are ready (for measuring).
    """
    t0 = time.perf_counter()
    loss = solve.loss(y0, target, every, on_solve)
    _sync(y0.device)
    t1 = time.perf_counter()
    if on_forward is not None:
        on_forward()
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    _sync(y0.device)
    t2 = time.perf_counter()
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
    return grads, t1 - t0, t2 - t1


def relative_error(g: list[Tensor], ref: list[Tensor]) -> float:
    """|g - ref| / |ref| over all parameter gradients together (L2, in float64)."""
    num = sum(float(((a.double() - b.double()) ** 2).sum()) for a, b in zip(g, ref))
    den = sum(float((b.double() ** 2).sum()) for b in ref)
    return math.sqrt(num / den) if den > 0 else float("nan")
