"""Hostile configs end in one ``error:`` line and exit 2, without a traceback and without writing
anything: formulas whose numbers or analysis would never finish, divisions by zero, meaningless
training ranges, a blocklisted ``_target_``. Beside them, unit tests of what bounds the formulas
(hnnsym.physics.symbolic): the size of folded numbers, the separability test without simplify,
the wall-clock budget."""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest
import sympy
import torch
from stage_cli import assert_one_line_error, run_stage, tree_hashes

from hnnsym.errors import UserError
from hnnsym.ode.capabilities import Capability, has
from hnnsym.physics.symbolic import (
    MAX_DIGITS,
    SymbolicModel,
    digits,
    parse,
    separable_mass,
    symbol,
    time_limit,
    vanishes,
)
from hnnsym.physics.systems import custom

F64 = torch.float64
GUARD_S = 60  # a subprocess timeout against a hang, not a speed assertion
SMALL = ["generate.n_train=32", "generate.n_val=8", "generate.n_test=4", "generate.test_steps=20"]
NESTED_POWERS = "(((99**99)**99)**99)**99 * 0 + q**2 + p**2"
HARD_TO_SIMPLIFY = "sin(q*p)**9*cos(q+p)**7*tan(q-p)**5/(2+cosh(q*p**3)) + p**2/2 + q**2/2"


def generate_custom(tmp: Path, text: str, *overrides: str):
    return run_stage(
        "generate", *SMALL, "system=custom", f"system.hamiltonian='{text}'",
        f"data_dir={tmp / 'data'}", f"hydra.run.dir={tmp / 'hydra'}", *overrides,
        timeout=GUARD_S,
    )  # fmt: skip


# ---- formulas, through the CLI -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (NESTED_POWERS, ["column 3: (99**99)**99 is a number of about 2e+04 digits",
                         f"at most {MAX_DIGITS} are allowed"]),
        ("9**9**9**9 + q", ["column 4: 9**9**9 is a number of about 3.7e+08 digits"]),
        ("(2**1000)**1000 + q", ["(2**1000)**1000 is a number of about 3e+05 digits"]),
        ("2**2**2**2**2 * q + p", ["2**2**2**2**2 is a number of about 2e+04 digits"]),
        ("exp(exp(exp(700.0))) * q", ["exp(exp(700.0)) is a number of about 4.4e+303 digits"]),
        ("1/0", ["column 1: 1/0 divides by zero"]),
        ("q**2 + p**2 + 1/0", ["column 15: 1/0 divides by zero"]),
        ("q**2 + p**2 + 0**-1", ["0**-1 divides by zero"]),
        ("q**2 + p**2 + 0/0", ["0/0 divides by zero"]),
        ("p**2/2 + log(0)", ["log(0) is not finite: it folds to zoo"]),
        ("p**2/2 + tan(pi/2)*q", ["tan(pi/2) is not finite: it folds to zoo"]),
        ("1e999*q + p", ["1e999 is not a finite float64 number"]),
        ("q**2 + p**2 + oo", ["unknown symbol 'oo'"]),
        ("q**2 + p**2 + zoo", ["unknown symbol 'zoo'"]),
        ("q**2 + p**2 + nan", ["unknown symbol 'nan'"]),
        ("10**500*q + p", ["is beyond float64"]),
    ],
)  # fmt: skip
def test_a_formula_that_would_hang_or_diverge_is_one_line(tmp_path, text, fragments):
    proc = generate_custom(tmp_path, text)
    line = assert_one_line_error(proc, f"system.hamiltonian {text!r}", *fragments)
    assert "depends on no coordinate" not in line
    assert not (tmp_path / "data").exists()  # refused before any simulation


