"""The one stage solver behind every tableau: predictor + fixed-point iteration (Choudhary et al., Alg. 2).

Shapes: a state y is (B, n) with the q-part in the first n_q columns; stages K are (s, B, n), row i
holding (k_i, l_i) = f(Y_i). When the stage dependencies form no cycle (explicit RK; leapfrog and
symplectic Euler on a separable H) the stages are evaluated once, in dependency order, instead.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import torch
from torch import Tensor

from hnnsym.errors import ConvergenceError
from hnnsym.ode.compiled import steps as compiled_steps
from hnnsym.ode.compiled import sweeps as compiled_sweeps
from hnnsym.ode.integrators.tableaux import Tableau
from hnnsym.ode.problem import Problem, SolverStats

Field = Callable[[Tensor], Tensor]
PREDICTORS = ("extrapolate", "rk2", "euler", "observed")
ON_FAIL = ("raise", "warn", "ignore")
# a chunk of compiled steps unrolls each step's planned sweeps: a kind of chunk whose steps take
# more (or do not converge) runs step by step instead
MAX_PLANNED_SWEEPS = 8
STEP_BY_STEP = (0, 0)
DEFAULT_TOL = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 1e-2}


@dataclass
class FixedPoint:
    """Options of a fixed-point iteration x <- g(x): stop when max|Δx| <= tol (None: by dtype)."""

    tol: float | None = None
    max_iter: int = 50
    on_fail: str = "raise"
    # sweeps the latest call needed, per kind of iteration: the next call's first batch
    _sweeps: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.on_fail not in ON_FAIL:
            raise ValueError(f"on_fail must be one of {ON_FAIL}, got {self.on_fail!r}")
        if self.max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {self.max_iter}")
        if self.tol is not None and not self.tol > 0:
            raise ValueError(f"tol must be > 0, got {self.tol}")

    def tolerance(self, dtype: torch.dtype) -> float:
        return self.tol if self.tol is not None else DEFAULT_TOL.get(dtype, 1e-6)

    def iterate(
        self,
        g: Callable[[Tensor], Tensor],
        x: Tensor,
        scale: float | Tensor = 1.0,
        stats: SolverStats | None = None,
        where: str = "",
        relative: bool = False,
        x_from_zero: bool = False,
    ) -> Tensor:
        """Iterate x <- g(x) until scale * max|Δx| (divided by max|x| if ``relative``) <= tol.

        ``x_from_zero``: x is itself g(0) (a linear map's iteration started from zero), so its
        size is the first change; the distance to the fixed point is then estimated from the
        contraction θ = |Δx_k| / |Δx_{k-1}| as θ/(1-θ) |Δx_k| (Hairer & Wanner, IV.8), which can
        stop an iteration earlier than |Δx_k| alone.

        Without a host sync per iteration: the sweeps run in batches, as many as the previous
        call of the same kind needed, their changes stay on the device and are read back once per
        batch; the iterate returned is the first that meets the tolerance (later sweeps of the
        batch are dropped, graph and all), then one sweep per read-back. So the result is the
        iteration stopped at the first converged sweep, bit for bit, whatever the batch size.
        """
        tol = self.tolerance(x.dtype)
        kind = (relative, x_from_zero)
        iterates, changes = [x], []
        on_device = isinstance(scale, Tensor)
        factor = 1.0 if relative or on_device else float(scale)
        if x_from_zero:  # the first change, |g(0) − 0|: x's own size (1 when relative)
            with torch.no_grad():
                first = x.detach().abs().max()
                changes.append(first * scale if on_device and not relative else first)
        sizes: list[float] = []  # the changes read back so far (x_from_zero: the first is g(0)'s)
        batch = max(1, min(self._sweeps.get(kind, 1), self.max_iter))
        done, residual = 0, float("inf")  # sweeps whose changes have been judged
        while True:
            for _ in range(min(batch, self.max_iter - (len(iterates) - 1))):
                x_new = g(iterates[-1])
                with torch.no_grad():  # a number ``scale`` multiplies on the host, read back
                    change = torch.linalg.vector_norm(x_new - iterates[-1], math.inf)
                    if relative:
                        change = change / x_new.detach().abs().max().clamp_min(1e-300)
                    elif on_device:
                        change = change * scale
                iterates.append(x_new)
                changes.append(change)
            new = changes[len(sizes) :]  # read back in one sync per batch
            read = [new[0].item()] if len(new) == 1 else torch.stack(new).tolist()
            sizes += [factor * v for v in read]
            stop = None
            offset = 1 if x_from_zero else 0
            for it in range(done + 1, len(iterates)):
                done = it
                residual = sizes[offset + it - 1]
                previous = sizes[offset + it - 2] if x_from_zero else None
                if x_from_zero and relative and it == 1:
                    previous = 1.0
                if previous is not None and 0 < previous and residual < previous:
                    theta = residual / previous
                    residual = min(residual, theta / (1 - theta) * residual)
                if not residual > tol:  # also stops on NaN, reported below
                    stop = it
                    break
            if stop is not None or len(iterates) - 1 >= self.max_iter:
                break
            batch = 1
        it = stop if stop is not None else len(iterates) - 1
        if stop is not None:
            self._sweeps[kind] = it
        conclude("fixed-point iteration", it, residual, tol, where, self.on_fail, stats)
        return iterates[it]


def conclude(
    solver: str, iterations: int, residual: float, tol: float, where: str, on_fail: str,
    stats: SolverStats | None,
) -> None:  # fmt: skip
    """Record an iterative solve in ``stats`` and, when its residual is above ``tol`` (or NaN),
    raise ``ConvergenceError`` (``on_fail="raise"``) or warn (``"warn"``) in one line."""
    converged = residual <= tol
    if stats is not None:
        stats.record(iterations, residual if residual == residual else float("inf"), converged,
                     where)  # fmt: skip
    if converged:
        return
    diverged = "" if residual == residual else " (diverged to non-finite values)"
    msg = (
        f"{solver} did not converge {where}: residual {residual:.3g} > tol {tol:.3g} after "
        f"{iterations} iterations{diverged}; use a smaller dt or raise max_iter"
    )
    if on_fail == "raise":
        raise ConvergenceError(msg)
    if on_fail == "warn":
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


@dataclass(frozen=True)
class RungeKutta:
    """A (partitioned) Runge–Kutta tableau plus the options of its stage solver. ``predictor``
    gives the first stage guess: explicit RK2 ("rk2", two evaluations of f), Euler ("euler", one),
    the observed next state ("observed", needs a guess; RK2 where none is given), or
    ("extrapolate", none) the stages of the previous steps of the same run extrapolated to this
    one, K ≈ 3K₋₁ − 3K₋₂ + K₋₃ (fewer previous steps: linear, constant; RK2 on a run's first
    step). The stages are smooth in t, so the guess is O(h³) off and the iteration needs about as
    many passes as from RK2, without RK2's two evaluations. The predictor stays in the graph, so
    ``gradient=backprop`` differentiates exactly the iteration that was computed.

    ``compile``: run the predictor, ``compile_sweeps`` sweeps and their changes as one compiled
    program (``hnnsym.ode.compiled``), read back once per chunk of sweeps; chunks follow until a
    sweep meets the tolerance, and the first such iterate is the result, as in ``FixedPoint``.
    ``compile_steps`` = m > 1 (with "extrapolate"): a run's steps, from its first, run m per
    program with one read-back (the run's last r < m steps as one program of r steps), the
    predictor of each step inside (RK2, then the extrapolations over one, two, three steps).
    Each step runs a planned number of sweeps and keeps its first iterate that met the
    tolerance, selected on the device; the plan, per kind of chunk (steps of history, m), is the
    most sweeps that its steps took so far, one count for the steps with fewer than three steps
    before them and one for the rest (every new plan is a new program). A kind of chunk not seen
    before runs eagerly and sets its plan; from a step whose sweeps all missed the tolerance,
    the rest of the chunk is stepped again eagerly and the plan raised. A run recomputed
    from a kept state (checkpoint, keep_every) then meets the chunks at other steps, so it
    equals the first run to rounding, not bit for bit. Eager where compilation is unavailable."""

    tableau: Tableau
    solver: FixedPoint = field(default_factory=FixedPoint)
    predictor: str = "extrapolate"
    compile: bool = False
    compile_sweeps: int = 1
    compile_steps: int = 1

    has_stages = True  # capabilities the gradient methods check (hnnsym.ode.gradients)
    reversible = False

    def __post_init__(self):
        if self.predictor not in PREDICTORS:
            raise ValueError(f"predictor must be one of {PREDICTORS}, got {self.predictor!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be true or false, got {self.compile!r}")
        for name in ("compile_sweeps", "compile_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")

    @property
    def name(self) -> str:
        return self.tableau.name

    @property
    def order(self) -> int:
        return self.tableau.order

    @property
    def symplectic(self) -> bool:
        return self.tableau.symplectic

    @property
    def partitioned(self) -> bool:
        return self.tableau.partitioned

    def strict(self) -> RungeKutta:
        """The same integrator, raising ConvergenceError whatever its ``on_fail``."""
        return replace(self, solver=replace(self.solver, on_fail="raise"))

    # ---- the integrator protocol (hnnsym.ode.integrators.Integrator) ------------------------
    def check(self, problem: Problem, y0: Tensor) -> None:
        """Any H (or vector field) and any guess: nothing to refuse."""

    def step_of(self, problem: Problem, y: Tensor, n: int) -> Tensor:
        """y_{n+1} from y_n of ``problem`` (differentiable when grad mode is on), as the first
        step of a run (no predictor history)."""
        return self.steps(problem, y, n, n + 1)[0][0]

    def steps(
        self, problem: Problem, y: Tensor, start: int, end: int, previous: Sequence[Tensor] = ()
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        """[y_{start+1}, …, y_end] from y = y_start, stepped in order as one run, and the
        predictor history after it. ``previous``: the stages of the steps before ``start`` (at
        most three, oldest first) that the "extrapolate" predictor draws on; given the history
        that a first call returned, a second call continues the run bit for bit (what the
        recomputing gradient methods rely on). Differentiable when grad mode is on."""
        n_q = y.shape[-1] // 2
        out: list[Tensor] = []
        previous = tuple(previous) if self.predictor == "extrapolate" else ()
        f, separable = problem.f, problem.separable  # the same for every step
        chunk = self.compile_steps if self.compile and self.predictor == "extrapolate" else 1
        if self.explicit_order(separable) is not None or problem.H is None:
            chunk = 1
        n = start
        while n < end:
            m = min(chunk, end - n)  # the run's last steps: one shorter program
            key = ("steps", len(previous), m) if m > 1 else None  # one step: as STEP_BY_STEP
            plan = self.solver._sweeps.get(key) if key else STEP_BY_STEP
            if plan != STEP_BY_STEP:
                kept = 0
                if plan is not None:
                    got = self._steps_compiled(problem, y, n, previous, _sweeps_of(plan, *key[1:]))
                    if got is None:  # compilation unavailable: step by step
                        chunk = 1
                        continue
                    states, stages = got
                    out += states
                    previous, n, kept = (*previous, *stages)[-3:], n + len(states), len(states)
                    y = states[-1] if states else y
                # a kind of chunk not seen before, or the rest of one from a step that its plan
                # gave too few sweeps: eagerly, and what the steps took sets or raises the plan
                # (the rest of the chunk, not a new kind of chunk from that step: fewer programs)
                needed = {}
                for j in range(kept, m):
                    y, K, needed[j] = self._step_eagerly(problem, y, n, previous)
                    out.append(y)
                    previous, n = (*previous[-2:], K), n + 1
                if needed:
                    self.solver._sweeps[key] = _raised(plan or (1, 1), key[1], needed)
                continue
            guess = None
            if problem.guess is not None and self.predictor == "observed":
                guess = problem.guess[n + 1]
            K = self.solve_stages(
                f, y, problem.h, n_q, separable, guess, problem.stats, f"at step {n}", previous,
                problem.H,
            )  # fmt: skip
            y = self.update(y, K, problem.h, n_q)
            out.append(y)
            if self.predictor == "extrapolate":
                previous = (*previous[-2:], K)
            n += 1
        return out, previous

    def _step_eagerly(
        self, problem: Problem, y: Tensor, n: int, previous: tuple[Tensor, ...]
    ) -> tuple[Tensor, Tensor, int]:
        """Step n from y by the eager solver (``solve_stages`` without H: nothing compiled): (y_{n+1},
        its stages, the sweeps they took, or ``max_iter`` + 1 where they did not converge)."""
        stats, n_q = SolverStats(), y.shape[-1] // 2
        K = self.solve_stages(
            problem.f, y, problem.h, n_q, problem.separable, None, stats, f"at step {n}", previous
        )  # fmt: skip
        if problem.stats is not None:
            problem.stats.merge(stats)
        sweeps = stats.iterations if not stats.unconverged else self.solver.max_iter + 1
        return self.update(y, K, problem.h, n_q), K, sweeps

    def _steps_compiled(
        self, problem: Problem, y: Tensor, n: int, previous: tuple[Tensor, ...],
        sweeps: tuple[int, ...],
    ) -> tuple[list[Tensor], list[Tensor]] | None:  # fmt: skip
        """Steps n, n+1, … from y by one compiled program of ``len(sweeps)`` steps, step j running
        ``sweeps[j]`` sweeps (``compiled.steps``: each step's stages are its first iterate that
        met the tolerance), one read-back: the states and stages of the leading steps that met
        it (a step that did not, and the steps after it, are dropped and stepped again by the
        caller). None where compilation is unavailable."""
        self._fill_caches()
        tol = self.solver.tolerance(y.dtype)
        got = compiled_steps(
            self, problem.H, y, previous, problem.h, y.shape[-1] // 2, (sweeps, tol)
        )  # fmt: skip
        if got is None:
            return None
        states, stages, info = got
        taken = 0
        for j, (taken_sweeps, residual) in enumerate(info.tolist()):
            if residual > tol:  # NaN is taken, and reported by conclude, as in FixedPoint
                break
            conclude("fixed-point iteration", int(taken_sweeps), residual, tol, f"at step {n + j}",
                     self.solver.on_fail, problem.stats)  # fmt: skip
            taken += 1
        # the program returns stacked tensors (three outputs for AOT autograd's runtime to wrap,
        # not 2m + 1); the kept steps as views
        return list(states[:taken].unbind(0)), list(stages[:taken].unbind(0))

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d), with a graph if grad mode is on."""
        return torch.stack([y0, *self.steps(problem, y0, 0, problem.steps)[0]])

    # ---- the stage equations --------------------------------------------------------------
    def stage_states(self, y: Tensor, K: Tensor, h: float, n_q: int) -> Tensor:
        """Y_i = y + h Σ_j a_ij K_j with a_q on the q-part and a_p on the p-part: (s, B, n)."""
        if not self._partitioned:  # one matrix for both parts: no split, no cat
            if self.tableau.stages == 1:
                return torch.add(y, K, alpha=h * self.tableau.a_q[0][0])
            a, _, _, _ = self.tableau.coefficients(y.dtype, y.device)
            return torch.add(y, (a @ K.reshape(K.shape[0], -1)).view(K.shape), alpha=h)
        a_q, _, a_p, _ = self.tableau.coefficients(y.dtype, y.device)
        Yq = y[..., :n_q] + h * torch.einsum("ij,jbn->ibn", a_q, K[..., :n_q])
        Yp = y[..., n_q:] + h * torch.einsum("ij,jbn->ibn", a_p, K[..., n_q:])
        return torch.cat([Yq, Yp], dim=-1)

    def stage_equations(self, f: Field, y: Tensor, K: Tensor, h: float, n_q: int) -> Tensor:
        """F(K, y)_i = f(Y_i): the stages solve K = F(K, y). (s, B, n) -> (s, B, n)."""
        Y = self.stage_states(y, K, h, n_q)
        s, B, n = Y.shape
        return f(Y.reshape(s * B, n)).reshape(s, B, n)

    def update(self, y: Tensor, K: Tensor, h: float, n_q: int) -> Tensor:
        """y' = y + h Σ_i b_i K_i (b_q on q, b_p on p)."""
        if not self._partitioned:
            if self.tableau.stages == 1:
                # a view, not K[0]: select's backward allocates and fills a zero tensor
                return torch.add(y, K.reshape(y.shape), alpha=h * self.tableau.b_q[0])
            _, b, _, _ = self.tableau.coefficients(y.dtype, y.device)
            return torch.add(y, torch.tensordot(b, K, 1), alpha=h)
        _, b_q, _, b_p = self.tableau.coefficients(y.dtype, y.device)
        return torch.cat(
            [
                y[..., :n_q] + h * torch.einsum("i,ibn->bn", b_q, K[..., :n_q]),
                y[..., n_q:] + h * torch.einsum("i,ibn->bn", b_p, K[..., n_q:]),
            ],
            dim=-1,
        )

    def _fill_caches(self) -> None:
        """Compute the cached properties before a compiled call: dynamo cannot enter the lock
        ``cached_property`` takes on first access."""
        self._partitioned, self._orders  # noqa: B018

    @cached_property
    def _partitioned(self) -> bool:
        return self.tableau.partitioned

    def weights(self, like: Tensor, n_q: int) -> Tensor:
        """∂y'/∂K_i as per-coordinate weights b_i: (s, 1, n)."""
        _, b_q, _, b_p = self.tableau.coefficients(like.dtype, like.device)
        s, n = self.tableau.stages, like.shape[-1]
        return torch.cat([b_q[:, None].expand(s, n_q), b_p[:, None].expand(s, n - n_q)], -1)[
            :, None, :
        ]

    # ---- explicit evaluation order ---------------------------------------------------------
    @cached_property
    def _orders(self) -> dict[bool, list[tuple[int, str]] | None]:
        return {sep: _evaluation_order(self.tableau, sep) for sep in (False, True)}

    def explicit_order(self, separable: bool) -> list[tuple[int, str]] | None:
        """Evaluation order of (stage, part) when the stage graph has no cycle, else None."""
        return self._orders[separable]

    # ---- solving ---------------------------------------------------------------------------
    def solve_stages(
        self,
        f: Field,
        y: Tensor,
        h: float,
        n_q: int,
        separable: bool = False,
        guess: Tensor | None = None,
        stats: SolverStats | None = None,
        where: str = "",
        previous: Sequence[Tensor] = (),
        H: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        """The stages K (s, B, n) of one step from y; ``previous``: the stages of the steps
        before it (oldest first), for the "extrapolate" predictor; ``H``: the Hamiltonian of f,
        which the compiled solve (``compile``) traces. Differentiable when grad mode is on."""
        order = self.explicit_order(separable)
        if order is not None:
            return self._explicit_stages(f, y, h, n_q, order)
        if self.compile and H is not None:
            if self.predictor == "extrapolate" and len(previous) == 3:
                K = self._solve_compiled(f, H, y, h, n_q, tuple(previous), stats, where)
            elif self._predicts_rk2(guess, previous):  # RK2 inside the program
                K = self._solve_compiled(f, H, y, h, n_q, (), stats, where)
            else:
                K0 = self._predict(f, y, h, guess, previous).contiguous()
                zero = torch.zeros_like(K0)
                K = self._solve_compiled(f, H, y, h, n_q, (K0, zero, zero), stats, where)
            if K is not None:
                return K
        return self.solver.iterate(
            lambda K: self.stage_equations(f, y, K, h, n_q),
            self._predict(f, y, h, guess, previous), abs(h), stats, where,
        )  # fmt: skip

    def _predicts_rk2(self, guess: Tensor | None, previous: Sequence[Tensor]) -> bool:
        """Whether ``_predict`` takes the slope of explicit RK2."""
        if self.predictor == "extrapolate" and previous:
            return False
        return guess is None and self.predictor != "euler"

    @staticmethod
    def extrapolate(previous: Sequence[Tensor]) -> Tensor:
        """``_extrapolate``, whatever the predictor: for ``hnnsym.ode.compiled``, which this
        module imports."""
        return _extrapolate(previous)

    def _predict(
        self, f: Field, y: Tensor, h: float, guess: Tensor | None, previous: Sequence[Tensor]
    ) -> Tensor:
        """The first stage guess K0 (s, B, n). It stays in the graph: backprop then
        differentiates the iteration as run."""
        if self.predictor == "extrapolate" and previous:
            K0 = _extrapolate(previous)
        else:
            if guess is not None:
                K0 = (guess - y) / h
            elif self.predictor == "euler":
                K0 = f(y)
            else:
                K0 = f(y + 0.5 * h * f(y))  # slope of explicit RK2 (midpoint)
            K0 = K0.unsqueeze(0).expand(self.tableau.stages, *y.shape)
        return K0

    def _solve_compiled(
        self, f: Field, H, y: Tensor, h: float, n_q: int, guess: tuple[Tensor, ...],
        stats: SolverStats | None, where: str,
    ) -> Tensor | None:  # fmt: skip
        """The stages by compiled chunks of ``compile_sweeps`` sweeps from the predictor over
        ``guess`` (``compiled.sweeps``: three steps' stages, or () for RK2), one read-back per
        chunk; the first iterate with |h| max|ΔK| <= tol, as ``FixedPoint.iterate``. None where
        compilation is unavailable."""
        solver, k = self.solver, self.compile_sweeps
        tol = solver.tolerance(y.dtype)
        self._fill_caches()
        done, residual, K = 0, float("inf"), None
        while done < solver.max_iter:
            out = compiled_sweeps(self, H, y, guess, h, n_q, k)
            if out is None:  # compilation unavailable; after a chunk: carry on eagerly from K
                if not done:
                    return None
                rest = replace(solver, max_iter=solver.max_iter - done)
                return rest.iterate(
                    lambda K: self.stage_equations(f, y, K, h, n_q), K, abs(h), stats, where
                )
            iterates, changes = out
            usable = min(k, solver.max_iter - done)
            for j, change in enumerate(changes.tolist()[:usable]):  # one sync per chunk
                residual = abs(h) * change
                if not residual > tol:  # also stops on NaN, reported by conclude
                    conclude("fixed-point iteration", done + j + 1, residual, tol, where,
                             solver.on_fail, stats)  # fmt: skip
                    return iterates[j]
            done += usable
            K = iterates[usable - 1]
            zero = torch.zeros_like(K)
            guess = (K, zero, zero)
        conclude("fixed-point iteration", done, residual, tol, where, solver.on_fail, stats)
        return K

    def _explicit_stages(self, f: Field, y: Tensor, h: float, n_q: int, order) -> Tensor:
        a_q, a_p = self.tableau.a_q, self.tableau.a_p
        s = self.tableau.stages
        zero_q, zero_p = torch.zeros_like(y[..., :n_q]), torch.zeros_like(y[..., n_q:])
        kq: list[Tensor] = [zero_q] * s
        kp: list[Tensor] = [zero_p] * s
        for i, part in order:
            Q = y[..., :n_q] + h * sum((a_q[i][j] * kq[j] for j in range(s) if a_q[i][j]), zero_q)
            P = y[..., n_q:] + h * sum((a_p[i][j] * kp[j] for j in range(s) if a_p[i][j]), zero_p)
            fi = f(torch.cat([Q, P], -1))
            if part in ("q", "qp"):
                kq[i] = fi[..., :n_q]
            if part in ("p", "qp"):
                kp[i] = fi[..., n_q:]
        return torch.stack([torch.cat([kq[i], kp[i]], -1) for i in range(s)])

    def step(
        self,
        f: Field,
        y: Tensor,
        h: float,
        n_q: int,
        separable: bool = False,
        guess: Tensor | None = None,
        stats: SolverStats | None = None,
        where: str = "",
    ) -> Tensor:
        K = self.solve_stages(f, y, h, n_q, separable, guess, stats, where)
        return self.update(y, K, h, n_q)


def _sweeps_of(plan: tuple[int, int], history: int, m: int) -> tuple[int, ...]:
    """The sweeps of each step of a chunk of m steps after ``history`` steps, under ``plan`` =
    (sweeps of a step with fewer than three steps before it, of one with three)."""
    return tuple(plan[history + j >= 3] for j in range(m))


def _raised(plan: tuple[int, int], history: int, needed: dict[int, int]) -> tuple[int, int]:
    """``plan`` raised to the sweeps that the chunk's steps j took (``needed``: {j: sweeps}), or
    ``STEP_BY_STEP`` where one took more than ``MAX_PLANNED_SWEEPS``. Two counts per kind of
    chunk, not one per step: each new plan is a new compiled program."""
    start, steady = plan
    for j, sweeps in needed.items():
        if sweeps > MAX_PLANNED_SWEEPS:
            return STEP_BY_STEP
        if history + j < 3:
            start = max(start, sweeps)
        else:
            steady = max(steady, sweeps)
    return start, steady


def _extrapolate(previous: Sequence[Tensor]) -> Tensor:
    """The next step's stages from the last one, two or three steps' (oldest first): the
    constant, linear or quadratic polynomial through them, one step on."""
    if len(previous) == 1:
        return previous[-1]
    if len(previous) == 2:
        return 2 * previous[-1] - previous[-2]
    return torch.add(previous[-3], previous[-1] - previous[-2], alpha=3)  # two ops, not three


def _evaluation_order(t: Tableau, separable: bool) -> list[tuple[int, str]] | None:
    """Topological order of the stage unknowns, or None when they are coupled (implicit).

    Non-separable: unknown i is the whole stage (k_i, l_i), needing stage j where a_q or a_p [i][j]
    is non-zero. Separable H = T(p) + V(q): k_i = T'(P_i) needs the l_j with a_p[i][j] != 0 and
    l_i = -V'(Q_i) needs the k_j with a_q[i][j] != 0.
    """
    s = t.stages
    if separable:
        nodes = [(i, "q") for i in range(s)] + [(i, "p") for i in range(s)]
        deps = {(i, "q"): {(j, "p") for j in range(s) if t.a_p[i][j]} for i in range(s)}
        deps |= {(i, "p"): {(j, "q") for j in range(s) if t.a_q[i][j]} for i in range(s)}
    else:
        nodes = [(i, "qp") for i in range(s)]
        deps = {
            (i, "qp"): {(j, "qp") for j in range(s) if t.a_q[i][j] or t.a_p[i][j]} for i in range(s)
        }
    order: list[tuple[int, str]] = []
    done: set = set()
    while len(order) < len(nodes):
        ready = [v for v in nodes if v not in done and deps[v] <= done]
        if not ready:
            return None
        order += ready
        done |= set(ready)
    return order
