"""Objects from config nodes: ``_target_`` instantiation in one place, with one-line errors.

Models, integrators, gradient methods, losses, the optimizer and the learning-rate schedule are
named by ``_target_`` in
``hnnsym/conf/`` (losses, optimizer and scheduler with ``_partial_: true``: completed here with what only
the run knows: the model's dim, its parameters, the optimizer, the run's LossContext). A wrong
argument or class name becomes one UserError naming the config key.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import hydra.utils
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from torch import nn

from hnnsym.errors import UserError
from hnnsym.ode.gradients import GRADIENTS, GradientMethod
from hnnsym.ode.integrators import INTEGRATORS, Integrator, get_integrator
from hnnsym.physics.capabilities import check_model
from hnnsym.physics.models import MODELS

# Keys of a model config that label it and are not constructor arguments.
MODEL_LABELS = ("name",)
# Constructor arguments that only set the initial weights: a trained model is the same model
# whatever they were, so a checkpoint matches a config that differs in them (or lacks them).
INITIAL_WEIGHT_KEYS = ("output_gain",)


def instantiate(node: Mapping[str, Any] | DictConfig, key: str, *args: Any, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(node, *args, **kwargs)``; UserError "<key>: <what went wrong>"."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise UserError(f"{key} needs a _target_ (a class or function to build), got {node!r}")
    try:
        return hydra.utils.instantiate(dict(node), *args, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__ or err
        raise UserError(f"{key}: {_one_line(cause)}") from err
    except (TypeError, ValueError) as err:
        raise UserError(f"{key}: {err}") from err


def _one_line(err: BaseException) -> str:
    """Hydra's message of ``err`` (wrapped over several lines, as the blocklist's refusal of
    ``os.system``) on one line, without its ``full_key:`` / ``object_type=`` trailer."""
    lines = [
        line.strip()
        for line in str(err).splitlines()
        if line.strip() and not line.strip().startswith(("full_key:", "object_type="))
    ]
    return " ".join(lines) or type(err).__name__


def _check_keys(node: Mapping[str, Any], group: str, label: Any) -> None:
    """UserError naming the first key of ``node`` that its ``_target_`` does not take (the
    config group=label in the message)."""
    try:
        target = hydra.utils.get_method(str(node["_target_"]))
    except Exception as err:  # noqa: BLE001 (Hydra raises several kinds; all mean "no such target")
        raise UserError(f"{group}: {_one_line(err)}") from err
    params = inspect.signature(target).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in node:
        if key != "_target_" and key not in params:
            takes = ", ".join(params) or "none"
            raise UserError(f"{group}={label} takes no key {group}.{key} (it takes: {takes})")


# Keys of an integrator or gradient config that label it and are not constructor arguments.
COMPONENT_LABELS = ("name",)


def _build_component(node: Mapping[str, Any] | DictConfig, group: str) -> Any:
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    spec = {k: v for k, v in node.items() if k not in COMPONENT_LABELS}
    label = node.get("name")
    _check_keys(spec, group, label)
    built = instantiate(spec, group)
    if label is not None and label != built.name:
        raise UserError(f"{group}.name is {label!r} but its _target_ builds {built.name!r}")
    return built


def build_integrator(node: Mapping[str, Any] | DictConfig) -> Integrator:
    """The integrator of a config node: ``_target_`` (a class or factory in
    ``hnnsym.ode.integrators``) with its options, and the label ``name``. Nodes of older
    checkpoints (``name`` plus the options of every integrator) are built by name with the options
    that integrator takes."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if "_target_" not in node:
        name = node.get("name")
        if name not in INTEGRATORS:
            raise UserError(f"integrator {name!r} is not one of {sorted(INTEGRATORS)}")
        known = INTEGRATORS[name][1]
        return get_integrator(name, **{k: v for k, v in node.items() if k in known})
    return _build_component(node, "integrator")


def build_gradient(node: Mapping[str, Any] | DictConfig) -> GradientMethod:
    """The gradient method of a config node: ``_target_`` (a class in ``hnnsym.ode.gradients``)
    with its options, and the label ``name``; nodes of older checkpoints are built by name."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node, resolve=True)
    if "_target_" not in node:
        name = node.get("name")
        if name not in GRADIENTS:
            raise UserError(f"gradient {name!r} is not one of {sorted(GRADIENTS)}")
        cls = GRADIENTS[name]
        node = {"_target_": f"{cls.__module__}.{cls.__qualname__}", **node}
    return _build_component(node, "gradient")


def model_spec(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture in a model config: ``_target_`` and its arguments, without the labels.
    Configs written before ``_target_`` ({"name"|"arch": "hnn", "hidden": ..., "loss": ...}, as in
    older checkpoints) are mapped to their class, so their runs still evaluate."""
    cfg = dict(model_cfg)
    if "_target_" not in cfg:
        arch = cfg.pop("arch", None) or cfg.get("name")
        if arch not in MODELS:
            raise UserError(f"model {arch!r} is not one of {sorted(MODELS)}")
        cls = MODELS[arch]
        cfg = {"_target_": f"{cls.__module__}.{cls.__qualname__}", **cfg}
        cfg.pop("loss", None)
    for label in MODEL_LABELS:
        cfg.pop(label, None)
    if "hidden" in cfg:
        cfg["hidden"] = tuple(cfg["hidden"])
    return cfg


