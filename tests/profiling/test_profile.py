"""The profile stage: the saved-bytes meter on hand-countable graphs, the CLI end to end on a tiny
setting (columns, figure, exactness of the symplectic adjoint, memory growth), the RSS worker."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from hnnsym.errors import UserError
from hnnsym.profiling.iteration import iteration, make_inputs, make_model, make_solver
from hnnsym.profiling.memory import rss_subprocess
from hnnsym.profiling.meter import SavedTensorMeter
from hnnsym.profiling.outputs import summary_tables
from hnnsym.profiling.plan import Method, Setting, methods_from_config
from hnnsym.profiling.run import COLUMNS
from hnnsym.profiling.stage import profile

REPO = Path(__file__).resolve().parents[2]
F32 = 4  # bytes
HNN = {"name": "hnn", "hidden": [16, 32, 16], "activation": "tanh"}
OSCILLATOR = {"name": "coupled_oscillator", "params": {"alpha": 0.5}}


# ---- the meter ---------------------------------------------------------------------------------
def test_meter_counts_unique_saved_storages_on_a_known_chain():
    n = 1000
    x = torch.randn(n, requires_grad=True)
    with SavedTensorMeter() as meter:
        y = x.exp()  # saves its result y
        z = y * y  # saves y twice: one storage
        w = z.sin()  # saves z
        loss = w.sum()  # saves nothing
        forward = meter.mark()
        (gx,) = torch.autograd.grad(loss, x)
    assert meter.packs == 4
    assert forward == 2 * n * F32  # y and z, each once
    assert meter.peak == 2 * n * F32
    assert meter.current == 0 and not meter.live  # all released by backward
    expected = torch.cos(x.exp() ** 2) * 2 * x.exp() ** 2
    torch.testing.assert_close(gx, expected)


def test_meter_excludes_given_storages_and_counts_whole_storage_of_views():
    n = 1000
    x = torch.randn(n, requires_grad=True)
    with SavedTensorMeter(exclude=[x]) as meter:
        a = x * x  # saves x (excluded)
        assert meter.current == 0
        b = a[::2].sin()  # saves a view of a's storage: all n floats count
        assert meter.current == n * F32
        del a, b
    assert meter.current == 0  # graph dropped with its outputs


class _BackwardBuildsAGraph(torch.autograd.Function):
    """Saves x in forward; its backward builds (and saves for) a graph of 3 n-vectors."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            t = x.detach().requires_grad_(True)
            u = t.exp()  # saves u
            v = u.sin()  # saves u (again)
            r = v.tanh()  # saves r
            (gt,) = torch.autograd.grad(r, t, g)
        return gt


def test_meter_counts_graphs_built_during_backward():
    n = 500
    x = torch.randn(n)
    y0 = torch.randn(n, requires_grad=True)
    with SavedTensorMeter(exclude=[y0]) as meter:
        x = y0 * 1.0  # saves nothing (scalar multiply by a Python number)
        out = _BackwardBuildsAGraph.apply(x)
        forward = meter.mark()
        out.sum().backward()
    assert forward == n * F32  # x, held for backward
    assert meter.peak == 3 * n * F32  # x, u, r alive together inside backward
    assert meter.current == 0


def test_meter_does_not_change_gradients():
    setting = Setting(system=OSCILLATOR, batch=16)
    H = make_model(HNN, 1, 0).double()
    params = list(H.parameters())
    y0, target = make_inputs(setting, 5)
    for gradient in ("backprop", "symplectic_adjoint", "adjoint"):
        solve = make_solver(Method(gradient, "implicit_midpoint", HNN), H, 5, 0.01, {})
        plain, _, _ = iteration(solve, params, y0, target)
        with SavedTensorMeter(exclude=[*params, y0, target]) as meter:
            metered, _, _ = iteration(solve, params, y0, target)
        assert all(torch.equal(a, b) for a, b in zip(plain, metered)), gradient
        assert meter.peak > 0 and meter.current == 0, gradient


def test_meter_counts_what_the_adjoint_keeps_outside_autograd(monkeypatch):
    """The symplectic adjoint's closed-form linearisation of f (one chunk of 8 steps here) holds
    plain tensors, no autograd graph: the meter counts them through hnnsym.ode.workspace, so its
    peak is above the chunk's kept tensors, and would not be without the announcement."""
    import hnnsym.ode.dynamics as dynamics

    setting = Setting(system=OSCILLATOR, batch=16)
    H = make_model(HNN, 1, 0).double()
    params = list(H.parameters())
    y0, target = make_inputs(setting, 8)
    solve = make_solver(Method("symplectic_adjoint", "implicit_midpoint", HNN), H, 8, 0.01, {})

    def peak() -> int:
        with SavedTensorMeter(exclude=[*params, y0, target]) as meter:
            iteration(solve, params, y0, target)
        assert meter.current == 0
        return meter.peak

    # per stage state: a_0 (2), a_1, a_2 (16 + 32), then s, t·u, s·u of each layer, ∇²H and Df
    per_state = 2 + 16 + 32 + 3 * (16 + 32 + 16) + 2 * 4
    kept = 8 * 16 * per_state * 8  # 8 steps × batch 16 states, float64
    counted = peak()
    monkeypatch.setattr(dynamics, "hold", lambda tensors: [])
    assert counted >= kept
    assert peak() < kept / 10  # the kept states and the loss's saved difference, 4.6 kB


