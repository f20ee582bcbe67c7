"""Peak RSS of one iteration in a fresh process (``rss_mb``): ``rss_subprocess`` starts the worker
``python -m hnnsym.profiling '<json spec>'`` (``hnnsym/profiling/__main__.py``), which runs
``measure_rss_here``."""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
from dataclasses import asdict

import torch

from hnnsym.config.runtime import glibc
from hnnsym.profiling.iteration import iteration, make_inputs, make_model, make_solver, params_of
from hnnsym.profiling.meter import MB
from hnnsym.profiling.plan import Method, Setting


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


def malloc_trim() -> None:
    """Return free heap pages to the OS (glibc), so that reusing them shows up as RSS growth."""
    if (libc := glibc()) is not None:
        libc.malloc_trim(0)


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
    params = params_of(H)
    solve = make_solver(method, H, steps, setting.dt, setting.solver, setting.fused_loss)
    # Warm-up on a tiny problem: lazy imports and initializations are not the iteration's memory.
    tiny = make_solver(method, H, 1, setting.dt, setting.solver, setting.fused_loss)
    iteration(tiny, params, y0[:2], target[:2, :2])
    gc.collect()
    malloc_trim()
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
