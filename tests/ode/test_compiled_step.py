"""The compiled stage solve (``RungeKutta(compile=True)``, ``hnnsym.ode.compiled``) against the
eager one: the same states to rounding (float32, float64), the same gradients to 1e-10 in float64
for backprop and symplectic_adjoint (whose backward's direct solve is compiled too), the same
sweep counts; and the eager fallback with its one-line notice where compilation fails.

Compile time is the cost here: tiny shapes (B = 4, 6 steps), and each compiled graph (one per
dtype, grad mode and chunk size) is reused by every test that needs it. The graphs land in the
persistent cache (``hnnsym.ode.compiled.cache_dir``), so a second run only loads them.
"""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from hnnsym import integrate
from hnnsym.ode import compiled
from hnnsym.ode.gradients import get_gradient
from hnnsym.ode.integrators import get_integrator
from hnnsym.ode.solve import solve
from hnnsym.physics.models import HNN
from hnnsym.profiling.meter import SavedTensorMeter


def _compiler_missing() -> str:
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile (dynamo) is not supported on this platform"
    if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "no C++ compiler for inductor"
    return ""


pytestmark = pytest.mark.skipif(bool(_compiler_missing()), reason=_compiler_missing())


@pytest.fixture(autouse=True)
def _compiled_solves_stayed_compiled():
    """A compiler failure makes this and every later solve of the process run eagerly, and a
    comparison of "compiled" against eager would then pass without a compiled run: each test must
    leave the compiled path working (the fallback tests restore the state they set)."""
    yield
    failed = [flag for flag in ("failed", "chunk_failed") if compiled._state[flag]]
    assert not failed, f"compilation failed ({failed}): the solves ran eagerly"


needs_programs_on_disk = pytest.mark.skipif(
    not compiled.programs_on_disk(),
    reason=f"torch {torch.__version__} does not compile programs ahead and save them",
)

H_STEP, STEPS, B = 0.05, 6, 4


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]
_MODELS: dict = {}


def _problem(dtype: torch.dtype, device: str = "cpu"):
    """One model and y0 per dtype and device, shared by the tests (so are the compiled graphs)."""
    if (dtype, device) not in _MODELS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = HNN(1).to(dtype=dtype, device=device)
        y0 = torch.randn(B, 2, dtype=dtype, generator=torch.Generator().manual_seed(1))
        _MODELS[(dtype, device)] = (model, y0.to(device))
    return _MODELS[(dtype, device)]


def _run(dtype, gradient, compile_, sweeps=1, tol=None, loss_grad=True, device="cpu", chunk=1):
    """(trajectory, parameter gradients or None, solver stats) of one rollout."""
    model, y0 = _problem(dtype, device)
    integ = get_integrator(
        "implicit_midpoint", compile=compile_, compile_sweeps=sweeps, tol=tol, compile_steps=chunk
    )  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.set_grad_enabled(loss_grad):
        sol = solve(model, y0, H_STEP, STEPS, integ, gradient)
        if not loss_grad:
            return sol.ys, None, sol.stats
        loss = (sol.ys**2).sum()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
    return sol.ys.detach(), torch.cat([g.ravel() for g in grads]), sol.stats


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_states_equal_eager_to_rounding(dtype):
    ys_c, _, stats_c = _run(dtype, "symplectic_adjoint", True, loss_grad=False)
    ys_e, _, stats_e = _run(dtype, "symplectic_adjoint", False, loss_grad=False)
    eps = torch.finfo(dtype).eps
    assert torch.isfinite(ys_c).all()
    assert (ys_c - ys_e).abs().max() <= 64 * eps * ys_e.abs().max()
    # the same iteration: the same number of sweeps per step
    assert stats_c.steps == stats_e.steps == STEPS
    assert stats_c.iterations == stats_e.iterations


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gradient", ["backprop", "symplectic_adjoint"])
def test_gradients_equal_eager_float64(gradient, device):
    """The compiled path differentiated by backprop (AOT autograd's backward of the graph) and
    by the symplectic adjoint (compiled forward, eager backward)."""
    ys_c, g_c, _ = _run(torch.float64, gradient, True, device=device)
    ys_e, g_e, _ = _run(torch.float64, gradient, False, device=device)
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert g_e.abs().max() > 0
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()


def test_a_backprop_program_keeps_less_for_its_backward_than_eager_code():
    """``ACTIVATION_MEMORY_BUDGET``: the backward recomputes the cheap ops from few saved
    tensors. The profile's meter (``saved_mb_peak``) counted 117,104 bytes at most for the
    programs with AOT autograd's default partition against 66,976 for the eager steps here, and
    28,528 with the budget of 0.3."""
    model, y0 = _problem(torch.float64)
    peaks = {}
    for compile_ in (True, False):
        with SavedTensorMeter(exclude=[*model.parameters(), y0]) as meter:
            _run(torch.float64, "backprop", compile_)
        peaks[compile_] = meter.peak
    assert 0 < peaks[True] < peaks[False]


