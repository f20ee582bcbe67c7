"""Which models may learn which coordinates of the chain pendulum (Finzi et al.): an
unconstrained H (HNN, ...) is refused on the Cartesian constrained data, a constrained model
(CHNN, CLNN) on anything else, in one line and before anything is trained or written (the run dir
is created empty, as for the other refusals of the train stage); NODE (the baseline, no energy)
learns the Cartesian data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hnnsym.compatibility import coordinates_problem
from hnnsym.errors import UserError
from hnnsym.physics.constrained_models import CHNN, CLNN
from hnnsym.physics.dissipative import DissipativeHNN
from hnnsym.physics.models import HNN, NODE, SeparableHNN
from hnnsym.physics.pendulums import CARTESIAN_SYSTEMS

TINY = ["generate.n_train=4", "generate.n_val=2", "generate.n_test=2", "generate.train_steps=6",
        "generate.test_steps=4"]  # fmt: skip


def _models() -> dict[str, torch.nn.Module]:
    return {
        "hnn": HNN(4, hidden=(8,)),
        "separable_hnn": SeparableHNN(4, hidden=(8,)),
        "dissipative_hnn": DissipativeHNN(4, hidden=(8,)),
        "node": NODE(4, hidden=(8,)),
        "chnn": CHNN(4, hidden=(8,)),
        "clnn": CLNN(4, hidden=(8,)),
    }


@pytest.mark.parametrize("system", ["chain_pendulum", "chain_pendulum_angles", "pendulum"])
def test_coordinates_problem_pairs_constrained_models_with_cartesian_systems(system):
    cartesian = system in CARTESIAN_SYSTEMS
    for name, model in _models().items():
        problem = coordinates_problem(system, model)
        if name in ("chnn", "clnn"):
            assert (problem is None) == cartesian, (name, problem)
        elif name == "node":  # no energy: a free field in any coordinates (the baseline)
            assert problem is None
        else:  # an unconstrained H: only off the Cartesian constrained systems
            assert (problem is None) == (not cartesian), (name, problem)
        if problem is not None:
            assert "\n" not in problem and type(model).__name__ in problem
    hnn_problem = coordinates_problem("chain_pendulum", HNN(4, hidden=(8,)))
    assert "system=chain_pendulum_angles" in hnn_problem and "model=chnn" in hnn_problem


def _data(compose_config, tmp_path: Path, system: str, links: int = 1) -> None:
    from hnnsym.data.simulate import generate

    common = [f"system={system}", f"system.params.links={links}", "noise=none",
              f"data_dir={tmp_path}/data"]  # fmt: skip
    generate(compose_config("generate", common + TINY))


def _run(system: str, tmp_path: Path, *more: str, links: int = 1) -> list[str]:
    return [f"system={system}", f"system.params.links={links}", "noise=none", f"data_dir={tmp_path}/data",
            f"run_dir={tmp_path}/run", "model.hidden=[8]", "train.epochs=1",
            "train.batch_size=2", "train.progress=false", *more]  # fmt: skip


@pytest.mark.parametrize(
    ("system", "choice"),
    [
        ("chain_pendulum", "method=hnn"),
        ("chain_pendulum", "model=separable_hnn"),
        ("chain_pendulum_angles", "method=chnn"),
        ("chain_pendulum_angles", "model=clnn"),
        ("chain_pendulum_angles", "method=chnn model.system=chain_pendulum"),
    ],
)
def test_train_refuses_the_wrong_coordinates_before_writing(compose_config, tmp_path, system,
                                                            choice):  # fmt: skip
    from hnnsym.training.stage import train

    # 2 links: in angles (d = 2) a CHNN told model.system=chain_pendulum is refused by its
    # constructor (the angle system's params, links=2, make Cartesian states of dim 4, not 2)
    _data(compose_config, tmp_path, system, links=2)
    cfg = compose_config("train", _run(system, tmp_path, *choice.split(), links=2))
    with pytest.raises(UserError, match="Cartesian coordinates") as err:
        train(cfg)
    assert "\n" not in str(err.value)
    assert not any((tmp_path / "run").glob("*"))  # no checkpoint, config or metrics


def test_node_learns_the_cartesian_chain_and_an_old_hnn_checkpoint_is_refused(
    compose_config, tmp_path, monkeypatch
):
    """NODE trains and evaluates on the Cartesian data; an HNN checkpoint of those data (as one
    trained before the check existed, made here by switching the train-stage check off) is refused
    by evaluate in one line."""
    from hnnsym.evaluation.stage import evaluate
    from hnnsym.training import stage
    from hnnsym.training.stage import train

    _data(compose_config, tmp_path, "chain_pendulum")
    node = _run("chain_pendulum", tmp_path, "method=node")
    train(compose_config("train", node))
    metrics = evaluate(compose_config("evaluate", node + ["eval.figures=false"]))
    assert 0 < metrics["rel_err_gmean"] < 1 and metrics["constraint_phi_max"] >= 0

    hnn = _run("chain_pendulum", tmp_path, "method=hnn", f"run_dir={tmp_path}/hnn")
    monkeypatch.setattr(stage, "coordinates_problem", lambda system, model, tracked=False: None)
    train(compose_config("train", hnn))
    monkeypatch.undo()
    out = tmp_path / "hnn_eval"
    with pytest.raises(UserError, match="model HNN does not know") as err:
        evaluate(compose_config("evaluate", hnn + [f"eval.out_dir={out}"]))
    assert "\n" not in str(err.value) and "checkpoint" in str(err.value)
    assert not out.exists()
