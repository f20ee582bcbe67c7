"""Typed schemas (OmegaConf structured configs) of the config sections each stage reads.

The YAML files in ``hnnsym/conf/`` hold the values and their documentation, and these dataclasses
the types (their fields are MISSING), so a value lives in one place; except the train section,
whose dataclass ``TrainOptions`` is its one declaration (default, type, range, documentation):
``register_configs`` puts it in Hydra's ConfigStore as the config ``train_options``, and the
trainer reads the validated object. ``validated`` checks a
composed config before any work: a wrong type (``train.epochs=ten``), a misspelt key
(``+train.epoch=3``) or a missing value becomes one UserError line naming the key, and the checked,
type-converted section replaces the composed one (``train.lr=1`` reads back as the float 1.0).

The schemas are applied per section, not as one Hydra primary schema, because an experiment
config (``# @package _global_``) may set sections of several stages at once (``experiment=demo``
sets ``generate`` and ``train``) and every stage composes it.

Ranges live here too, as field metadata (``checked(ge(1))``: "train.epochs must be >= 1, got 0"),
and rules across fields as functions in ``CROSS_CHECKS``; so ``validated`` is the one call a stage
makes. What needs the data or other files (a window longer than the trajectories) stays with the
stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hnnsym.errors import UserError


@dataclass(frozen=True)
class Rule:
    """A range rule of one field: ``ok(value)``, and ``text`` for "<key> must be <text>"."""

    text: str
    ok: Callable[[Any], bool]


def ge(low: float) -> Rule:
    return Rule(f">= {low}", lambda v: v >= low)


def gt(low: float) -> Rule:
    return Rule(f"> {low}", lambda v: v > low)


def between(low: float, high: float) -> Rule:
    """Strictly between: low < v < high."""
    return Rule(f"in ({low}, {high})", lambda v: low < v < high)


def finite_ge(low: float) -> Rule:
    return Rule(f"a finite number >= {low}", lambda v: math.isfinite(v) and v >= low)


def finite_gt(low: float) -> Rule:
    return Rule(f"a finite number > {low}", lambda v: math.isfinite(v) and v > low)


def one_of(*choices: Any) -> Rule:
    names = [str(c) for c in choices]
    if len(names) <= 2:
        text = " or ".join(names)
    else:
        text = ", ".join(names[:-1]) + " or " + names[-1]
    return Rule(text, lambda v: v in choices)


PATH = Rule("a non-empty path", lambda v: isinstance(v, str) and bool(v.strip()))


def checked(rule: Rule, nullable: bool = False, default: Any = MISSING) -> Any:
    """A field (MISSING unless ``default``) whose value must satisfy ``rule`` (or be null, with
    ``nullable``)."""
    return field(default=default, metadata={"rule": rule, "nullable": nullable})


PATH_TEMPLATES = ("data_file", "run_dir")  # checked by _empty_path: they interpolate other keys


@dataclass
class CommonSchema:
    """hnnsym/conf/common.yaml: the top-level keys every stage shares (the paths are checked resolved:
    an empty ``data_dir=`` would otherwise put data_file at the root of the file system)."""

    seed: int = checked(ge(0))
    device: str = MISSING
    dtype: str = checked(one_of("float32", "float64"))
    threads: int | None = checked(ge(1), nullable=True)
    data_dir: str = checked(PATH)
    memory_limit: Any = MISSING  # checked by hnnsym.resources.parse_size


@dataclass
class SystemSchema:
    name: str = MISSING
    params: dict[str, float] = field(default_factory=dict)


@dataclass
class CustomSystemSchema:
    """system=custom (hnnsym/conf/system/custom.yaml): H as an expression; the values are checked where
    the system is built (hnnsym.physics.systems.custom)."""

    name: str = MISSING
    hamiltonian: str = MISSING
    coordinates: list[str] | None = MISSING
    params: dict[str, float] = field(default_factory=dict)
    domain: list[Any] = MISSING  # [low, high] or one [low, high] per coordinate
    energy_max: float | None = MISSING


@dataclass
class NoiseSchema:
    name: str = MISSING
    std: float = checked(finite_ge(0))


@dataclass
class PlateauSchema:
    """halve the lr when the validation loss stalls for ``patience`` epochs"""

    factor: float = checked(between(0, 1), default=0.5)  # the lr is multiplied by it
    patience: int = checked(ge(0), default=3)


@dataclass
class EarlyStopSchema:
    """stop when the validation loss has not improved by min_delta (relative) for patience
    epochs"""

    patience: int = checked(ge(1), default=8)  # 0 would stop after the first epoch
    min_delta: float = checked(Rule("in [0, 1)", lambda v: 0 <= v < 1), default=1.0e-3)


def _optimizer() -> dict[str, Any]:
    """Built with the model's parameters (_partial_); any torch.optim class. ``fused``: torch's
    one-kernel-per-parameter step (Adam, AdamW, SGD, Adagrad), on the CPU too, where the default
    is a Python loop of ops per parameter: 2.5-3x faster there for the default MLP. With a class
    that has no fused step, drop it: ``~train.optimizer.fused``."""
    return {
        "_target_": "torch.optim.Adam",
        "_partial_": True,
        "lr": "${..lr}",
        "weight_decay": "${..weight_decay}",
        "fused": True,
    }


def _schedulers() -> dict[str, Any]:
    """Built with the optimizer (_partial_); a ReduceLROnPlateau steps on the validation loss."""
    return {
        "plateau": {  # halve the lr when the validation loss stalls for plateau.patience epochs
            "_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau",
            "_partial_": True,
            "factor": "${train.plateau.factor}",
            "patience": "${train.plateau.patience}",
        },
        "cosine": {  # cosine annealing from lr to 0 over train.epochs
            "_target_": "torch.optim.lr_scheduler.CosineAnnealingLR",
            "_partial_": True,
            "T_max": "${train.epochs}",
        },
    }


@dataclass
class TrainOptions:
    """The train section (``train.*``): the one declaration of each option, its default, type and
    range. Registered as the config ``train_options`` (``register_configs``) that every stage's
    defaults list composes (evaluate too, so that a sweep's ``train.lr=...`` works unchanged in
    both stages); the trainer reads the validated object (``OmegaConf.to_object``)."""

    epochs: int = checked(ge(1), default=25)
    batch_size: int = checked(ge(1), default=512)
    window: int = checked(ge(1), default=6)  # tau: predicted steps per training window
    # multiple shooting: split each window into this many segments, each started from its
    # observed (init=learned: its learned) state
    segments: int = checked(ge(1), default=1)
    substeps: int = checked(ge(1), default=1)  # integration steps per observation interval
    lr: float = checked(finite_gt(0), default=0.01)
    weight_decay: float = checked(finite_ge(0), default=0.0)
    optimizer: dict[str, Any] = field(default_factory=_optimizer)  # a _target_ node
    schedule: str = "plateau"  # which of schedulers steps the lr once per epoch (checked there)
    schedulers: dict[str, Any] = field(default_factory=_schedulers)  # _target_ nodes
    plateau: PlateauSchema = field(default_factory=PlateauSchema)
    early_stop: EarlyStopSchema = field(default_factory=EarlyStopSchema)
    val_batch_size: int = checked(ge(1), default=4096)
    # steps of the validation windows (null: window); longer ones let the model's error grow
    # past the noise floor
    val_window: int | None = checked(ge(1), nullable=True, default=None)
    # validation windows: null, one per validation trajectory from a random start (drawn on the
    # seed); K, every window starting at 0, K, 2K, ... of each (a long recording cut into a few
    # pieces is then validated on all of it, not on a handful of draws)
    val_stride: int | None = checked(ge(1), nullable=True, default=None)
    # units of the rollout loss's squared error: stored (the data file's scaled units) or
    # recording (each state component weighted by the square of its scale, Units.state_scales:
    # the error in the recording's units, as evaluate scores it; the same as stored on files
    # without units)
    loss_units: str = checked(one_of("stored", "recording"), default="stored")
    max_train: int | None = checked(ge(1), nullable=True, default=None)  # the first N trajectories
    max_val: int | None = checked(ge(1), nullable=True, default=None)
    # window start: observed | smoothed (fitted to the window under the model's flow) | learned
    # (a free state per training observation, refined with θ); hnnsym.training.losses
    init: str = checked(one_of("observed", "smoothed", "learned"), default="observed")
    init_iterations: int = checked(ge(1), default=1)  # Gauss–Newton steps of the smoothed start
    # learned starts: SGD step on each window's own loss; null: 1/(4(window/segments + 1 + 2
    # continuity)), half a Gauss–Newton step
    init_lr: float | None = checked(finite_gt(0), nullable=True, default=None)
    # multiple shooting with learned starts (init=learned, segments > 1): weight w of the penalty
    # w·||end of segment k - start of segment k+1||^2 that joins the segments; 0: off
    continuity: float = checked(finite_ge(0), default=0.0)
    # weight averaging: decay β (1 = SWA, the plain mean) of an average of θ over the optimizer
    # steps, which is validated and checkpointed; null: off (docs/papers/table1.md, "Weight
    # averaging": the default since it won on every system and noise level)
    ema: float | None = checked(
        Rule("in (0, 1]", lambda v: 0 < v <= 1), nullable=True, default=0.99
    )
    ema_start: int = checked(ge(1), default=1)  # the first epoch whose steps are averaged
    # after training, refit H's last layer by least squares to the training trajectories'
    # implicit-midpoint steps (hnnsym.training.refit; both checkpoints); null: off
    refit: str | None = checked(one_of("last_layer"), nullable=True, default=None)
    resume: Any = False  # true | false | auto: continue from checkpoints/last.pt
    overwrite: bool = False  # allow replacing a finished run in run_dir
    progress: bool = True


@dataclass
class GenerateSchema:
    n_train: int = checked(ge(1))
    n_val: int = checked(ge(1))
    n_test: int = checked(ge(1))
    obs_dt: float = MISSING  # obs_dt / fine_dt is checked by hnnsym.data.simulate.observation_ratio
    fine_dt: float = MISSING
    train_steps: int = checked(ge(1))
    test_steps: int = checked(ge(1))
    integrator: str = MISSING
    tol: float | None = checked(finite_gt(0), nullable=True)
    max_iter: int = checked(ge(1))
    chunk: int = checked(ge(1))
    overwrite: bool = MISSING
    observe: str = checked(one_of("qp", "q"))


@dataclass
class EvalSchema:
    checkpoint: str = checked(one_of("best", "last"))
    dtype: str = checked(one_of("float32", "float64"))
    grid_points: int | None = checked(ge(2), nullable=True)
    slice_points: int = checked(ge(2))
    rollout_steps: int | None = checked(ge(1), nullable=True)
    max_trajectories: int | None = checked(ge(1), nullable=True)
    init: str = checked(one_of("first", "observed", "fitted"))
    init_steps: int = checked(ge(1))
    init_iterations: int = checked(ge(1))
    substeps: int | None = checked(ge(1), nullable=True)
    valid_threshold: float = checked(between(0, 1))
    horizons: list[int] = MISSING  # >= 1 each, checked by hnnsym.evaluation.horizons
    segment: int = checked(ge(1))
    chunk: int = checked(ge(1))
    figures: bool = MISSING
    plot_trajectories: int = checked(ge(0))
    plot_training_data: bool = MISSING
    scatter_points: int = checked(ge(1))
    out_dir: str | None = checked(PATH, nullable=True)  # null: ${run_dir}/eval (or eval_val)
    overwrite: bool = MISSING
    split: str = checked(one_of("test", "val"))  # the split rolled out and scored


@dataclass
class ExactGradientSchema:
    gradient: str = MISSING
    iterations: int = MISSING


@dataclass
class ReferenceGradientSchema:
    integrator: str = MISSING
    gradient: str = MISSING
    refine: int = MISSING


@dataclass
class ProfileSchema:
    steps: list[int] = MISSING
    batch: int = MISSING
    dt: float = MISSING
    repeats: int = MISSING
    warmup: int = MISSING
    dtype: str = MISSING
    threads: int | None = MISSING
    subprocess: bool = MISSING
    torchdiffeq: bool = MISSING
    gradient_errors: bool = MISSING
    grad_tol: float | None = MISSING
    fused_loss: bool = MISSING
    overwrite: bool = MISSING
    exact: ExactGradientSchema = field(default_factory=ExactGradientSchema)
    reference: ReferenceGradientSchema = field(default_factory=ReferenceGradientSchema)
    methods: list[dict[str, Any]] = MISSING  # each entry is checked by hnnsym.profiling


@dataclass
class ReportSchema:
    runs: Any = MISSING  # a path or glob, or a list of them
    out_dir: str = checked(PATH)
    name: str = MISSING
    group_by: list[str] | None = MISSING
    ignore: list[str] | None = MISSING
    metrics: list[str] | None = MISSING
    plot: list[str] | None = MISSING
    hue: str | None = MISSING
    digits: int = MISSING
    eval_dir: str = MISSING
    overwrite: bool = MISSING


@dataclass
class IngestSchema:
    """The ingest section's options by name only: their values take several forms (a number or
    one per position, a dict or null, a column name or a method) and ``hnnsym.data.settings``
    checks them, with the data. Here a misspelt option (``+ingest.gap_tolerence=1``) is refused
    rather than composed and ignored."""

    source: Any = MISSING
    name: Any = MISSING
    header: Any = MISSING
    separator: Any = MISSING
    comment: Any = MISSING
    skip_rows: Any = MISSING
    names: Any = MISSING
    units: Any = MISSING
    time: Any = MISSING
    dt: Any = MISSING
    trial: Any = MISSING
    positions: Any = MISSING
    momenta: Any = MISSING
    velocities: Any = MISSING
    smoothing: Any = MISSING
    mass: Any = MISSING
    angles: Any = MISSING
    wrapped: Any = MISSING
    points: Any = MISSING
    chain: Any = MISSING
    coordinates: Any = MISSING
    gap_tolerance: Any = MISSING
    jitter: Any = MISSING
    irregular: Any = MISSING
    min_segment: Any = MISSING
    every: Any = MISSING
    max_segment: Any = MISSING
    steps: Any = MISSING
    test_steps: Any = MISSING
    scale: Any = MISSING
    split: Any = MISSING
    seed: Any = MISSING
    overwrite: Any = MISSING


# Each stage's sections (top-level keys of its composed config) and their schemas.
SECTIONS: dict[str, type] = {
    "system": SystemSchema,
    "noise": NoiseSchema,
    "train": TrainOptions,
    "generate": GenerateSchema,
    "eval": EvalSchema,
    "profile": ProfileSchema,
    "report": ReportSchema,
    "ingest": IngestSchema,
}


# Groups that a method config overrides (its defaults list: ``override /integrator: tao``), which
# Hydra applies only to groups composed before it: ``method`` must follow them in the defaults list.
METHOD_OVERRIDES = ("integrator", "gradient", "model")


def method_order_problem(order: Sequence[str]) -> str | None:
    """What is wrong with the order in which config groups were composed (``order``, first
    first), if ``method`` comes before a group it overrides; else None."""
    if "method" not in order:
        return None
    early = [g for g in METHOD_OVERRIDES if g in order and order.index(g) > order.index("method")]
    if not early:
        return None
    return (
        f"defaults list: method must come after {', '.join(METHOD_OVERRIDES)} (a method "
        f"overrides them), but it comes before {', '.join(early)}"
    )


def composition_order() -> list[str]:
    """The config groups of the running Hydra job in the order they were composed (Hydra's
    ``runtime.choices`` lists them last first); empty outside a Hydra job."""
    if not HydraConfig.initialized():
        return []
    return list(reversed(list(HydraConfig.get().runtime.choices)))


def task_overrides() -> list[str]:
    """The command line's overrides of the running Hydra job; empty outside one."""
    if not HydraConfig.initialized():
        return []
    return list(HydraConfig.get().overrides.task)


