"""system=custom: a Hamiltonian from an expression (hnnsym.physics.symbolic), its errors, its
equality with the built-in systems it spells out, and generate -> train -> evaluate on it."""

from __future__ import annotations

import builtins
import json
import logging
import math

import pytest
import sympy
import torch
from omegaconf import OmegaConf

from hnnsym import integrate
from hnnsym.checkpoints import load_checkpoint
from hnnsym.config.build import model_from_checkpoint
from hnnsym.config.schemas import validated
from hnnsym.data.simulate import generate
from hnnsym.errors import UserError
from hnnsym.evaluation.metrics import grid_errors
from hnnsym.evaluation.stage import evaluate
from hnnsym.ode.capabilities import Capability, has
from hnnsym.ode.dynamics import vector_field
from hnnsym.physics.symbolic import SymbolicModel, parse
from hnnsym.physics.systems import custom, get_system, system_from_config
from hnnsym.training.stage import train

F64 = torch.float64
DOUBLE_WELL = "p**2/2 + q**4/4 - q**2/2"
HENON_HEILES = "(px**2 + py**2)/2 + (qx**2 + qy**2)/2 + qx**2*qy - qy**3/3"
HH_COORDINATES = ["qx", "qy", "px", "py"]


def states(n: int, width: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * (2 * torch.rand((n, width), generator=g, dtype=F64) - 1)


# ---- the parser -----------------------------------------------------------------------------


def test_parse_builds_the_expression_node_by_node():
    q, p, k = (sympy.Symbol(n, real=True) for n in ("q", "p", "k"))
    assert parse("p**2/2 + k*q**2/2", ["q", "p"], ["k"]) == p**2 / 2 + k * q**2 / 2
    assert parse(" -q + +p - (q - p) ", ["q", "p"]) == 2 * p - 2 * q
    got = parse("sqrt(abs(q)) + exp(-p) * cos(pi*q) / tanh(2.5)", ["q", "p"])
    assert got == sympy.sqrt(sympy.Abs(q)) + sympy.exp(-p) * sympy.cos(sympy.pi * q) / sympy.tanh(
        sympy.Float(2.5)
    )
    assert parse("q**(1/2)", ["q", "p"]) == sympy.sqrt(q)  # integer division stays exact


def test_the_text_is_never_evaluated(monkeypatch):
    """No eval/exec anywhere between the string and the torch function; Python code is refused.
    (One call first, so that the lazy imports of sympy, which run module code, are done.)"""
    custom("p**2/2 + 1 - cos(q)")

    def refuse(*args, **kwargs):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    system = custom("p**2/2 + 1 - cos(q) + k*exp(abs(p))", params={"k": 0.5})
    assert torch.isfinite(system(states(8, 2, 0))).all()
    with pytest.raises(UserError, match="unknown function '__import__'"):
        custom("__import__('os')")
    with pytest.raises(UserError, match="unknown function .__import__\\('os'\\).getcwd."):
        custom("__import__('os').getcwd()")
    with pytest.raises(UserError, match=r"'q.__class__' is not allowed"):
        custom("q.__class__")


@pytest.mark.parametrize(
    "text,message",
    [
        ("p**2 2", r"'p\*\*2 2', column 6: invalid syntax"),
        ("p**2/2 +", r"the end: invalid syntax"),
        ("(q + p", r"column 1: '\(' was never closed"),
        (
            "x**2 + p**2",
            r"column 1: unknown symbol 'x': not a coordinate \(q, p\), a constant "
            r"\(none in system.params\) or pi; set system.coordinates or \+system.params.x=<value>",
        ),
        ("p**2 + q^2", r"column 9: '\^' is not a power in Python syntax: write \*\*"),
        ("q // 2 + p", r"operator '//' is not allowed"),
        ("foo(q) + p", r"column 1: unknown function 'foo'; allowed: abs, acos"),
        ("sin(q, p)", r"sin takes one argument"),
        ("exp(x=q) + p", r"exp takes one argument"),
        ("sin + p", r"sin is a function: write sin\(...\)"),
        ("q if p else 1", r"'q if p else 1' is not allowed"),
        ("'q' + p", r"'q' is not a number"),
        ("[q, p]", r"is not allowed"),
        (
            "2**2**1000 + q",
            r"column 1: 2\*\*2\*\*1000 is a number of about 3.2e\+300 digits; at most "
            r"1000 are allowed",
        ),
        ("log(-1) + q + p", r"I\*pi is not real"),
        ("   ", r"system.hamiltonian is empty"),
        ("3.5", r"depends on no coordinate \(q, p\)"),
    ],
)
def test_bad_expressions_are_one_line_errors(text, message):
    with pytest.raises(UserError, match=message) as err:
        custom(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"coordinates": ["q1", "q2", "p1"]}, r"system.coordinates \['q1', 'q2', 'p1'\] must be an "
         "even number of names"),
        ({"hamiltonian": HENON_HEILES, "coordinates": HH_COORDINATES, "domain": [[-1, 1]] * 3},
         r"system.domain has 3 intervals, but there are 4 coordinates"),
        ({"domain": [1.0, -1.0]}, r"finite low < high"),
        ({"domain": 3}, r"system.domain must be \[low, high\] or one \[low, high\] per coordinate"),
        ({"hamiltonian": "p**2/2 - log(q)"}, r"is not finite at \(q, p\) = \(-2, -2\), inside "
         "system.domain"),
        ({"hamiltonian": "p**2/2 + 1/q"}, r"is not finite at \(q, p\) = \(0, -2\)"),
        ({"energy_max": -1.0}, r"no state of system.domain has H < system.energy_max=-1.0 "
         r"\(H >= -0.25"),
        ({"params": {"k": "two"}}, r"system.params.k must be a finite number, got 'two'"),
        ({"params": {"q": 1.0}}, r"the name 'q' is given twice"),
        ({"coordinates": ["x", "exp"]}, r"coordinate name 'exp' is a function or constant name"),
        ({"coordinates": ["x", "2y"]}, r"coordinate name '2y' is not an identifier"),
        ({"hamiltonian": "p**2/2 + q/k", "params": {"k": 0}}, r"column 10: q/k divides by zero"),
    ],
)  # fmt: skip
def test_bad_specs_are_one_line_errors(kwargs, message):
    with pytest.raises(UserError, match=message) as err:
        custom(**kwargs)
    assert "\n" not in str(err.value)


