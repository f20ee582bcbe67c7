"""``odeint(func, y0, t)``: torchdiffeq's fixed-grid call on hnnsym's kernel.

    ys = odeint(func, y0, t, method="gauss_legendre4", options={"step_size": 0.01},
                gradient="symplectic_adjoint")

``func(t, y)`` is any callable (an ``nn.Module`` for the stepwise gradients) returning dy/dt of
y's shape; ``ys`` is (len(t), *y0.shape), the states at the times ``t``, as torchdiffeq returns
them. Nothing here integrates: the call is one ``hnnsym.ode.solve.solve`` of an autonomous field
on an augmented state, stepped by the project's integrators and differentiated by its gradient
methods.

The state. y0 of any shape is one state: ``func`` always sees a tensor of y0's shape (a leading
batch dimension of y0 is whatever ``func`` makes of it, as in torchdiffeq), and gradients flow to
all of it. The kernel steps rows z = [y0.flatten(), t, (0)] of shape (1, n): the time t rides in
the state with dt/dτ = ±1, and a zero with derivative 0 pads n to an even size (the kernel's
[q, p] layout; the general-field tableaux never split the two halves).

Time. For a Runge–Kutta tableau (A, b, c = A·1), the augmented autonomous system is stepped with
exactly the stage times of the non-autonomous method: the time stage T_i = t_n + h Σ_j a_ij·1 =
t_n + c_i h, so func sees (t_n + c_i h, Y_i). The augmented map is an ordinary RK step of an
autonomous field, so every gradient method applies unchanged, and the symplectic adjoint stays
the exact gradient of the discrete map (the adjoint of the time row, ∂f/∂t included, is carried
along; nothing is approximated). Passing stage times through the kernel instead would have meant
a second, time-aware stage solver and adjoint. Decreasing t is stepped in τ = |t − t0| with
dt/dτ = −1 and the field negated.

Methods (``METHODS``): those of the project's integrators that apply to a general field: the
Gauss–Legendre family (implicit midpoint, GL4, GL6; symplectic), the classic rk4, and, as data
here, explicit Euler, explicit midpoint and Kutta's 3/8 rule (``rk38``, which is torchdiffeq's
fixed-grid ``rk4``: ``rk4_alt_step_func``). leapfrog and symplectic_euler are partitioned [q, p]
methods, symplectic for a Hamiltonian field only: refused here, by the table, not by inspecting
func (use ``hnnsym.integrate(H, ...)`` for a Hamiltonian).

Gradients (``gradient=``, or ``adjoint=True`` for the symplectic adjoint): ``backprop`` (the
default, torchdiffeq's ``odeint``), ``checkpoint``, ``symplectic_adjoint`` (exact, O(N) states or
O(√N) with ``keep_every="sqrt"``), ``adjoint`` (the continuous adjoint; dL/dθ off by O(h²)), or a
built ``GradientMethod``. The stepwise ones differentiate the parameters of ``func`` (an
``nn.Module``) or ``adjoint_params``, as torchdiffeq's ``odeint_adjoint``; t gets no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from hnnsym.errors import IncompatibleError
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.integrators import INTEGRATORS, get_integrator
from hnnsym.ode.integrators.tableaux import TABLEAUX, Tableau
from hnnsym.ode.protocols import GradientMethod, StagedIntegrator, TimeVectorField
from hnnsym.ode.solve import solve


def _explicit(name: str, a, b, order: int, description: str) -> Tableau:
    a = tuple(tuple(float(x) for x in row) for row in a)
    b = tuple(float(x) for x in b)
    return Tableau(name, a, b, a, b, order, False, False, description)


EULER = _explicit("euler", [[0]], [1], 1, "explicit Euler")
MIDPOINT = _explicit("midpoint", [[0, 0], [0.5, 0]], [0, 1], 2, "explicit midpoint (RK2)")
RK38 = _explicit(
    "rk38",
    [[0, 0, 0, 0], [1 / 3, 0, 0, 0], [-1 / 3, 1, 0, 0], [1, -1, 1, 0]],
    [1 / 8, 3 / 8, 3 / 8, 1 / 8],
    4,
    "Kutta's 3/8 rule (torchdiffeq's fixed-grid rk4)",
)


@dataclass(frozen=True)
class Method:
    """One entry of odeint's method table: the tableau, and whether it applies to any f(t, y)
    (declared here; func is never inspected for it)."""

    tableau: Tableau
    general: bool = True
    why_not: str = ""


_PARTITIONED = (
    "a partitioned [q, p] method, symplectic only for a Hamiltonian field; odeint takes a general "
    "f(t, y): use hnnsym.integrate(H, y0, h, steps, integrator={name!r}) for a Hamiltonian H, or "
    "method='implicit_midpoint' / 'gauss_legendre4' here"
)
METHODS: dict[str, Method] = {
    "implicit_midpoint": Method(TABLEAUX["implicit_midpoint"]),
    "gauss_legendre4": Method(TABLEAUX["gauss_legendre4"]),
    "gauss_legendre6": Method(TABLEAUX["gauss_legendre6"]),
    "rk4": Method(TABLEAUX["rk4"]),
    "rk38": Method(RK38),
    "euler": Method(EULER),
    "midpoint": Method(MIDPOINT),
    "leapfrog": Method(TABLEAUX["leapfrog"], False, _PARTITIONED),
    "symplectic_euler": Method(TABLEAUX["symplectic_euler"], False, _PARTITIONED),
}
STAGE_OPTIONS = INTEGRATORS["implicit_midpoint"][1]  # tol, max_iter, predictor, on_fail
ADJOINT_NAME = "symplectic_adjoint"  # what adjoint=True means


class _AugmentedField(nn.Module):
    """func(t, y) as the kernel's autonomous, non-Hamiltonian field on rows z = [y, t, (pad)]
    (``hnnsym.ode.protocols.VectorField``). Each row is one call of func with y0's shape."""

    capabilities = frozenset({Capability.OWN_FIELD})

    def __init__(
        self,
        func: Callable[[Tensor, Tensor], Tensor],
        shape: torch.Size,
        direction: float,
        params: Sequence[Tensor],
    ):
        super().__init__()
        self.func = func
        self.shape, self.n, self.direction = shape, math.prod(shape), direction
        self._params = list(params)

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        """The parameters the stepwise gradient methods differentiate (func's or
        ``adjoint_params``)."""
        return iter(self._params)

    def vector_field(self, z: Tensor) -> Tensor:
        n = self.n
        rows = []
        for row in z:  # each row: one state at its own (stage) time
            t = row[n]
            dy = self.func(t, row[:n].reshape(self.shape))
            if not isinstance(dy, Tensor) or dy.shape != self.shape:
                got = tuple(dy.shape) if isinstance(dy, Tensor) else type(dy).__name__
                raise ValueError(
                    f"odeint: func(t, y) must return a tensor of y0's shape {tuple(self.shape)}, "
                    f"got {got}"
                )
            # t' = ±1 and pad' = 0, kept in the graph of z (so f always depends on z)
            rest = row[n:] * 0
            rest = torch.cat([rest[:1] + self.direction, rest[1:]])
            rows.append(torch.cat([self.direction * dy.reshape(n).to(z.dtype), rest]))
        return torch.stack(rows)

    def forward(self, z: Tensor) -> Tensor:
        return self.vector_field(z)