@pytest.mark.slow
def test_a_formula_simplify_hung_on_generates(tmp_path):
    """A legitimate (non-separable) H that sympy.simplify never finished on: generated within the
    guard, on a box away from the poles of tan(q - p)."""
    proc = generate_custom(tmp_path, HARD_TO_SIMPLIFY, "system.domain=[-0.5,0.5]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(tree_hashes(tmp_path / "data")) == ["custom/low/seed0.h5"]


# ---- training ranges and the _target_ blocklist, through the CLI ---------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("adversarial")
    proc = run_stage("generate", "system=double_well", *SMALL, f"data_dir={root}",
                     f"hydra.run.dir={root / 'hydra'}", timeout=GUARD_S)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        (["train.early_stop.patience=-3"], ["train.early_stop.patience must be >= 1, got -3"]),
        (["train.early_stop.min_delta=nan"],
         ["train.early_stop.min_delta must be in [0, 1), got nan"]),
        (["train.early_stop.patience=-3", "train.early_stop.min_delta=nan"],
         ["train.early_stop.patience must be >= 1, got -3; train.early_stop.min_delta must be "
          "in [0, 1), got nan"]),
        (["train.plateau.factor=nan"], ["train.plateau.factor must be in (0, 1), got nan"]),
        (["train.plateau.patience=-1"], ["train.plateau.patience must be >= 0, got -1"]),
        (["train.lr=inf"], ["train.lr must be a finite number > 0, got inf"]),
        (["train.weight_decay=nan"], ["train.weight_decay must be a finite number >= 0, got nan"]),
        (["integrator=rattle", "+integrator.predictor=observed"],
         ["integrator=rattle takes no key integrator.predictor (it takes: tol, max_iter"]),
        (["gradient=backprop", "+gradient.keep_every=2"],
         ["gradient=backprop takes no key gradient.keep_every"]),
        (["train.optimizer._target_=os.system"],
         ["train.optimizer: Target 'os.system' is blocklisted because it allows config data to "
          "control executable behavior"]),
    ],
)  # fmt: skip
def test_a_meaningless_train_option_is_one_line(data, tmp_path, overrides, fragments):
    before = tree_hashes(data)
    proc = run_stage("train", "system=double_well", f"data_dir={data}",
                     f"run_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'hydra'}",
                     "train.epochs=1", *overrides, timeout=GUARD_S)  # fmt: skip
    line = assert_one_line_error(proc, *fragments)
    if "blocklisted" in line:  # Hydra's message is wrapped over lines: all of them, joined
        assert line.endswith("It cannot be authorized with HYDRA_INSTANTIATE_ALLOWLIST_OVERRIDE.")
    assert tree_hashes(data) == before and tree_hashes(tmp_path) == {}


# ---- the bounds, unit by unit ---------------------------------------------------------------


def test_digits_of_numbers_and_unevaluated_operations():
    assert digits(sympy.Integer(10**999)) == 999
    assert digits(sympy.Rational(1, 10**50)) == 50
    assert digits(sympy.Integer(0)) == digits(sympy.Integer(1)) == 0
    assert 300 <= digits(sympy.Float(1e300)) <= 301 and 300 <= digits(sympy.Float(1e-300)) <= 301
    power = sympy.Pow(99, 99, evaluate=False)
    assert digits(power) == pytest.approx(math.log10(99**99), rel=1e-12)
    assert digits(sympy.Mul(10**400, 10**500, evaluate=False)) == 900
    assert digits(sympy.exp(sympy.Float(700.0), evaluate=False)) == pytest.approx(
        700 * math.log10(math.e), rel=1e-12
    )
    assert digits(sympy.Pow(sympy.Integer(2), sympy.Integer(10**400), evaluate=False)) == math.inf


def test_numbers_are_refused_before_they_are_computed():
    """The limit holds before sympy folds: this would take hours if it were computed."""
    start = time.perf_counter()
    with pytest.raises(UserError, match=r"9\*\*9\*\*9 is a number of about 3.7e\+08 digits"):
        parse("9**9**9**9 + q", ["q", "p"])
    assert time.perf_counter() - start < GUARD_S
    q = symbol("q")
    assert parse("10**999 / 10**998 * q", ["q", "p"]) == 10 * q  # within the limit: exact
    with pytest.raises(UserError, match=r"k\*\*k is a number of"):  # constants fold as numbers
        custom("p**2/2 + k**k**k*q", params={"k": 1e300})


def test_a_huge_integer_exponent_of_a_coordinate_is_a_float_one_for_torch():
    system = custom("q**(10**50) + p**2", domain=[-0.5, 0.5])
    y = 0.5 * (2 * torch.rand((64, 2), generator=torch.Generator().manual_seed(0), dtype=F64) - 1)
    torch.testing.assert_close(system(y), y[:, 1] ** 2, rtol=0, atol=0)


def old_separable_mass(expr, q, p):
    """The verdict before: every zero test by sympy.simplify."""

    def is_zero(e):
        return sympy.simplify(e) == 0

    if not all(is_zero(sympy.diff(expr, qi, pj)) for qi in q for pj in p):
        return False, None
    kinetic = expr - expr.subs({pj: 0 for pj in p})
    inverse = sympy.diff(kinetic, p[0], 2)
    if inverse.free_symbols or not inverse.is_positive:
        return True, None
    if not is_zero(kinetic - inverse * sum(pj**2 for pj in p) / 2):
        return True, None
    return True, float(1 / inverse)


