"""One table of the models learned on real recordings against the baselines and the physical fit.

Reads every ``<runs>/**/eval/metrics.json`` (runs of ``python -m hnnsym.evaluate`` on files of
``python -m hnnsym.ingest``) and the physical fits of ``benchmarks/real_physical_fit.py``; groups
the runs by recording (the data file's stem) and model (its name, plus a label given by the run
dir's parent when runs of one model differ), and writes, per recording and horizon h of
``eval.horizons``, the rollout MSE (recording units, the test windows of ``evaluate``):

    model rows      the mean over seeds, and each seed's value
    baselines       no_motion, constant_velocity, linear (from the runs' metrics.json: the same
                    for every run of a recording, checked)
    physical        the fitted damped (coupled) oscillator, where one applies

and the ratios of the MSE to the physical fit at every horizon and, at the main horizon, to the
linear fit; the models' mean training wall time (their ``metrics.csv``). A chain recorded in
angles whose runs and physical fit report the tracked points' error (``mse_points_h<h>``) is
tabled in those points.

    PYTHONPATH=. .venv/bin/python benchmarks/real_table.py --runs outputs/real
    -> outputs/bench/real/real_table.{csv,md}
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf

from hnnsym.artifacts import now_utc, write_text

BASELINES = ("no_motion", "constant_velocity", "linear")


def load_runs(root: Path) -> dict[str, dict[str, list[dict]]]:
    """{recording: {model label: [metrics, …] sorted by seed}}."""
    out: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(root.glob("**/eval/metrics.json")):
        m = json.loads(path.read_text())
        if m.get("system", {}).get("name") != "measured" or "main_horizon" not in m:
            continue
        recording = Path(m["data"]["file"]).stem
        model = m["model_config"].get("name", "?")
        m["_seed"], m["_run"] = training_seed(path.parent.parent, m), str(path.parent.parent)
        m["_train_seconds"] = train_seconds(path.parent.parent / "metrics.csv")
        out[recording][model].append(m)
    for models in out.values():
        for runs in models.values():
            runs.sort(key=lambda m: (m["_seed"] is None, m["_seed"]))
    return out


def training_seed(run: Path, m: dict) -> int | None:
    """The seed the run was trained with (its ``config.yaml``), else the evaluation's."""
    config = run / "config.yaml"
    if config.exists():
        seed = OmegaConf.load(config).get("seed")
        if seed is not None:
            return int(seed)
    return m["config"].get("seed") if isinstance(m.get("config"), dict) else None


def train_seconds(path: Path) -> float | None:
    """The training wall time of a run: the last ``wall_time`` of its ``metrics.csv`` (summed
    over resumes by the trainer), or None without one."""
    if not path.exists():
        return None
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return float(rows[-1]["wall_time"]) if rows and rows[-1].get("wall_time") else None


def load_physical(path: Path | None) -> dict[str, dict]:
    if path is None or not path.exists():
        return {}
    results = json.loads(path.read_text())["results"]
    return {r["name"]: r for r in results if "skipped" not in r}


def fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.4g}"


def make_row(
    base: dict, ref: dict, phys: dict | None, predictor: str, seeds: str, by_h: dict, kind: str
) -> dict:
    """A table row: the MSE at each horizon and the ratios at the longest to the physical fit
    (``phys``, None where none applies) and to the linear baseline."""
    hs = base["horizons"]
    H = hs[-1]
    r = {**base, "predictor": predictor, "kind": kind, "seeds": seeds}
    r |= {f"mse_h{h}": by_h.get(h) for h in hs}
    key = "mse_points" if base["coordinates"] == "points" else "mse"
    for h in hs:
        r[f"ratio_physical_h{h}"] = by_h[h] / phys[f"{key}_h{h}"] if phys else None
    r["ratio_physical"] = r[f"ratio_physical_h{H}"]
    r["ratio_linear"] = by_h[H] / ref["linear"][H] if ref["linear"][H] else None
    return r


