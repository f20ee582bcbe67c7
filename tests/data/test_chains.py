"""Tracked points of a filmed double pendulum read as a chain: links and the fixed point
detected, the origin and lengths estimated through the tracking jitter, joint angles, velocities
by a smoothing difference, and one-line refusals for a chain that does not fit the data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from filmed_pendulum import DT, LENGTHS, ORIGIN, POINTS, rods, tracked

from hnnsym.data.chains import (
    build_chain,
    chain_mapping,
    chain_system_params,
    detect_chain,
    fit_circle,
    points_from_config,
)
from hnnsym.data.hdf5 import read_dataset
from hnnsym.data.ingest import ingest
from hnnsym.data.segments import estimated_velocities
from hnnsym.data.settings import Mapping, Options
from hnnsym.data.units import Units
from hnnsym.errors import DataError, UserError
from hnnsym.physics.systems import MEASURED


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert text and "\n" not in text
    return text


def test_detected_chain_origin_lengths_and_angles_through_jitter() -> None:
    _, theta, _ = rods()
    table = tracked(theta, jitter=2.0)
    points = points_from_config({k: POINTS[k] for k in ("bob2", "pivot", "bob1")})  # any order
    assert detect_chain(table, points) == ["pivot", "bob1", "bob2"]
    chain = build_chain(table, points, "detect")
    assert np.abs(np.asarray(chain.origin) - ORIGIN).max() < 0.5
    assert abs(chain.lengths[0] - LENGTHS[0]) < 0.5 and abs(chain.lengths[1] - LENGTHS[1]) < 0.5
    error = np.angle(np.exp(1j * (chain.angles(table) - theta)))
    assert np.sqrt((error**2).mean()) < 2.0 * 2.0 / LENGTHS[1]  # about jitter / length


def test_circle_fit_is_exact_on_an_arc() -> None:
    a = np.linspace(0.2, 1.4, 50)
    centre, radius = fit_circle(np.stack([3 + 7 * np.cos(a), -2 + 7 * np.sin(a)], 1))
    np.testing.assert_allclose(centre, [3, -2], atol=1e-9)
    assert abs(radius - 7) < 1e-9


def test_smoothing_velocities_beat_finite_differences_on_jittery_angles() -> None:
    _, theta, rates = rods()
    table = tracked(theta, jitter=2.0)
    chain = build_chain(table, points_from_config(POINTS), ["pivot", "bob1", "bob2"])
    q = np.unwrap(chain.angles(table), axis=0)
    o = Options(every=4, smoothing_window=7, smoothing_order=3)
    smooth = estimated_velocities(q, DT, "smoothing", o)
    fd = estimated_velocities(q, DT, "finite_difference", o)
    inner = slice(50, -50)

    def rms(v: np.ndarray) -> float:
        return float(np.sqrt(((v - rates)[inner] ** 2).mean()))

    assert rms(smooth) < 0.05 * float(np.sqrt((rates**2).mean()))
    assert rms(smooth) < 0.2 * rms(fd)
    # exact for a polynomial of the fitted degree, ends included
    t = DT * np.arange(40)[:, None]
    cubic = 1 + 2 * t - 3 * t**2 + 0.5 * t**3
    exact = 2 - 6 * t + 1.5 * t**2
    o1 = Options(every=1, smoothing_window=7, smoothing_order=3)
    np.testing.assert_allclose(estimated_velocities(cubic, DT, "smoothing", o1), exact, atol=1e-8)
    assert estimated_velocities(cubic[:6], DT, "smoothing", o1) is None  # shorter than a window


def test_chains_that_do_not_fit_the_data_are_refused_in_one_line() -> None:
    _, theta, _ = rods()
    table = tracked(theta, jitter=1.0)
    points = points_from_config(POINTS)
    with pytest.raises(DataError) as err:
        build_chain(table, points, ["pivot", "bob2", "bob1"])
    assert "pivot and bob2 are not rigidly linked" in one_line(err)
    with pytest.raises(DataError) as err:
        build_chain(table, points, ["bob2", "bob1", "pivot"])
    assert "the first point bob2 is not fixed" in one_line(err)
    with pytest.raises(UserError) as err:
        build_chain(table, points, ["pivot", "bob1", "elbow"])
    assert "elbow" in one_line(err)
    moving = table.assign(x3=600 + 400 * np.sin(np.arange(len(table)) * 0.01), y3=300.0)
    extra = points_from_config({**POINTS, "marker": ["x3", "y3"]})
    with pytest.raises(DataError) as err:
        build_chain(moving, extra, "detect")
    assert "['marker'] are not on the chain" in one_line(err)
    with pytest.raises(UserError) as err:
        chain_mapping(table, Mapping(time=None, trial=None, positions=["x1"]), POINTS,
                      "detect", "angles")  # fmt: skip
    assert "not both" in one_line(err)
    with pytest.raises(UserError) as err:
        points_from_config({"pivot": ["x0"], "bob": ["x1", "y1"]})
    assert "two columns" in one_line(err)


def test_a_tracked_chain_ingests_as_joint_angles_with_its_geometry(
    tmp_path: Path, compose_config
) -> None:
    _, theta, _ = rods()
    path = tmp_path / "pendulum.csv"
    tracked(theta, jitter=1.0).round().astype(int).to_csv(path, index=False, header=False)
    out = ingest(compose_config("ingest", [
        f"ingest.source={path}", "ingest.names=[x0,y0,x1,y1,x2,y2]", "ingest.time=null",
        f"ingest.dt={DT}", "ingest.every=4",
        "ingest.points={pivot: [x0,y0], bob1: [x1,y1], bob2: [x2,y2]}", "ingest.chain=detect",
        "ingest.coordinates=angles", "ingest.velocities=smoothing", "ingest.max_segment=100",
        "ingest.units={time: s, x0: px, y0: px, x1: px, y1: px, x2: px, y2: px}",
        f"data_file={tmp_path / 'pendulum.h5'}",
    ]))  # fmt: skip
    data = read_dataset(out, system=MEASURED, dim=2)
    units = Units.from_attrs(data.attrs, 2)
    assert data.attrs["observe"] == "qp" and units.periodic == (0, 1)
    assert list(units.names) == ["theta_bob1", "theta_bob2"]
    chain = json.loads(data.attrs["chain"])
    assert chain["points"] == ["pivot", "bob1", "bob2"] and chain["units"] == "px"
    assert chain["coordinates"] == "angles"
    assert np.abs(np.asarray(chain["origin"]) - ORIGIN).max() < 0.5
    np.testing.assert_allclose(chain["lengths"], LENGTHS, atol=0.5)
    # the stored rates are the angles' derivative: over 10 frames (0.1 s) the trapezoidal
    # integral of the rates is the change of the stored angles, up to the tracking jitter
    states = units.to_recording(data.splits["train"].observed)
    dt = float(data.attrs["obs_dt"]) * units.time
    assert abs(dt - 4 * DT) < 1e-12
    change = states[:, 10:, :2] - states[:, :-10, :2]
    rates = states[..., 2:]
    csum = np.concatenate([np.zeros_like(rates[:, :1]),
                           np.cumsum(dt * (rates[:, 1:] + rates[:, :-1]) / 2, 1)], 1)  # fmt: skip
    integral = csum[:, 10:] - csum[:, :-10]
    assert np.sqrt(((integral - change) ** 2).mean()) < 0.03 * np.sqrt((change**2).mean())


def test_points_coordinates_keep_the_moving_points_and_record_the_chain(
    tmp_path, compose_config
) -> None:
    _, theta, _ = rods(4.0)
    path = tmp_path / "pendulum.csv"
    tracked(theta, jitter=1.0).to_csv(path, index=False)
    out = ingest(compose_config("ingest", [
        f"ingest.source={path}", "ingest.time=null", f"ingest.dt={DT}", "ingest.every=4",
        "ingest.points={pivot: [x0,y0], bob1: [x1,y1], bob2: [x2,y2]}",
        "ingest.chain=[pivot,bob1,bob2]", "ingest.max_segment=50", f"data_file={tmp_path / 'p.h5'}",
    ]))  # fmt: skip
    data = read_dataset(out, system=MEASURED, dim=4)
    assert data.attrs["observe"] == "q"
    units = Units.from_attrs(data.attrs, 4)
    assert list(units.names) == ["x1", "y1", "x2", "y2"]
    assert len(set(units.q)) == 1  # one scale for the plane: distances keep their ratios
    chain = json.loads(data.attrs["chain"])
    assert chain["coordinates"] == "points" and chain["relative_to_origin"]
    # stored relative to the origin: the chain's constraints hold in the stored units
    x = data.splits["train"].observed.reshape(-1, 4)
    params = chain_system_params(data.attrs, units.q)
    assert params["links"] == 2
    r1 = np.linalg.norm(x[:, :2], axis=1)
    r2 = np.linalg.norm(x[:, 2:] - x[:, :2], axis=1)
    np.testing.assert_allclose([r1.mean(), r2.mean()], params["lengths"], rtol=2e-3)
    assert r1.std() < 0.02 * r1.mean() and r2.std() < 0.02 * r2.mean()