QP = ["q", "p"]
Q2P2 = ["q1", "q2", "p1", "p2"]
REPO_SYSTEMS = [  # the custom systems of conf/, README and tests, and the ones they spell out
    ("p**2/2 + q**4/4 - q**2/2", QP, {}),
    ("p**2/2 + k*q**2/2 + q**4/4", QP, {"k": 2.4}),
    ("p**2/(2*m*l**2) + m*g*l*(1 - cos(q))", QP, {"m": 0.5, "l": 2.0, "g": 9.81}),
    ("(px**2 + py**2)/2 + (qx**2 + qy**2)/2 + qx**2*qy - qy**3/3", ["qx", "qy", "px", "py"], {}),
    ("(p1**2 + p2**2)/2 + (q1**2 + q2**2)/2 + q1**2*q2 - q2**3/3", Q2P2, {}),
    ("p**2/2 + 1 - cos(q) + k*exp(abs(p))", QP, {"k": 0.5}),
    ("p**2/2 + q**2/2 + 0.5*q*p", QP, {}),
    ("p**2/(2*3) + cos(q)", QP, {}),
    ("exp(p) + q**2", QP, {}),
    ("p1**2/2 + p2**2 + q1**2 + q2**2", Q2P2, {}),
    ("(p1**2 + p2**2)/4 + sin(q1)*q2", Q2P2, {}),
    ("(p1**2 + p2**2)/2 + q1*p2", Q2P2, {}),
    ("p**2/2 + q**2/2 + sin(q)**2*p + cos(q)**2*p - p", QP, {}),
    ("(q + p)**2 - 2*q*p", QP, {}),
    ("p**2/2 + q**2/2 + 1e-30*q*p", QP, {}),
]


@pytest.mark.parametrize(("text", "coordinates", "constants"), REPO_SYSTEMS)
def test_separability_agrees_with_the_simplify_verdict(text, coordinates, constants):
    expr = parse(text, coordinates, constants, values=constants)
    symbols = [symbol(c) for c in coordinates]
    d = len(symbols) // 2
    new = separable_mass(expr, symbols[:d], symbols[d:])
    old = old_separable_mass(expr, symbols[:d], symbols[d:])
    assert new[0] is old[0]
    assert new[1] == (pytest.approx(old[1], rel=1e-15) if old[1] is not None else None)


def test_the_formula_simplify_hung_on_is_decided_at_a_point():
    """Its mixed derivative is nonzero at the first random point: no simplify is called."""
    q, p = symbol("q"), symbol("p")
    expr = parse(HARD_TO_SIMPLIFY, ["q", "p"])
    start = time.perf_counter()
    assert not vanishes(sympy.diff(expr, q, p))
    assert time.perf_counter() - start < GUARD_S
    system = custom(HARD_TO_SIMPLIFY, domain=[-0.5, 0.5])
    assert (system.separable, system.mass) == (False, None)
    y = 0.5 * (2 * torch.rand((64, 2), generator=torch.Generator().manual_seed(1), dtype=F64) - 1)
    q_, p_ = y.unbind(-1)
    want = (torch.sin(q_ * p_) ** 9 * torch.cos(q_ + p_) ** 7 * torch.tan(q_ - p_) ** 5
            / (2 + torch.cosh(q_ * p_**3)) + p_**2 / 2 + q_**2 / 2)  # fmt: skip
    torch.testing.assert_close(system(y), want, rtol=1e-14, atol=1e-15)


def test_a_learned_constant_counts_in_the_separability():
    assert has(
        SymbolicModel(1, "p**2/2 + k*q**2/2", learn=["k"], init={"k": 1.0}), Capability.SEPARABLE
    )
    assert not has(
        SymbolicModel(1, "p**2/2 + k*q*p + q**2", learn=["k"], init={"k": 0.0}),
        Capability.SEPARABLE,
    )


def test_time_limit_interrupts_python_and_restores_the_timer():
    previous = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    with pytest.raises(UserError, match=r"^H took more than 0.2 s to parse and analyse"):
        with time_limit(0.2, "H"):
            while True:
                sum(range(1000))
    assert time.perf_counter() - start < GUARD_S
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is previous
    with time_limit(5, "H"):  # an inner block within an outer budget runs under the outer one
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
        with time_limit(0.01, "inner"):
            time.sleep(0.05)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
