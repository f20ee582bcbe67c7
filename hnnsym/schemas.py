"""Typed schemas (OmegaConf structured configs) of the config sections each stage reads.

The YAML files in ``conf/`` hold the values and their documentation; these dataclasses hold only
the types (every field is MISSING here), so a value lives in one place. ``validated`` checks a
composed config before any work: a wrong type (``train.epochs=ten``), a misspelt key
(``+train.epoch=3``) or a missing value becomes one UserError line naming the key, and the checked,
type-converted section replaces the composed one (``train.lr=1`` reads back as the float 1.0).

The schemas are applied per section, not as one Hydra primary schema, because an experiment
config (``# @package _global_``) may set sections of several stages at once (``experiment=demo``
sets ``generate`` and ``train``) and every stage composes it.
Ranges and cross-field rules (``lr > 0``, ``window % segments``) stay with each stage's checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hnnsym.cli import UserError


@dataclass
class CommonSchema:
    """conf/common.yaml: the top-level keys every stage shares (the path templates data_file,
    run_name and run_dir are strings by construction and are resolved where they are used)."""

    seed: int = MISSING
    device: str = MISSING
    dtype: str = MISSING
    threads: int | None = MISSING
    data_dir: str = MISSING


@dataclass
class SystemSchema:
    name: str = MISSING
    params: dict[str, float] = field(default_factory=dict)


@dataclass
class NoiseSchema:
    name: str = MISSING
    std: float = MISSING


@dataclass
class PlateauSchema:
    factor: float = MISSING
    patience: int = MISSING


@dataclass
class EarlyStopSchema:
    patience: int = MISSING
    min_delta: float = MISSING


@dataclass
class TrainSchema:
    epochs: int = MISSING
    batch_size: int = MISSING
    window: int = MISSING
    segments: int = MISSING
    substeps: int = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    schedule: str = MISSING
    plateau: PlateauSchema = field(default_factory=PlateauSchema)
    early_stop: EarlyStopSchema = field(default_factory=EarlyStopSchema)
    val_batch_size: int = MISSING
    max_train: int | None = MISSING
    max_val: int | None = MISSING
    init: str = MISSING
    init_iterations: int = MISSING
    resume: Any = MISSING  # true | false | auto
    overwrite: bool = MISSING
    progress: bool = MISSING


@dataclass
class GenerateSchema:
    n_train: int = MISSING
    n_val: int = MISSING
    n_test: int = MISSING
    obs_dt: float = MISSING
    fine_dt: float = MISSING
    train_steps: int = MISSING
    test_steps: int = MISSING
    integrator: str = MISSING
    tol: float | None = MISSING
    max_iter: int = MISSING
    chunk: int = MISSING
    overwrite: bool = MISSING


@dataclass
class EvalSchema:
    checkpoint: str = MISSING
    dtype: str = MISSING
    grid_points: int | None = MISSING
    slice_points: int = MISSING
    rollout_steps: int | None = MISSING
    max_trajectories: int | None = MISSING
    substeps: int | None = MISSING
    valid_threshold: float = MISSING
    segment: int = MISSING
    chunk: int = MISSING
    figures: bool = MISSING
    plot_trajectories: int = MISSING
    plot_training_data: bool = MISSING
    scatter_points: int = MISSING


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
    exact: ExactGradientSchema = field(default_factory=ExactGradientSchema)
    reference: ReferenceGradientSchema = field(default_factory=ReferenceGradientSchema)
    methods: list[dict[str, Any]] = MISSING  # each entry is checked by hnnsym.profiling


@dataclass
class ReportSchema:
    runs: Any = MISSING  # a path or glob, or a list of them
    out_dir: str = MISSING
    name: str = MISSING
    group_by: list[str] | None = MISSING
    ignore: list[str] | None = MISSING
    metrics: list[str] | None = MISSING
    plot: list[str] | None = MISSING
    hue: str | None = MISSING
    digits: int = MISSING


# Each stage's sections (top-level keys of its composed config) and their schemas.
SECTIONS: dict[str, type] = {
    "system": SystemSchema,
    "noise": NoiseSchema,
    "train": TrainSchema,
    "generate": GenerateSchema,
    "eval": EvalSchema,
    "profile": ProfileSchema,
    "report": ReportSchema,
}


def validated(cfg: DictConfig, *sections: str, common: bool = True) -> DictConfig:
    """Check ``cfg``'s ``sections`` (names in SECTIONS) and, with ``common``, its CommonSchema
    keys against their types; replace each by its checked copy and return ``cfg``.
    UserError (one line: the key and what is wrong) on the first problem."""
    checks: list[tuple[str | None, type, Any]] = []
    if common:
        keys = [f for f in CommonSchema.__dataclass_fields__ if f in cfg]
        checks.append((None, CommonSchema, {k: _resolved(cfg, k) for k in keys}))
    checks += [(name, SECTIONS[name], _resolved(cfg, name)) for name in sections]
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
    return cfg


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
