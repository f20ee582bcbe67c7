"""Measuring one training iteration per gradient method: time, memory, gradient error (Fig. 5).

One *iteration* is what a training step costs: ``traj = solve(y0)`` over ``steps`` steps, the loss
``mean((traj - target)²)`` on every time point, and ``torch.autograd.grad(loss, params)``.

Memory is measured three ways, each defined so that it can be checked:

- ``saved_mb_solve`` / ``saved_mb_forward`` / ``saved_mb_peak`` (any device): the bytes autograd
  keeps for backward,
  counted with ``torch.autograd.graph.saved_tensors_hooks``. Every tensor autograd saves (by an
  op's backward formula or ``ctx.save_for_backward``) is packed by the hook; the meter tracks the
  *unique storages* referenced by live saved tensors (a storage saved twice counts once; a view
  counts its whole storage), adds a storage's bytes when it is first packed and subtracts them when
  the last packed reference is released (when autograd frees the node's saved variables, i.e. after
  that node's backward or when its graph dies). Storages that exist before the iteration (the
  parameters, y0, the target) are not counted. ``saved_mb_solve`` is the live total when the
  trajectory is ready (what the gradient method itself keeps), ``saved_mb_forward`` when the loss
  is ready (what the forward pass leaves for backward); ``saved_mb_peak`` is the maximum over the
  forward *and* backward passes, so the graphs that the adjoint methods build inside their backward
  (one step of stage equations at a time, or the augmented adjoint system) count too.
- ``rss_mb`` (CPU): the peak resident set of a fresh Python subprocess running exactly one iteration,
  minus that process's resident set after imports, model, inputs and a tiny warm-up iteration
  (free heap returned by ``malloc_trim``; peak reset through ``/proc/self/clear_refs`` where Linux
  allows, else ``ru_maxrss`` growth). It includes what the saved bytes do not: temporaries,
  allocator slack, recomputed graphs.
- ``cuda_mb`` (CUDA): ``torch.cuda.max_memory_allocated`` after a reset, minus the allocation before
  the iteration.

Gradient errors are relative L2 distances over all parameter gradients, in float64 on the timed
run's inputs: ``grad_err_exact`` against the exact gradient of the method's own discretization
(``Method.exact_reference``), ``grad_err_ref`` against the continuous-time gradient (a high-order
integrator at a fraction of dt), ``grad_err_run`` of the timed (float32) gradient. See COLUMN_HELP.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from hnnsym.artifacts import atomic_path
from hnnsym.dynamics import vector_field
from hnnsym.gradients import GRADIENTS
from hnnsym.integrators import SolverStats, get_integrator
from hnnsym.integrators.stage_solver import DEFAULT_TOL
from hnnsym.models import MODELS, model_from_config
from hnnsym.solve import integrate
from hnnsym.systems import System, get_system

if TYPE_CHECKING:
    import pandas as pd

MB = float(2**20)
BACKENDS = ("hnnsym", "torchdiffeq")
SOLVER_KEYS = ("tol", "max_iter", "predictor", "on_fail")
TORCHDIFFEQ_GRADIENTS = ("odeint", "odeint_adjoint")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

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


# ---- the saved-bytes meter -----------------------------------------------------------------
def _storage_key(t: Tensor) -> tuple[str, int, int] | None:
    """(device, data_ptr, nbytes) of a tensor's storage; None when it has none (e.g. sparse)."""
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (str(t.device), st.data_ptr(), st.nbytes())


class _Packed:
    """What the pack hook returns: holds the saved tensor; its release un-counts the storage."""

    __slots__ = ("meter", "key", "tensor")

    def __init__(self, meter: "SavedTensorMeter", key, tensor: Tensor):
        self.meter, self.key, self.tensor = meter, key, tensor

    def __del__(self):
        self.meter._release(self.key)


