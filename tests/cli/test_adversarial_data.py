"""Hostile and broken data files through the CLI: train, evaluate and ingest end in one ``error:``
line and exit 2, with no traceback, the input file unchanged and nothing written."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from stage_cli import TINY_GENERATE, assert_one_line_error, run_stage, tree_hashes

pytestmark = pytest.mark.slow

SYSTEM = ["system=double_well", "noise=low", "seed=0"]
TINY_TRAIN = ["train.epochs=2", "train.batch_size=32", "train.progress=false"]


def cli(stage: str, root: Path, *overrides: str):
    paths = [f"data_dir={root / 'data'}", f"run_dir={root / 'run'}", f"hydra.run.dir={root / 'h'}"]
    return run_stage(stage, *SYSTEM, *paths, *overrides)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny dataset and a run trained on it."""
    root = tmp_path_factory.mktemp("adversarial")
    proc = cli("generate", root, *TINY_GENERATE)
    assert proc.returncode == 0, proc.stderr
    proc = cli("train", root, *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    return root


def broken(trained: Path, tmp_path: Path, change: Callable[[h5py.File], None]) -> Path:
    """A copy of the tiny dataset with ``change`` applied."""
    path = tmp_path / "broken.h5"
    shutil.copy(trained / "data" / "double_well" / "low" / "seed0.h5", path)
    with h5py.File(path, "r+") as f:
        change(f)
    return path


def replace(key: str, value: Callable[[np.ndarray], np.ndarray]) -> Callable[[h5py.File], None]:
    def change(f: h5py.File) -> None:
        data = value(f[key][...])
        del f[key]
        f[key] = data

    return change


def group_instead(f: h5py.File) -> None:
    del f["train/observed"]
    f.create_group("train/observed")


def no_trajectories(split: str) -> Callable[[h5py.File], None]:
    def change(f: h5py.File) -> None:
        for key in ("observed", "clean"):
            replace(f"{split}/{key}", lambda a: a[:0])(f)

    return change


def huge(f: h5py.File) -> None:
    """A (10^9, 13, 2) observed declared, nothing stored: the file stays small."""
    del f["train/observed"], f["train/clean"]
    f["train"].create_dataset("observed", shape=(10**9, 13, 2), dtype="f8", chunks=(1, 13, 2))


TRAIN_CASES = {
    "bytes": (replace("train/observed", lambda a: np.char.encode(a.astype(str))),
              ["split 'train' observed holds byte strings"]),
    "group": (group_instead, ["train/observed is an HDF5 group, not a dataset"]),
    "no_trajectories": (no_trajectories("train"), ["split 'train' holds no trajectories", "N=0"]),
    "complex": (replace("train/observed", lambda a: a + 1j),
                ["split 'train' observed holds complex numbers"]),
    "bool": (replace("train/observed", lambda a: a > 0), ["observed holds booleans"]),
    "reversed_t": (replace("train/t", lambda a: a[::-1]),
                   ["split 'train' t[1] = 0.11 follows t[0] = 0.12", "not obs_dt = 0.01"]),
    "t_step": (replace("val/t", lambda a: 2 * a), ["split 'val' t[1] = 0.02", "not obs_dt = 0.01"]),
    "clean_shape": (replace("train/clean", lambda a: a[:, :-1]), ["clean (96, 12, 2)"]),
    "t_length": (replace("train/t", lambda a: a[:-1]), ["t (12,)"]),
    "ndim": (replace("train/observed", lambda a: a[..., 0]), ["observed (96, 13)"]),
    "no_t": (lambda f: f.__delitem__("val/t"), ["split 'val' lacks the dataset t"]),
    "obs_dt_text": (lambda f: f.attrs.__setitem__("obs_dt", "0.01"),
                    ["obs_dt must be the time between observations", "got '0.01'"]),
    "obs_dt_array": (lambda f: f.attrs.__setitem__("obs_dt", np.array([0.01, 0.01])),
                     ["obs_dt must be", "array("]),
    "obs_dt_zero": (lambda f: f.attrs.__setitem__("obs_dt", 0.0), ["obs_dt must be", "got 0.0"]),
    "obs_dt_negative": (lambda f: f.attrs.__setitem__("obs_dt", -0.01), ["got -0.01"]),
    "huge": (huge, ["train/observed declares shape (1000000000, 13, 2)", "needs about",
                    "available memory"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_train_refuses_a_broken_file_in_one_line(trained, tmp_path, case):
    change, fragments = TRAIN_CASES[case]
    path = broken(trained, tmp_path, change)
    before = tree_hashes(path)
    proc = cli("train", tmp_path, *TINY_TRAIN, f"data_file={path}")
    assert_one_line_error(proc, str(path), *fragments)
    assert tree_hashes(path) == before
    assert not (tmp_path / "run").exists()


def test_a_read_above_memory_limit_names_the_limit(trained, tmp_path):
    path = broken(trained, tmp_path, huge)
    proc = cli("train", tmp_path, *TINY_TRAIN, f"data_file={path}", "memory_limit=1GiB")
    assert_one_line_error(
        proc, "needs about 194 GiB of memory, more than the 1 GiB of memory_limit"
    )
    assert not (tmp_path / "run").exists()


EVALUATE_CASES = {
    "no_trajectories": (no_trajectories("test"), ["split 'test' holds no trajectories"]),
    "complex": (replace("test/observed", lambda a: a + 1j), ["test' observed holds complex"]),
    "reversed_t": (replace("test/t", lambda a: a[::-1]), ["split 'test' t[1] = 0.19"]),
}


@pytest.mark.parametrize("case", list(EVALUATE_CASES))
def test_evaluate_refuses_a_broken_file_in_one_line(trained, tmp_path, case):
    change, fragments = EVALUATE_CASES[case]
    path = broken(trained, tmp_path, change)
    before, run = tree_hashes(path), tree_hashes(trained / "run")
    out = tmp_path / "eval"
    proc = run_stage("evaluate", *SYSTEM, f"data_dir={trained / 'data'}",
                     f"run_dir={trained / 'run'}", f"hydra.run.dir={tmp_path / 'h'}",
                     f"data_file={path}", f"eval.out_dir={out}", "device=cpu")  # fmt: skip
    assert_one_line_error(proc, str(path), *fragments)
    assert tree_hashes(path) == before and tree_hashes(trained / "run") == run
    assert not out.exists()


INGEST = ["ingest.time=t", "ingest.positions=[x]", "ingest.velocities=[v]"]
TEXT_CASES = {
    "header_only": ("t,x,v\n", [], ["holds no data rows, only a header line"]),
    "repeated_name": ("t,x,x\n0,1,2\n", ["ingest.velocities=null"], ["two columns are named 'x'"]),
    "long_header": ("t x v w\n0 1 2\n", [], ["the header names 4 columns (t, x, v, w), the rows have 3"]),
    "short_header": ("t,x\n0,1,2\n", [], ["the header names 2 columns (t, x), the rows have 3"]),
    "memory": ("t,x,v\n" + "0.1,0.2,0.3\n" * 100, ["memory_limit=1KiB"],
               ["needs about", "more than the 1 KiB of memory_limit"]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_ingest_refuses_a_broken_text_file_in_one_line(tmp_path, case):
    text, overrides, fragments = TEXT_CASES[case]
    source = tmp_path / "in" / "m.csv"
    source.parent.mkdir()
    source.write_text(text)
    before = tree_hashes(source.parent)
    out = tmp_path / "out" / "m.h5"
    proc = run_stage("ingest", f"ingest.source={source}", *INGEST, *overrides,
                     f"data_file={out}", f"hydra.run.dir={tmp_path / 'h'}")  # fmt: skip
    assert_one_line_error(proc, str(source), *fragments)
    assert tree_hashes(source.parent) == before
    assert not out.parent.exists()


def test_ingest_refuses_an_option_it_does_not_have_in_one_line(tmp_path):
    """``+ingest.gap_tolerence=1`` (misspelt; Hydra's own error suggests the +) is refused before
    the file is read, not composed and ignored."""
    source = tmp_path / "m.csv"
    source.write_text("t,x,v\n" + "".join(f"{k * 0.1},{k},1\n" for k in range(40)))
    out = tmp_path / "out" / "m.h5"
    proc = run_stage("ingest", f"ingest.source={source}", *INGEST, "+ingest.gap_tolerence=1",
                     f"data_file={out}", f"hydra.run.dir={tmp_path / 'h'}")  # fmt: skip
    assert_one_line_error(proc, "ingest.gap_tolerence: Key 'gap_tolerence' not in 'IngestSchema'")
    assert not out.parent.exists()