# ---- configurations ----------------------------------------------------------------------------
def test_unregistered_methods_are_skipped_with_a_note():
    entries = [
        {"gradient": "backprop"},
        {"gradient": "no_such_gradient"},
        {"gradient": "backprop", "integrator": "no_such_integrator"},
        {"gradient": "backprop", "model": "no_such_model"},
        {"backend": "torchdiffeq", "gradient": "odeint", "integrator": "rk4"},
    ]
    methods, notes = methods_from_config(entries, "implicit_midpoint", HNN, torchdiffeq=False)
    assert [m.label for m in methods] == ["backprop"]
    assert len(notes) == 4
    assert any("no_such_gradient" in n for n in notes)
    assert any("torchdiffeq=false" in n for n in notes)


def test_malformed_method_entries_are_user_errors():
    with pytest.raises(UserError, match="gradient"):
        methods_from_config([{"integrator": "rk4"}], "implicit_midpoint", HNN)
    with pytest.raises(UserError, match="backend"):
        methods_from_config([{"gradient": "backprop", "backend": "jax"}], "implicit_midpoint", HNN)
    with pytest.raises(UserError, match="unique"):
        methods_from_config([{"gradient": "backprop"}] * 2, "implicit_midpoint", HNN)
    with pytest.raises(UserError, match=r"methods\[0\].options: .*keep_every"):
        entry = {"gradient": "symplectic_adjoint", "options": {"keep_every": 0}}
        methods_from_config([entry], "implicit_midpoint", HNN)


def test_gradient_options_reach_the_method_and_the_ratio_tables():
    """profile.methods entries carry the gradient method's options (keep_every), and profile.md
    gains backprop's time and memory over each method's."""
    entries = [{"gradient": "backprop"},
               {"gradient": "symplectic_adjoint", "options": {"keep_every": "sqrt"}, "label": "sa"}]  # fmt: skip
    methods, _ = methods_from_config(entries, "implicit_midpoint", HNN)
    assert methods[1].options == {"keep_every": "sqrt"} and methods[1].key != methods[0].key
    rows = pd.DataFrame({"method": ["backprop", "sa"], "steps": [8, 8], "cpu_ms": [10.0, 4.0],
                         "saved_mb_peak": [30.0, 0.5]})  # fmt: skip
    text = summary_tables(rows)
    time_part, memory_part = text.split("backprop CPU time / the method's")[1].split(
        "backprop peak saved memory / the method's"
    )
    assert re.search(r"\| sa\s+\|\s+2\.5 \|", time_part)
    assert re.search(r"\| sa\s+\|\s+60 \|", memory_part)


def test_a_method_may_profile_the_compiled_stage_solve(monkeypatch):
    """profile.methods[i].solver takes the compiled stage solve's options (compile,
    compile_steps, compile_sweeps), and make_solver hands them to the integrator."""
    import hnnsym.profiling.iteration as iteration_module

    entry = {"gradient": "backprop", "solver": {"compile": True, "compile_steps": 8}, "label": "c8"}
    methods, _ = methods_from_config([entry], "implicit_midpoint", HNN)
    built = {}
    real = iteration_module.get_integrator

    def spy(name, **options):
        built.update(options)
        return real(name, **options)

    monkeypatch.setattr(iteration_module, "get_integrator", spy)
    make_solver(methods[0], make_model(HNN, 1, 0), 4, 0.01, {"tol": 1e-6})
    assert built == {"tol": 1e-6, "compile": True, "compile_steps": 8}
    with pytest.raises(UserError, match="solver may set only"):
        methods_from_config(
            [{"gradient": "backprop", "solver": {"fuse": True}}], "implicit_midpoint", HNN
        )


