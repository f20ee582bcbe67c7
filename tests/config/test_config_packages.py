"""Config groups stay in their own packages: only experiments (and the stages' primary configs)
are ``# @package _global_``; a group file that sets keys of another section selects a config of
that section in its defaults list instead."""

from __future__ import annotations

from hnnsym.config import CONF_DIR

PRIMARY = {"common", "run", "generate", "ingest", "train", "evaluate", "profile", "report"}


def test_only_experiments_and_primary_configs_are_global():
    global_files = [
        path.relative_to(CONF_DIR).as_posix()
        for path in CONF_DIR.rglob("*.yaml")
        if "@package _global_" in path.read_text()
        and path.parts[len(CONF_DIR.parts)] != "experiment"
        and not (path.parent == CONF_DIR and path.stem in PRIMARY)
    ]
    assert global_files == []


def test_a_system_brings_its_generate_defaults_and_a_method_its_paths(compose_config):
    chain = compose_config("generate", ["system=chain_pendulum"])
    assert chain.generate.n_train == 800 and chain.generate.obs_dt == 0.03
    angles = compose_config("generate", ["system=chain_pendulum_angles"])
    assert angles.generate.tol == 1e-13 and angles.system.params.links == 3
    ddlm = compose_config("train", ["method=ddlm", "system=pendulum"])
    assert ddlm.data_file.endswith("pendulum/low/seed0_q.h5")
    assert ddlm.run_name == "pendulum/ddlm/low/seed0" and ddlm.model.name == "potential"
