"""The data layer: HDF5 schema and round trip, its errors, training windows, ground-truth helpers."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from conftest import random_splits, tiny_attrs

import hnnsym
from hnnsym.data.hdf5 import (
    CHUNK_BYTES,
    SCHEMA_VERSION,
    Split,
    chunk_shape,
    generate_command,
    made_by_generate,
    read_dataset,
    write_dataset,
)
from hnnsym.data.simulate import add_noise, observation_ratio, simulate, split_generator
from hnnsym.data.windows import random_windows, strided_windows
from hnnsym.errors import DataError, UserError
from hnnsym.ode.integrators import get_integrator
from hnnsym.physics.systems import get_system

ROOT_ATTRS = {
    "schema_version", "system", "system_params", "dim", "obs_dt", "fine_dt", "integrator", "noise",
    "noise_std", "seed", "n_train", "n_val", "n_test", "hnnsym_version", "versions", "config",
    "created", "observe", "units",
}  # fmt: skip


# ---- schema and round trip ------------------------------------------------------------------


def test_round_trip_keeps_arrays_and_attrs(tmp_path):
    splits = random_splits(dim=2)
    path = tmp_path / "d.h5"
    write_dataset(path, splits, tiny_attrs("henon_heiles", 2, system_params={"energy_max": 1 / 6}))
    data = read_dataset(path, system="henon_heiles", dim=2)
    assert data.path == path
    for name, split in splits.items():
        got = data.splits[name]
        for key in ("observed", "clean", "t"):
            np.testing.assert_array_equal(getattr(got, key), getattr(split, key))
            assert getattr(got, key).dtype == np.float64
    a = data.attrs
    assert set(a) == ROOT_ATTRS
    assert a["schema_version"] == SCHEMA_VERSION
    assert a["system_params"] == {"energy_max": 1 / 6}
    assert a["versions"]["hnnsym"] == hnnsym.__version__ == a["hnnsym_version"]
    assert (a["n_train"], a["n_val"], a["n_test"]) == (6, 3, 2)
    assert (a["dim"], a["seed"], a["obs_dt"], a["noise"]) == (2, 0, 0.1, "low")
    assert datetime.fromisoformat(a["created"]).utcoffset().total_seconds() == 0


def test_file_is_plain_hdf5_chunked_by_whole_trajectories_and_compressed(tmp_path):
    path = tmp_path / "d.h5"
    write_dataset(path, random_splits(dim=1), tiny_attrs())
    with h5py.File(path, "r") as f:
        assert set(f) == {"train", "val", "test"}
        assert json.loads(f.attrs["system_params"]) == {}
        assert isinstance(f.attrs["config"], str)
        for name, (n, steps) in {"train": (6, 5), "val": (3, 5), "test": (2, 9)}.items():
            for key in ("observed", "clean"):
                ds = f[name][key]
                assert ds.shape == (n, steps + 1, 2) and ds.dtype == np.float64
                assert ds.chunks == (n, steps + 1, 2)  # a few short trajectories: one chunk
                assert ds.compression == "gzip" and ds.shuffle and ds.fletcher32
            assert f[name]["t"].shape == (steps + 1,)


@pytest.mark.parametrize(
    ("shape", "rows"),
    [((16384, 33, 2), CHUNK_BYTES // (33 * 2 * 8)), ((3, 100_000, 4), 1), ((5, 3, 2), 5)],
)
def test_a_chunk_holds_whole_trajectories_up_to_its_size(shape, rows):
    chunk = chunk_shape(shape)
    assert chunk == (rows, *shape[1:])
    assert rows == 1 or 8 * np.prod(chunk) <= CHUNK_BYTES


def test_trajectories_over_several_chunks_and_a_partial_last_one_read_back(tmp_path):
    per_chunk = CHUNK_BYTES // (6 * 2 * 8)
    splits = random_splits(dim=1, sizes={"train": (2 * per_chunk + 7, 5), "val": (3, 5)})
    path = tmp_path / "d.h5"
    write_dataset(path, splits, tiny_attrs())
    with h5py.File(path, "r") as f:
        assert f["train"]["observed"].id.get_num_chunks() == 3
    data = read_dataset(path, splits=("train", "val"))
    for key in ("observed", "clean"):
        np.testing.assert_array_equal(
            getattr(data.splits["train"], key), getattr(splits["train"], key)
        )


def test_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "d.h5"
    write_dataset(path, random_splits(seed=1), tiny_attrs())
    with pytest.raises(DataError, match=r"d\.h5 already exists.*generate\.overwrite=true"):
        write_dataset(path, random_splits(seed=2), tiny_attrs())
    first = read_dataset(path).splits["train"].clean
    np.testing.assert_array_equal(first, random_splits(seed=1)["train"].clean)
    write_dataset(path, random_splits(seed=2), tiny_attrs(), overwrite=True)
    np.testing.assert_array_equal(
        read_dataset(path).splits["train"].clean, random_splits(seed=2)["train"].clean
    )


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    path = tmp_path / "d.h5"
    write_dataset(path, random_splits(seed=1), tiny_attrs())
    before = path.read_bytes()
    with pytest.raises(TypeError, match="bogus"):  # raised inside the atomic block, mid-write
        write_dataset(path, random_splits(seed=2), tiny_attrs(bogus={"a": 1}), overwrite=True)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["d.h5"]


# ---- every DataError ------------------------------------------------------------------------


def test_missing_file_says_which_generate_command_to_run(tmp_path):
    path = tmp_path / "d" / "pendulum" / "medium" / "seed3.h5"
    with pytest.raises(DataError) as err:
        read_dataset(path, system="pendulum")
    msg = str(err.value)
    assert f"no data file at {path}" in msg
    assert (
        f"`python -m hnnsym.generate system=pendulum noise=medium seed=3 data_dir={tmp_path / 'd'}`"
        in msg
    )
    assert "\n" not in msg
    default = generate_command(Path("data/henon_heiles/low/seed0.h5"))
    assert default == "python -m hnnsym.generate system=henon_heiles noise=low seed=0"


def test_not_hdf5(tmp_path):
    path = tmp_path / "seed0.h5"
    path.write_text("not an HDF5 file\n")
    with pytest.raises(DataError, match="not a readable HDF5 file, or is truncated or corrupt"):
        read_dataset(path)


def test_truncated(tiny_dataset):
    path = tiny_dataset()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="truncated or corrupt.*generate.overwrite=true"):
        read_dataset(path)


def test_corrupt_chunk_is_caught_by_checksum(tiny_dataset):
    path = tiny_dataset()
    with h5py.File(path, "r") as f:
        info = f["val"]["clean"].id.get_chunk_info(0)
    with open(path, "r+b") as fh:  # flip one byte inside the compressed chunk
        fh.seek(info.byte_offset + info.size // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    read_dataset(path, splits=("train",))  # other splits still read
    with pytest.raises(DataError, match="truncated or corrupt"):
        read_dataset(path)


@pytest.mark.parametrize("version", [None, SCHEMA_VERSION + 1])
def test_schema_version_missing_or_different(tiny_dataset, version):
    path = tiny_dataset()
    with h5py.File(path, "r+") as f:
        if version is None:
            del f.attrs["schema_version"]
        else:
            f.attrs["schema_version"] = version
    expected = "no schema_version" if version is None else f"schema_version {version}, this"
    with pytest.raises(DataError, match=expected):
        read_dataset(path)


def test_system_or_dim_mismatch(tiny_dataset):
    path = tiny_dataset("double_well", 1)
    with pytest.raises(DataError, match="holds system 'double_well', not 'pendulum'"):
        read_dataset(path, system="pendulum")
    with pytest.raises(DataError, match="holds dim=1 states, not dim=2"):
        read_dataset(path, dim=2)
    read_dataset(path, system="double_well", dim=1)


def test_missing_split(tiny_dataset):
    path = tiny_dataset(sizes={"train": (4, 3), "val": (2, 3)})
    read_dataset(path, splits=("train", "val"))
    with pytest.raises(DataError, match=r"no split 'test' \(it has \['train', 'val'\]\)"):
        read_dataset(path)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_data(tmp_path, bad):
    splits = random_splits()
    splits["val"].observed[1, 2, 0] = bad
    path = tmp_path / "d.h5"
    write_dataset(path, splits, tiny_attrs())
    with pytest.raises(DataError, match="split 'val' observed contains NaN or Inf"):
        read_dataset(path)


def test_data_error_is_a_user_error():
    assert issubclass(DataError, UserError)


# ---- files written by hand (not by generate) -------------------------------------------------
SCHEMA_DOC = "docs/guide/recordings.md, section 'File format'"


def write_by_hand(path: Path, drop: tuple[str, ...] = (), **attrs) -> Path:
    """What the schema table (docs/guide/recordings.md) marks required, written with plain h5py: root attributes
    schema_version, system, dim, obs_dt; observed and t per split (no clean)."""
    splits = random_splits()
    with h5py.File(path, "w") as f:
        for name, split in splits.items():
            f[f"{name}/observed"] = split.observed
            f[f"{name}/t"] = split.t
        root = {"schema_version": 1, "system": "double_well", "dim": 1, "obs_dt": 0.1, **attrs}
        for key, value in root.items():
            if key not in drop:
                f.attrs[key] = value
    return path


def test_a_file_with_only_the_required_contents_reads(tmp_path):
    data = read_dataset(write_by_hand(tmp_path / "m.h5"), system="double_well", dim=1)
    assert data.splits["test"].clean is None
    np.testing.assert_array_equal(data.splits["train"].observed, random_splits()["train"].observed)
    a = data.attrs
    assert set(a) == ROOT_ATTRS  # every schema attribute, the optional ones as their default
    assert (a["obs_dt"], a["dim"], a["system_params"]) == (0.1, 1, {})
    assert a["noise_std"] is a["fine_dt"] is a["integrator"] is a["config"] is None
    assert not made_by_generate(a)
    assert made_by_generate(read_dataset(write_tiny(tmp_path / "g.h5")).attrs)


def write_tiny(path: Path) -> Path:
    write_dataset(path, random_splits(), tiny_attrs())
    return path


@pytest.mark.parametrize("missing", ["system", "dim", "obs_dt"])
def test_a_missing_required_attribute_is_named_with_what_to_do(tmp_path, missing):
    path = write_by_hand(tmp_path / "m.h5", drop=(missing,))
    with pytest.raises(DataError) as err:
        read_dataset(path, system="double_well", dim=1)
    msg = str(err.value)
    assert f"lacks the required root attribute {missing} (" in msg and SCHEMA_DOC in msg, msg
    assert "regenerate" not in msg and "\n" not in msg
    # the same file written by generate: regenerating it is the advice
    generated = write_tiny(tmp_path / "data" / "double_well" / "low" / "seed0.h5")
    with h5py.File(generated, "r+") as f:
        del f.attrs[missing]
    with pytest.raises(DataError, match=f"{missing} .*regenerate it: `python -m hnnsym.generate "
                       "system=double_well noise=low seed=0 .*generate.overwrite=true`"):  # fmt: skip
        read_dataset(generated)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"obs_dt": 0.0}, "obs_dt must be the time between observations, a number > 0, got 0.0"),
        ({"obs_dt": "0.01"}, "obs_dt must be .* got '0.01'"),
        ({"dim": 0}, "dim must be an integer d >= 1"),
        ({"system_params": "m=1"}, "system_params is not valid JSON"),
        (
            {"schema_version": 2},
            "schema_version 2, this hnnsym reads 1; write the file in schema 1",
        ),
        ({"system": "robot"}, "holds system 'robot', which is not a built-in system"),
    ],
)
def test_a_malformed_attribute_is_named(tmp_path, attrs, message):
    with pytest.raises(DataError, match=message):
        read_dataset(write_by_hand(tmp_path / "m.h5", **attrs), system="double_well")


def test_hand_written_file_without_schema_version_or_a_dataset(tmp_path):
    path = write_by_hand(tmp_path / "m.h5", drop=("schema_version",))
    with pytest.raises(DataError, match=f"no schema_version attribute; set schema_version=1 .*"
                       f"{SCHEMA_DOC}"):  # fmt: skip
        read_dataset(path)
    path = write_by_hand(tmp_path / "m.h5")
    with h5py.File(path, "r+") as f:
        del f["val/t"]
    with pytest.raises(DataError, match=f"split 'val' lacks the dataset t; every split needs "
                       f"observed and t \\({SCHEMA_DOC}\\)"):  # fmt: skip
        read_dataset(path)
    read_dataset(path, splits=("train", "test"))
    with h5py.File(path, "r+") as f:
        f["test/observed"][0, 1, 0] = np.nan
    with pytest.raises(DataError, match="test' observed contains NaN or Inf; drop or repair"):
        read_dataset(path, splits=("test",))


# ---- training windows -----------------------------------------------------------------------


def test_random_windows_are_slices_from_uniform_starts():
    N, T, window = 5, 7, 3
    observed = torch.randn(N, T + 1, 4, generator=torch.Generator().manual_seed(0))
    index = torch.tensor([4, 0, 4, 2] * 100)
    out = random_windows(observed, window, index, torch.Generator().manual_seed(1))
    assert out.shape == (window + 1, index.shape[0], 4) and out.is_contiguous()
    # each window's start is where its first state sits in its trajectory (values are distinct)
    hits = observed[index, :, 0] == out[0, :, 0, None]  # (B, T+1)
    assert (hits.sum(1) == 1).all()
    starts = hits.float().argmax(1)
    times = starts[:, None] + torch.arange(window + 1)
    assert torch.equal(out, observed[index[:, None], times].transpose(0, 1))
    counts = np.bincount(starts.numpy(), minlength=T - window + 1)
    assert len(counts) == T - window + 1  # never beyond T - window
    assert counts.min() > 50  # every start in [0, T - window] drawn (400 draws over 5 values)


def test_random_windows_deterministic_and_full_length_window():
    observed = torch.randn(3, 6, 2, generator=torch.Generator().manual_seed(0))
    index = torch.arange(3)
    a = random_windows(observed, 2, index, torch.Generator().manual_seed(7))
    b = random_windows(observed, 2, index, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    full = random_windows(observed, 5, index, torch.Generator().manual_seed(7))
    assert torch.equal(full, observed.transpose(0, 1))


@pytest.mark.parametrize("window", [0, 6])
def test_random_windows_rejects_bad_window(window):
    observed = torch.zeros(3, 6, 2)  # T = 5
    with pytest.raises(DataError, match="window"):
        random_windows(observed, window, torch.arange(3), torch.Generator())


def test_strided_windows_are_every_window_at_the_stride_trajectory_by_trajectory():
    N, T = 3, 11
    observed = torch.randn(N, T + 1, 2, generator=torch.Generator().manual_seed(0))
    out = strided_windows(observed, 4, 3)  # starts 0, 3, 6: the last ends at 10 <= T
    assert out.shape == (5, N * 3, 2)
    for k, (n, s) in enumerate((n, s) for n in range(N) for s in (0, 3, 6)):
        assert torch.equal(out[:, k], observed[n, s : s + 5])
    assert torch.equal(strided_windows(observed, T, 1), observed.transpose(0, 1))
    assert strided_windows(observed, 2, 1).shape[1] == N * (T - 1)  # every start


@pytest.mark.parametrize(("window", "stride", "message"), [(12, 1, "window"), (4, 0, "stride")])
def test_strided_windows_reject_a_bad_window_or_stride(window, stride, message):
    with pytest.raises(DataError, match=message):
        strided_windows(torch.zeros(2, 12, 2), window, stride)


# ---- making data ----------------------------------------------------------------------------


def test_split_generators_are_independent_and_reproducible():
    def draw(seed, split, stream):
        return torch.rand(4, generator=split_generator(seed, split, stream))

    assert torch.equal(draw(3, "val", "noise"), draw(3, "val", "noise"))
    draws = [draw(s, sp, st) for s in (0, 1) for sp in ("train", "val", "test") for st in ("initial", "noise")]  # fmt: skip
    assert len({tuple(d.tolist()) for d in draws}) == len(draws)
    with pytest.raises(UserError, match="seed must be >= 0"):
        split_generator(-1, "train", "noise")


def test_observation_ratio():
    assert observation_ratio(0.01, 0.001) == 10  # 0.01 / 0.001 = 9.999999999999998 in floats
    assert observation_ratio(0.05, 0.05) == 1
    with pytest.raises(UserError, match="whole multiple of fine_dt=0.003"):
        observation_ratio(0.01, 0.003)
    with pytest.raises(UserError, match="whole multiple"):
        observation_ratio(0.0005, 0.001)
    for obs_dt, fine_dt in ((0.0, 0.001), (0.01, -0.001), (float("nan"), 0.001)):
        with pytest.raises(UserError, match="finite and > 0"):
            observation_ratio(obs_dt, fine_dt)


def test_simulate_is_integrate_subsampled_bitwise():
    """Restarting integrate() every `every` steps changes nothing: each step depends on y only."""
    system = get_system("double_well")
    y0 = system.sample(5, torch.Generator().manual_seed(0))
    integ = get_integrator("gauss_legendre4", tol=1e-14)
    got = simulate(system, y0, 0.01, 4, 6, integ)
    with torch.no_grad():
        ref = hnnsym.integrate(system, y0, 0.01, 24, integ, "backprop")
    assert got.shape == (7, 5, 2) and not got.requires_grad
    assert torch.equal(got, ref[::4])


def test_simulate_matches_the_exact_linear_flow():
    """Coupled oscillator: y' = A y with A = [[a, 1], [-1, -a]], so y(t) = expm(A t) y0."""
    alpha = 0.5
    system = get_system("coupled_oscillator", alpha=alpha)
    y0 = system.sample(8, torch.Generator().manual_seed(0))
    every, steps, fine_dt = 5, 8, 0.002
    got = simulate(system, y0, fine_dt, every, steps, get_integrator("gauss_legendre6", tol=1e-14))
    A = torch.tensor([[alpha, 1.0], [-1.0, -alpha]], dtype=torch.float64)
    times = torch.arange(steps + 1, dtype=torch.float64) * every * fine_dt
    exact = torch.einsum("tij,bj->tbi", torch.linalg.matrix_exp(A * times[:, None, None]), y0)
    torch.testing.assert_close(got, exact, rtol=0, atol=1e-13)


def test_add_noise():
    clean = np.zeros((200, 11, 4))
    noisy = add_noise(clean, 0.05, torch.Generator().manual_seed(0))
    assert abs(noisy.std() / 0.05 - 1) < 5 / np.sqrt(2 * noisy.size)  # 5 sigma
    assert abs(noisy.mean()) < 5 * 0.05 / np.sqrt(noisy.size)
    assert np.array_equal(add_noise(clean, 0.0, torch.Generator()), clean)
    split = Split(noisy, clean, np.arange(11.0))
    assert split.observed is noisy