# ---- the stage end to end ------------------------------------------------------------------------
def _run(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hnnsym.profile", *overrides],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("profile")
    proc = _run(
        f"hydra.run.dir={run_dir}", "profile.steps=[2,4]", "profile.batch=8",
        "profile.repeats=1", "profile.subprocess=false", "profile.reference.refine=2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return run_dir, proc, pd.read_csv(run_dir / "profile.csv")


@pytest.mark.slow
def test_cli_writes_csv_markdown_and_figure(tiny_run):
    run_dir, proc, df = tiny_run
    assert list(df.columns) == COLUMNS
    assert set(df["steps"]) == {2, 4}
    labels = set(df["method"])
    assert {"backprop", "checkpoint", "adjoint", "symplectic_adjoint"} <= labels
    assert (df.groupby("method").size() == 2).all()
    assert (df["time_ms"] > 0).all() and (df["cpu_ms"] > 0).all()
    png = (run_dir / "profile.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "gradient error" in (run_dir / "profile.md").read_text()
    assert f"wrote {run_dir / 'profile.csv'}" in proc.stdout
    assert "| symplectic_adjoint" in proc.stdout


@pytest.mark.slow
def test_symplectic_adjoint_is_exact_and_the_continuous_adjoint_is_not(tiny_run):
    _, _, df = tiny_run
    by = df.set_index(["method", "steps"])
    for steps in (2, 4):
        sa = by.loc[("symplectic_adjoint", steps)]
        assert sa["grad_err_exact"] < 1e-10
        # the continuous adjoint carries its O(h^2) discretization error
        assert by.loc[("adjoint", steps), "grad_err_exact"] > 100 * max(sa["grad_err_exact"], 1e-16)
        # all three discrete-exact methods see the same discretization error vs the reference
        ref = by.loc[("backprop", steps), "grad_err_ref"]
        assert math.isclose(sa["grad_err_ref"], ref, rel_tol=1e-3)


@pytest.mark.slow
def test_backprop_memory_grows_with_steps_and_symplectic_adjoint_barely(tiny_run):
    _, _, df = tiny_run
    saved = df.pivot(index="method", columns="steps", values="saved_mb_forward")
    bp, sa = saved.loc["backprop"], saved.loc["symplectic_adjoint"]
    assert bp[4] > 1.4 * bp[2]  # the first step's RK2 predictor: ~3x a later step's graph
    assert bp[4] - bp[2] > 20 * (sa[4] - sa[2])
    cp = saved.loc["checkpoint"]  # keeps the states only, like the symplectic adjoint
    assert bp[4] - bp[2] > 20 * (cp[4] - cp[2])


def test_cli_bad_input_is_one_line_error(tmp_path):
    proc = _run(f"hydra.run.dir={tmp_path}", "profile.steps=[0,4]")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: profile.steps")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "profile.csv").exists()


# ---- the RSS worker ----------------------------------------------------------------------------
@pytest.mark.slow
def test_subprocess_rss_sees_backprops_graph():
    """A fresh process's RSS growth holds at least the bytes saved for backward (they are resident
    together at the end of forward); the symplectic adjoint's is several times smaller. At 512
    steps measured 16 against 205 MiB; at 128 steps (12 against 40 to 52 MiB) backprop's graph is
    too close to the adjoint's allocator baseline of about 12 MiB to tell them apart reliably."""
    steps = 512
    setting = Setting(system=OSCILLATOR, batch=512)
    bp, sa = (Method(g, "implicit_midpoint", HNN) for g in ("backprop", "symplectic_adjoint"))
    H = make_model(HNN, 1, 0)
    params = list(H.parameters())
    y0, target = (x.float() for x in make_inputs(setting, steps))
    with SavedTensorMeter(exclude=[*params, y0, target]) as meter:
        iteration(make_solver(bp, H, steps, setting.dt, {}), params, y0, target)
    rss_bp = rss_subprocess(bp, steps, setting)["rss_mb"]
    rss_sa = rss_subprocess(sa, steps, setting)["rss_mb"]
    assert rss_bp >= 0.9 * meter.peak / 2**20
    assert rss_sa < 0.3 * rss_bp


@pytest.mark.slow
def test_fused_loss_option_keeps_the_gradient_and_drops_the_trajectory(compose_config, tmp_path):
    """profile.fused_loss=true: the loss through solve_loss. The fused symplectic adjoint (k=sqrt)
    stays exact and what it holds for backward when the loss is ready drops below the plain run's
    by more than the trajectory-sized ŷ − y; backprop (plain path either way) keeps its memory;
    profile.md says which loss was measured."""
    steps, batch = 16, 8
    methods = (
        "profile.methods=[{gradient: backprop},{gradient: symplectic_adjoint, options: "
        "{keep_every: sqrt}, label: sa}]"
    )
    frames = {}
    for fused in (False, True):
        cfg = compose_config("profile", [
            f"profile.steps=[{steps}]", f"profile.batch={batch}", "profile.repeats=1",
            "profile.warmup=0", "profile.subprocess=false", "profile.reference.refine=1",
            "profile.torchdiffeq=false", methods, f"profile.fused_loss={str(fused).lower()}",
            f"profile.gradient_errors={str(fused).lower()}",
        ])  # fmt: skip
        paths = profile(cfg, tmp_path / str(fused))
        frames[fused] = pd.read_csv(paths["csv"]).set_index("method")
    md = (tmp_path / "True" / "profile.md").read_text()
    assert "loss fused (solve_loss)" in md and "profile.fused_loss=true" in md
    assert "loss on the trajectory" in (tmp_path / "False" / "profile.md").read_text()
    plain, fused = frames[False], frames[True]
    traj_mb = (steps + 1) * batch * 2 * F32 / 2**20  # float32 (steps+1, B, 2d), 2d = 2 here
    assert fused.loc["sa", "grad_err_exact"] < 1e-10
    assert fused.loc["sa", "saved_mb_forward"] < plain.loc["sa", "saved_mb_forward"] - 0.9 * traj_mb
    for col in ("saved_mb_forward", "saved_mb_peak"):
        assert fused.loc["backprop", col] == plain.loc["backprop", col]
