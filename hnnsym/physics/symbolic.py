"""A Hamiltonian from an expression: ``"p**2/2 + q**4/4 - q**2/2"`` -> H(y), y = [q, p] (B, 2d).

The text is parsed with Python's ``ast`` (``mode="eval"``) and never evaluated: only numbers, names
(the coordinates, the constants, ``pi``), ``+ - * / **``, unary ``±`` and calls of the functions in
``FUNCTIONS`` are accepted, and the sympy expression is built node by node from that tree. The torch
function is a recursive translation of the sympy expression into closures over tensor operations
(no ``lambdify``, no ``exec``), so autograd gives ∇H. sympy also decides separability
(∂²H/∂q_i∂p_j ≡ 0) and the mass of T = |p|²/(2m), without ``simplify`` where it can (see
``vanishes``).

The work is bounded: a number that sympy would fold exactly (``9**9**9``, ``exp(exp(700.0))``) is
refused before it is computed when it would need more than ``MAX_DIGITS`` digits, a folded
division by zero or other non-finite number is refused where it appears, and ``time_limit`` gives
parsing and analysis together a wall-clock budget (``BUDGET_S``).

Errors are one line (``UserError``) naming the key ``where`` (``system.hamiltonian``) and, for
syntax, the column.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
import math
import operator
import random
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import sympy
import torch
from torch import Tensor, nn

from hnnsym.errors import UserError
from hnnsym.ode.capabilities import Capability
from hnnsym.ode.integrators.reversible import kinetic_part, potential_part

log = logging.getLogger(__name__)

# name in the expression -> (sympy function, torch function); all take one argument.
FUNCTIONS: dict[str, tuple[Callable, Callable[[Tensor], Tensor]]] = {
    "sin": (sympy.sin, torch.sin),
    "cos": (sympy.cos, torch.cos),
    "tan": (sympy.tan, torch.tan),
    "asin": (sympy.asin, torch.asin),
    "acos": (sympy.acos, torch.acos),
    "atan": (sympy.atan, torch.atan),
    "sinh": (sympy.sinh, torch.sinh),
    "cosh": (sympy.cosh, torch.cosh),
    "tanh": (sympy.tanh, torch.tanh),
    "exp": (sympy.exp, torch.exp),
    "log": (sympy.log, torch.log),
    "sqrt": (sympy.sqrt, torch.sqrt),
    "abs": (sympy.Abs, torch.abs),
}
# sympy function class -> torch function (sqrt becomes Pow(x, 1/2), handled with powers).
_TORCH = {
    sympy_f: torch_f
    for name, (sympy_f, torch_f) in FUNCTIONS.items()
    if isinstance(sympy_f, type) and name != "sqrt"
}
NAMED_CONSTANTS = {"pi": sympy.pi}
RESERVED = set(FUNCTIONS) | set(NAMED_CONSTANTS)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_OPERATOR_TEXT = {ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<",
                  ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&"}  # fmt: skip
# sympy folds numbers exactly (9**9**9 has 3.7e8 digits) in single calls no timer interrupts: a
# number of more than this many decimal digits (log10 max(|x|, 1/|x|); a fraction's larger part) is
# refused, a power before it is computed. float64 ends at 1e308: every number H can use fits.
MAX_DIGITS = 1000
BUDGET_S = 10.0  # wall-clock seconds for parsing, compiling and analysing one expression
_NON_FINITE = (sympy.zoo, sympy.oo, -sympy.oo, sympy.nan)
_LOG10_2 = math.log10(2)
_LOG10_E = math.log10(math.e)
_GROWING = (sympy.exp, sympy.sinh, sympy.cosh)  # |f(x)| ~ e^|x|


def symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a coordinate or constant (real, as in the phase space)."""
    return sympy.Symbol(name, real=True)


