"""What is profiled: the methods (``Method``), the setting of an iteration (``Setting``), the run
options (``ProfileOptions``), and their parsing and checking from ``hnnsym/conf/profile.yaml``
(``methods_from_config``, ``from_config``)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from hnnsym.config import CONF_DIR
from hnnsym.config.build import model_spec
from hnnsym.config.runtime import resolve_device, resolve_dtype
from hnnsym.config.schemas import validated
from hnnsym.errors import UserError
from hnnsym.ode.gradients import GRADIENTS, get_gradient
from hnnsym.ode.integrators import INTEGRATORS, STAGE_OPTIONS, get_integrator
from hnnsym.physics.systems import System, system_from_config

BACKENDS = ("hnnsym", "torchdiffeq")
SOLVER_KEYS = STAGE_OPTIONS  # what a method's solver entry may override
TORCHDIFFEQ_GRADIENTS = ("odeint", "odeint_adjoint")


@dataclass(frozen=True)
class Method:
    """One configuration: a gradient method, the integrator it differentiates, and the model.

    ``backend="torchdiffeq"``: ``gradient`` is ``odeint`` or ``odeint_adjoint`` and ``integrator``
    a torchdiffeq fixed-step method (``rk4``), with ``step_size = dt``. ``solver`` overrides the
    integrator group's stage-solver options (SOLVER_KEYS, the compiled solve's too) for this method;
    ``options`` are the gradient method's own (e.g. ``keep_every`` of the stepwise methods).
    """

    gradient: str
    integrator: str
    model: dict = field(default_factory=dict, hash=False, compare=False)
    backend: str = "hnnsym"
    label: str = ""
    solver: dict = field(default_factory=dict, hash=False, compare=False)
    options: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def model_name(self) -> str:
        return str(self.model.get("name", ""))

    @property
    def model_key(self) -> str:
        return json.dumps(self.model, sort_keys=True)

    @property
    def key(self) -> str:
        return json.dumps(
            [self.backend, self.gradient, self.integrator, self.model, self.solver, self.options],
            sort_keys=True,
        )

    def exact_reference(self, gradient: str = "checkpoint", iterations: int = 8) -> "Method":
        """The exact gradient of this discretization: autograd through it (torchdiffeq: ``odeint``;
        ours: ``gradient``, backprop or checkpoint, which give the same numbers) with exactly
        ``iterations`` fixed-point iterations per stage solve.

        Backprop differentiates the iterations it ran (predictor included), so its derivative has
        an error of order c^k after k iterations (c = contraction factor) on top of the states'
        own: a fixed, generous k makes the derivative converge as well.
        """
        if self.backend == "torchdiffeq":
            return replace(self, gradient="odeint", label="", solver={})
        fixed = {"tol": sys.float_info.min, "max_iter": int(iterations), "on_fail": "ignore"}
        return replace(self, gradient=gradient, label="", solver=fixed, options={})


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
    fused_loss: bool = False  # the loss through solve_loss (folded into stepwise sweeps)

    def build_system(self) -> System:
        return system_from_config(self.system)


@dataclass
class ProfileOptions:
    """How the run goes: the numbers of steps, timed repeats after warm-up, the RSS subprocess and
    gradient-error columns on or off, the exact and the continuous-time reference gradients."""

    steps: list[int]
    repeats: int = 5
    warmup: int = 1
    subprocess: bool = True
    gradient_errors: bool = True
    reference: dict = field(default_factory=lambda: {"integrator": "gauss_legendre6", "refine": 4})
    exact: dict = field(default_factory=lambda: {"gradient": "checkpoint", "iterations": 8})


def solver_options(integrator: str, options: dict) -> dict:
    """The stage-solver options (SOLVER_KEYS) among ``options`` that ``integrator`` takes: all of
    them for a Runge–Kutta tableau, none for tao and reversible_leapfrog (no stage solver)."""
    known = INTEGRATORS[integrator][1] if integrator in INTEGRATORS else ()
    return {k: v for k, v in options.items() if k in SOLVER_KEYS and k in known}


def load_model_config(name: str, conf_dir: Path = CONF_DIR) -> dict:
    """The config group ``model/<name>.yaml`` as a dict."""
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
    ``model`` (a name in ``hnnsym/conf/model`` or a full dict; default: the model group), ``backend``
    (hnnsym | torchdiffeq), ``label``. Entries whose gradient, integrator or model is not registered
    here (e.g. a method from an extension not installed) are skipped with a note, as is torchdiffeq
    when it is off or not installed.
    """
    methods: list[Method] = []
    notes: list[str] = []
    have_tde = _torchdiffeq_available()
    for i, raw in enumerate(entries):
        entry = dict(raw)
        keys = {"gradient", "integrator", "model", "backend", "label", "solver", "options"}
        unknown = set(entry) - keys
        if unknown or "gradient" not in entry:
            raise UserError(
                f"profile.methods[{i}] = {entry}: needs 'gradient' and may have only integrator, "
                f"model, backend, label, solver, options (unexpected: {sorted(unknown)})"
            )
        options = dict(entry.get("options") or {})
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
        try:
            model_spec(mcfg)  # a _target_, or a name of a registered network
        except UserError as err:
            notes.append(f"{what}: skipped, {err}")
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
                get_gradient(gradient, **options)
            except ValueError as err:
                raise UserError(f"profile.methods[{i}].options: {err}") from err
            try:
                get_integrator(integ)
            except ValueError:
                notes.append(f"{what}: skipped, integrator {integ!r} is not registered")
                continue
            default_setup = integ == integrator and mcfg.get("name") == model.get("name")
            label = label or (gradient if default_setup else f"{gradient}/{integ}/{mcfg['name']}")
        methods.append(Method(gradient, integ, mcfg, backend, label, solver, options))
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


def from_config(cfg: DictConfig) -> tuple[list[Method], Setting, ProfileOptions, list[str]]:
    """Methods, setting and options from the composed ``hnnsym/conf/profile.yaml`` (UserError if bad)."""
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
        system_from_config(system)
        get_integrator(integ["name"], **solver_options(integ["name"], integ))
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
        grad_tol=p["grad_tol"], fused_loss=bool(p["fused_loss"]),
    )  # fmt: skip
    options = ProfileOptions(
        steps=[int(s) for s in steps], repeats=int(p["repeats"]), warmup=int(p["warmup"]),
        subprocess=bool(p["subprocess"]), gradient_errors=bool(p["gradient_errors"]), reference=ref,
        exact=exact,
    )  # fmt: skip
    return methods, setting, options, notes


def _whole(x, low: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= low
