"""A Hamiltonian from an expression: ``"p**2/2 + q**4/4 - q**2/2"`` -> H(y), y = [q, p] (B, 2d).

The text is parsed with Python's ``ast`` (``mode="eval"``) and never evaluated: only numbers, names
(the coordinates, the constants, ``pi``), ``+ - * / **``, unary ``±`` and calls of the functions in
``FUNCTIONS`` are accepted, and the sympy expression is built node by node from that tree. The torch
function is a recursive translation of the sympy expression into closures over tensor operations
(no ``lambdify``, no ``exec``), so autograd gives ∇H. sympy also decides separability
(∂²H/∂q_i∂p_j ≡ 0) and the mass of T = |p|²/(2m).

Errors are one line (``UserError``) naming the key ``where`` (``system.hamiltonian``) and, for
syntax, the column.
"""

from __future__ import annotations

import ast
import functools
import logging
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence

import sympy
import torch
from torch import Tensor, nn

from hnnsym.errors import UserError

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
MAX_NUMERIC_EXPONENT = 100  # number ** number is exact in sympy: 2**2**100 would never finish


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
    where: str = "system.hamiltonian",
) -> sympy.Expr:  # fmt: skip
    """The sympy expression of ``text`` in the symbols ``coordinates`` and ``constants`` (real).

    Never evaluates ``text``: it is parsed by ``ast`` and only whitelisted nodes are translated.
    UserError (one line) on a syntax error (with its column), a disallowed construct, or an
    unknown symbol."""
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
            return sympy.Integer(value) if isinstance(value, int) else sympy.Float(value)
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
            if (
                isinstance(node.op, ast.Pow)
                and left.is_number
                and right.is_number
                and abs(float(right)) > MAX_NUMERIC_EXPONENT
            ):
                raise self.fail(node, f"the exponent of {self.segment(node)} is too large")
            try:
                return _BINARY[type(node.op)](left, right)
            except ZeroDivisionError:
                raise self.fail(node, f"{self.segment(node)} divides by zero") from None
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                name = self.segment(node.func)
                raise self.fail(node, f"unknown function {name!r}; allowed: "
                                f"{', '.join(sorted(FUNCTIONS))}")  # fmt: skip
            if node.keywords or len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
                raise self.fail(node, f"{node.func.id} takes one argument")
            return FUNCTIONS[node.func.id][0](self.build(node.args[0]))
        raise self.fail(node, f"{self.segment(node)!r} is not allowed (only numbers, names, "
                        "+ - * / **, and calls of functions)")  # fmt: skip


# ---- sympy -> torch -------------------------------------------------------------------------

Values = Sequence  # of Tensor | float, one per symbol of ``compile_torch``


def compile_torch(expr: sympy.Expr, symbols: Sequence[sympy.Symbol]) -> Callable[[Values], Tensor]:
    """``f(values)``: ``expr`` with ``symbols[i]`` = ``values[i]`` (tensors broadcast), built of
    torch operations (differentiable). Numeric subexpressions are folded to floats."""
    index = {s: i for i, s in enumerate(symbols)}

    def build(e: sympy.Expr) -> Callable[[Values], Tensor | float]:
        if not (e.free_symbols & index.keys()):
            if e.free_symbols:
                missing = sorted(map(str, e.free_symbols))
                raise ValueError(f"{e} has symbols without values: {missing}")
            try:
                c = float(e)
            except TypeError:
                c = math.nan
            if not math.isfinite(c):
                what = (
                    "infinite (a division by zero?)" if e.has(sympy.zoo, sympy.oo) else "not real"
                )
                raise ValueError(f"{e} is {what}")
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
            if exp.is_Integer:
                k = int(exp)
                return lambda v: b(v) ** k
            x = build(exp)
            return lambda v: b(v) ** x(v)
        if e.func in _TORCH:
            (arg,) = e.args
            f, a = _TORCH[e.func], build(arg)
            return lambda v: f(a(v))
        raise ValueError(f"no torch translation of {e.func.__name__} in {e}")

    return build(expr)


# ---- analysis ------------------------------------------------------------------------------


def is_zero(e: sympy.Expr) -> bool:
    """True when sympy proves ``e`` ≡ 0 (False when it cannot decide)."""
    try:
        return sympy.simplify(e) == 0
    except Exception:  # noqa: BLE001 — sympy's simplify may fail on odd input: not provably zero
        return False


