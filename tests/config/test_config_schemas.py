"""Typed config schemas (hnnsym.config.schemas): every stage's composed defaults pass, and a wrong type
or a misspelt key in any checked section is one UserError line naming the key."""

from __future__ import annotations

import shutil

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from hnnsym.config import CONF_DIR
from hnnsym.config.schemas import (
    SECTIONS,
    TrainOptions,
    method_order_problem,
    unread_section_problem,
    validated,
)
from hnnsym.errors import UserError

STAGE_SECTIONS = {
    "generate": ("system", "noise", "generate"),
    "train": ("system", "noise", "train"),
    "evaluate": ("system", "noise", "train", "eval"),
    "profile": ("system", "profile"),
    "report": ("report",),
    "ingest": ("ingest",),
}
WITHOUT_COMMON = ("report", "ingest")  # the stages that validate their sections with common=False


CASES = [(stage, None) for stage in STAGE_SECTIONS] + [
    ("generate", "demo"), ("train", "demo"), ("evaluate", "demo"),
    ("train", "table1_nssnn"), ("evaluate", "table1_node"),
    ("train", "double_well_separable"), ("evaluate", "double_well_separable"),
]  # fmt: skip


@pytest.mark.parametrize(("stage", "experiment"), CASES)
def test_the_shipped_configs_match_their_schemas(compose_config, stage, experiment):
    overrides = [f"experiment={experiment}"] if experiment else []
    cfg = compose_config(stage, overrides)
    before = OmegaConf.to_container(cfg, resolve=False)
    validated(cfg, *STAGE_SECTIONS[stage], common=stage not in WITHOUT_COMMON)
    for name in STAGE_SECTIONS[stage]:  # same values after the check (types may only widen)
        assert (
            OmegaConf.to_container(cfg[name], resolve=True)
            == OmegaConf.to_container(OmegaConf.create(before)[name], resolve=True)
            or name == "profile"
        )  # profile.dtype: ${dtype} reads back resolved


def test_every_schema_field_is_in_the_yaml(compose_config):
    """A key in a schema but not in hnnsym/conf/ would be MISSING for every run; and the reverse is what
    the struct check refuses. Both directions: the schema and the YAML list the same keys."""
    for stage, sections in STAGE_SECTIONS.items():
        cfg = compose_config(stage)
        for name in sections:
            schema_keys = set(OmegaConf.structured(SECTIONS[name]).keys())
            assert schema_keys == set(cfg[name].keys()) or name == "system", (stage, name)


@pytest.mark.parametrize(
    ("stage", "override", "message"),
    [
        ("train", "train.batch_size=big", "train.batch_size: Value 'big' of type 'str' could not be converted to Integer"),
        ("train", "train.plateau.patience=1.5", "train.plateau.patience: Value '1.5' of type 'float'"),
        ("train", "+train.early_stop.min_deltas=1", "train.early_stop.min_deltas: Key 'min_deltas' not in"),
        ("train", "train.max_train=all", "train.max_train: Value 'all' of type 'str' could not be converted to Integer"),
        ("train", "seed=first", "seed: Value 'first' of type 'str' could not be converted to Integer"),
        ("train", "threads=many", "threads: Value 'many'"),
        ("train", "system.params.alpha=strong", "system.params.alpha: Value 'strong' of type 'str'"),
        ("generate", "generate.obs_dt=fast", "generate.obs_dt: Value 'fast' of type 'str' could not be converted to Float"),
        ("evaluate", "eval.figures=maybe", "eval.figures: Value 'maybe' is not a valid bool"),
        ("evaluate", "eval.grid_points=1e5", "eval.grid_points: Value '100000.0' of type 'float'"),
        ("profile", "profile.steps=[4,many]", "profile.steps[1]: Value 'many' of type 'str'"),
        ("profile", "profile.exact.iterations=x", "profile.exact.iterations: Value 'x' of type 'str'"),
        ("report", "report.digits=three", "report.digits: Value 'three' of type 'str'"),
        ("report", "+report.colour=red", "report.colour: Key 'colour' not in 'ReportSchema'"),
        ("ingest", "+ingest.gap_tolerence=1", "ingest.gap_tolerence: Key 'gap_tolerence' not in 'IngestSchema'"),
    ],
)  # fmt: skip
def test_type_errors_are_one_line(compose_config, stage, override, message):
    cfg = compose_config(
        stage, [override] + (["system=coupled_oscillator"] if "alpha" in override else [])
    )
    with pytest.raises(UserError) as err:
        validated(cfg, *STAGE_SECTIONS[stage], common=stage not in WITHOUT_COMMON)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_checked_values_are_converted(compose_config):
    cfg = validated(compose_config("train", ["train.lr=1", "noise.std=0"]), "train", "noise")
    assert isinstance(cfg.train.lr, float) and cfg.train.lr == 1.0
    assert isinstance(cfg.noise.std, float)