class SavedTensorMeter:
    """Live and peak bytes of the unique storages autograd saves for backward (see module doc).

    Use as a context manager around forward *and* backward. ``exclude`` are tensors whose storages
    pre-exist and are not counted (parameters, inputs). ``mark()`` records the live total at that
    moment (e.g. when the forward pass ends).
    """

    def __init__(self, exclude: Iterable[Tensor] = ()):
        self.exclude = {k[:2] for k in map(_storage_key, exclude) if k is not None}
        self.live: dict[tuple[str, int], list[int]] = {}  # (device, ptr) -> [nbytes, references]
        self.current = 0
        self.peak = 0
        self.packs = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> "SavedTensorMeter":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def mark(self) -> int:
        return self.current

    def _pack(self, t: Tensor):
        key = _storage_key(t)
        if key is None or key[:2] in self.exclude:
            return t
        self.packs += 1
        entry = self.live.get(key[:2])
        if entry is None:
            self.live[key[:2]] = [key[2], 1]
            self.current += key[2]
            self.peak = max(self.peak, self.current)
        else:
            entry[1] += 1
        return _Packed(self, key[:2], t.detach())  # detached: no cycle through a saved output

    @staticmethod
    def _unpack(packed) -> Tensor:
        return packed.tensor if isinstance(packed, _Packed) else packed

    def _release(self, key) -> None:
        entry = self.live[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.current -= entry[0]


# ---- what is profiled ----------------------------------------------------------------------
@dataclass(frozen=True)
class Method:
    """One configuration: a gradient method, the integrator it differentiates, and the model.

    ``backend="torchdiffeq"``: ``gradient`` is ``odeint`` or ``odeint_adjoint`` and ``integrator``
    a torchdiffeq fixed-step method (``rk4``), with ``step_size = dt``. ``solver`` overrides the
    integrator group's stage-solver options (tol, max_iter, predictor, on_fail) for this method.
    """

    gradient: str
    integrator: str
    model: dict = field(default_factory=dict, hash=False, compare=False)
    backend: str = "hnnsym"
    label: str = ""
    solver: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def model_name(self) -> str:
        return str(self.model.get("name", ""))

    @property
    def model_key(self) -> str:
        return json.dumps(self.model, sort_keys=True)

    @property
    def key(self) -> str:
        return json.dumps(
            [self.backend, self.gradient, self.integrator, self.model, self.solver], sort_keys=True
        )

    def exact_reference(self, gradient: str = "checkpoint", iterations: int = 8) -> "Method":
        """The exact gradient of this discretization: autograd through it (torchdiffeq: ``odeint``;
        ours: ``gradient``, backprop or checkpoint, which give the same numbers) with exactly
        ``iterations`` fixed-point iterations per stage solve.

        Backprop differentiates the iterations it ran, starting from a detached predictor, so its
        derivative has the error c^k of k iterations (c = contraction factor) even when the states
        have converged after fewer: a fixed, generous k makes the derivative converge as well.
        """
        if self.backend == "torchdiffeq":
            return replace(self, gradient="odeint", label="", solver={})
        fixed = {"tol": sys.float_info.min, "max_iter": int(iterations), "on_fail": "ignore"}
        return replace(self, gradient=gradient, label="", solver=fixed)


def load_model_config(name: str, conf_dir: Path = CONF_DIR) -> dict:
    """The config group ``model/<name>.yaml`` as a dict."""
    from omegaconf import OmegaConf

    path = conf_dir / "model" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"no model config {path}")
    return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True))


