"""The run loop: every method at every number of steps (``run_profile``), one row each with the
columns COLUMNS (defined in COLUMN_HELP): timings, memory, solver iterations, gradient errors."""

from __future__ import annotations

import copy
import gc
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
import torch
from torch import Tensor, nn

from hnnsym.ode.integrators import DEFAULT_TOL
from hnnsym.ode.problem import SolverStats
from hnnsym.profiling.iteration import (
    iteration,
    make_inputs,
    make_model,
    make_solver,
    params_of,
    relative_error,
)
from hnnsym.profiling.memory import malloc_trim, rss_subprocess
from hnnsym.profiling.meter import MB, SavedTensorMeter
from hnnsym.profiling.plan import Method, ProfileOptions, Setting

COLUMNS = [
    "method", "backend", "gradient", "integrator", "model", "steps", "batch", "dt", "dtype",
    "device", "threads", "time_ms", "time_min_ms", "cpu_ms", "time_forward_ms", "time_backward_ms",
    "saved_mb_solve", "saved_mb_forward", "saved_mb_peak", "rss_mb", "cuda_mb", "grad_err_exact", "grad_err_ref",
    "grad_err_run", "fpi_forward", "fpi_backward", "note",
]  # fmt: skip
COLUMN_HELP = {
    "time_ms": "median wall time of one iteration (forward + loss + backward) over the repeats",
    "time_min_ms": "fastest repeat",
    "cpu_ms": "median CPU time of the process per iteration (less sensitive than wall time to other "
    "processes on a shared machine; all threads)",
    "time_forward_ms": "median of the forward part (solve + loss)",
    "time_backward_ms": "median of the backward part (autograd.grad of the loss)",
    "saved_mb_solve": "MiB of unique storages autograd holds for backward when the trajectory is "
    "ready (the gradient method's own holdings, before the loss)",
    "saved_mb_forward": "MiB held for backward when the loss is ready (adds the loss's own saved "
    "tensor, trajectory-sized, the same for every method)",
    "saved_mb_peak": "peak MiB held by autograd over forward and backward (graphs built in backward too)",
    "rss_mb": "peak resident MiB of a fresh subprocess running one iteration, above its post-setup baseline",
    "cuda_mb": "torch.cuda.max_memory_allocated above the pre-iteration allocation, MiB",
    "grad_err_exact": "float64: |g - g_exact| / |g_exact|, g_exact the exact gradient of the same "
    "discretization (backprop through the same integrator; torchdiffeq odeint for odeint_adjoint)",
    "grad_err_ref": "float64: |g - g_ref| / |g_ref|, g_ref the continuous-time gradient "
    "(reference integrator at dt/refine): discretization error plus gradient error",
    "grad_err_run": "the timed run's gradient (run dtype and tolerances) vs the float64 g_exact",
    "fpi_forward": "mean fixed-point iterations per stage solve in forward",
    "fpi_backward": "mean fixed-point iterations per solve in backward (recomputation and adjoint)",
}


class _Runner:
    """A method set up in the run dtype for one number of steps."""

    def __init__(self, method: Method, steps: int, setting: Setting, model: nn.Module, device):
        dtype = getattr(torch, setting.dtype)
        self.H = copy.deepcopy(model).to(device=device, dtype=dtype)
        self.params = params_of(self.H)
        self.solve = make_solver(
            method, self.H, steps, setting.dt, setting.solver, setting.fused_loss
        )
        self.t_fwd: list[float] = []
        self.t_bwd: list[float] = []
        self.t_cpu: list[float] = []
        self.grads: list[Tensor] | None = None

    def run(self, y0: Tensor, target: Tensor, record: bool) -> None:
        cpu = time.process_time()
        grads, tf, tb = iteration(self.solve, self.params, y0, target)
        cpu = time.process_time() - cpu
        if record:
            self.t_fwd.append(tf)
            self.t_bwd.append(tb)
            self.t_cpu.append(cpu)
            self.grads = [g.detach().cpu() for g in grads]


