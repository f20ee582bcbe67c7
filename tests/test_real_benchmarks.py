"""benchmarks/real_physical_fit.py and benchmarks/real_table.py on a synthetic recording: an exact
damped oscillator written as a lab file (pixels, a trial column), ingested as a user would."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from hnnsym.data.ingest import ingest

pytest.importorskip("scipy")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def oscillator_file(path: Path, k=6.0, c=0.05, x0=3.0, dt=1 / 30, n=600) -> Path:
    """x(t) of ẍ = −k (x − x0) − c ẋ, exact, with its velocity: rows trial, t, x, v."""
    w = math.sqrt(k - c * c / 4)
    t = np.arange(n) * dt
    env = np.exp(-c * t / 2)
    x = x0 + 100 * env * np.cos(w * t)
    v = 100 * env * (-c / 2 * np.cos(w * t) - w * np.sin(w * t))
    rows = np.column_stack([np.zeros(n), t, x, v])
    path.write_text("% x v\n" + "\n".join(" ".join(f"{a:.12g}" for a in r) for r in rows) + "\n")
    return path


def test_the_physical_fit_recovers_a_damped_oscillator(tmp_path, compose_config) -> None:
    src = oscillator_file(tmp_path / "osc.txt")
    out = ingest(compose_config("ingest", [
        f"ingest.source={src}", "ingest.names=[trial,t,x,v]", "ingest.trial=trial",
        "ingest.positions=[x]", "ingest.velocities=[v]", "ingest.max_segment=64",
        f"data_file={tmp_path / 'osc.h5'}",
    ]))  # fmt: skip
    fit = load("real_physical_fit").fit_file(out, None)
    assert fit["horizons"] == [1, 4, 12] and fit["windows"] >= 5
    assert fit["fit"]["K"][0][0] == pytest.approx(6.0, rel=1e-4)
    assert fit["fit"]["C"][0][0] == pytest.approx(0.05, abs=1e-4)
    assert fit["fit"]["x0"][0] == pytest.approx(3.0, abs=1e-3)
    scale = fit["mse_h12_no_motion"]
    assert fit["mse_h12"] < 1e-8 * scale  # exact data: the right model rolls out exactly
    assert fit["mse_h12_linear"] < 1e-6 * scale  # an exact linear ODE is a linear map too

    # the table: a fake evaluated run beside the fit, its ratio to the fit and the linear one
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "physical_fit.json").write_text(json.dumps({"results": [fit]}))
    run = tmp_path / "runs" / "osc" / "dissipative_hnn" / "seed0" / "eval"
    run.mkdir(parents=True)
    metrics = {
        "system": {"name": "measured"}, "data": {"file": str(out)},
        "model_config": {"name": "dissipative_hnn"}, "config": {"seed": 0},
        "horizons": fit["horizons"], "main_horizon": 12, "windows": fit["windows"],
        **{f"mse_h{h}": 2 * fit[f"mse_h{h}"] for h in fit["horizons"]},
        **{f"mse_h{h}_{b}": fit[f"mse_h{h}_{b}"] for h in fit["horizons"]
           for b in ("no_motion", "constant_velocity", "linear")},
    }  # fmt: skip
    (run / "metrics.json").write_text(json.dumps(metrics))
    table = load("real_table")
    rows = table.rows(
        table.load_runs(tmp_path / "runs"), table.load_physical(bench / "physical_fit.json")
    )
    model = next(r for r in rows if r["predictor"] == "dissipative_hnn")
    assert model["ratio_physical"] == pytest.approx(2.0)
    assert model["per_seed"] == [2 * fit["mse_h12"]]
    assert [r["predictor"] for r in rows] == ["dissipative_hnn", "physical fit", "no_motion",
                                              "constant_velocity", "linear"]  # fmt: skip
    assert "| dissipative_hnn | 0 |" in table.markdown(rows, tmp_path / "runs", None)