def check_names(coordinates: Sequence[str], constants: Iterable[str], where: str) -> None:
    """Coordinates and constants are distinct identifiers, none a function name or ``pi``."""
    seen: set[str] = set()
    for kind, names in (("coordinate", coordinates), ("constant", constants)):
        for name in names:
            if not isinstance(name, str) or not name.isidentifier():
                raise UserError(f"{where}: {kind} name {name!r} is not an identifier")
            if name in RESERVED:
                raise UserError(f"{where}: {kind} name {name!r} is a function or constant name")
            if name in seen:
                raise UserError(f"{where}: the name {name!r} is given twice")
            seen.add(name)


def parse(
    text: str, coordinates: Sequence[str], constants: Iterable[str] = (),
    where: str = "system.hamiltonian", values: Mapping[str, float] | None = None,
) -> sympy.Expr:  # fmt: skip
    """The sympy expression of ``text`` in the symbols ``coordinates`` and ``constants`` (real);
    a constant in ``values`` enters as its number, so it is folded (and bounded) as one.

    Never evaluates ``text``: it is parsed by ``ast`` and only whitelisted nodes are translated.
    UserError (one line) on a syntax error (with its column), a disallowed construct, an
    unknown symbol, a number of more than MAX_DIGITS digits or a non-finite one."""
    constants = list(constants)
    check_names(coordinates, constants, where)
    if not isinstance(text, str):
        raise UserError(f"{where} must be a string (an expression), got {text!r}")
    if not text.strip():
        raise UserError(f"{where} is empty: give H as an expression, e.g. 'p**2/2 + q**2/2'")
    text = text.strip()  # the columns below count in this text
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        at = f"column {err.offset}" if err.offset else "the end"
        raise UserError(f"{where} {text!r}, {at}: {err.msg}") from None
    except (RecursionError, MemoryError, ValueError) as err:
        raise UserError(f"{where} {text!r} cannot be parsed ({type(err).__name__})") from None
    names = {name: symbol(name) for name in (*coordinates, *constants)}
    names.update({name: sympy.Float(value) for name, value in (values or {}).items()})
    context = _Context(text, where, names, list(coordinates), constants)
    try:
        return context.build(tree.body)
    except RecursionError:
        raise UserError(f"{where} {text!r} is nested too deeply") from None