def unread_section_problem(overrides: Sequence[str], sections: Sequence[str]) -> str | None:
    """What is wrong with an override that adds a key (``+generate.n_train=96``) to a stage
    section (``SECTIONS``) that this stage does not read (``sections``): it would be accepted and
    ignored. None if there is none."""
    for override in overrides:
        if not override.startswith("+") or override.startswith("++"):
            continue
        section = override[1:].split("=", 1)[0].split(".", 1)[0]
        if section in SECTIONS and section not in sections:
            reads = ", ".join(sections) if sections else "none of " + ", ".join(SECTIONS)
            return f"{override}: this stage does not read the {section} section (it reads {reads})"
    return None


def register_configs() -> None:
    """Store the configs declared here in Hydra's ConfigStore: ``train_options`` (the train
    section's defaults, as plain values: ``validated`` applies the types, so that a wrong one is
    one UserError line, not Hydra's merge error)."""
    defaults = OmegaConf.to_container(OmegaConf.structured(TrainOptions), resolve=False)
    ConfigStore.instance().store(name="train_options", node={"train": defaults})


def _train_rules(cfg: DictConfig) -> str | None:
    t = cfg.train
    if t.window % t.segments:
        return f"train.window ({t.window}) must be a multiple of train.segments ({t.segments})"
    if t.val_window is not None and t.val_window % t.segments:
        return (f"train.val_window ({t.val_window}) must be a multiple of train.segments "
                f"({t.segments})")  # fmt: skip
    if t.continuity and t.init != "learned":
        return (f"train.continuity={t.continuity} joins segments that start from learned states: "
                "it needs train.init=learned")  # fmt: skip
    if t.continuity and t.segments == 1:
        return (f"train.continuity={t.continuity} joins segments: it needs train.segments > 1 "
                "(e.g. train.window=32 train.segments=4)")  # fmt: skip
    if "integrator" in cfg and cfg.integrator.get("predictor") == "observed" and t.substeps != 1:
        return "integrator.predictor=observed needs train.substeps=1"
    return None