def methods_from_config(
    entries: Iterable[dict],
    integrator: str,
    model: dict,
    torchdiffeq: bool = True,
    conf_dir: Path = CONF_DIR,
) -> tuple[list[Method], list[str]]:
    """Methods from the ``profile.methods`` entries, and notes on those skipped.

    Entry keys: ``gradient`` (required), ``integrator`` (default: the profiled integrator),
    ``model`` (a name in ``conf/model`` or a full dict; default: the model group), ``backend``
    (hnnsym | torchdiffeq), ``label``. Entries whose gradient, integrator or model is not registered
    here (e.g. a method from an extension not installed) are skipped with a note, as is torchdiffeq
    when it is off or not installed.
    """
    from hnnsym.cli import UserError

    methods: list[Method] = []
    notes: list[str] = []
    have_tde = _torchdiffeq_available()
    for i, raw in enumerate(entries):
        entry = dict(raw)
        unknown = set(entry) - {"gradient", "integrator", "model", "backend", "label", "solver"}
        if unknown or "gradient" not in entry:
            raise UserError(
                f"profile.methods[{i}] = {entry}: needs 'gradient' and may have only integrator, "
                f"model, backend, label, solver (unexpected: {sorted(unknown)})"
            )
        solver = dict(entry.get("solver") or {})
        if set(solver) - set(SOLVER_KEYS):
            raise UserError(f"profile.methods[{i}].solver may set only {SOLVER_KEYS}, got {solver}")
        backend = entry.get("backend") or "hnnsym"
        if backend not in BACKENDS:
            raise UserError(
                f"profile.methods[{i}].backend must be one of {BACKENDS}, got {backend!r}"
            )
        gradient = str(entry["gradient"])
        integ = str(entry.get("integrator") or integrator)
        mcfg = entry.get("model") or model
        label = str(entry.get("label") or "")
        what = f"{backend}:{gradient}/{integ}"
        if isinstance(mcfg, str):
            try:
                mcfg = load_model_config(mcfg, conf_dir)
            except ValueError as err:
                notes.append(f"{what}: skipped, {err}")
                continue
        mcfg = dict(mcfg)
        if mcfg.get("name") not in MODELS:
            notes.append(f"{what}: skipped, model {mcfg.get('name')!r} is not registered")
            continue
        if backend == "torchdiffeq":
            if not torchdiffeq:
                notes.append(f"{what}: skipped, profile.torchdiffeq=false")
                continue
            if not have_tde:
                notes.append(
                    f"{what}: skipped, torchdiffeq is not installed (pip install torchdiffeq)"
                )
                continue
            if gradient not in TORCHDIFFEQ_GRADIENTS:
                raise UserError(
                    f"profile.methods[{i}]: torchdiffeq gradient must be one of "
                    f"{TORCHDIFFEQ_GRADIENTS}, got {gradient!r}"
                )
            label = label or f"torchdiffeq.{gradient}/{integ}"
        else:
            if gradient not in GRADIENTS:
                notes.append(f"{what}: skipped, gradient {gradient!r} is not registered")
                continue
            try:
                get_integrator(integ)
            except ValueError:
                notes.append(f"{what}: skipped, integrator {integ!r} is not registered")
                continue
            default_setup = integ == integrator and mcfg.get("name") == model.get("name")
            label = label or (gradient if default_setup else f"{gradient}/{integ}/{mcfg['name']}")
        methods.append(Method(gradient, integ, mcfg, backend, label, solver))
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise UserError(f"profile.methods: labels must be unique, got {labels}")
    return methods, notes


def _torchdiffeq_available() -> bool:
    try:
        import torchdiffeq  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Setting:
    """Everything an iteration depends on besides the method and the number of steps."""

    system: dict  # {"name": ..., "params": {...}}
    batch: int = 512
    dt: float = 0.01
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = 1
    solver: dict = field(default_factory=dict)  # tol, max_iter, predictor, on_fail (run dtype)
    grad_tol: float | None = None  # stage/adjoint tolerance of the float64 gradient runs

    def build_system(self) -> System:
        return get_system(self.system["name"], **dict(self.system.get("params") or {}))


def make_inputs(setting: Setting, steps: int) -> tuple[Tensor, Tensor]:
    """y0 (B, 2d) from the system's domain and a random target (steps+1, B, 2d), in float64 on CPU.

    Drawn from ``seed`` alone, so a subprocess reproduces them exactly.
    """
    system = setting.build_system()
    gen = torch.Generator().manual_seed(int(setting.seed))
    y0 = system.sample(setting.batch, gen, dtype=torch.float64)
    target = torch.randn((steps + 1, *y0.shape), generator=gen, dtype=torch.float64)
    return y0, target