def _time_grid(t: Tensor, step_size: Any) -> tuple[float, float, list[int]]:
    """(h, direction, the step index of each t[i]) for a strictly monotone t whose every
    t[i] − t[0] is a whole multiple of h (default: the smallest spacing of t)."""
    if not isinstance(t, Tensor):
        t = torch.as_tensor(t)
    if t.dim() != 1 or t.numel() < 1 or not t.is_floating_point():
        raise ValueError(
            f"odeint: t must be a 1-D floating tensor of times, got shape {tuple(t.shape)}, "
            f"dtype {t.dtype}"
        )
    times = t.detach().to("cpu", torch.float64).tolist()
    if not all(math.isfinite(x) for x in times):
        raise ValueError("odeint: t has a non-finite time")
    gaps = [b - a for a, b in zip(times, times[1:])]
    direction = -1.0 if gaps and gaps[0] < 0 else 1.0
    if any(not g * direction > 0 for g in gaps):
        raise ValueError("odeint: t must be strictly increasing or strictly decreasing")
    if step_size is None:
        h = min((abs(g) for g in gaps), default=1.0)
    else:
        try:
            h = float(step_size)
        except (TypeError, ValueError):
            h = float("nan")
        if not (math.isfinite(h) and h > 0):
            raise ValueError(f"odeint: step_size must be a finite number > 0, got {step_size!r}")
    eps = torch.finfo(t.dtype).eps
    slack = 1e-9 * h + 16 * eps * max(abs(x) for x in times)  # t's own rounding
    steps = []
    for i, x in enumerate(times):
        span = abs(x - times[0])
        k = round(span / h)
        if abs(span - k * h) > slack:
            raise ValueError(
                f"odeint: t[{i}] - t[0] = {x - times[0]:.10g} is not a whole multiple of "
                f"step_size {h:.10g}; choose a step that divides every spacing of t"
            )
        steps.append(k)
    return h, direction, steps