def separable_mass(
    expr: sympy.Expr, q: Sequence[sympy.Symbol], p: Sequence[sympy.Symbol]
) -> tuple[bool, float | None]:
    """(separable, mass): separable when every ∂²H/∂q_i∂p_j ≡ 0, i.e. H = T(p) + V(q); mass m when
    moreover T(p) = H − H(q, 0) = |p|²/(2m) with m > 0 (None otherwise)."""
    if not all(is_zero(sympy.diff(expr, qi, pj)) for qi in q for pj in p):
        return False, None
    kinetic = expr - expr.subs({pj: 0 for pj in p})
    inverse = sympy.diff(kinetic, p[0], 2)
    if inverse.free_symbols or not inverse.is_positive:
        return True, None
    if not is_zero(kinetic - inverse * sum(pj**2 for pj in p) / 2):
        return True, None
    return True, float(1 / inverse)


class SymbolicHamiltonian:
    """H(y) = the expression with y = [q, p] (B, 2d) -> (B,), constants as numbers.

    ``coordinates`` names the 2d columns of y in order (positions first); ``constants`` the values
    of the other symbols of ``text``."""

    def __init__(
        self, text: str, coordinates: Sequence[str], constants: Mapping[str, float],
        where: str = "system.hamiltonian",
    ) -> None:  # fmt: skip
        self.text = text
        self.coordinates = list(coordinates)
        self.symbols = [symbol(c) for c in self.coordinates]
        self.expr_symbolic = parse(text, self.coordinates, constants, where)
        self.expr = self.expr_symbolic.subs(
            {symbol(k): sympy.Float(v) for k, v in constants.items()}
        )
        used = self.expr.free_symbols
        self.unused = [c for c, s in zip(self.coordinates, self.symbols) if s not in used]
        if len(self.unused) == len(self.coordinates):
            raise UserError(f"{where} {text!r} depends on no coordinate "
                            f"({', '.join(self.coordinates)})")  # fmt: skip
        try:
            self._f = compile_torch(self.expr, self.symbols)
        except ValueError as err:
            raise UserError(f"{where} {text!r}: {err}") from None

    def __call__(self, y: Tensor) -> Tensor:
        out = self._f(y.unbind(-1))
        if not isinstance(out, Tensor) or out.shape != y.shape[:-1]:
            out = out + torch.zeros(y.shape[:-1], dtype=y.dtype, device=y.device)
        return out

    def separability(self) -> tuple[bool, float | None]:
        """(separable, mass) of H: see ``separable_mass``."""
        d = len(self.symbols) // 2
        return separable_mass(self.expr, self.symbols[:d], self.symbols[d:])


class SymbolicModel(nn.Module):
    """A learned H that is the user's expression with the constants in ``learn`` as parameters
    (fit to the data like a network's weights; ``model=symbolic model.learn=[k]``): (B, 2d) -> (B,).

    The other constants keep their values in ``params``; a learned one starts from ``init[name]``
    (default: its value in ``params``). ``separable`` when ∂²H/∂q_i∂p_j ≡ 0 for every value of the
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
        expr = parse(hamiltonian, coordinates, [*fixed, *starts], "model.hamiltonian")
        expr = expr.subs({symbol(k): sympy.Float(v) for k, v in fixed.items()})
        if missing := [k for k in learn if symbol(k) not in expr.free_symbols]:
            raise UserError(f"model.learn: H does not depend on {', '.join(missing)}")
        self.dim, self.names, self.text = dim, learn, hamiltonian
        self.constants = nn.ParameterDict(
            {
                k: nn.Parameter(torch.tensor(v, dtype=torch.get_default_dtype()))
                for k, v in starts.items()
            }
        )
        symbols = [symbol(c) for c in coordinates]
        try:
            self._f = compile_torch(expr, [*symbols, *(symbol(k) for k in learn)])
        except ValueError as err:
            raise UserError(f"model.hamiltonian {hamiltonian!r}: {err}") from None
        self.separable = separable_mass(expr, symbols[:dim], symbols[dim:])[0]

    def forward(self, y: Tensor) -> Tensor:
        out = self._f([*y.unbind(-1), *(self.constants[k] for k in self.names)])
        return out + torch.zeros(y.shape[:-1], dtype=y.dtype, device=y.device)

    def extra_repr(self) -> str:
        return f"H = {self.text}, learned {self.names}"