def make_model(model_cfg: dict, dim: int, seed: int) -> nn.Module:
    """The model initialized from ``seed`` (float32 init, as training does), on CPU."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return model_from_config(model_cfg, dim)


class _TorchdiffeqField(nn.Module):
    """The same vector field J^-1 ∇H as torchdiffeq wants it: ``forward(t, y)``."""

    def __init__(self, H: nn.Module):
        super().__init__()
        self.H = H

    def forward(self, t: Tensor, y: Tensor) -> Tensor:
        return vector_field(self.H, y)


def make_solver(
    method: Method,
    H: nn.Module,
    steps: int,
    dt: float,
    solver: dict,
    stats: SolverStats | None = None,
) -> Callable[[Tensor], Tensor]:
    """y0 -> trajectory (steps+1, B, 2d), differentiable by ``method``."""
    if method.backend == "torchdiffeq":
        import torchdiffeq

        odeint = (
            torchdiffeq.odeint_adjoint
            if method.gradient == "odeint_adjoint"
            else torchdiffeq.odeint
        )
        func = _TorchdiffeqField(H)

        def solve(y0: Tensor) -> Tensor:
            t = torch.arange(steps + 1, dtype=y0.dtype, device=y0.device) * dt
            return odeint(func, y0, t, method=method.integrator, options={"step_size": dt})

        return solve
    options = {k: v for k, v in {**solver, **method.solver}.items() if k in SOLVER_KEYS}

    def solve(y0: Tensor) -> Tensor:
        return integrate(
            H, y0, dt, steps, method.integrator, method.gradient, stats=stats, **options
        )

    return solve


def _params(H: nn.Module) -> list[Tensor]:
    return [p for p in H.parameters() if p.requires_grad]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def iteration(
    solve: Callable[[Tensor], Tensor],
    params: list[Tensor],
    y0: Tensor,
    target: Tensor,
    on_forward: Callable[[], None] | None = None,
    on_solve: Callable[[], None] | None = None,
) -> tuple[list[Tensor], float, float]:
    """One training iteration: (parameter gradients, forward seconds, backward seconds).

    Gradients of parameters the loss does not reach (H's output bias) are zeros. ``on_solve`` and
    ``on_forward`` are called when the trajectory and when the loss are ready (for measuring).
    """
    t0 = time.perf_counter()
    traj = solve(y0)
    if on_solve is not None:
        on_solve()
    loss = ((traj - target) ** 2).mean()
    _sync(y0.device)
    t1 = time.perf_counter()
    if on_forward is not None:
        on_forward()
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    _sync(y0.device)
    t2 = time.perf_counter()
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]
    return grads, t1 - t0, t2 - t1


def relative_error(g: list[Tensor], ref: list[Tensor]) -> float:
    """|g - ref| / |ref| over all parameter gradients together (L2, in float64)."""
    num = sum(float(((a.double() - b.double()) ** 2).sum()) for a, b in zip(g, ref))
    den = sum(float((b.double() ** 2).sum()) for b in ref)
    return math.sqrt(num / den) if den > 0 else float("nan")


# ---- one process, one iteration: peak RSS ----------------------------------------------------
def _proc_status(field_name: str) -> int | None:
    """A ``VmRSS``/``VmHWM`` line of /proc/self/status in bytes (None off Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not possible here."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return _proc_status("VmHWM") is not None


def _malloc_trim() -> None:
    """Return free heap pages to the OS (glibc), so that reusing them shows up as RSS growth."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _ru_maxrss_bytes() -> int:
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def measure_rss_here(spec: dict) -> dict:
    """Set up the iteration described by ``spec``, then run it once and return its peak RSS growth.

    Meant to run in a fresh process (``rss_subprocess``). The baseline is taken after the imports,
    the model, the inputs, and one iteration of the same method on a tiny problem (1 step, 2
    states: lazy imports, thread pools, the autograd engine), with free heap pages returned to the
    OS (glibc ``malloc_trim``), so the growth is the iteration's own.
    """
    setting = Setting(**spec["setting"])
    method = Method(**spec["method"])
    steps = int(spec["steps"])
    if setting.threads:
        torch.set_num_threads(int(setting.threads))
    dtype = getattr(torch, setting.dtype)
    system = setting.build_system()
    y0, target = (x.to(dtype) for x in make_inputs(setting, steps))
    H = make_model(method.model, system.dim, setting.seed).to(dtype)
    params = _params(H)
    solve = make_solver(method, H, steps, setting.dt, setting.solver)
    # Warm-up on a tiny problem: lazy imports and initializations are not the iteration's memory.
    tiny = make_solver(method, H, 1, setting.dt, setting.solver)
    iteration(tiny, params, y0[:2], target[:2, :2])
    gc.collect()
    _malloc_trim()
    if _reset_peak_rss():
        how = "clear_refs"
        base = _proc_status("VmRSS")
        iteration(solve, params, y0, target)
        peak = _proc_status("VmHWM")
    else:
        how = "ru_maxrss"
        base = _ru_maxrss_bytes()
        iteration(solve, params, y0, target)
        peak = _ru_maxrss_bytes()
    return {"rss_mb": (peak - base) / MB, "baseline_mb": base / MB, "how": how}


def rss_subprocess(method: Method, steps: int, setting: Setting, timeout: float = 3600) -> dict:
    """``measure_rss_here`` in a fresh ``python -m hnnsym.profiling`` process."""
    spec = {"method": asdict(method), "steps": steps, "setting": asdict(setting)}
    proc = subprocess.run(
        [sys.executable, "-m", "hnnsym.profiling", json.dumps(spec)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"RSS subprocess failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the profile -----------------------------------------------------------------------------
@dataclass
class ProfileOptions:
    steps: list[int]
    repeats: int = 5
    warmup: int = 1
    subprocess: bool = True
    gradient_errors: bool = True
    reference: dict = field(default_factory=lambda: {"integrator": "gauss_legendre6", "refine": 4})
    exact: dict = field(default_factory=lambda: {"gradient": "checkpoint", "iterations": 8})


class _Runner:
    """A method set up in the run dtype for one number of steps."""

    def __init__(self, method: Method, steps: int, setting: Setting, model: nn.Module, device):
        dtype = getattr(torch, setting.dtype)
        self.H = copy.deepcopy(model).to(device=device, dtype=dtype)
        self.params = _params(self.H)
        self.stats = SolverStats()
        self.solve = make_solver(method, self.H, steps, setting.dt, setting.solver, self.stats)
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
    params = _params(H)
    solver = {**setting.solver, "tol": setting.grad_tol, "on_fail": "ignore"}
    stats = SolverStats()
    solve = make_solver(method, H, steps * every, dt or setting.dt, solver, stats)
    grads, _, _ = iteration(lambda y: solve(y)[::every], params, y0, target)
    return [g.detach().cpu() for g in grads], stats


def run_profile(
    methods: list[Method],
    setting: Setting,
    options: ProfileOptions,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> tuple["pd.DataFrame", list[str]]:
    """Profile every method at every number of steps: (one row per (method, steps), notes)."""
    import pandas as pd

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
    stats = runner.stats
    stats.__init__()  # reset the counts in place (the solver holds this object)
    forward: dict[str, Any] = {}
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    meter = SavedTensorMeter(exclude=[*runner.params, y0, target])
    with meter:
        iteration(
            runner.solve, runner.params, y0, target,
            on_forward=lambda: forward.update(saved=meter.mark(), stats=copy.copy(stats)),
            on_solve=lambda: forward.update(solve=meter.mark()),
        )  # fmt: skip
    if device.type == "cuda":
        out["cuda_mb"] = (torch.cuda.max_memory_allocated(device) - base) / MB
    out.update(
        saved_mb_solve=forward["solve"] / MB,
        saved_mb_forward=forward["saved"] / MB,
        saved_mb_peak=meter.peak / MB,
    )
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
            _malloc_trim()  # give the float64 graphs' pages back before the next run
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


# ---- outputs -----------------------------------------------------------------------------------
SUMMARY = {
    "time_ms": "median wall time per iteration [ms]",
    "cpu_ms": "median CPU time per iteration [ms]",
    "saved_mb_peak": "peak saved-for-backward memory [MiB]",
    "rss_mb": "peak RSS growth of a fresh process [MiB]",
    "cuda_mb": "peak CUDA memory [MiB]",
    "grad_err_exact": "gradient error vs the exact gradient of the same discretization (float64)",
    "grad_err_ref": "gradient error vs the continuous-time reference (float64)",
}


def summary_tables(df: "pd.DataFrame") -> str:
    """Markdown: one table per measured quantity, methods × steps."""
    parts = []
    for col, title in SUMMARY.items():
        if col not in df or df[col].isna().all():
            continue
        table = df.pivot_table(
            index="method", columns="steps", values=col, sort=False, dropna=False
        )
        fmt = ".3g" if col.startswith("grad_err") else ".4g"
        parts.append(f"**{title}**\n\n" + table.to_markdown(floatfmt=fmt))
    return "\n\n".join(parts)


def plot_profile(df: "pd.DataFrame", path: str | os.PathLike, title: str = "") -> None:
    """Memory and time vs steps, log-log, one line per method (written atomically, PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    panels = [
        (c, t)
        for c, t in (
            ("saved_mb_peak", "saved for backward, peak [MiB]"),
            ("rss_mb", "peak RSS growth of a fresh process [MiB]"),
            ("cuda_mb", "CUDA peak [MiB]"),
            ("time_ms", "time per iteration [ms] (wall; dotted: CPU)"),
        )
        if c in df and df[c].notna().any()
    ]
    methods = list(dict.fromkeys(df["method"]))
    color = {m: f"C{i % 10}" for i, m in enumerate(methods)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), squeeze=False)
    steps = sorted(df["steps"].unique())
    for ax, (col, label) in zip(axes[0], panels):
        for method, part in df.groupby("method", sort=False):
            part = part.dropna(subset=[col]).sort_values("steps")
            part = part[part[col] > 0]
            ax.plot(part["steps"], part[col], marker="o", ms=3, color=color[method])
            if col == "time_ms" and "cpu_ms" in part:
                ax.plot(part["steps"], part["cpu_ms"], ls=":", color=color[method])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(steps, [str(s) for s in steps], fontsize=7)
        ax.set_xlabel("steps")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=color[m], marker="o", ms=3) for m in methods]
    fig.legend(handles, methods, loc="lower center", ncol=min(len(methods), 4), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06 * math.ceil(len(methods) / 4), 1, 1))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def write_outputs(
    df: "pd.DataFrame",
    notes: list[str],
    run_dir: str | os.PathLike,
    title: str = "",
) -> dict[str, Path]:
    """profile.csv, profile.md (tables, notes, column definitions) and profile.png in ``run_dir``."""
    run_dir = Path(run_dir)
    paths = {k: run_dir / f"profile.{k}" for k in ("csv", "md", "png")}
    with atomic_path(paths["csv"]) as tmp:
        df.to_csv(tmp, index=False)
    columns = "\n".join(f"- `{k}`: {v}" for k, v in COLUMN_HELP.items())
    note_text = "\n".join(f"- {n}" for n in notes) or "- none"
    text = (
        f"# {title}\n\n{summary_tables(df)}\n\n## Notes\n\n{note_text}\n\n## Columns\n\n{columns}\n"
    )
    with atomic_path(paths["md"]) as tmp:
        tmp.write_text(text)
    if len(df):
        plot_profile(df, paths["png"], title)
    return paths


