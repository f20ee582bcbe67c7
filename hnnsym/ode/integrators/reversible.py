"""A bitwise-reversible leapfrog: position Verlet on an integer fixed-point state (Stam).

For a separable H(q, p) = T(p) + V(q) one step of size h is

    q_½ = q_n + R(h/2 · T'(p_n)),    p_{n+1} = p_n + R(-h · V'(q_½)),    q_{n+1} = q_½ + R(h/2 · T'(p_{n+1}))

with q and p held as int64 fixed-point numbers x = X · 2^-frac_bits and each increment computed in
floating point from the dequantized state, then rounded to an integer by R and added exactly.
The same step with -h undoes it bit for bit: every increment of the backward step is computed from
the same integers as the forward one (so its force is the same float, if forces are deterministic),
is negated exactly in floating point, and is rounded by an *odd* R, R(-x) = -R(x) (round half to
even, or truncation toward zero). Floor is not odd, floor(x) + floor(-x) = -1 for every non-integer
x, and breaks the inverse by one unit per substep.

Range and resolution: an int64 holds |X| <= 2^63 - 1, so with ``frac_bits`` = f the state must stay
in |q_i|, |p_i| < 2^(63-f) (8 for the default f = 60) and is resolved to 2^-f (8.7e-19 at f = 60,
below float64's own resolution of O(1) numbers). Leaving the range (a state, or a single increment,
that would need more than 63 bits) raises ``FixedPointOverflowError``; nothing wraps silently.
Non-finite forces raise the same error.

Determinism: exact reversal needs every force evaluation to return the same bits when given the
same input. On CPU that holds for the elementwise ops and matrix products of an MLP as long as the
thread count (``torch.set_num_threads``) and the batch are the same in both directions; set
``torch.use_deterministic_algorithms(True)`` and, across machines, ``MKL_CBWR=COMPATIBLE`` (MKL
may pick different kernels per CPU). On CUDA additionally set ``CUBLAS_WORKSPACE_CONFIG=:4096:8``
(or ``:16:8``) before the first cuBLAS call and ``torch.use_deterministic_algorithms(True)``, keep
``torch.backends.cudnn.benchmark = False``, and run both directions on the same device and stream;
TF32 is deterministic but coarse, turn it off (``torch.backends.cuda.matmul.allow_tf32 = False``)
for float32 forces. The ``reversible`` gradient checks at the end of its backward pass that it
rebuilt the initial integers exactly and raises otherwise.

Gradients: rounding is treated as the identity (straight-through), so the differentiated map is
the float position-Verlet step evaluated at the fixed-point states; ``gradient=backprop`` and
``gradient=reversible`` differentiate that same map.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from hnnsym.errors import FixedPointOverflowError, IncompatibleError
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import hamiltonian_flow
from hnnsym.ode.problem import Problem

INT64_MAX = 2**63 - 1
_TWO63 = 2.0**63  # the smallest float64 that does not fit an int64 (exactly representable)
_SAFE = 2.0**63 - 2.0**12  # |float(x) + float(inc)| below this: x + inc cannot overflow

Rounding = Callable[[Tensor], Tensor]
ROUNDINGS: dict[str, Rounding] = {"half_even": torch.round, "trunc": torch.trunc}


class Separable(nn.Module):
    """Declare a Hamiltonian separable, H(q, p) = T(p) + V(q), and split it.

    ``kinetic(p) = H(0, p)`` and ``potential(q) = H(q, 0)`` equal T and V up to constants, which no
    force sees. Wrap a plain callable H with it, e.g. ``Separable(lambda y: ...)``; what declares
    ``SEPARABLE`` itself (``SeparableHNN``, a ``System`` with ``separable=True``, a separable
    ``SymbolicModel``) needs no wrapper. Nothing checks
    that H really is separable: for a non-separable H the forces would silently be wrong.
    ``kinetic_grad(p)``/``potential_grad(q)``, (B, d) -> (B, d), if given, are used as T' and V'
    instead of autograd (several times faster for small analytic systems; torch ops, so they stay
    differentiable).
    """

    def __init__(
        self,
        H: Callable[[Tensor], Tensor],
        kinetic_grad: Callable[[Tensor], Tensor] | None = None,
        potential_grad: Callable[[Tensor], Tensor] | None = None,
    ):
        super().__init__()
        self.H = H
        self.kinetic_grad, self.potential_grad = kinetic_grad, potential_grad
        self.capabilities = frozenset(
            {Capability.HAMILTONIAN, Capability.SEPARABLE}
            | ({Capability.KINETIC_GRADIENT} if kinetic_grad is not None else set())
            | ({Capability.POTENTIAL_GRADIENT} if potential_grad is not None else set())
        )

    def forward(self, y: Tensor) -> Tensor:
        return self.H(y)

    def kinetic(self, p: Tensor) -> Tensor:
        return kinetic_part(self.H, p)

    def potential(self, q: Tensor) -> Tensor:
        return potential_part(self.H, q)


def kinetic_part(H: Callable[[Tensor], Tensor], p: Tensor) -> Tensor:
    """T(p) = H(0, p) of a separable H, for momenta (..., d) -> (...) (T up to a constant)."""
    return H(torch.cat([torch.zeros_like(p), p], -1))


def potential_part(H: Callable[[Tensor], Tensor], q: Tensor) -> Tensor:
    """V(q) = H(q, 0) of a separable H, for positions (..., d) -> (...) (V up to a constant)."""
    return H(torch.cat([q, torch.zeros_like(q)], -1))


def as_separable(H: Callable[[Tensor], Tensor], who: str = "integrator=reversible_leapfrog"):
    """H itself, which declares ``SEPARABLE`` (so has ``kinetic``/``potential``); raises
    ``IncompatibleError`` unless it does and its flow is J⁻¹∇H."""
    if not hamiltonian_flow(H):
        raise IncompatibleError(
            f"{who} steps the forces T'(p), V'(q) of a Hamiltonian flow, but "
            f"{getattr(H, 'name', type(H).__name__)} has a vector field of its own (dissipative or "
            f"without H); use integrator=implicit_midpoint, gauss_legendre4 or rk4"
        )
    if not has(H, Capability.SEPARABLE):
        name = getattr(H, "name", type(H).__name__)
        raise IncompatibleError(
            f"{who} needs a separable H(q, p) = T(p) + V(q), but {name} does not declare "
            f"itself separable; use model=separable_hnn, or wrap an analytic separable system as "
            f"hnnsym.ode.integrators.Separable(system)"
        )
    return H


def _partial_gradient(fn: Callable[[Tensor], Tensor], x: Tensor, create_graph: bool) -> Tensor:
    """∇fn(x) for fn: (B, d) -> (B,) (T'(p) or V'(q)); a graph through it with ``create_graph``."""
    with torch.enable_grad():
        if not x.requires_grad:
            x = x.detach().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(x).sum(), x, create_graph=create_graph)
    return g


def _at(step: int | None) -> str:
    return "" if step is None else f" at step {step}"


def _straight(x: Tensor) -> Tensor:
    """Exactly 0 in value, the identity in gradient: added to a rounded value it makes the
    rounding straight-through."""
    return x - x.detach()


@dataclass
class ReversibleLeapfrog:
    """Position Verlet on int64 fixed point with ``frac_bits`` fractional bits (see module doc).

    ``rounding``: "half_even" (default) or "trunc", or a callable on float64 tensors of values in
    units of the last bit, which must be odd (R(-x) = -R(x)) for the inverse to be exact; it is
    not checked, so a non-odd callable (floor) gives a map that -h does not undo.
    """

    frac_bits: int = 60
    rounding: str | Rounding = "half_even"

    name = "reversible_leapfrog"
    order = 2
    symplectic = True
    reversible = True  # gradient=reversible rebuilds its states by stepping back bit for bit
    has_stages = False

    def __post_init__(self):
        if isinstance(self.frac_bits, bool) or int(self.frac_bits) != self.frac_bits:
            raise ValueError(f"frac_bits must be a whole number, got {self.frac_bits!r}")
        self.frac_bits = int(self.frac_bits)
        if not 0 <= self.frac_bits <= 62:
            raise ValueError(
                f"frac_bits must be in 0..62 (range |x| < 2^(63-frac_bits)), got {self.frac_bits}"
            )
        if isinstance(self.rounding, str):
            if self.rounding not in ROUNDINGS:
                raise ValueError(
                    f"rounding must be one of {sorted(ROUNDINGS)} (odd roundings; floor breaks the "
                    f"inverse), got {self.rounding!r}"
                )
            self._round = ROUNDINGS[self.rounding]
        elif callable(self.rounding):
            self._round = self.rounding
        else:
            raise ValueError(f"rounding must be a name or a callable, got {self.rounding!r}")

    @property
    def scale(self) -> float:
        """Integer units per unit of q or p: 2^frac_bits."""
        return math.ldexp(1.0, self.frac_bits)

    @property
    def bound(self) -> float:
        """States must satisfy |q_i|, |p_i| < bound = 2^(63 - frac_bits)."""
        return math.ldexp(1.0, 63 - self.frac_bits)

    # ---- fixed point -----------------------------------------------------------------------
    def quantize(self, y: Tensor) -> Tensor:
        """Float state -> int64 fixed point (round half to even). Raises outside the range."""
        x = torch.round(y.detach().to(torch.float64) * self.scale)
        if not bool((x.abs() < _TWO63).all()):  # also catches NaN and inf
            raise FixedPointOverflowError(
                f"initial state outside the fixed-point range |x| < 2^{63 - self.frac_bits} = "
                f"{self.bound:g} (max |y0| = {y.detach().abs().max().item():.6g}); lower "
                f"frac_bits to widen the range"
            )
        return x.to(torch.int64)

    def dequantize(self, x: Tensor, dtype: torch.dtype = torch.float64) -> Tensor:
        """int64 fixed point -> float (the nearest float of that dtype)."""
        return x.to(dtype) * math.ldexp(1.0, -self.frac_bits)

    def to_fixed(self, dx: Tensor, step: int | None = None) -> Tensor:
        """A float increment -> R(dx · 2^frac_bits) as int64. Raises on non-finite or too large."""
        if dx.requires_grad:
            dx = dx.detach()
        if dx.dtype != torch.float64:
            dx = dx.to(torch.float64)  # exact; so is the scaling by a power of two
        s = self._round(dx * self.scale)
        if not s.abs().max().item() < _TWO63:  # NaN fails too
            bad = dx[~(s.abs() < _TWO63)]
            raise FixedPointOverflowError(
                f"increment {bad.flatten()[0].item():.6g}{_at(step)} is not finite or exceeds the "
                f"fixed-point range 2^{63 - self.frac_bits} = {self.bound:g}; use a smaller step "
                f"or lower frac_bits"
            )
        return s.to(torch.int64)

    def add(self, x: Tensor, inc: Tensor, step: int | None = None) -> Tensor:
        """x + inc in int64, raising instead of wrapping when |x + inc| would exceed 2^63 - 1.

        Needs |x| <= 2^63 - 1 and |inc| <= 2^63 - 1 (guaranteed by quantize/to_fixed/add).
        """
        # fast path: the float sum is within 2^11 of the exact one, so below 2^63 - 2^12 it is safe
        if (x.to(torch.float64) + inc.to(torch.float64)).abs().max().item() < _SAFE:
            return x + inc
        headroom = INT64_MAX - x.abs()  # exact check near the edge
        over = (inc.abs() > headroom) & ((inc ^ x) >= 0)  # same sign and too large
        if bool(over.any()):
            raise FixedPointOverflowError(
                f"state left the fixed-point range |x| < 2^{63 - self.frac_bits} = {self.bound:g}"
                f"{_at(step)}; the orbit escapes or the step is unstable (smaller h), or lower "
                f"frac_bits to widen the range"
            )
        return x + inc

    # ---- stepping --------------------------------------------------------------------------
    def forces(self, H) -> tuple[Callable[..., Tensor], Callable[..., Tensor]]:
        """(T', V') of a separable H as functions (x, create_graph) -> gradient: H's own
        ``kinetic_grad``/``potential_grad`` where it has them, else autograd of kinetic/potential."""
        Hs = as_separable(H)

        def force(explicit, energy):
            if explicit is not None:
                return lambda x, graph=False: explicit(x)
            return lambda x, graph=False: _partial_gradient(energy, x, graph)

        dT = Hs.kinetic_grad if has(Hs, Capability.KINETIC_GRADIENT) else None
        dV = Hs.potential_grad if has(Hs, Capability.POTENTIAL_GRADIENT) else None
        return force(dT, Hs.kinetic), force(dV, Hs.potential)

    def advance(self, H, x: Tensor, h: float, steps: int) -> Tensor:
        """``steps`` steps of size h (either sign) on an int64 state x (B, 2d) -> int64 (B, 2d).

        ``advance(H, advance(H, x, h, N), -h, N)`` returns x bit for bit (given deterministic
        forces). Forces are evaluated in float64.
        """
        if x.dtype != torch.int64 or x.dim() != 2 or x.shape[-1] % 2:
            raise ValueError(f"x must be an int64 tensor (B, 2d), got {x.dtype} {tuple(x.shape)}")
        _, xq, xp = self._run(H, x, None, float(h), int(steps), False, False, torch.float64)
        return torch.cat([xq, xp], -1)

    def float_advance(self, H, y: Tensor, h: float, steps: int) -> Tensor:
        """The same substeps in plain floating point, y (B, 2d) -> (B, 2d), for comparison: in
        exact arithmetic -h undoes them, in floating point it does not (rounding errors are not
        reversed, and chaos amplifies them)."""
        dT, dV = self.forces(H)
        d = y.shape[-1] // 2
        q, p = y[:, :d], y[:, d:]
        for _ in range(int(steps)):
            q = q + 0.5 * h * dT(p)
            p = p - h * dV(q)
            q = q + 0.5 * h * dT(p)
        return torch.cat([q, p], -1)

    def states(self, H, y0: Tensor, h: float, steps: int) -> Tensor:
        """All states (steps+1, B, 2d) in y0's dtype, quantizing y0 first.

        With grad mode on, differentiable in y0 and H's parameters with rounding straight-through
        (this is ``gradient=backprop``: memory grows with steps).
        """
        graph = torch.is_grad_enabled()
        traj, _, _ = self._run(
            H, self.quantize(y0), y0, float(h), int(steps), graph, True, y0.dtype
        )
        return traj

    def _run(self, H, x, y0, h, steps, graph, record, dtype):
        """The forward loop on int64 halves (xq, xp) with float mirrors (Yq, Yp): their dequantized
        values, plus a straight-through graph of the float map when ``graph``. T'(p_{n+1}) serves
        the last drift of step n and the first of step n+1: two force evaluations per step."""
        dT, dV = self.forces(H)
        d = x.shape[-1] // 2
        xq, xp = x[:, :d], x[:, d:]
        Y = self.dequantize(x, dtype)
        if graph and y0 is not None:
            Y = Y + _straight(y0)
        Yq, Yp = Y[:, :d], Y[:, d:]
        out = [Y] if record else None
        a = 0.5 * h

        def update(x, Y, dx, inc, n, need_Y=True):
            x = self.add(x, inc, n)
            if not need_Y:
                return x, None
            Y_new = self.dequantize(x, dtype)
            return x, (Y_new + _straight(Y + dx) if graph else Y_new)

        if steps:
            dq = a * dT(Yp, graph)
            inc = self.to_fixed(dq, 0)
        for n in range(steps):
            # q_½ = q_n + R(h/2 T'(p_n))
            xq, Yq = update(xq, Yq, dq, inc, n)
            # p_{n+1} = p_n + R(-h V'(q_½))
            dp = -h * dV(Yq, graph)
            xp, Yp = update(xp, Yp, dp, self.to_fixed(dp, n), n)
            # q_{n+1} = q_½ + R(h/2 T'(p_{n+1})); T'(p_{n+1}) and its R are reused by step n+1
            dq = a * dT(Yp, graph)
            inc = self.to_fixed(dq, n)
            xq, Yq = update(xq, Yq, dq, inc, n, graph or record)
            if record:
                out.append(torch.cat([Yq, Yp], -1))
        return (torch.stack(out) if record else None), xq, xp

    # ---- the integrator protocol (hnnsym.ode.integrators.Integrator) ------------------------
    def strict(self) -> ReversibleLeapfrog:
        return self  # explicit: nothing to converge

    def check(self, problem: Problem, y0: Tensor) -> None:
        """A separable H; on CUDA, a warning unless deterministic algorithms are on."""
        as_separable(problem.H)
        if y0.device.type == "cuda" and not torch.are_deterministic_algorithms_enabled():
            warnings.warn(
                "reversible_leapfrog on CUDA without torch.use_deterministic_algorithms(True) "
                "(and CUBLAS_WORKSPACE_CONFIG=:4096:8): forces may not repeat bit for bit",
                RuntimeWarning,
                stacklevel=4,
            )

    def trajectory(self, problem: Problem, y0: Tensor) -> Tensor:
        """All states (steps+1, B, 2d): differentiable (``gradient=backprop``) in grad mode."""
        return self.states(problem.H, y0, problem.h, problem.steps)