def _method(method: str | Tableau, options: Mapping[str, Any]) -> StagedIntegrator:
    if isinstance(method, Tableau):
        if method.partitioned:
            raise IncompatibleError(
                f"odeint: method {method.name} is partitioned; odeint takes plain (non-"
                "partitioned) Runge–Kutta tableaux only"
            )
        tableau = method
    elif method in METHODS:
        entry = METHODS[method]
        if not entry.general:
            raise IncompatibleError(
                f"odeint: method={method!r} is {entry.why_not.format(name=method)}"
            )
        tableau = entry.tableau
    else:
        general = [name for name, m in METHODS.items() if m.general]
        raise ValueError(f"odeint: unknown method {method!r}; choose one of {general}")
    return get_integrator(tableau, **options)


def _gradient(
    gradient: str | GradientMethod | None, adjoint: bool | str | GradientMethod | None
) -> str | GradientMethod:
    if adjoint is not None and gradient is not None:
        raise ValueError("odeint: give gradient= or adjoint=, not both")
    if adjoint is True:
        return ADJOINT_NAME
    if adjoint is False:
        return "backprop"
    choice = adjoint if adjoint is not None else gradient
    return "backprop" if choice is None else choice


def odeint(
    func: TimeVectorField | Callable[[Tensor, Tensor], Tensor],
    y0: Tensor,
    t: Tensor | Sequence[float],
    *,
    method: str | Tableau = "implicit_midpoint",
    options: Mapping[str, Any] | None = None,
    gradient: str | GradientMethod | None = None,
    adjoint: bool | str | GradientMethod | None = None,
    adjoint_params: Sequence[Tensor] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> Tensor:
    """The states at the times ``t``: (len(t), *y0.shape), ys[0] = y0, of dy/dt = func(t, y).

    func: ``func(t, y)``, t a 0-dim tensor, y of y0's shape, returning dy/dt of y0's shape.
    y0: any shape, one state (func sees all of it; see the module doc for the batch convention).
    t: strictly monotone 1-D times; every t[i] − t[0] a whole multiple of the step (ValueError).
    method: a name in ``METHODS`` (leapfrog and symplectic_euler are refused: Hamiltonian only)
    or a plain Runge–Kutta ``Tableau``.
    options: ``step_size`` (default: the smallest spacing of t) and the stage-solver options of
    the implicit methods: ``tol`` (default 1e-12 in float64, 1e-6 in float32), ``max_iter``,
    ``predictor``, ``on_fail``.
    gradient / adjoint: "backprop" (default), "checkpoint", "symplectic_adjoint" (exact; also
    ``adjoint=True``), "adjoint" (continuous), or a ``GradientMethod`` object (e.g.
    ``get_gradient("symplectic_adjoint", keep_every="sqrt")``).
    adjoint_params: the tensors the stepwise gradients differentiate when func is not an
    ``nn.Module`` (``()`` for none); default: func's parameters.
    rtol, atol: accepted for torchdiffeq compatibility and ignored, as by its fixed-grid solvers.
    """
    del rtol, atol
    if not isinstance(y0, Tensor) or not y0.is_floating_point():
        raise ValueError(
            f"odeint: y0 must be a floating-point tensor, got {type(y0).__name__}"
            + (f" of dtype {y0.dtype}" if isinstance(y0, Tensor) else "")
        )
    options = dict(options or {})
    unknown = sorted(set(options) - {"step_size", *STAGE_OPTIONS})
    if unknown:
        raise ValueError(
            f"odeint: unknown options {unknown}; odeint takes step_size and {list(STAGE_OPTIONS)}"
        )
    h, direction, index = _time_grid(torch.as_tensor(t), options.pop("step_size", None))
    integrator = _method(method, options)
    choice = _gradient(gradient, adjoint)
    if getattr(choice, "name", choice) == "reversible":
        raise IncompatibleError(
            "odeint: gradient=reversible needs integrator=reversible_leapfrog, which steps a "
            "separable Hamiltonian only; use gradient='symplectic_adjoint' (exact) here"
        )
    if adjoint_params is not None:
        params = list(adjoint_params)
    elif isinstance(func, nn.Module):
        params = list(func.parameters())
    elif choice == "backprop":
        params = []  # backprop follows func's graph, whatever it captures
    else:
        name = getattr(choice, "name", choice)
        raise ValueError(
            f"odeint: gradient={name} differentiates the parameters of func, which is not an "
            "nn.Module: pass adjoint_params=[...] (or () if there are none)"
        )
    field = _AugmentedField(func, y0.shape, direction, params)
    n = field.n
    t0 = torch.as_tensor(t).detach().reshape(-1)[:1].to(y0)
    parts = [y0.reshape(n), t0] + ([y0.new_zeros(1)] if (n + 1) % 2 else [])
    z0 = torch.cat(parts).unsqueeze(0)
    ys = solve(field, z0, h, index[-1], integrator, choice).ys  # (steps+1, 1, n + 1 or 2)
    return ys[index, 0, :n].reshape(len(index), *y0.shape)


__all__ = ["EULER", "METHODS", "MIDPOINT", "RK38", "Method", "odeint"]