if __name__ == "__main__":  # the RSS worker: python -m hnnsym.profiling '<json spec>'
    print(json.dumps(measure_rss_here(json.loads(sys.argv[1]))))


def from_config(cfg) -> tuple[list[Method], Setting, ProfileOptions, list[str]]:
    """Methods, setting and options from the composed ``conf/profile.yaml`` (UserError if bad)."""
    from omegaconf import OmegaConf

    from hnnsym.cli import UserError, resolve_device, resolve_dtype
    from hnnsym.schemas import validated

    p = OmegaConf.to_container(validated(cfg, "system", "profile").profile, resolve=True)
    steps = p["steps"]
    if not isinstance(steps, list) or not steps or not all(_whole(s, 1) for s in steps):
        raise UserError(
            f"profile.steps must be a non-empty list of whole numbers >= 1, got {steps}"
        )
    for key, low in (("batch", 1), ("repeats", 1), ("warmup", 0)):
        if not _whole(p[key], low):
            raise UserError(f"profile.{key} must be a whole number >= {low}, got {p[key]!r}")
    if not (isinstance(p["dt"], (int, float)) and math.isfinite(p["dt"]) and p["dt"] > 0):
        raise UserError(f"profile.dt must be a number > 0, got {p['dt']!r}")
    if p["threads"] is not None and not _whole(p["threads"], 1):
        raise UserError(
            f"profile.threads must be null or a whole number >= 1, got {p['threads']!r}"
        )
    ref = dict(p["reference"])
    if not _whole(ref.get("refine", 1), 1):
        raise UserError(
            f"profile.reference.refine must be a whole number >= 1, got {ref['refine']!r}"
        )
    if p["grad_tol"] is not None and not (
        isinstance(p["grad_tol"], (int, float)) and p["grad_tol"] > 0
    ):
        raise UserError(f"profile.grad_tol must be null or a number > 0, got {p['grad_tol']!r}")
    resolve_dtype(p["dtype"])
    device = resolve_device(cfg.device)
    integ = OmegaConf.to_container(cfg.integrator, resolve=True)
    model = OmegaConf.to_container(cfg.model, resolve=True)
    system = OmegaConf.to_container(cfg.system, resolve=True)
    try:
        get_system(system["name"], **dict(system.get("params") or {}))
        get_integrator(integ["name"], integ.get("tol"), integ.get("max_iter", 50),
                       integ.get("predictor", "rk2"), integ.get("on_fail", "raise"))  # fmt: skip
        get_integrator(ref["integrator"])
    except (ValueError, TypeError) as err:
        raise UserError(str(err)) from None
    if ref.get("gradient", "symplectic_adjoint") not in GRADIENTS:
        raise UserError(f"profile.reference.gradient must be one of {sorted(GRADIENTS)}")
    exact = dict(p["exact"])
    if exact.get("gradient") not in ("backprop", "checkpoint"):
        raise UserError(f"profile.exact.gradient must be backprop or checkpoint, got {exact}")
    if not _whole(exact.get("iterations"), 1):
        raise UserError(f"profile.exact.iterations must be a whole number >= 1, got {exact}")
    methods, notes = methods_from_config(p["methods"], integ["name"], model, bool(p["torchdiffeq"]))
    if not methods:
        raise UserError("profile.methods: nothing to profile (every entry was skipped)")
    setting = Setting(
        system=system, batch=int(p["batch"]), dt=float(p["dt"]), seed=int(cfg.seed),
        dtype=p["dtype"], device=str(device), threads=p["threads"],
        solver={k: integ[k] for k in SOLVER_KEYS if k in integ},
        grad_tol=p["grad_tol"],
    )  # fmt: skip
    options = ProfileOptions(
        steps=[int(s) for s in steps], repeats=int(p["repeats"]), warmup=int(p["warmup"]),
        subprocess=bool(p["subprocess"]), gradient_errors=bool(p["gradient_errors"]), reference=ref,
        exact=exact,
    )  # fmt: skip
    return methods, setting, options, notes


def _whole(x, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low