class _Context:
    """Translation of one parsed expression's nodes into sympy."""

    def __init__(self, text, where, names, coordinates, constants):
        self.text, self.where, self.names = text, where, names
        self.coordinates, self.constants = coordinates, constants

    def fail(self, node: ast.AST, what: str) -> UserError:
        return UserError(f"{self.where} {self.text!r}, column {node.col_offset + 1}: {what}")

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or type(node).__name__

    def build(self, node: ast.AST) -> sympy.Expr:
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(node, f"{self.segment(node)} is not a number")
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(node, f"{self.segment(node)} is not a finite float64 number")
            number = sympy.Integer(value) if isinstance(value, int) else sympy.Float(value)
            return self.bounded(node, number)
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.names[node.id]
            if node.id in NAMED_CONSTANTS:
                return NAMED_CONSTANTS[node.id]
            if node.id in FUNCTIONS:
                raise self.fail(node, f"{node.id} is a function: write {node.id}(...)")
            raise self.fail(node, f"unknown symbol {node.id!r}: not a coordinate "
                            f"({', '.join(self.coordinates)}), a constant ("
                            f"{', '.join(self.constants) or 'none in system.params'}) or pi; set "
                            f"system.coordinates or +system.params.{node.id}=<value>")  # fmt: skip
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.build(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.BitXor):
                at = self.text.find("^", node.left.end_col_offset or 0)
                raise UserError(f"{self.where} {self.text!r}, column {at + 1}: '^' is not a power "
                                "in Python syntax: write **")  # fmt: skip
            if type(node.op) not in _BINARY:
                shown = _OPERATOR_TEXT.get(type(node.op), type(node.op).__name__)
                raise self.fail(node, f"operator {shown!r} is not allowed (only + - * / **)")
            left, right = self.build(node.left), self.build(node.right)
            op = type(node.op)
            numbers = not (left.free_symbols or right.free_symbols)
            if numbers and op is ast.Pow:  # the one fold that can explode: checked before
                self.bounded(node, sympy.Pow(left, right, evaluate=False))
            result = _BINARY[op](left, right)
            if numbers:  # + - * / of bounded numbers are cheap: checked after
                self.bounded(node, result)
            if op in (ast.Div, ast.Pow) and _is_non_finite(result) and right.is_number:
                if (op is ast.Div and right.is_zero) or (left.is_zero and right.is_negative):
                    raise self.fail(node, f"{self.segment(node)} divides by zero")
            return self.finite(node, result)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = self.segment(node.func)
                raise self.fail(node, f"unknown function {name!r}; allowed: "
                                f"{', '.join(sorted(FUNCTIONS))}")  # fmt: skip
            if node.keywords or len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
                raise self.fail(node, f"{node.func.id} takes one argument")
            f, arg = FUNCTIONS[node.func.id][0], self.build(node.args[0])
            if not arg.free_symbols:
                self.bounded(node, f(arg, evaluate=False))
            return self.finite(node, f(arg))
        raise self.fail(node, f"{self.segment(node)!r} is not allowed (only numbers, names, "
                        "+ - * / **, and calls of functions)")  # fmt: skip

    def bounded(self, node: ast.AST, number: sympy.Expr) -> sympy.Expr:
        """``number`` (symbol-free, usually unevaluated), refused if it needs > MAX_DIGITS digits."""
        size = digits(number)
        if size > MAX_DIGITS:
            about = f"about {size:.2g}" if math.isfinite(size) else "more than 1e308"
            raise self.fail(node, f"{self.segment(node)} is a number of {about} digits; at most "
                            f"{MAX_DIGITS} are allowed")  # fmt: skip
        return number

    def finite(self, node: ast.AST, result: sympy.Expr) -> sympy.Expr:
        """``result``, refused if folding made it (or one of its terms or factors) zoo, ±oo or
        nan: the operands are finite, so it is this node's doing."""
        if _is_non_finite(result):
            bad = next(e for e in (result, *result.args) if e in _NON_FINITE)
            raise self.fail(node, f"{self.segment(node)} is not finite: it folds to {bad}")
        return result


def _is_non_finite(e: sympy.Expr) -> bool:
    """``e`` is, or directly holds, zoo, ±oo or nan (where sympy's folding puts them)."""
    return e in _NON_FINITE or any(a in _NON_FINITE for a in e.args)


def _reach(e: sympy.Expr) -> float:
    """An upper bound of |e| for a symbol-free ``e`` (inf beyond float64)."""
    if e.is_Rational or e.is_Float:
        try:
            return abs(float(e))
        except OverflowError:
            return math.inf
    size = digits(e)
    return 10.0**size if size < 308 else math.inf


@functools.lru_cache(maxsize=4096)
def digits(e: sympy.Expr) -> float:
    """Roughly the decimal digits sympy needs to hold the symbol-free ``e`` once folded, without
    folding it: log10 max(|x|, 1/|x|) of a number (exact for an integer or fraction, its larger
    part; within a bit for a float), inf when that is beyond float64. Operations combine their
    operands' sizes, from above for products and powers (a power multiplies, exp exponentiates);
    a function that keeps sizes (sin, log of a big number) still costs its argument's digits."""
    if e.is_Rational:
        return max((math.log10(abs(n)) for n in (e.p, e.q) if n), default=0.0)
    if e.is_Float:
        _, mantissa, exponent, bits = e._mpf_  # |x| in [2**(exponent+bits-1), 2**(exponent+bits))
        return max(exponent + bits, 1 - exponent - bits) * _LOG10_2 if mantissa else 0.0
    if not e.args:  # pi, E, I, zoo ...
        return 1.0
    sizes = [digits(a) for a in e.args]
    if e.is_Add:  # fractions add up their denominators
        fractions = sum(
            s for a, s in zip(e.args, sizes, strict=True) if a.is_Rational and not a.is_Integer
        )
        return fractions + max(sizes) + math.log10(len(sizes))
    if e.is_Mul:
        return sum(sizes)
    if e.is_Pow:
        return 0.0 if sizes[0] == 0 else _reach(e.args[1]) * sizes[0]
    if isinstance(e, _GROWING):
        return _reach(e.args[0]) * _LOG10_E
    if isinstance(e, sympy.log):
        return math.log10(sizes[0] / _LOG10_E + 1) + 1
    return max(sizes)