def model_class(model_cfg: Mapping[str, Any]) -> type:
    """The class a model config builds (its ``_target_``), for what it declares
    (``capabilities``) before it is built."""
    target = model_spec(model_cfg)["_target_"]
    try:
        return hydra.utils.get_class(target)
    except (ImportError, ValueError, AttributeError) as err:
        raise UserError(f"model _target_ {target!r} is not an importable class ({err})") from err


# Keys of a constrained model's config (CHNN, CLNN) that say where its constraints come from: the
# chain's earlier spatial / graph / parameter_seed, now system_params (the data's system).
CONSTRAINT_SOURCE_KEYS = ("spatial", "graph", "parameter_seed", "system_params")


def same_model(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two model configs (a checkpoint's and the run's) describe the same model. A config
    of a constrained model from before ``system_params`` (the chain's spatial / graph /
    parameter_seed) matches a current one on everything else: both give the chain of the data's
    dim, whose parameters train checks against the data file, and the stages rebuild a trained
    model from its checkpoint's own config. ``periodic: null`` matches any ``periodic``, and
    ``INITIAL_WEIGHT_KEYS`` are not compared."""
    a, b = dict(a), dict(b)
    for key in INITIAL_WEIGHT_KEYS:
        a.pop(key, None)
        b.pop(key, None)
    # periodic: null (the model configs' default) asks for the data file's angles, which train
    # writes into the checkpoint's config, so it matches any; a config without the key has none
    periodic = [a.pop("periodic", []), b.pop("periodic", [])]
    if None not in periodic and sorted(periodic[0]) != sorted(periodic[1]):
        return False
    if ("system_params" in a) != ("system_params" in b):
        for key in CONSTRAINT_SOURCE_KEYS:
            a.pop(key, None)
            b.pop(key, None)
    return a == b


def build_model(model_cfg: Mapping[str, Any] | DictConfig, dim: int) -> nn.Module:
    """The network of a model config for states of ``dim`` degrees of freedom."""
    if isinstance(model_cfg, DictConfig):
        model_cfg = OmegaConf.to_container(model_cfg, resolve=True)
    model = instantiate(model_spec(model_cfg), "model", dim=dim)
    check_model(model)  # its declared capabilities have their methods
    return model


def model_from_checkpoint(payload: dict) -> nn.Module:
    """The trained model of a checkpoint written by ``hnnsym.train`` (keys model_config, dim,
    model), in the dtype its state was saved in (a refit model's is float64:
    ``hnnsym.training.refit``)."""
    model = build_model(payload["model_config"], payload["dim"])
    saved = {t.dtype for t in payload["model"].values() if t.is_floating_point()}
    if len(saved) == 1:
        model.to(saved.pop())
    model.load_state_dict(payload["model"])
    return model


def build_optimizer(train: DictConfig, model: nn.Module) -> torch.optim.Optimizer:
    """``train.optimizer`` (a partial) completed with the model's parameters."""
    partial = instantiate(train.optimizer, "train.optimizer")
    try:
        return partial(model.parameters())
    except (TypeError, ValueError, RuntimeError) as err:
        hint = (
            " (without torch's fused step: ~train.optimizer.fused)" if "fused" in str(err) else ""
        )
        raise UserError(f"train.optimizer: {err}{hint}") from err


def build_scheduler(train: DictConfig, optimizer: torch.optim.Optimizer) -> Any:
    """``train.schedulers[train.schedule]`` (a partial) completed with the optimizer."""
    if train.schedule not in train.schedulers:
        raise UserError(
            f"train.schedule must be one of {sorted(train.schedulers)}, got {train.schedule!r}"
        )
    partial = instantiate(train.schedulers[train.schedule], f"train.schedulers.{train.schedule}")
    try:
        return partial(optimizer)
    except (TypeError, ValueError) as err:
        raise UserError(f"train.schedulers.{train.schedule}: {err}") from err
