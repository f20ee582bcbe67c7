"""The generate stage: config, validation, the CLI end to end, physics of the data, determinism."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO

from hnnsym.config import CONF_DIR
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.simulate import check_config, generate, make_split
from hnnsym.errors import UserError
from hnnsym.physics.systems import get_system

# A tiny run (about a second of CPU): every split present, a test horizon of 20 observations.
TINY = [
    "generate.n_train=24", "generate.n_val=8", "generate.n_test=4", "generate.train_steps=6",
    "generate.test_steps=20", "device=cpu",
]  # fmt: skip


def exact_coupled_oscillator(y0: np.ndarray, t: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """y' = A y with A = [[alpha, 1], [-1, -alpha]] (H = p²/2 + q²/2 + alpha q p): (N, T+1, 2)."""
    A = torch.tensor([[alpha, 1.0], [-1.0, -alpha]], dtype=torch.float64)
    flows = torch.linalg.matrix_exp(A * torch.from_numpy(t)[:, None, None])  # (T+1, 2, 2)
    return torch.einsum("tij,nj->nti", flows, torch.from_numpy(y0)).numpy()


# ---- config ---------------------------------------------------------------------------------


def test_default_config_writes_where_train_looks(compose_config, tmp_path):
    cfg = compose_config("generate", ["system=henon_heiles"])
    assert cfg.data_file == "data/henon_heiles/low/seed0.h5"
    g = cfg.generate
    assert (g.n_train, g.n_val, g.n_test) == (16384, 8192, 256)
    assert (g.obs_dt, g.fine_dt, g.integrator, g.overwrite) == (
        0.01,
        0.001,
        "gauss_legendre6",
        False,
    )
    assert cfg.noise.std == 0.01
    check_config(compose_config("generate", [f"data_dir={tmp_path}"]))  # the defaults are valid


def test_experiment_overrides_the_stage_defaults(compose_config):
    """experiment=demo (# @package _global_, after _self_) wins over generate.yaml's values."""
    demo = yaml.safe_load((CONF_DIR / "experiment" / "demo.yaml").read_text())
    base = compose_config("generate", ["noise=high", "seed=4"])
    cfg = compose_config("generate", ["experiment=demo", "noise=high", "seed=4"])
    assert demo["generate"]
    for key, value in demo["generate"].items():
        assert cfg.generate[key] == value
    assert any(base.generate[key] != value for key, value in demo["generate"].items())
    data_dir = demo.get("data_dir", "data")
    assert cfg.data_file == f"{data_dir}/henon_heiles/high/seed4.h5"


@pytest.mark.parametrize(
    "override, message",
    [
        ("generate.fine_dt=0", "obs_dt and fine_dt must be finite and > 0"),
        ("generate.obs_dt=-0.01", "obs_dt and fine_dt must be finite and > 0"),
        ("generate.fine_dt=0.003", "obs_dt=0.01 must be a whole multiple of fine_dt=0.003"),
        ("noise.std=-0.1", "noise.std must be a finite number >= 0, got -0.1"),
        ("noise.std=abc", "noise.std: Value 'abc' of type 'str' could not be converted to Float"),
        ("generate.n_train=0", "generate.n_train must be >= 1, got 0"),
        (
            "generate.n_test=2.5",
            "generate.n_test: Value '2.5' of type 'float' could not be converted to Integer",
        ),
        ("generate.test_steps=0", "generate.test_steps must be >= 1"),
        ("generate.tol=0", "generate.tol must be a finite number > 0"),
        ("threads=0", "threads must be >= 1 or null"),
        ("seed=-1", "seed must be >= 0"),
        ("seed=one", "seed: Value 'one' of type 'str' could not be converted to Integer"),
        ("+generate.n_trian=5", "generate.n_trian: Key 'n_trian' not in 'GenerateSchema'"),
        ("generate.overwrite=maybe", "generate.overwrite: Value 'maybe' is not a valid bool"),
        ("generate.integrator=rk45", "unknown integrator 'rk45'"),
        ("system.name=lorenz", "unknown system 'lorenz'"),
        ("+system.params.beta=1", "unexpected keyword argument 'beta'"),
    ],
)
def test_bad_config_is_refused_up_front(compose_config, tmp_path, override, message):
    cfg = compose_config("generate", [f"data_dir={tmp_path}", override])
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("(", r"\(")):
        check_config(cfg)