def rows(runs: dict, physical: dict) -> list[dict]:
    """One row per recording × predictor with its MSE at each horizon."""
    out = []
    for recording in sorted(set(runs) | set(physical)):
        models = runs.get(recording, {})
        first = next((ms[0] for ms in models.values()), None)
        phys = physical.get(recording)
        hs = first["horizons"] if first else phys["horizons"]
        H = hs[-1]
        windows = first["windows"] if first else phys["windows"]
        # a chain recorded in angles is scored in its tracked points (px²) where the physical
        # fit and every run report them; otherwise in the file's own coordinates
        points = (
            phys is not None
            and f"mse_points_h{H}" in phys
            and all(f"mse_points_h{H}" in m for ms in models.values() for m in ms)
        )
        key = "mse_points" if points else "mse"
        ref = {}
        for b in BASELINES:  # from the runs (all must agree), else from the physical fit file
            src = first if first else phys
            ref[b] = {h: src.get(f"{key}_h{h}_{b}") for h in hs}
            for ms in models.values():
                for m in ms:
                    same = all(math.isclose(m[f"{key}_h{h}_{b}"], ref[b][h], rel_tol=1e-6)
                               for h in hs)  # fmt: skip
                    if not same:
                        raise SystemExit(f"{m['_run']}: baseline {b} differs from the other runs "
                                         f"of {recording} (other test windows?)")  # fmt: skip
        phys_h = phys and phys.get("horizons") == hs and phys.get("windows") == windows
        base = {"recording": recording, "windows": windows, "horizons": hs,
                "coordinates": "points" if points else "file"}  # fmt: skip
        phys_h = phys if phys_h else None

        for model, ms in sorted(models.items()):
            mean = {h: sum(m[f"{key}_h{h}"] for m in ms) / len(ms) for h in hs}
            r = make_row(
                base,
                ref,
                phys_h,
                model,
                ",".join(str(m["_seed"]) for m in ms),
                mean,
                "model (mean)",
            )
            r["per_seed"] = [m[f"{key}_h{H}"] for m in ms]
            walls = [m["_train_seconds"] for m in ms if m.get("_train_seconds") is not None]
            r["train_seconds"] = sum(walls) / len(walls) if walls else None
            r["warnings"] = sum(bool(m.get("warning")) for m in ms)
            out.append(r)
        if phys_h:
            out.append(
                make_row(
                    base,
                    ref,
                    phys_h,
                    "physical fit",
                    "",
                    {h: phys[f"{key}_h{h}"] for h in hs},
                    "physical",
                )
            )
        for b in BASELINES:
            out.append(make_row(base, ref, phys_h, b, "", ref[b], "baseline"))
    return out


def markdown(table: list[dict], runs_root: Path, physical: Path | None) -> str:
    lines = [
        "# Models on real recordings against baselines and the physical fit",
        "",
        f"Written {now_utc()} by `benchmarks/real_table.py` from `{runs_root}/**/eval/metrics.json`"
        + (f" and `{physical}`" if physical else "") + ". MSE of rollouts from observed test "
        "states over steps 1..h and state components, in the recording's units, on the test "
        "windows of `python -m hnnsym.evaluate` (non-overlapping, of the longest horizon); model "
        "rows: mean over the seeds, and each seed's value at the longest horizon.",
        "",
    ]  # fmt: skip
    by_rec: dict[str, list[dict]] = defaultdict(list)
    for r in table:
        by_rec[r["recording"]].append(r)
    for recording, rs in by_rec.items():
        hs = rs[0]["horizons"]
        H = hs[-1]
        where = (" in the tracked points (px², the file's chain geometry)"
                 if rs[0]["coordinates"] == "points" else "")  # fmt: skip
        lines += [
            f"**{recording}** ({rs[0]['windows']} test windows of {H} steps{where})",
            "",
            "| predictor | seeds | " + " | ".join(f"MSE h={h}" for h in hs)
            + " | " + " | ".join(f"÷ physical h={h}" for h in hs)
            + f" | ÷ linear (h={H}) | per seed (h={H}) | train s (mean) |",
            "|---|---|" + "---|" * (2 * len(hs)) + "---|---|---|",
        ]  # fmt: skip
        for r in rs:
            seeds = r["seeds"] or "–"
            per = ", ".join(fmt(x) for x in r.get("per_seed", [])) or "–"
            name = f"**{r['predictor']}**" if r["kind"] == "physical" else r["predictor"]
            wall = r.get("train_seconds")
            lines.append(f"| {name} | {seeds} | " + " | ".join(fmt(r[f"mse_h{h}"]) for h in hs)
                         + " | " + " | ".join(fmt(r[f"ratio_physical_h{h}"]) for h in hs)
                         + f" | {fmt(r['ratio_linear'])} | {per} | "
                         + (f"{wall:.0f}" if wall is not None else "–") + " |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def to_csv(table: list[dict]) -> str:
    hs = sorted({h for r in table for h in r["horizons"]})
    cols = ["recording", "windows", "coordinates", "predictor", "kind", "seeds",
            *(f"mse_h{h}" for h in hs), *(f"ratio_physical_h{h}" for h in hs), "ratio_linear",
            "per_seed", "train_seconds"]  # fmt: skip
    buf = io.StringIO()
    w = csv.DictWriter(buf, cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in table:
        w.writerow({**r, "per_seed": ";".join(f"{x:.6g}" for x in r.get("per_seed", []))})
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=Path("outputs/real"))
    ap.add_argument("--physical", type=Path, default=Path("outputs/bench/real/physical_fit.json"))
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/real"))
    args = ap.parse_args()
    physical = args.physical if args.physical.exists() else None
    table = rows(load_runs(args.runs), load_physical(physical))
    if not table:
        raise SystemExit(f"no evaluated runs of recordings under {args.runs}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "real_table.csv", to_csv(table))
    text = markdown(table, args.runs, physical)
    write_text(args.out / "real_table.md", text)
    print(text, end="")


if __name__ == "__main__":
    main()
