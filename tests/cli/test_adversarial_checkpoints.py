"""Hostile and broken checkpoints: a pickled payload is never run, an earlier checkpoint is refused
until the user converts it (confirming they trust it), a corrupted or non-finite one is refused in
one line, and a metric over rollouts that all failed is NaN, not 0."""

from __future__ import annotations

import builtins
import json
import math
import os
import pty
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from stage_cli import TINY_GENERATE, assert_one_line_error, run_stage, tree_hashes

from hnnsym.checkpoints import (
    CHECKSUM,
    UnsafeCheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from hnnsym.convert_checkpoint import convert as convert_in_process
from hnnsym.errors import UserError
from hnnsym.evaluation.metrics import rollout_metrics
from hnnsym.evaluation.rollout import RolloutResult
from hnnsym.evaluation.summary import summary_text
from hnnsym.physics.systems import get_system

pytestmark = pytest.mark.slow

SYSTEM = ["system=double_well", "noise=low", "seed=0"]
TRAIN = ["train.epochs=2", "train.batch_size=32", "train.progress=false"]
CONVERT = "python -m hnnsym.convert_checkpoint"


def cli(stage: str, tmp: Path, *overrides: str) -> subprocess.CompletedProcess:
    paths = [f"data_dir={tmp / 'data'}", f"run_dir={tmp / 'run'}", f"hydra.run.dir={tmp / 'hydra'}"]
    return run_stage(stage, *SYSTEM, *paths, *overrides)


def convert(*args: str | Path, **popen) -> subprocess.CompletedProcess:
    popen.setdefault("stdin", subprocess.DEVNULL)
    return run_stage("convert_checkpoint", *map(str, args), **popen)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny double_well dataset and a 2-epoch run of it."""
    root = tmp_path_factory.mktemp("checkpoints")
    proc = cli("generate", root, *TINY_GENERATE)
    assert proc.returncode == 0, proc.stderr
    proc = cli("train", root, *TRAIN)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture
def tmp(trained: Path, tmp_path: Path) -> Path:
    """A fresh copy of the module's data and run."""
    for name in ("data", "run"):
        shutil.copytree(trained / name, tmp_path / name)
    return tmp_path


def checkpoint(tmp: Path, which: str) -> Path:
    return tmp / "run" / "checkpoints" / f"{which}.pt"


def resume(tmp: Path) -> subprocess.CompletedProcess:
    return cli("train", tmp, *TRAIN[1:], "train.epochs=3", "train.resume=true")


def refused_by(tmp: Path, stage: str) -> tuple[subprocess.CompletedProcess, str]:
    """``evaluate`` (reads best.pt) or ``train.resume=true`` (reads last.pt), and that file."""
    if stage == "evaluate":
        return cli("evaluate", tmp), "best"
    return resume(tmp), "last"


class Payload:
    """Unpickling it creates ``marker`` (what an attacker's code would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.open, (self.marker, "w")


def write_old_style(path: Path, **extra) -> None:
    """The checkpoint as an earlier hnnsym wrote it: plain torch.save with a TorchVersion inside
    and no checksum (plus ``extra`` entries)."""
    payload = torch.load(path, weights_only=True)
    del payload[CHECKSUM]
    payload["versions"]["torch"] = torch.__version__  # a torch.torch_version.TorchVersion
    torch.save({**payload, **extra}, path)


# ---- the safe form ------------------------------------------------------------------------------
def test_a_fresh_run_writes_checkpoints_that_load_without_unpickling_and_evaluate(tmp):
    for which in ("best", "last"):
        raw = torch.load(checkpoint(tmp, which), weights_only=True)
        assert isinstance(raw[CHECKSUM], str) and len(raw[CHECKSUM]) == 64
        assert type(raw["versions"]["torch"]) is str
        assert CHECKSUM not in load_checkpoint(checkpoint(tmp, which))
    proc = cli("evaluate", tmp)
    assert proc.returncode == 0, proc.stderr
    assert math.isfinite(
        json.loads((tmp / "run" / "eval" / "metrics.json").read_text())["traj_mse"]
    )
    proc = resume(tmp)
    assert proc.returncode == 0, proc.stderr
    assert "resuming" in proc.stdout
    torch.load(checkpoint(tmp, "last"), weights_only=True)


def test_save_makes_the_payload_plain_and_refuses_other_objects(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, {"a": (1, np.float64(2.5)), "p": Path("x"), "v": torch.__version__,
                           "w": torch.nn.Parameter(torch.ones(2))})  # fmt: skip
    raw = torch.load(path, weights_only=True)
    assert raw["a"] == [1, 2.5] and type(raw["a"][1]) is float
    assert raw["p"] == "x" and type(raw["v"]) is str and type(raw["w"]) is torch.Tensor
    with pytest.raises(TypeError, match="/'o'"):
        save_checkpoint(tmp_path / "d.pt", {"o": object()})
    assert not (tmp_path / "d.pt").exists()


# ---- code in a checkpoint is never run ------------------------------------------------------------
@pytest.mark.parametrize("stage", ["evaluate", "train"])
def test_a_pickled_payload_is_refused_and_not_run(tmp, stage):
    marker = tmp / "payload-ran"
    for which in ("best", "last"):
        write_old_style(checkpoint(tmp, which), note=Payload(marker))
    before = tree_hashes(tmp / "run")
    proc, which = refused_by(tmp, stage)
    assert_one_line_error(proc, str(checkpoint(tmp, which)), "io.open",
                          f"{CONVERT} {checkpoint(tmp, which)}")  # fmt: skip
    assert not marker.exists()
    assert tree_hashes(tmp / "run") == before
    # the conversion command does not unpickle it unasked either
    assert_one_line_error(convert(checkpoint(tmp, which)), "--trust")
    assert not marker.exists()
    assert tree_hashes(tmp / "run") == before


# ---- an earlier checkpoint: refused, then converted once trusted ----------------------------------
def answer(path: Path, reply: str) -> subprocess.CompletedProcess:
    """The conversion command on a terminal (a pty as stdin), answering ``reply``."""
    main, terminal = pty.openpty()
    try:
        os.write(main, f"{reply}\n".encode())
        return convert(path, stdin=terminal)
    finally:
        os.close(main)
        os.close(terminal)


def test_an_earlier_checkpoint_is_refused_then_converted_once_the_user_confirms(tmp):
    best, last = checkpoint(tmp, "best"), checkpoint(tmp, "last")
    write_old_style(best)
    write_old_style(last)
    before = tree_hashes(tmp / "run")
    assert_one_line_error(cli("evaluate", tmp), f"{CONVERT} {best}", "TorchVersion")
    assert_one_line_error(resume(tmp), f"{CONVERT} {last}")
    # not confirmed: no terminal and no --trust, or an answer other than yes
    assert_one_line_error(convert(best), "not converted", "--trust")
    assert_one_line_error(answer(best, "no"), "not converted")
    assert tree_hashes(tmp / "run") == before
    # confirmed on the terminal, or with --trust
    proc = answer(best, "yes")
    assert proc.returncode == 0, proc.stderr
    assert "runs any code" in proc.stderr and "Type yes" in proc.stderr
    proc = convert(last, "--trust")
    assert proc.returncode == 0, proc.stderr
    assert f"kept at {last}.unsafe" in proc.stdout
    for path in (best, last):  # the originals are kept beside them, byte for byte
        backup = path.with_name(f"{path.name}.unsafe")
        assert tree_hashes(backup)[backup.name] == before[f"checkpoints/{path.name}"]
        torch.load(path, weights_only=True)
    assert cli("evaluate", tmp).returncode == 0
    proc = resume(tmp)
    assert proc.returncode == 0, proc.stderr
    # a safe checkpoint is left as it is
    converted = tree_hashes(best)
    proc = convert(best)
    assert proc.returncode == 0 and "nothing to do" in proc.stdout
    assert tree_hashes(best) == converted


def test_a_checkpoint_without_checksum_converts_without_unpickling_and_backups_are_kept(tmp_path):
    path = tmp_path / "best.pt"
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 1}, path)  # safe, but no checksum
    with pytest.raises(UnsafeCheckpointError, match=f"{CONVERT} {path}"):
        load_checkpoint(path)
    original = path.read_bytes()
    assert "converted" in convert_in_process(path, trust=False)  # nothing to unpickle: no question
    assert load_checkpoint(path)["epoch"] == 1
    assert (tmp_path / "best.pt.unsafe").read_bytes() == original
    assert "nothing to do" in convert_in_process(path, trust=False)
    # an earlier backup is never replaced
    torch.save({"model": {"w": torch.ones(2)}}, path)
    kept = path.read_bytes()
    with pytest.raises(UserError, match="already exists"):
        convert_in_process(path, trust=True)
    assert path.read_bytes() == kept and (tmp_path / "best.pt.unsafe").read_bytes() == original


# ---- corrupted checkpoints ----------------------------------------------------------------------
def first_weight(path: Path) -> tuple[str, torch.Tensor]:
    model = torch.load(path, weights_only=True)["model"]
    key = next(iter(model))
    return key, model[key]


@pytest.mark.parametrize("stage", ["evaluate", "train"])
def test_nan_weights_with_a_recomputed_checksum_are_refused(tmp, stage):
    for which in ("best", "last"):
        payload = load_checkpoint(checkpoint(tmp, which))
        key = next(iter(payload["model"]))
        payload["model"][key].view(-1)[0] = math.nan
        save_checkpoint(checkpoint(tmp, which), payload)  # a valid checksum of the NaN
    before = tree_hashes(tmp / "run")
    proc, which = refused_by(tmp, stage)
    assert_one_line_error(proc, str(checkpoint(tmp, which)), "non-finite", f"model/{key}")
    assert tree_hashes(tmp / "run") == before


@pytest.mark.parametrize("stage", ["evaluate", "train"])
def test_nan_bytes_written_into_a_tensor_fail_the_checksum(tmp, stage):
    for which in ("best", "last"):
        path = checkpoint(tmp, which)
        _, weight = first_weight(path)
        blob = path.read_bytes()
        stored = weight.numpy().tobytes()
        at = blob.index(stored)
        nan = torch.full_like(weight, math.nan).numpy().tobytes()
        path.write_bytes(blob[:at] + nan + blob[at + len(nan) :])
    before = tree_hashes(tmp / "run")
    proc, which = refused_by(tmp, stage)
    assert_one_line_error(proc, str(checkpoint(tmp, which)), "corrupted", "sha256")
    assert tree_hashes(tmp / "run") == before


@pytest.mark.parametrize("stage", ["evaluate", "train"])
def test_64_flipped_bytes_inside_a_tensor_are_refused(tmp, stage):
    for which in ("best", "last"):
        path = checkpoint(tmp, which)
        with zipfile.ZipFile(path) as archive:  # the largest tensor storage
            record = max((i for i in archive.infolist() if "/data/" in i.filename),
                         key=lambda i: i.file_size)  # fmt: skip
        blob = bytearray(path.read_bytes())
        name_length, extra_length = (int.from_bytes(blob[record.header_offset + k : record.header_offset + k + 2], "little")
                                     for k in (26, 28))  # fmt: skip
        start = record.header_offset + 30 + name_length + extra_length
        assert record.file_size >= 128
        for k in range(start + 32, start + 96):
            blob[k] ^= 0xFF
        path.write_bytes(bytes(blob))
    before = tree_hashes(tmp / "run")
    proc, which = refused_by(tmp, stage)
    assert_one_line_error(proc, str(checkpoint(tmp, which)))
    assert tree_hashes(tmp / "run") == before


# ---- metrics over rollouts that all failed ------------------------------------------------------
def test_metrics_over_rollouts_that_all_failed_are_nan_and_the_summary_warns():
    system = get_system("double_well")
    truth = torch.zeros(6, 3, 2, dtype=torch.float64)
    truth[:, :, 0] = torch.linspace(0.1, 0.6, 6)[:, None]
    states = torch.full_like(truth, math.nan)
    states[0] = truth[0]  # every rollout fails at its first step
    result = RolloutResult(states, torch.ones(3, dtype=torch.long), ["NaN/Inf state"] * 3, 0.1, 1)
    t = torch.arange(6, dtype=torch.float64) * 0.1
    m = rollout_metrics(result, truth, t, system, system).summary
    assert m["rollout_failed"] == 1
    for key in ("traj_mse", "traj_l2_mean", "traj_l2_final", "energy_drift_true_max",
                "energy_drift_true_mean", "energy_drift_pred_max"):  # fmt: skip
        assert math.isnan(m[key]), key
    shown = {**m, "traj_mse": None, "rollout_failures": ["NaN/Inf state"],
             "checkpoint": {"path": "best.pt", "epoch": 1}, "data": {"file": "d.h5"},
             "files": {"figures": []}}  # fmt: skip
    text = summary_text(shown, Path("eval"), "  rollout ...")
    assert "warning: all 3 rollouts failed (NaN/Inf state)" in text
    # one rollout that ran a step: its states count
    states[1, 0] = truth[1, 0]
    result.fail_step[0] = 2
    m = rollout_metrics(result, truth, t, system, system).summary
    assert m["traj_mse"] == 0 and m["rollout_failed"] == 1