def _gradient64(
    method: Method, steps: int, setting: Setting, model: nn.Module, y0: Tensor, target: Tensor,
    dt: float | None = None, every: int = 1,
) -> tuple[list[Tensor], SolverStats]:  # fmt: skip
    """The float64 gradient of the loss at (y0, target) by ``method`` (``every``: loss on every
    ``every``-th state of a run with ``steps * every`` steps of ``dt``), stage and adjoint solves
    to ``setting.grad_tol`` unless the method sets its own; non-convergence is left to the caller
    to report from the returned stats."""
    H = copy.deepcopy(model).to(device=y0.device, dtype=torch.float64)
    params = params_of(H)
    solver = {**setting.solver, "tol": setting.grad_tol, "on_fail": "ignore"}
    solve = make_solver(method, H, steps * every, dt or setting.dt, solver, setting.fused_loss)
    grads, _, _ = iteration(solve, params, y0, target, every=every)
    return [g.detach().cpu() for g in grads], solve.stats


def run_profile(
    methods: list[Method],
    setting: Setting,
    options: ProfileOptions,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """Profile every method at every number of steps: (one row per (method, steps), notes)."""
    device = torch.device(setting.device)
    dtype = getattr(torch, setting.dtype)
    if setting.threads:
        torch.set_num_threads(int(setting.threads))
    system = setting.build_system()
    models = {m.model_key: make_model(m.model, system.dim, setting.seed) for m in methods}
    notes: list[str] = []
    methods = _supported(methods, setting, models, system, device, notes)
    rows: list[dict] = []
    steps_iter = progress(options.steps) if progress else options.steps
    for steps in steps_iter:
        y0_64, target_64 = make_inputs(setting, steps)
        y0 = y0_64.to(device=device, dtype=dtype)
        target = target_64.to(device=device, dtype=dtype)
        runners = {
            m.label: _Runner(m, steps, setting, models[m.model_key], device) for m in methods
        }
        # Repeats go round-robin over the methods, so load from other processes spreads evenly.
        for r in range(options.warmup + options.repeats):
            for m in methods:
                runners[m.label].run(y0, target, record=r >= options.warmup)
        run_grads = {}
        for m in methods:
            row = _row(m, steps, setting, runners[m.label], device)
            row.update(_memory(runners[m.label], y0, target, device, m))
            rows.append(row)
            run_grads[m.label] = runners.pop(m.label).grads  # free graphs before the next method
        if options.gradient_errors:
            _gradient_errors(
                rows[-len(methods) :], run_grads, methods, steps, setting, models, options, notes
            )
        if options.subprocess and device.type == "cpu":
            for row, m in zip(rows[-len(methods) :], methods):
                try:
                    row["rss_mb"] = rss_subprocess(m, steps, setting)["rss_mb"]
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    notes.append(f"{m.label} at {steps} steps: {err}")
    df = pd.DataFrame(rows)
    return df.reindex(columns=COLUMNS), notes


def _supported(methods, setting, models, system, device, notes) -> list[Method]:
    """Drop methods that refuse this setup (e.g. the continuous adjoint on a partitioned method)."""
    keep = []
    dtype = getattr(torch, setting.dtype)
    y0 = system.sample(2, torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    for m in methods:
        H = copy.deepcopy(models[m.model_key]).to(device=device, dtype=dtype)
        try:
            make_solver(m, H, 1, setting.dt, setting.solver)(y0)
        except ValueError as err:
            notes.append(f"{m.label}: skipped, {err}")
            continue
        keep.append(m)
    return keep


def _row(m: Method, steps: int, setting: Setting, runner: _Runner, device) -> dict:
    total = [f + b for f, b in zip(runner.t_fwd, runner.t_bwd)]
    return {
        "method": m.label, "backend": m.backend, "gradient": m.gradient,
        "integrator": m.integrator, "model": m.model_name, "steps": steps,
        "batch": setting.batch, "dt": setting.dt, "dtype": setting.dtype, "device": str(device),
        "threads": torch.get_num_threads(),
        "time_ms": 1e3 * statistics.median(total), "time_min_ms": 1e3 * min(total),
        "cpu_ms": 1e3 * statistics.median(runner.t_cpu),
        "time_forward_ms": 1e3 * statistics.median(runner.t_fwd),
        "time_backward_ms": 1e3 * statistics.median(runner.t_bwd),
        "note": "",
    }  # fmt: skip


def _memory(runner: _Runner, y0: Tensor, target: Tensor, device, m: Method) -> dict:
    """Saved-tensor bytes (and CUDA peak) of one more iteration, with solver iteration counts."""
    nan = float("nan")
    out: dict[str, Any] = {"cuda_mb": nan}
    forward: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    meter = SavedTensorMeter(exclude=[*runner.params, y0, target])
    with meter:
        iteration(
            runner.solve, runner.params, y0, target,
            on_forward=lambda: forward.update(
                saved=meter.mark(), stats=copy.copy(runner.solve.stats)
            ),
            on_solve=lambda: forward.update(solve=meter.mark()),
        )  # fmt: skip
    if device.type == "cuda":
        out["cuda_mb"] = (torch.cuda.max_memory_allocated(device) - base) / MB
    out.update(
        saved_mb_solve=forward["solve"] / MB,
        saved_mb_forward=forward["saved"] / MB,
        saved_mb_peak=meter.peak / MB,
    )
    stats = runner.solve.stats  # this iteration's: forward and backward
    fwd: SolverStats = forward["stats"]
    out["fpi_forward"] = fwd.mean_iterations if fwd.steps else nan
    b_steps = stats.steps - fwd.steps
    out["fpi_backward"] = (stats.iterations - fwd.iterations) / b_steps if b_steps else nan
    if stats.unconverged:
        notes = [out.get("note", ""), f"{stats.unconverged} unconverged solves"]
        out["note"] = "; ".join(n for n in notes if n)
    return out


def _gradient_errors(
    rows: list[dict], runner_grads: dict, methods: list[Method], steps: int, setting: Setting,
    models: dict, options: ProfileOptions, notes: list[str],
) -> None:  # fmt: skip
    """Fill grad_err_exact / grad_err_ref / grad_err_run of ``rows`` (float64 runs)."""
    device = torch.device(setting.device)
    run_dtype = getattr(torch, setting.dtype)
    # The same inputs as the timed run (rounded to its dtype), in float64.
    y0, target = (
        x.to(run_dtype).to(device=device, dtype=torch.float64) for x in make_inputs(setting, steps)
    )
    cache: dict[str, list[Tensor] | Exception] = {}

    def grad(m: Method, dt: float | None = None, every: int = 1):
        key = f"{m.key}|{every}"
        if key not in cache:
            try:
                g, stats = _gradient64(
                    m, steps, setting, models[m.model_key], y0, target, dt, every
                )
                cache[key] = g
                tol = setting.grad_tol or DEFAULT_TOL[torch.float64]
                if stats.max_residual > tol:
                    notes.append(
                        f"float64 {m.gradient}/{m.integrator} at {steps} steps: solves not "
                        f"converged to {tol:g} (max residual {stats.max_residual:.2g})"
                    )
            except (ValueError, RuntimeError) as err:  # unsupported, or failed
                cache[key] = err
            gc.collect()
            malloc_trim()  # give the float64 graphs' pages back before the next run
        return cache[key]

    ref = options.reference
    refine = int(ref.get("refine", 1))
    exact_how = options.exact
    for row, m in zip(rows, methods):
        g = grad(m)
        exact = grad(m.exact_reference(exact_how["gradient"], exact_how["iterations"]))
        if isinstance(exact, Exception) and exact_how["gradient"] != "backprop":
            exact = grad(m.exact_reference("backprop", exact_how["iterations"]))
        ref_method = Method(
            str(ref.get("gradient", "symplectic_adjoint")), str(ref["integrator"]), m.model
        )
        cont = grad(ref_method, setting.dt / refine, refine)
        for col, other in (("grad_err_exact", exact), ("grad_err_ref", cont)):
            bad = next((x for x in (g, other) if isinstance(x, Exception)), None)
            if bad is not None:
                row[col] = float("nan")
                notes.append(f"{m.label} at {steps} steps: {col} not computed: {bad}")
            else:
                row[col] = relative_error(g, other)
        run = runner_grads.get(m.label)
        row["grad_err_run"] = (
            float("nan")
            if run is None or isinstance(exact, Exception)
            else relative_error(run, exact)
        )