def test_chunks_stop_at_the_first_converged_sweep():
    """Three sweeps per chunk and a tolerance that needs several: the iterate returned is the
    first converged one (as the eager iteration), not the chunk's last, and later chunks follow
    until convergence."""
    ys_c, _, stats_c = _run(torch.float64, "symplectic_adjoint", True, 3, 1e-14, False)
    ys_e, _, stats_e = _run(torch.float64, "symplectic_adjoint", False, 1, 1e-14, False)
    assert stats_e.max_iterations > 3  # the test means something: more than one chunk
    assert stats_e.iterations % 3  # and some step stops inside a chunk
    assert stats_c.iterations == stats_e.iterations
    assert (ys_c - ys_e).abs().max() <= 1e-13


def _compile_with(monkeypatch, compile_fn) -> None:
    """``compiled._compile`` replaced by ``compile_fn``, from a clean slate: no programs kept and
    no earlier failure."""
    monkeypatch.setattr(compiled, "_compile", compile_fn)
    monkeypatch.setattr(compiled, "_models", compiled.weakref.WeakKeyDictionary())
    monkeypatch.setattr(compiled, "_shared", {})
    monkeypatch.setitem(compiled._state, "failed", False)
    monkeypatch.setitem(compiled._state, "chunk_failed", False)
    monkeypatch.setitem(compiled._state, "unsaved", False)


def test_compile_failure_falls_back_to_eager_with_one_notice(monkeypatch, caplog):
    def broken(fn, device_type):
        raise RuntimeError("no compiler here\nsecond line")

    _compile_with(monkeypatch, broken)
    with caplog.at_level(logging.WARNING, logger="hnnsym.ode.compiled"):
        ys_1, g_1, _ = _run(torch.float64, "backprop", True)
        ys_2, g_2, _ = _run(torch.float64, "symplectic_adjoint", True, chunk=3)
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    notices = [r for r in caplog.records if r.name == "hnnsym.ode.compiled"]
    assert len(notices) == 1
    assert "runs eagerly" in notices[0].getMessage()
    assert "no compiler here" in notices[0].getMessage()
    assert "\n" not in notices[0].getMessage()
    assert torch.equal(ys_1, ys_e) and torch.equal(g_1, g_e)
    assert torch.equal(ys_2, ys_e)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("periodic", "chunk", "chunks"), [((), 4, 2), ((0,), 8, 1)])