# Rules across fields, per section: each returns the problem, or None.
CROSS_CHECKS: dict[str, list[Callable[[DictConfig], str | None]]] = {"train": [_train_rules]}


def _range_problems(schema: type, node: Any, where: str) -> list[str]:
    """What is wrong with each field of ``node`` (checked against ``schema``, nested sections
    included) that breaks its Rule, in the schema's order."""
    problems: list[str] = []
    for f in fields(schema):
        key = f"{where}.{f.name}" if where else f.name
        nested = f.default_factory
        if isinstance(nested, type) and is_dataclass(nested):
            problems += _range_problems(nested, node[f.name], key)
            continue
        rule: Rule | None = f.metadata.get("rule")
        if rule is None:
            continue
        value = node[f.name]
        if value is None:
            if f.metadata.get("nullable"):
                continue
        elif (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            or isinstance(value, str)
        ):
            try:
                if rule.ok(value):
                    continue
            except TypeError:
                pass
        null = " or null" if f.metadata.get("nullable") else ""
        shown = repr(value) if isinstance(value, str) else value
        problems.append(f"{key} must be {rule.text}{null}, got {shown}")
    return problems


def validated(cfg: DictConfig, *sections: str, common: bool = True) -> DictConfig:
    """Check ``cfg``'s ``sections`` (names in SECTIONS) and, with ``common``, its CommonSchema
    keys against their types; replace each by its checked copy and return ``cfg``.
    UserError (one line: the key and what is wrong) on the first problem: a wrong type, or the
    first section whose values break their ranges (all of that section's, joined by "; ")."""
    if problem := method_order_problem(composition_order()):
        raise UserError(problem)
    if problem := unread_section_problem(task_overrides(), sections):
        raise UserError(problem)
    checks: list[tuple[str | None, type, Any]] = []
    if common:
        keys = [f for f in CommonSchema.__dataclass_fields__ if f in cfg]
        checks.append((None, CommonSchema, {k: _resolved(cfg, k) for k in keys}))
        for key in PATH_TEMPLATES:
            if problem := _empty_path(cfg, key):
                raise UserError(problem)
    for name in sections:
        value = _resolved(cfg, name)
        custom = name == "system" and isinstance(value, dict) and value.get("name") == "custom"
        checks.append((name, CustomSystemSchema if custom else SECTIONS[name], value))
    for name, schema, value in checks:
        try:
            node = OmegaConf.merge(OmegaConf.structured(schema), value)
            OmegaConf.to_container(node, throw_on_missing=True)
        except OmegaConfBaseException as err:
            raise UserError(_one_line(err, name)) from None
        if name is None:
            for key in value:
                cfg[key] = node[key]
        else:
            cfg[name] = node
        if problems := _range_problems(schema, node, name or ""):
            raise UserError("; ".join(problems))
    for name in sections:
        for rule in CROSS_CHECKS.get(name, []):
            problem = rule(cfg)
            if problem:
                raise UserError(problem)
    return cfg


def _empty_path(cfg: DictConfig, key: str) -> str | None:
    """The problem with the path ``key`` when it resolves to an empty string (a template that
    does not resolve is left to the stage that reads it: profile has no data_file)."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except OmegaConfBaseException:
        return None
    if isinstance(value, str) and not value.strip():
        return f"{key} must be a non-empty path, got {value!r}"
    return None


def _resolved(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` with its interpolations resolved (against the whole config)."""
    if key not in cfg:
        raise UserError(f"the config has no {key!r} section")
    try:
        value = cfg[key]
        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
        return value
    except OmegaConfBaseException as err:
        raise UserError(f"the config does not resolve: {_one_line(err, None)}") from None


def _one_line(err: OmegaConfBaseException, section: str | None) -> str:
    """``train.epochs: Value 'ten' of type 'str' could not be converted to Integer``."""
    message = str(err).splitlines()[0].strip() if str(err) else type(err).__name__
    key = getattr(err, "full_key", None) or ""
    where = ".".join(part for part in (section, key) if part)
    return f"{where}: {message}" if where else message