# ---- one declaration of the train options; the method's place in the defaults list --------------


def test_the_train_defaults_are_the_dataclass_defaults(compose_config):
    """The train section every stage composes is TrainOptions' defaults (no YAML copy of them),
    and the trainer reads the validated section as a TrainOptions."""
    cfg = compose_config("train")
    declared = OmegaConf.to_container(OmegaConf.structured(TrainOptions), resolve=False)
    assert OmegaConf.to_container(cfg.train, resolve=False) == declared
    assert not (CONF_DIR / "train_options.yaml").exists()
    options = OmegaConf.to_object(validated(cfg, "train").train)
    assert isinstance(options, TrainOptions) and options.early_stop.patience == 8
    assert options.optimizer["lr"] == 0.01  # interpolations resolved against the run's config


def test_a_method_before_the_groups_it_overrides_is_one_line():
    order = ["common", "system", "noise", "integrator", "gradient", "model", "method"]
    assert method_order_problem(order) is None
    assert method_order_problem(["system", "integrator"]) is None  # generate: no method
    wrong = ["common", "system", "noise", "method", "integrator", "gradient", "model"]
    assert method_order_problem(wrong) == (
        "defaults list: method must come after integrator, gradient, model (a method overrides "
        "them), but it comes before integrator, gradient, model"
    )


@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_the_shipped_defaults_compose_method_last(stage):
    """Hydra's runtime.choices, reversed, is the composition order that composition_order reads:
    the shipped configs pass, and a run.yaml with method first is refused."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(stage, ["method=nssnn"], return_hydra_config=True)
    order = list(reversed(list(cfg.hydra.runtime.choices)))
    assert method_order_problem(order) is None
    assert order.index("model") < order.index("method")


def test_a_run_yaml_with_method_first_is_refused(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    run = (conf / "run.yaml").read_text()
    moved = run.replace("  - method: hnn\n", "").replace(
        "  - noise: low\n", "  - noise: low\n  - method: hnn\n"
    )
    assert moved != run
    (conf / "run.yaml").write_text(moved)
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", ["method=hnn"], return_hydra_config=True)
    order = list(reversed(list(cfg.hydra.runtime.choices)))
    assert "but it comes before integrator, gradient, model" in str(method_order_problem(order))


def test_an_added_key_of_a_section_the_stage_does_not_read_is_refused():
    """``+generate.n_train=96`` given to train would be composed and never read: refused, naming
    what the stage reads. Keys of sections it reads, other keys and ``++`` pass to the schemas."""
    problem = unread_section_problem(["seed=1", "+generate.n_train=96"], ["system", "train"])
    assert problem == (
        "+generate.n_train=96: this stage does not read the generate section "
        "(it reads system, train)"
    )
    for fine in ("+train.epoch=3", "+model.init.k=2", "++generate.n_train=96", "generate.n=1"):
        assert unread_section_problem([fine], ["system", "train"]) is None
    assert "none of system, noise" in unread_section_problem(["+eval.x=1"], [])