def test_the_symplectic_adjoints_chunks_run_compiled_and_exact(
    device, periodic, chunk, chunks, monkeypatch
):
    """With a compiled integrator the symplectic adjoint's direct solve runs as compiled
    programs too (``compiled.chunk``; 6 steps in chunks of 4 and 2, or in one), for the MLP's
    closed form and its periodic-input form, and the float64 gradients equal eager ones to
    1e-10."""
    import hnnsym.ode.gradients.symplectic_adjoint as sa

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = HNN(1, periodic=list(periodic)).to(dtype=torch.float64, device=device)
    y0 = torch.randn(B, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y0 = y0.to(device)
    calls = []

    def spy(*args):
        out = compiled.chunk(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(sa, "compiled_chunk", spy)
    gradient = get_gradient("symplectic_adjoint", chunk=chunk)
    grads = {}
    for compile_ in (True, False):
        integ = get_integrator("implicit_midpoint", compile=compile_)
        sol = solve(model, y0, H_STEP, STEPS, integ, gradient)
        g = torch.autograd.grad((sol.ys**2).sum(), list(model.parameters()), allow_unused=True)
        grads[compile_] = torch.cat([x.ravel() for x in g if x is not None])
    assert calls == [True] * chunks  # none in the eager run
    assert grads[False].abs().max() > 0
    assert (grads[True] - grads[False]).abs().max() <= 1e-10 * grads[False].abs().max()


def test_a_chunk_that_fails_to_compile_runs_eagerly_and_keeps_the_compiled_forward(
    monkeypatch, caplog
):
    """A compiler failure in the adjoint's chunk gives its own one-line notice; the chunk runs
    eagerly (the same gradient), and the forward's compiled solve stays on."""
    real = compiled._compile

    def broken_chunks(fn, device_type):
        if "chunk_adjoint" in fn.__name__:
            raise RuntimeError("cannot compile this chunk\nsecond line")
        return real(fn, device_type)

    _compile_with(monkeypatch, broken_chunks)
    with caplog.at_level(logging.WARNING, logger="hnnsym.ode.compiled"):
        ys_c, g_c, _ = _run(torch.float64, "symplectic_adjoint", True)
    ys_e, g_e, _ = _run(torch.float64, "symplectic_adjoint", False)
    notices = [r.getMessage() for r in caplog.records if r.name == "hnnsym.ode.compiled"]
    assert len(notices) == 1 and "symplectic adjoint's backward" in notices[0], notices
    assert "cannot compile this chunk" in notices[0] and "\n" not in notices[0]
    assert not compiled._state["failed"] and compiled._state["chunk_failed"]
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()
    assert (ys_c - ys_e).abs().max() <= 1e-13


def _compile_with_backward(monkeypatch, bw_compiler) -> None:
    """Programs compiled by AOT autograd with a forward compiler that passes the graph through
    and ``bw_compiler`` for the backward (no inductor: quick), from a clean slate."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                           bw_compiler=bw_compiler)  # fmt: skip
    _compile_with(monkeypatch, lambda fn, _: torch.compile(fn, backend=backend, fullgraph=True))


def test_a_backward_that_fails_to_compile_falls_back_to_eager_before_the_loss(monkeypatch, caplog):
    """AOT autograd compiles a program's backward when it first runs: a compiler that fails
    only there is caught at the program's first call, the solve runs eagerly, and the
    caller's backward() gets the eager gradients."""

    def backward_fails(gm, example_inputs):
        raise RuntimeError("no backward compiler here")

    _compile_with_backward(monkeypatch, backward_fails)
    with caplog.at_level(logging.WARNING, logger="hnnsym.ode.compiled"):
        ys_c, g_c, _ = _run(torch.float64, "backprop", True)
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    notices = [r.getMessage() for r in caplog.records if r.name == "hnnsym.ode.compiled"]
    assert len(notices) == 1 and "no backward compiler here" in notices[0]
    assert torch.equal(ys_c, ys_e) and torch.equal(g_c, g_e)
    assert compiled._state["failed"]


def test_a_backward_that_compiles_is_checked_once_per_program(monkeypatch):
    """With a working backward the check runs on a program's first call in grad mode only, and
    the compiled solve's gradients are the eager ones."""
    from torch._functorch.aot_autograd import make_boxed_func

    calls = []

    def backward(gm, example_inputs):
        calls.append(1)
        return make_boxed_func(gm.forward)

    _compile_with_backward(monkeypatch, backward)
    checks = []
    check = compiled._check_backward
    monkeypatch.setattr(compiled, "_check_backward", lambda *a: checks.append(1) or check(*a))
    ys_c, g_c, _ = _run(torch.float64, "backprop", True)
    ys_c2, g_c2, _ = _run(torch.float64, "backprop", True)
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    assert not compiled._state["failed"] and calls
    assert len(checks) == len(compiled._programs_of(_problem(torch.float64)[0]))
    assert (ys_c - ys_e).abs().max() <= 1e-12 and (g_c - g_e).abs().max() <= 1e-10
    assert torch.equal(g_c, g_c2)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(compiled.CACHE_ENV, str(tmp_path / "mine"))
    assert compiled.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(compiled.CACHE_ENV)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compiled.cache_dir() == tmp_path / "hnnsym" / "inductor"


class _VectorSets:
    """A stand-in for inductor's ``valid_vec_isa_list``: called, the sets that passed its check
    (counted); ``__wrapped__``, those the CPU's flags declare, unchecked."""

    def __init__(self, passed: list[str], declared: list[str]):
        self.passed, self.declared, self.checks = passed, declared, 0

    def __call__(self) -> list[str]:
        self.checks += 1
        return self.passed

    def __wrapped__(self) -> list[str]:
        return self.declared


@pytest.fixture
def inductor_config():
    """Inductor's settings, each test's changes undone (its ``patch``; pytest's monkeypatch does
    not restore them)."""
    import torch._inductor.config as config

    with config.patch({"cpp.vec_isa_ok": None}):
        yield config


def test_the_vector_instructions_are_checked_once_per_machine(
    monkeypatch, tmp_path, inductor_config
):
    from torch._inductor import cpu_vec_isa

    sets = _VectorSets(["avx512", "avx2"], ["avx512", "avx2"])
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", sets)
    compiled._check_vector_instructions(tmp_path)
    assert sets.checks == 1 and inductor_config.cpp.vec_isa_ok is True
    (record,) = tmp_path.iterdir()
    assert record.name == f"{compiled._machine_key()}.all-passed"
    # a later process: the record, no check, the same setting (part of inductor's cache keys)
    inductor_config.cpp.vec_isa_ok = None
    compiled._check_vector_instructions(tmp_path)
    assert sets.checks == 1 and inductor_config.cpp.vec_isa_ok is True


def test_a_vector_record_that_cannot_be_written_checks_again_with_the_same_setting(
    monkeypatch, tmp_path, inductor_config
):
    from torch._inductor import cpu_vec_isa

    sets = _VectorSets(["avx2"], ["avx2"])
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", sets)
    blocker = tmp_path / "blocker"
    blocker.write_text("")  # a file where the records' folder would be
    for checks in (1, 2):
        inductor_config.cpp.vec_isa_ok = None
        compiled._check_vector_instructions(blocker / "records")
        assert sets.checks == checks and inductor_config.cpp.vec_isa_ok is True


def test_the_machine_key_without_a_cpp_compiler(monkeypatch):
    """No compiler found: the key is still made (the compile fails later, with its notice)."""
    from torch._inductor import cpp_builder

    def missing() -> str:
        raise RuntimeError("no C++ compiler")

    key = compiled._machine_key()
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    assert len(compiled._machine_key()) == 32 and compiled._machine_key() != key


def test_a_machine_where_a_vector_set_failed_keeps_inductors_check(
    monkeypatch, tmp_path, inductor_config
):
    from torch._inductor import cpu_vec_isa

    sets = _VectorSets(["avx2"], ["avx512", "avx2"])  # the compiler cannot build AVX-512 code
    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", sets)
    for _ in range(2):
        compiled._check_vector_instructions(tmp_path)
        assert inductor_config.cpp.vec_isa_ok is None  # inductor checks in every process
    assert [p.suffix for p in tmp_path.iterdir()] == [".some-failed"]
    # the user's own setting is theirs
    inductor_config.cpp.vec_isa_ok = False
    compiled._check_vector_instructions(tmp_path / "other")
    assert inductor_config.cpp.vec_isa_ok is False and not (tmp_path / "other").exists()


def test_the_vector_instructions_record_of_this_machine(tmp_path, inductor_config):
    """Inductor's own check, on this machine: the verdict is consistent with the setting."""
    compiled._check_vector_instructions(tmp_path)
    (record,) = tmp_path.iterdir()
    assert record.stem == compiled._machine_key()
    assert record.suffix in (".all-passed", ".some-failed")
    assert inductor_config.cpp.vec_isa_ok is (True if record.suffix == ".all-passed" else None)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="compile_sweeps"):
        get_integrator("implicit_midpoint", compile=True, compile_sweeps=0)
    with pytest.raises(ValueError, match="compile must be true or false"):
        get_integrator("implicit_midpoint", compile="yes")


def test_integrate_accepts_the_compiled_integrator():
    model, y0 = _problem(torch.float64)
    with torch.no_grad():
        a = integrate(model, y0, H_STEP, 2, get_integrator("implicit_midpoint", compile=True))
        b = integrate(model, y0, H_STEP, 2, "implicit_midpoint")
    assert (a - b).abs().max() <= 1e-13


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gradient", ["checkpoint", "symplectic_adjoint"])
def test_recomputing_methods_continue_the_compiled_run(gradient, device):
    """Stepwise methods that recompute the states between kept ones (keep_every = 4) restart the
    compiled run from a kept state and its predictor history: the gradient is the eager one. On
    CUDA the forward without grad replays CUDA graphs and the recomputation in grad mode does
    not."""
    method = get_gradient(gradient, keep_every=4)
    _, g_c, _ = _run(torch.float64, method, True, device=device)
    _, g_e, _ = _run(torch.float64, get_gradient(gradient, keep_every=4), False, device=device)
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()


@pytest.mark.parametrize("gradient", ["backprop", "symplectic_adjoint"])
def test_chunks_of_steps_equal_eager(gradient, monkeypatch):
    """compile_steps = 3: a run's steps three per program from its first step on, a step running
    as many sweeps as the most its kind took so far in its kind of chunk (kinds: fewer than
    three steps before it, or three; a chunk of a kind not seen before runs eagerly and sets
    that plan); from a step whose sweeps did not meet the tolerance, the rest of the chunk is
    stepped again eagerly and raises the plan. The same states, sweep counts and gradients as eager (float64), with the
    plans learned and with one sweep too few."""
    from hnnsym.ode.integrators.stage_solver import RungeKutta

    calls = []  # (first step, steps of history, plan, steps kept)
    original = RungeKutta._steps_compiled

    def spy(self, problem, y, n, previous, plan):
        got = original(self, problem, y, n, previous, plan)
        calls.append((n, len(previous), plan, len(got[0])))
        return got

    monkeypatch.setattr(RungeKutta, "_steps_compiled", spy)
    model, y0 = _problem(torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    tol = 1e-9  # one sweep for most steps, two for some

    def run(integ):
        sol = solve(model, y0, H_STEP, 11, integ, gradient)
        grads = torch.autograd.grad((sol.ys**2).sum(), params, allow_unused=True)
        flat = torch.cat([g.ravel() for g in grads if g is not None])
        return sol.ys.detach(), flat, sol.stats

    ys_e, g_e, stats_e = run(get_integrator("implicit_midpoint", tol=tol))
    compiled_ = get_integrator("implicit_midpoint", tol=tol, compile=True, compile_steps=3)
    plans = compiled_.solver._sweeps
    # the first run: each kind of chunk seen first (steps 0, 3, 9) runs eagerly and sets its
    # plan; the second: programs only; (symplectic adjoint) the third: a plan one sweep short
    for case in ("first", "second", "short")[: 3 if gradient == "symplectic_adjoint" else 2]:
        if case == "short":  # one sweep too few for the first chunk's steps that take more
            learned = plans[("steps", 0, 3)]  # (sweeps of a step with fewer than three before
            assert learned[0] > 1  # it, of one with three): here all three steps are the first
            plans[("steps", 0, 3)] = (learned[0] - 1, learned[1])
        calls.clear()
        ys_c, g_c, stats_c = run(compiled_)
        assert stats_c.iterations == stats_e.iterations and stats_c.steps == stats_e.steps == 11
        assert (ys_c - ys_e).abs().max() <= 1e-13
        assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()
        kept = [c[:2] + c[3:] for c in calls]
        if case == "first":
            assert kept == [(6, 3, 3)]
            assert {key for key in plans if key[0] == "steps"} == {
                ("steps", 0, 3), ("steps", 3, 3), ("steps", 3, 2)}  # fmt: skip
        elif case == "second":  # the plans are what the steps took: every program kept whole
            assert kept == [(0, 0, 3), (3, 3, 3), (6, 3, 3), (9, 3, 2)]
        else:  # cut at a step given too few: the chunk's rest eagerly, raising the plan back
            assert kept[0][:2] == (0, 0) and kept[0][2] < 3 and plans[("steps", 0, 3)] == learned
            assert kept[1:] == [(3, 3, 3), (6, 3, 3), (9, 3, 2)]


@pytest.mark.parametrize("predictor", ["rk2", "extrapolate"])
def test_the_rk2_guess_is_taken_inside_the_program(predictor, monkeypatch):
    """A step predicted by RK2 (every step with ``predictor="rk2"``, the first of a run with
    "extrapolate") takes the guess inside the compiled program, not by eager field evaluations
    before it; states, sweep counts and gradients equal eager (float64)."""
    from hnnsym.ode.integrators.stage_solver import RungeKutta

    eager_guesses = []
    original = RungeKutta._predict

    def spy(self, *args):
        if not torch.compiler.is_compiling():  # a guess run eagerly, not one traced into a program
            eager_guesses.append(self.compile)
        return original(self, *args)

    monkeypatch.setattr(RungeKutta, "_predict", spy)
    model, y0 = _problem(torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for compile_ in (True, False):
        integ = get_integrator("implicit_midpoint", predictor=predictor, compile=compile_)
        sol = solve(model, y0, H_STEP, STEPS, integ, "backprop")
        grads = torch.autograd.grad((sol.ys**2).sum(), params, allow_unused=True)
        flat = torch.cat([g.ravel() for g in grads if g is not None])
        results.append((sol.ys.detach(), flat, sol.stats))
    (ys_c, g_c, stats_c), (ys_e, g_e, stats_e) = results
    assert stats_c.iterations == stats_e.iterations
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()
    # eager guesses: none for rk2 when compiled; with "extrapolate" only the constant and
    # linear extrapolations of steps 2 and 3 (the first step's RK2 runs in the program)
    assert eager_guesses.count(True) == (0 if predictor == "rk2" else 2)
    assert eager_guesses.count(False) == STEPS


def test_a_plan_counts_the_most_sweeps_of_each_kind_of_step():
    """A chunk's plan: the most sweeps its steps with fewer than three steps before them took,
    and the most the others took; a step past the bound (or not converged, counted as
    max_iter + 1) sends that kind of chunk step by step."""
    from hnnsym.ode.integrators.stage_solver import MAX_PLANNED_SWEEPS, STEP_BY_STEP, _raised

    assert _raised((1, 1), 0, {0: 2, 1: 3, 2: 2, 3: 1, 4: 2}) == (3, 2)
    assert _raised((3, 2), 3, {1: 1}) == (3, 2) and _raised((3, 2), 2, {0: 4}) == (4, 2)
    assert _raised((3, 2), 3, {0: MAX_PLANNED_SWEEPS}) == (3, MAX_PLANNED_SWEEPS)
    assert _raised((3, 2), 3, {0: MAX_PLANNED_SWEEPS + 1}) == STEP_BY_STEP


def test_models_of_one_structure_share_programs():
    """A second model of the same structure (the next run of a sweep in the same process) runs on
    the first's programs with its own weights: its states and gradients are its own eager ones
    (float64), and nothing new is compiled. A model of another structure has its own."""
    model, y0 = _problem(torch.float64)
    _run(torch.float64, "backprop", True)  # the first model's programs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        other = HNN(1).to(torch.float64)
    programs = compiled._programs_of(model)
    assert compiled._programs_of(other) is programs and programs
    known = set(programs)
    params = list(other.parameters())
    results = []
    for compile_ in (True, False):
        integ = get_integrator("implicit_midpoint", compile=compile_)
        ys = solve(other, y0, H_STEP, STEPS, integ, "backprop").ys
        grads = torch.autograd.grad((ys**2).sum(), params, allow_unused=True)
        results.append((ys.detach(), torch.cat([g.ravel() for g in grads if g is not None])))
    (ys_c, g_c), (ys_e, g_e) = results
    assert set(programs) == known
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()
    assert (ys_e - _run(torch.float64, "backprop", False)[0]).abs().max() > 1e-3  # other weights
    assert compiled._programs_of(HNN(1, periodic=[0]).to(torch.float64)) is not programs


def test_a_parameter_replaced_after_the_first_call_gets_a_program_of_its_own(monkeypatch):
    """H's modules are listed once (``compiled._first_read``), its tensors read from them on every
    call: a weight swapped for a frozen copy after the first solve changes the signature, so the
    next solve runs a program for it (here the traced function itself, no compiler) and matches
    the eager solve of the swapped model."""
    _compile_with(monkeypatch, lambda fn, _: fn)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = HNN(1).to(torch.float64)
    _, y0 = _problem(torch.float64)
    integ = get_integrator("implicit_midpoint", compile=True)
    solve(model, y0, H_STEP, STEPS, integ, "backprop")
    programs = compiled._programs_of(model)
    before = {key: set(program.by_signature) for key, program in programs.items()}
    first = model.net[0]
    first.weight = torch.nn.Parameter(first.weight.detach().clone(), requires_grad=False)
    results = []
    for compile_ in (True, False):
        integrator = get_integrator("implicit_midpoint", compile=compile_)
        ys = solve(model, y0, H_STEP, STEPS, integrator, "backprop").ys
        grads = torch.autograd.grad((ys**2).sum(), [first.bias, model.net[2].weight])
        results.append((ys.detach(), torch.cat([g.ravel() for g in grads])))
    assert any(set(programs[key].by_signature) - signatures for key, signatures in before.items())
    (ys_c, g_c), (ys_e, g_e) = results
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()


_COMPILE = compiled._compile


def _counting_traces(monkeypatch, traced: list) -> None:
    """``_compile`` as it is, each program compiled ahead counted in ``traced``; a clean slate
    (a new process: no programs in memory)."""

    def counting(fn, device_type):
        program = _COMPILE(fn, device_type)
        ahead = program.aot_compile
        program.aot_compile = lambda inputs: traced.append(fn.__name__) or ahead(inputs)
        return program

    _compile_with(monkeypatch, counting)


@needs_programs_on_disk
def test_a_later_process_loads_the_programs_from_disk_without_tracing(monkeypatch, tmp_path):
    """The programs a solve compiled are saved; a new process (a clean slate here) loads them
    instead of tracing, and they give the same states and gradients, those of the eager solve."""
    monkeypatch.setattr(compiled, "programs_dir", lambda: tmp_path)
    traced: list = []
    _counting_traces(monkeypatch, traced)
    ys_1, g_1, _ = _run(torch.float64, "backprop", True)
    saved = sorted(tmp_path.glob("*.bin"))
    assert traced and len(saved) == len(traced)
    _counting_traces(monkeypatch, traced)
    first = len(traced)
    ys_2, g_2, _ = _run(torch.float64, "backprop", True)
    assert len(traced) == first  # loaded, nothing traced
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    assert torch.equal(ys_1, ys_2) and torch.equal(g_1, g_2)
    assert (ys_2 - ys_e).abs().max() <= 1e-13
    assert (g_2 - g_e).abs().max() <= 1e-10 * g_e.abs().max()


@needs_programs_on_disk
def test_a_damaged_program_on_disk_is_compiled_again(monkeypatch, tmp_path):
    monkeypatch.setattr(compiled, "programs_dir", lambda: tmp_path)
    traced: list = []
    _counting_traces(monkeypatch, traced)
    ys_e, _, _ = _run(torch.float64, "symplectic_adjoint", False, loss_grad=False)
    _run(torch.float64, "symplectic_adjoint", True, loss_grad=False)
    saved = sorted(tmp_path.glob("*.bin"))
    assert saved
    for path in saved:
        path.write_bytes(b"not a program")
    _counting_traces(monkeypatch, traced)
    first = len(traced)
    ys_c, _, _ = _run(torch.float64, "symplectic_adjoint", True, loss_grad=False)
    assert len(traced) == first + len(saved)
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert all(path.read_bytes() != b"not a program" for path in saved)


@needs_programs_on_disk
def test_a_cache_that_cannot_be_written_is_reported_once_and_the_solve_stays_compiled(
    monkeypatch, tmp_path, caplog
):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setattr(compiled, "programs_dir", lambda: blocker / "programs")
    traced: list = []
    _counting_traces(monkeypatch, traced)
    with caplog.at_level(logging.WARNING, logger="hnnsym.ode.compiled"):
        ys_c, _, _ = _run(torch.float64, "symplectic_adjoint", True, loss_grad=False)
        ys_c2, _, _ = _run(torch.float64, "symplectic_adjoint", True, loss_grad=False)
    ys_e, _, _ = _run(torch.float64, "symplectic_adjoint", False, loss_grad=False)
    notices = [r.getMessage() for r in caplog.records if r.name == "hnnsym.ode.compiled"]
    assert len(notices) == 1 and "cannot be saved" in notices[0] and "\n" not in notices[0]
    assert str(blocker) in notices[0]
    assert traced and not compiled._state["failed"]  # compiled, kept in memory
    assert torch.equal(ys_c, ys_c2) and (ys_c - ys_e).abs().max() <= 1e-13


def test_a_torch_that_cannot_save_programs_still_compiles_the_solve(monkeypatch, tmp_path):
    """Where torch.compile cannot compile a program ahead and save it (torch 2.11), each process
    traces its programs: the solve stays compiled, exact, and nothing is written."""
    monkeypatch.setattr(compiled, "programs_dir", lambda: tmp_path)
    monkeypatch.setattr(compiled, "programs_on_disk", lambda: False)
    _compile_with(monkeypatch, compiled._compile)
    ys_c, g_c, _ = _run(torch.float64, "backprop", True)
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    programs = compiled._programs_of(_problem(torch.float64)[0]).values()
    assert programs and all(p.by_signature for p in programs)
    assert all(not p.compiled.kept_on_disk for p in programs)
    assert not list(tmp_path.iterdir())
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()


class _OwnHamiltonian(HNN):
    """A model class outside hnnsym: its code could change without hnnsym's source changing."""


def test_programs_are_kept_on_disk_only_for_hnnsyms_own_code():
    """A program's file is named by everything it depends on; a model of the user's own class
    (whose source the name would not follow) keeps its programs in memory only."""
    model = HNN(1).to(torch.float64)
    y = torch.zeros(4, 2, dtype=torch.float64)
    key = ("_steps", 0.05, 1)
    name = compiled._disk_key(model, key, compiled._signature(model, (y,)))
    assert name is not None
    assert name == compiled._disk_key(model, key, compiled._signature(model, (y.clone(),)))
    assert name != compiled._disk_key(model, ("_steps", 0.1, 1), compiled._signature(model, (y,)))
    assert name != compiled._disk_key(model, key, compiled._signature(model, (y[:2],)))
    assert name != compiled._disk_key(HNN(2).double(), key, compiled._signature(model, (y,)))
    assert compiled._disk_key(_OwnHamiltonian(1), key, compiled._signature(model, (y,))) is None


def test_a_program_on_disk_belongs_to_the_partition_it_was_compiled_with():
    """AOT autograd's settings decide what the forward saves and the backward recomputes: a
    program compiled with another memory budget is another file."""
    import torch._functorch.config as functorch_config

    model = HNN(1).to(torch.float64)
    signature = compiled._signature(model, (torch.zeros(4, 2, dtype=torch.float64),))
    names = set()
    for budget in (compiled.ACTIVATION_MEMORY_BUDGET, 1.0):  # ours, AOT autograd's default
        with functorch_config.patch(activation_memory_budget=budget):
            names.add(compiled._disk_key(model, ("_steps",), signature))
    assert len(names) == 2


def test_a_program_on_disk_belongs_to_the_cpu_it_was_compiled_for(monkeypatch):
    """Inductor's code uses the CPU's vector instructions: a cache on a cluster's shared disk
    must not give a node the programs of another kind of CPU."""
    model = HNN(1).to(torch.float64)
    signature = compiled._signature(model, (torch.zeros(4, 2, dtype=torch.float64),))
    name = compiled._disk_key(model, ("_steps",), signature)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "ANOTHER_ISA")
    assert compiled._disk_key(model, ("_steps",), signature) != name


def test_cuda_graphs_on_cuda_only_and_their_outputs_are_copied_out():
    """``uses_cuda_graphs``: on CUDA, in grad mode or not. A program that replays CUDA graphs
    returns copies of its outputs (the next replay overwrites the pool they live in), the same
    nesting; any other program returns its outputs as they are."""
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            assert compiled.uses_cuda_graphs("cuda") and not compiled.uses_cuda_graphs("cpu")
    pool = torch.arange(3.0)

    def replay(H, y):
        return [pool, None], (y,)

    for graphs in (True, False):
        replay.cuda_graphs = graphs
        program = compiled._Program(replay, replay, "replay", (), "cpu")
        (first, none), (y,) = program(None, torch.ones(2))
        assert none is None and torch.equal(first, pool) and torch.equal(y, torch.ones(2))
        assert (first.data_ptr() != pool.data_ptr()) == graphs


def test_a_program_with_cuda_graphs_checks_its_backward_on_a_twin_without_them(monkeypatch):
    """In grad mode a new program's backward is checked on a twin compiled without CUDA graphs
    (``_Program.checked``): on the program itself the check's backward would end the graph
    trees' pending forwards in the middle of a solve. The solve's own calls go to the program,
    and the gradients are the eager ones. Programs here run eagerly, flagged as CUDA graphs."""
    made, calls = [], []

    def flagged(fn, device_type, graphs=None):
        graphs = True if graphs is None else graphs
        made.append(graphs)

        def program(H, *inputs):
            calls.append(graphs)
            return fn(H, *inputs)

        program.cuda_graphs = graphs
        return program

    _compile_with(monkeypatch, flagged)
    ys_c, g_c, _ = _run(torch.float64, "backprop", True)
    ys_e, g_e, _ = _run(torch.float64, "backprop", False)
    programs = len(compiled._programs_of(_problem(torch.float64)[0]))
    assert programs and made == [True, False] * programs  # a program, then its twin
    assert calls.count(False) == programs  # each twin ran its check once, and nothing else
    assert calls.count(True) >= programs
    assert (ys_c - ys_e).abs().max() <= 1e-13
    assert (g_c - g_e).abs().max() <= 1e-10 * g_e.abs().max()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_training_steps_with_cuda_graphs_in_grad_mode_equal_eager_ones(monkeypatch):
    """Backprop's compiled programs replay CUDA graphs in grad mode (none skipped) through the
    optimizer steps of a training loop as the trainer takes them: ``.grad`` set to None before
    each batch and read by the optimizer before the next forward. Batch after batch the
    parameters equal those of eager training to 1e-10 (float64), through the graphs' warm-up,
    recording and replays and a smaller last batch (another program)."""
    from torch._dynamo.utils import counters

    skipped = counters["inductor"]["cudagraph_skips"]
    graph_calls = []  # per call of a compiled program: whether it replays CUDA graphs in grad mode
    call = compiled._Program.__call__

    def counted(self, H, *inputs):
        graph_calls.append(self.graphs and torch.is_grad_enabled())
        return call(self, H, *inputs)

    monkeypatch.setattr(compiled._Program, "__call__", counted)
    gen = torch.Generator().manual_seed(2)
    batches = [
        torch.randn(n, 2, dtype=torch.float64, generator=gen).cuda() for n in (4,) * 5 + (3,)
    ]
    trained = {}
    for compile_ in (True, False):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = HNN(1).to(dtype=torch.float64, device="cuda")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        integ = get_integrator("implicit_midpoint", compile=compile_, compile_steps=3)
        trained[compile_] = []
        for y0 in batches:
            optimizer.zero_grad(set_to_none=True)
            sol = solve(model, y0, H_STEP, STEPS, integ, "backprop")
            ((sol.ys - y0) ** 2).mean().backward()
            optimizer.step()
            trained[compile_].append(torch.cat([p.detach().ravel() for p in model.parameters()]))
    assert counters["inductor"]["cudagraph_skips"] == skipped
    assert sum(graph_calls) >= len(batches)  # the compiled run's solves replayed them
    for graphs, eager in zip(trained[True], trained[False], strict=True):
        assert (graphs - eager).abs().max() <= 1e-10 * eager.abs().max()
    assert not torch.equal(trained[False][0], trained[False][-1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_rollout_without_grad_replays_cuda_graphs_and_keeps_its_states():
    """Outside grad mode a compiled solve on CUDA runs as CUDA graphs (no program skipped
    them), its states equal the eager solve's to rounding, and a second rollout's replays leave
    the first's states as they were."""
    from torch._dynamo.utils import counters

    skipped = counters["inductor"]["cudagraph_skips"]
    first, _, _ = _run(torch.float64, "symplectic_adjoint", True, loss_grad=False, device="cuda")
    kept = first.clone()
    model, y0 = _problem(torch.float64, "cuda")
    integ = get_integrator("implicit_midpoint", compile=True)
    with torch.no_grad():
        solve(model, 2 * y0, H_STEP, STEPS, integ, "symplectic_adjoint")
    eager, _, _ = _run(torch.float64, "symplectic_adjoint", False, loss_grad=False, device="cuda")
    assert counters["inductor"]["cudagraph_skips"] == skipped
    assert torch.equal(first, kept)
    assert (first - eager).abs().max() <= 64 * torch.finfo(torch.float64).eps * eager.abs().max()