def test_a_coordinate_h_does_not_depend_on_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        system = custom("p1**2/2 + q1**2/2", coordinates=["q1", "q2", "p1", "p2"])
    assert "does not depend on q2, p2" in caplog.text
    y = states(5, 4, 1)
    torch.testing.assert_close(system(y), y[:, 2] ** 2 / 2 + y[:, 0] ** 2 / 2, rtol=0, atol=0)


# ---- the systems it spells out ------------------------------------------------------------


def assert_same_system(mine, builtin, y: torch.Tensor) -> None:
    """H and J⁻¹∇H (autograd) to rounding in float64, and the same structure."""
    torch.testing.assert_close(mine(y), builtin(y), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(vector_field(mine, y), vector_field(builtin, y), rtol=1e-13,
                               atol=1e-14)  # fmt: skip
    assert (mine.dim, mine.domain, mine.energy_max) == (
        builtin.dim, builtin.domain, builtin.energy_max)  # fmt: skip
    assert (mine.separable, mine.mass) == (builtin.separable, builtin.mass)


def test_custom_double_well_is_the_builtin_one():
    mine, builtin = custom(DOUBLE_WELL), get_system("double_well")
    assert_same_system(mine, builtin, states(257, 2, 0, scale=3.0))
    # the grids (evaluation) and the draws (generate) of the same box are the same
    assert torch.equal(mine.grid(17), builtin.grid(17))
    assert torch.equal(
        mine.sample(64, torch.Generator().manual_seed(3)),
        builtin.sample(64, torch.Generator().manual_seed(3)),
    )


def test_henon_heiles_as_an_expression_is_the_builtin_one():
    builtin = get_system("henon_heiles")
    mine = custom(HENON_HEILES, HH_COORDINATES, {}, [-0.5, 0.5], 1 / 6)
    assert_same_system(mine, builtin, states(257, 4, 1, scale=0.7))
    assert torch.equal(mine.grid(8), builtin.grid(8))


def test_constants_enter_as_their_values():
    """The pendulum with m = 0.5, l = 2, g = 9.81 as an expression with constants."""
    params = {"m": 0.5, "l": 2.0, "g": 9.81}
    mine = custom("p**2/(2*m*l**2) + m*g*l*(1 - cos(q))", params=params,
                  domain=[[-math.pi / 2, math.pi / 2], [-1.5, 1.5]])  # fmt: skip
    builtin = get_system("pendulum", g=9.81, length=2.0, mass=0.5)
    assert_same_system(mine, builtin, states(129, 2, 2))


@pytest.mark.parametrize(
    "text,coordinates,separable,mass",
    [
        (DOUBLE_WELL, None, True, 1.0),
        ("p**2/2 + q**2/2 + 0.5*q*p", None, False, None),  # the coupled oscillator
        ("p**2/(2*3) + cos(q)", None, True, 3.0),
        ("exp(p) + q**2", None, True, None),  # separable, T not quadratic
        ("p1**2/2 + p2**2 + q1**2 + q2**2", ["q1", "q2", "p1", "p2"], True, None),  # anisotropic
        ("(p1**2 + p2**2)/4 + sin(q1)*q2", ["q1", "q2", "p1", "p2"], True, 2.0),
        ("(p1**2 + p2**2)/2 + q1*p2", ["q1", "q2", "p1", "p2"], False, None),
        ("p**2/2 + q**2/2 + sin(q)**2*p + cos(q)**2*p - p", None, True, 1.0),  # needs simplify
    ],
)
def test_separability_and_mass(text, coordinates, separable, mass):
    system = custom(text, coordinates)
    assert system.separable is separable
    assert system.mass == (pytest.approx(mass, rel=1e-15) if mass is not None else None)
    if separable:  # V(q) = H(q, 0)
        y = states(16, 2 * system.dim, 3)
        q = y[:, : system.dim]
        torch.testing.assert_close(system.potential(q), system(torch.cat([q, 0 * q], -1)))


def test_separable_custom_h_runs_leapfrog_explicitly_as_the_builtin():
    """Detected separability is what the integrators read: leapfrog takes the explicit path, one
    H evaluation pattern, with the same trajectory as on the built-in double well."""
    y0 = states(8, 2, 4, scale=1.5)
    mine = integrate(custom(DOUBLE_WELL), y0, 0.05, 40, "leapfrog", "backprop")
    theirs = integrate(get_system("double_well"), y0, 0.05, 40, "leapfrog", "backprop")
    torch.testing.assert_close(mine, theirs, rtol=1e-13, atol=1e-13)


# ---- the spec round trip --------------------------------------------------------------------


def test_params_hold_the_whole_spec_and_rebuild_the_same_system():
    system = custom("p**2/2 + k*q**2/2 + q**4/4", ["q", "p"], {"k": 2.4},
                    [[-1.0, 1.0], [-2.0, 2.0]], 1.5)  # fmt: skip
    assert system.params == {
        "hamiltonian": "p**2/2 + k*q**2/2 + q**4/4", "coordinates": ["q", "p"],
        "params": {"k": 2.4}, "domain": [[-1.0, 1.0], [-2.0, 2.0]], "energy_max": 1.5,
    }  # fmt: skip
    # as stored in a data file (JSON) or a checkpoint, then rebuilt as the stages do
    record = json.loads(json.dumps({"name": system.name, "params": system.params}))
    for rebuilt in (get_system("custom", **record["params"]), system_from_config(record)):
        assert rebuilt.params == system.params
        assert (rebuilt.domain, rebuilt.energy_max, rebuilt.separable, rebuilt.mass) == (
            system.domain, system.energy_max, system.separable, system.mass)  # fmt: skip
        y = states(64, 2, 5)
        assert torch.equal(rebuilt(y), system(y))
        torch.testing.assert_close(system(y), y[:, 1] ** 2 / 2 + 1.2 * y[:, 0] ** 2 + y[:, 0] ** 4 / 4,
                                   rtol=1e-15, atol=1e-15)  # fmt: skip


def test_config_node_builds_the_system(compose_config):
    """hnnsym/conf/system/custom.yaml with overrides, validated, -> system_from_config."""
    cfg = compose_config("generate", [
        "system=custom", f"system.hamiltonian='{HENON_HEILES}'",
        "system.coordinates=[qx,qy,px,py]", "system.domain=[-0.5,0.5]",
        "system.energy_max=0.16666666666666666", "+system.params.k=1.0",
    ])  # fmt: skip
    validated(cfg, "system")
    system = system_from_config(cfg.system)
    assert system.params["params"] == {"k": 1.0}
    assert_same_system(system, get_system("henon_heiles"), states(33, 4, 6, scale=0.5))
    # the default is the double well
    default = system_from_config(compose_config("generate", ["system=custom"]).system)
    assert_same_system(default, get_system("double_well"), states(33, 2, 7))
    with pytest.raises(UserError, match="system.foo: Key 'foo' not in 'CustomSystemSchema'"):
        validated(compose_config("generate", ["system=custom", "+system.foo=1"]), "system")
    bad = OmegaConf.create({"name": "custom", "hamiltonian": "p**2 + x", "coordinates": ["q", "p"],
                            "params": {}, "domain": [-1, 1], "energy_max": None})  # fmt: skip
    with pytest.raises(UserError, match="unknown symbol 'x'"):
        system_from_config(bad)


# ---- end to end -----------------------------------------------------------------------------


def test_generate_train_evaluate_on_an_expression(compose_config, tmp_path):
    """generate -> train (1 epoch) -> evaluate on H = p²/2 + k q²/2 + q⁴/4 (k = 2.4): the data,
    the checkpoint and the metrics carry the expression, and h_l1 is the model's error against it."""
    text = "p**2/2 + k*q**2/2 + q**4/4"
    system_args = ["system=custom", f"system.hamiltonian={text}", "+system.params.k=2.4",
                   "system.domain=[-1.5,1.5]"]  # fmt: skip
    common = [*system_args, "noise=low", f"data_dir={tmp_path / 'data'}",
              f"run_dir={tmp_path / 'run'}", "device=cpu"]  # fmt: skip
    path = generate(compose_config("generate", [
        *common, "generate.n_train=16", "generate.n_val=8", "generate.n_test=2",
        "generate.train_steps=8", "generate.test_steps=10", "generate.obs_dt=0.05",
        "generate.fine_dt=0.01",
    ]))  # fmt: skip
    assert path == tmp_path / "data" / "custom" / "low" / "seed0.h5"
    run = [*common, "train.epochs=1", "train.batch_size=8", "train.window=4",
           "train.progress=false"]  # fmt: skip
    train(compose_config("train", run))
    metrics = evaluate(compose_config("evaluate", [*run, "eval.figures=false",
                                                   "eval.grid_points=41"]))  # fmt: skip
    assert metrics["system"]["params"]["hamiltonian"] == text
    assert metrics["system"]["params"]["params"] == {"k": 2.4}

    payload = load_checkpoint(tmp_path / "run" / "checkpoints" / "best.pt")
    model = model_from_checkpoint(payload)
    truth = custom(text, params={"k": 2.4}, domain=[-1.5, 1.5])
    expected = grid_errors(truth, model.double().eval(), truth.grid(41))["h_l1"]
    assert math.isfinite(metrics["h_l1"])
    assert metrics["h_l1"] == pytest.approx(expected, rel=1e-6)

    # training on that file with another expression is refused
    other = [a.replace("k*q**2/2", "k*q**2/3") for a in run]
    with pytest.raises(UserError, match="holds another custom system: its system.hamiltonian"):
        train(compose_config("train", [*other, "run_dir=" + str(tmp_path / "run2")]))

    # model=symbolic fits k from a wrong start (1.0) towards the data's 2.4
    fit = [*common, f"run_dir={tmp_path / 'fit'}", "model=symbolic", "model.learn=[k]",
           "+model.init.k=1.0", "train.epochs=10", "train.batch_size=8", "train.window=4",
           "train.lr=0.2", "train.progress=false"]  # fmt: skip
    result = train(compose_config("train", fit))
    k = float(load_checkpoint(result.best)["model"]["constants.k"])
    assert abs(k - 2.4) < 0.1, k
    metrics = evaluate(compose_config("evaluate", [*fit, "eval.figures=false",
                                                   "eval.grid_points=41"]))  # fmt: skip
    assert metrics["h_l1"] < 0.1 * expected  # far below the one-epoch network's error


def test_symbolic_model_is_the_expression_with_learnable_constants():
    model = SymbolicModel(1, "p**2/(2*m) + k*q**2/2 + c*q", None, {"k": 2.4, "m": 2.0, "c": 0.1},
                          learn=["k"], init={"k": 1.5}).double()  # fmt: skip
    assert [n for n, _ in model.named_parameters()] == ["constants.k"] and has(
        model, Capability.SEPARABLE
    )
    y = states(32, 2, 8)
    q, p = y[:, 0], y[:, 1]
    torch.testing.assert_close(model(y), p**2 / 4 + 1.5 * q**2 / 2 + 0.1 * q, rtol=1e-15,
                               atol=1e-15)  # fmt: skip
    model(y).sum().backward()  # dH/dk = q²/2
    torch.testing.assert_close(model.constants["k"].grad, (q**2 / 2).sum(), rtol=1e-14, atol=0)
    assert not has(
        SymbolicModel(1, "p**2/2 + k*q*p", learn=["k"], init={"k": 0.1}), Capability.SEPARABLE
    )
    for kwargs, message in [
        ({"learn": []}, "needs model.learn"),
        ({"learn": ["a"]}, r"'a' needs a start value \(\+model.init.a=..."),
        ({"learn": ["k"], "init": {"k": 1.0, "m": 3.0}}, r"model.init sets \['m'\]"),
        ({"learn": ["k"], "coordinates": ["q1", "q2", "p1", "p2"]}, "4 coordinates"),
        ({"learn": ["k"], "params": {"k": 1.0, "z": 1.0}, "init": {"z": 2.0}},
         "model.init sets"),
    ]:  # fmt: skip
        args = {"params": {"k": 1.0}, **kwargs}
        with pytest.raises(UserError, match=message):
            SymbolicModel(1, "p**2/2 + k*q**2/2", **args)
    with pytest.raises(UserError, match="H does not depend on z"):
        SymbolicModel(1, "p**2/2 + k*q**2/2", params={"k": 1.0, "z": 1.0}, learn=["k", "z"])