def test_existing_file_is_refused_before_any_work(compose_config, tmp_path):
    cfg = compose_config("generate", [f"data_dir={tmp_path}"])
    path = tmp_path / "henon_heiles" / "low" / "seed0.h5"
    path.parent.mkdir(parents=True)
    path.write_text("old")
    with pytest.raises(UserError, match=r"seed0\.h5 already exists.*generate\.overwrite=true"):
        check_config(cfg)
    check_config(compose_config("generate", [f"data_dir={tmp_path}", "generate.overwrite=true"]))


# ---- the CLI --------------------------------------------------------------------------------


def cli(*overrides: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("HNNSYM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "hnnsym.generate", *overrides, f"hydra.run.dir={cwd}/hydra"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One real `python -m hnnsym.generate` run: coupled oscillator, noise=medium (std 0.05)."""
    tmp = tmp_path_factory.mktemp("gen")
    overrides = ["system=coupled_oscillator", "noise=medium", "seed=5", f"data_dir={tmp}", *TINY]
    proc = cli(*overrides, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return tmp, overrides, proc


@pytest.mark.slow
def test_cli_writes_the_file_and_says_where(cli_run):
    tmp, _, proc = cli_run
    path = tmp / "coupled_oscillator" / "medium" / "seed5.h5"
    assert f"wrote {path}" in proc.stdout
    assert (tmp / "hydra" / "generate.log").exists()  # Hydra's run dir: only its log
    assert not (REPO / "outputs" / "generate" / "coupled_oscillator" / "medium" / "seed5").exists()
    data = read_dataset(path, system="coupled_oscillator", dim=1)
    a = data.attrs
    assert (a["noise"], a["noise_std"], a["seed"], a["integrator"]) == (
        "medium",
        0.05,
        5,
        "gauss_legendre6",
    )
    assert (a["n_train"], a["n_val"], a["n_test"], a["obs_dt"], a["fine_dt"]) == (
        24,
        8,
        4,
        0.01,
        0.001,
    )
    assert a["system_params"] == {"alpha": 0.5}
    config = yaml.safe_load(a["config"])  # the resolved config
    assert config["data_file"] == str(path) and config["generate"]["n_train"] == 24
    for name, steps in (("train", 6), ("val", 6), ("test", 20)):
        split = data.splits[name]
        assert split.clean.shape == (a[f"n_{name}"], steps + 1, 2)
        np.testing.assert_allclose(split.t, 0.01 * np.arange(steps + 1), rtol=0, atol=1e-15)


@pytest.mark.slow
def test_cli_clean_data_is_the_exact_flow_and_noise_has_the_configured_std(cli_run):
    tmp, _, _ = cli_run
    data = read_dataset(tmp / "coupled_oscillator" / "medium" / "seed5.h5")
    residuals = []
    for split in data.splits.values():
        exact = exact_coupled_oscillator(split.clean[:, 0], split.t)
        np.testing.assert_allclose(split.clean, exact, rtol=0, atol=1e-12)
        residuals.append((split.observed - split.clean).ravel())
        assert (split.observed[:, 0] != split.clean[:, 0]).all()  # noise at t = 0 too
    r = np.concatenate(residuals)  # 616 values: std within 5 sigma of 0.05
    assert abs(r.std() / 0.05 - 1) < 5 / np.sqrt(2 * r.size)
    assert abs(r.mean()) < 5 * 0.05 / np.sqrt(r.size)
    # initial conditions from the system's domain, different across splits
    y0 = np.concatenate([s.clean[:, 0] for s in data.splits.values()])
    assert (np.abs(y0) <= 2).all() and len(np.unique(y0[:, 0])) == len(y0)


@pytest.mark.slow
def test_cli_refuses_to_overwrite_with_one_line(cli_run):
    tmp, overrides, _ = cli_run
    path = tmp / "coupled_oscillator" / "medium" / "seed5.h5"
    before = path.read_bytes()
    proc = cli(*overrides, cwd=tmp)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {path} already exists; pass generate.overwrite=true to replace it "
        "(or choose another seed or data_dir)"
    ]
    assert path.read_bytes() == before


# ---- determinism and physics, in process ----------------------------------------------------


@pytest.mark.slow
def test_same_config_and_seed_give_bitwise_identical_data(compose_config, tmp_path, cli_run):
    """A second run (in process, overwrite=true) reproduces the CLI's arrays bit for bit; only the
    `created` attribute differs."""
    tmp, overrides, _ = cli_run
    first = read_dataset(tmp / "coupled_oscillator" / "medium" / "seed5.h5")
    cfg = compose_config("generate", [*overrides, f"data_dir={tmp_path}"])
    second = read_dataset(generate(cfg))
    for name, split in first.splits.items():
        for key in ("observed", "clean", "t"):
            assert np.array_equal(getattr(split, key), getattr(second.splits[name], key))
    differing = {k for k in first.attrs if first.attrs[k] != second.attrs[k]}
    assert differing <= {"created", "config"}  # config differs only in data_dir here


@pytest.mark.slow
def test_noise_level_and_split_sizes_leave_the_clean_data_alone(compose_config, tmp_path, cli_run):
    """Streams are per (split, initial | noise): noise=none has the same clean trajectories, and
    changing n_train does not change val/test."""
    tmp, overrides, _ = cli_run
    first = read_dataset(tmp / "coupled_oscillator" / "medium" / "seed5.h5")
    cfg = compose_config(
        "generate", [*overrides, f"data_dir={tmp_path}", "noise=none", "generate.n_train=7"]
    )
    quiet = read_dataset(generate(cfg))
    assert quiet.attrs["noise_std"] == 0.0
    for name in ("val", "test"):
        assert np.array_equal(quiet.splits[name].clean, first.splits[name].clean)
    assert np.array_equal(quiet.splits["train"].clean, first.splits["train"].clean[:7])
    for split in quiet.splits.values():
        assert np.array_equal(split.observed, split.clean)


def test_henon_heiles_ground_truth_conserves_energy(compose_config, tmp_path):
    """Gauss–Legendre 6 at 0.001 conserves H to rounding (implicit midpoint at the same step is
    off by 7e-10 here), starting below the escape energy 1/6."""
    cfg = compose_config(
        "generate", [f"data_dir={tmp_path}", "generate.n_test=6", "generate.test_steps=30"]
    )
    system, every, _ = check_config(cfg)
    split, stats = make_split(cfg, system, "test", every, torch.device("cpu"))
    clean = torch.from_numpy(split.clean)
    H = get_system("henon_heiles")(clean.reshape(-1, 4)).reshape(clean.shape[:2])
    assert (H[:, 0] < 1 / 6).all() and (clean[:, 0].abs() <= 0.5).all()
    assert (H - H[:, :1]).abs().max() < 1e-14
    assert stats.unconverged == 0 and stats.steps == 30 * every
    assert not np.array_equal(split.observed, split.clean)


@pytest.mark.slow
def test_ctrl_c_while_generating_leaves_nothing_behind(tmp_path):
    """SIGINT in the middle of a generation (not in training, which has its own test): one line,
    exit 130, no data file and no temporary file."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    overrides = ["system=henon_heiles", f"data_dir={tmp_path}", "generate.n_train=256",
                 "generate.n_val=400000", "generate.chunk=1024"]  # fmt: skip
    # Ctrl-C's SIGINT as a terminal delivers it: a suite started in the background (nohup, `&`
    # without job control) ignores SIGINT, and Python keeps an inherited SIG_IGN
    proc = subprocess.Popen(
        [sys.executable, "-m", "hnnsym.generate", *overrides, f"hydra.run.dir={tmp_path}/hydra"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    log = tmp_path / "hydra" / "generate.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "train:" in log.read_text()):  # in the middle of the val split
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr.decode()
    assert "interrupted" in stderr.decode() and "Traceback" not in stderr.decode()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["generate.log"]