# ---- sympy -> torch -------------------------------------------------------------------------

_INT_EXPONENT = 2**31  # a larger integer exponent is a float one for torch (which wants int64)


def _brief(e: sympy.Expr, width: int = 60) -> str:
    """``str(e)``, its middle cut out when longer than ``width`` (a number of 500 digits)."""
    text = str(e)
    if len(text) <= width:
        return text
    return f"{text[: width // 2]}...{text[-width // 4 :]} ({len(text)} characters)"


Values = Sequence  # of Tensor | float, one per symbol of ``compile_torch``


def compile_torch(expr: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> Callable[[Values], Tensor]:
    """``f(values)``: ``expr`` with ``symbols[i]`` = ``values[i]`` (tensors broadcast), built of
    torch operations (differentiable). Numeric subexpressions are folded to floats."""
    index = {s: i for i, s in enumerate(symbols)}

    def build(e: sympy.Expr) -> Callable[[Values], Tensor | float]:
        if not (e.free_symbols & index.keys()):
            if e.free_symbols:
                missing = sorted(map(str, e.free_symbols))
                raise ValueError(f"{_brief(e)} has symbols without values: {missing}")
            try:
                c = float(e)
            except TypeError:
                c = math.nan
            if not math.isfinite(c):
                what = (
                    "infinite (a division by zero?)" if e.has(sympy.zoo, sympy.oo)
                    else "beyond float64" if math.isinf(c) else "not real"
                )  # fmt: skip
                raise ValueError(f"{_brief(e)} is {what}")
            return lambda v: c
        if e.is_Symbol:
            i = index[e]
            return lambda v: v[i]
        if e.is_Add or e.is_Mul:
            parts = [build(a) for a in e.args]
            combine = operator.add if e.is_Add else operator.mul
            return lambda v: functools.reduce(combine, (f(v) for f in parts))
        if e.is_Pow:
            base, exp = e.args
            b = build(base)
            if exp == sympy.Rational(1, 2):
                return lambda v: torch.sqrt(b(v))
            if exp.is_Integer and abs(exp) <= _INT_EXPONENT:
                k = int(exp)
                return lambda v: b(v) ** k
            x = build(exp)
            return lambda v: b(v) ** x(v)
        if e.func in _TORCH:
            (arg,) = e.args
            f, a = _TORCH[e.func], build(arg)
            return lambda v: f(a(v))
        raise ValueError(f"no torch translation of {e.func.__name__} in {_brief(e)}")

    return build(expr)


# ---- analysis ------------------------------------------------------------------------------


class _OutOfTime(BaseException):
    """The budget's timer went off (a BaseException: sympy's ``except Exception`` lets it pass)."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Run the block within ``seconds`` of wall-clock time, else UserError "<what> took more than
    <seconds> s". A SIGALRM timer: it needs the main thread and ``signal.setitimer`` and leaves an
    armed timer alone (the block then runs without a budget, as under an outer ``time_limit``).
    It interrupts Python code only: one long C call (an exact power) is bounded by MAX_DIGITS."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _OutOfTime:
        raise UserError(f"{what} took more than {seconds:g} s to parse and analyse; write it "
                        "more simply") from None  # fmt: skip
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


_POINTS = 8  # random points of the numeric test in vanishes
_PRECISION = 30  # its decimal digits
_NONZERO = 1e-15  # a value above this at 30 digits is no rounding error of an exact zero


def nonzero_somewhere(e: sympy.Expr) -> bool:
    """True when ``e`` evaluates (30 digits) to a real number > 1e-15 in magnitude at one of 8
    points drawn uniformly from [-1.5, 1.5] for its symbols (seeded): then e ≢ 0. False proves
    nothing (e may be undefined or complex at the points, or tiny)."""
    symbols = sorted(e.free_symbols, key=str)
    draw = random.Random(0)
    for _ in range(_POINTS):
        point = {s: sympy.Float(draw.uniform(-1.5, 1.5), _PRECISION) for s in symbols}
        try:
            value = e.evalf(_PRECISION, subs=point)
        except ArithmeticError:  # mpmath's overflow of a huge intermediate: no verdict here
            continue
        if value.is_Number and value.is_finite and abs(value) > _NONZERO:
            return True
    return False


def vanishes(e: sympy.Expr) -> bool:
    """True when ``e`` ≡ 0. Exact and cheap first: sympy's canonical form is 0 (the sum of a T(p)
    and a V(q) differentiates to a literal 0), or ``e`` is nonzero at a random point (the mixed
    derivative of most non-separable H). Only what both leave open goes to ``sympy.simplify``,
    which may take long (under ``time_limit``) and then decides False when it cannot prove 0."""
    if e == 0:
        return True
    if nonzero_somewhere(e):
        return False
    try:
        return sympy.simplify(e) == 0
    except Exception:  # noqa: BLE001 — sympy's simplify may fail on odd input: not provably zero
        return False


def separable_mass(
    expr: sympy.Expr, q: Sequence[sympy.Symbol], p: Sequence[sympy.Symbol]
) -> tuple[bool, float | None]:
    """(separable, mass): separable when every ∂²H/∂q_i∂p_j ≡ 0, i.e. H = T(p) + V(q); mass m when
    moreover T(p) = H − H(q, 0) = |p|²/(2m) with m > 0 (None otherwise). ≡ 0 as ``vanishes``
    decides it."""
    if not all(vanishes(sympy.diff(expr, qi, pj)) for qi in q for pj in p):
        return False, None
    kinetic = expr - expr.subs({pj: 0 for pj in p})
    inverse = sympy.diff(kinetic, p[0], 2)
    if inverse.free_symbols or not inverse.is_positive:
        return True, None
    if not vanishes(kinetic - inverse * sum(pj**2 for pj in p) / 2):
        return True, None
    return True, float(1 / inverse)


class SymbolicHamiltonian:
    """H(y) = the expression with y = [q, p] (B, 2d) -> (B,), constants as numbers.

    ``coordinates`` names the 2d columns of y in order (positions first); ``constants`` the values
    of the other symbols of ``text``. Parsing, compiling and the separability analysis run here,
    together within ``BUDGET_S`` seconds. A plain energy: its ``System`` declares separability."""

    capabilities = frozenset({Capability.HAMILTONIAN})

    def __init__(
        self, text: str, coordinates: Sequence[str], constants: Mapping[str, float],
        where: str = "system.hamiltonian",
    ) -> None:  # fmt: skip
        self.text = text
        self.coordinates = list(coordinates)
        self.symbols = [symbol(c) for c in self.coordinates]
        with time_limit(BUDGET_S, f"{where} {text!r}"):
            self.expr = parse(text, self.coordinates, constants, where, values=constants)
            used = self.expr.free_symbols
            self.unused = [c for c, s in zip(self.coordinates, self.symbols) if s not in used]
            if len(self.unused) == len(self.coordinates):
                raise UserError(f"{where} {text!r} depends on no coordinate "
                                f"({', '.join(self.coordinates)})")  # fmt: skip
            try:
                self._f = compile_torch(self.expr, self.symbols)
            except ValueError as err:
                raise UserError(f"{where} {text!r}: {err}") from None
            d = len(self.symbols) // 2
            self._separability = separable_mass(self.expr, self.symbols[:d], self.symbols[d:])

    def __call__(self, y: Tensor) -> Tensor:
        out = self._f(y.unbind(-1))
        if not isinstance(out, Tensor) or out.shape != y.shape[:-1]:
            out = out + torch.zeros(y.shape[:-1], dtype=y.dtype, device=y.device)
        return out

    def separability(self) -> tuple[bool, float | None]:
        """(separable, mass) of H: see ``separable_mass``."""
        return self._separability


class SymbolicModel(nn.Module):
    """A learned H that is the user's expression with the constants in ``learn`` as parameters
    (fit to the data like a network's weights; ``model=symbolic model.learn=[k]``): (B, 2d) -> (B,).

    The other constants keep their values in ``params``; a learned one starts from ``init[name]``
    (default: its value in ``params``). It declares ``SEPARABLE`` when ∂²H/∂q_i∂p_j ≡ 0 for every value of the
    learned constants (then leapfrog runs explicitly)."""

    def __init__(
        self,
        dim: int,
        hamiltonian: str,
        coordinates: Sequence[str] | None = None,
        params: Mapping[str, float] | None = None,
        learn: Sequence[str] = (),
        init: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        coordinates = ["q", "p"] if coordinates is None else [str(c) for c in coordinates]
        if len(coordinates) != 2 * dim:
            raise UserError(f"model: {len(coordinates)} coordinates {coordinates} for states of "
                            f"dim {dim} (2d = {2 * dim} columns)")  # fmt: skip
        params, init, learn = dict(params or {}), dict(init or {}), [str(k) for k in learn]
        if not learn:
            raise UserError("model=symbolic needs model.learn=[<constant>, ...]: the constants "
                            "of system.hamiltonian to fit")  # fmt: skip
        starts: dict[str, float] = {}
        for name in learn:
            value = init.get(name, params.get(name))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"model.learn: {name!r} needs a start value (+model.init.{name}=... "
                                "or system.params)")  # fmt: skip
            starts[name] = float(value)
        if unknown := sorted(set(init) - set(learn)):
            raise UserError(f"model.init sets {unknown}, which are not in model.learn {learn}")
        fixed = {k: float(v) for k, v in params.items() if k not in starts}
        symbols = [symbol(c) for c in coordinates]
        with time_limit(BUDGET_S, f"model.hamiltonian {hamiltonian!r}"):
            expr = parse(hamiltonian, coordinates, [*fixed, *starts], "model.hamiltonian", fixed)
            if missing := [k for k in learn if symbol(k) not in expr.free_symbols]:
                raise UserError(f"model.learn: H does not depend on {', '.join(missing)}")
            try:
                self._f = compile_torch(expr, [*symbols, *(symbol(k) for k in learn)])
            except ValueError as err:
                raise UserError(f"model.hamiltonian {hamiltonian!r}: {err}") from None
            separable = separable_mass(expr, symbols[:dim], symbols[dim:])[0]
        self.capabilities = frozenset(
            {Capability.HAMILTONIAN} | ({Capability.SEPARABLE} if separable else set())
        )
        self.dim, self.names, self.text = dim, learn, hamiltonian
        self.constants = nn.ParameterDict(
            {
                k: nn.Parameter(torch.tensor(v, dtype=torch.get_default_dtype()))
                for k, v in starts.items()
            }
        )

    def forward(self, y: Tensor) -> Tensor:
        out = self._f([*y.unbind(-1), *(self.constants[k] for k in self.names)])
        return out + torch.zeros(y.shape[:-1], dtype=y.dtype, device=y.device)

    def kinetic(self, p: Tensor) -> Tensor:
        """T(p) = H(0, p) (used where it declares ``SEPARABLE``)."""
        return kinetic_part(self, p)

    def potential(self, q: Tensor) -> Tensor:
        """V(q) = H(q, 0) (used where it declares ``SEPARABLE``)."""
        return potential_part(self, q)

    def extra_repr(self) -> str:
        return f"H = {self.text}, learned {self.names}"
