"""Measurements from a file into the HDF5 schema (``python -m hnnsym.ingest``, ``ingest(cfg)``).

Pipeline (every step logged):

1. ``read_table``: a .csv/.txt/.tsv/.dat file (header or none, comma/whitespace/tab/semicolon
   separated, CRLF fine; pandas), a .npz (one array per column; 2-D arrays give ``<key>_<j>``) or
   an .h5 (its 1-D/2-D datasets, the same way) -> a table of float64 columns. Empty cells are NaN
   (that row is dropped, i.e. a gap); text that is not a number is a one-line error.
2. Rows are grouped by the trial column (or are one recording) and cut into **segments** of
   uniformly spaced observations: a step dt_i = t_{i+1} - t_i ends a segment when
   dt_i > (1 + ``gap_tolerance``) · Δ (a dropped frame), dt_i <= 0 (time restarts) or a row is
   dropped, where Δ = median of all positive steps = ``obs_dt``. Steps that are neither a gap nor
   within ``jitter`` · Δ of Δ make the spacing irregular: refused, or (``irregular=resample``)
   each segment is linearly interpolated onto t_0 + kΔ. Nothing is ever integrated across a gap.
3. Per segment: angle columns are unwrapped (``np.unwrap``; ``wrapped=auto`` unwraps a column
   that has a jump |Δθ| > π), momenta are read, or p = mass · v from velocity columns, or from
   central differences of q (``velocities=finite_difference``), or left out (positions only,
   ``observe = q``).
4. Segments are subsampled (``every``), cut at the ends of split time ranges and into equal
   blocks of at most ``max_segment`` steps; those shorter than ``min_segment`` are dropped. Units
   are chosen (``scale``: auto, powers of two; ``choose_units``). Each segment is tiled by
   trajectories of T steps (``steps``, or ``auto_steps``), the last one ending at the segment's
   end (``cut``); the schema stores (N, T+1, width) per split, in the scaled units.
5. Segments (never single points or pieces of one) are dealt to train/val/test by the split
   rules (``choose_splits``: fractions by a permutation from ``seed``, or segment indices,
   trials, time ranges, every k-th); the file records the rules (attribute ``split``) and which
   rows went where (attribute ``segments``).

Written with system ``measured`` (no known H; d from the file), no ``clean`` split, and the
provenance: ``source``, ``source_sha256``, ``columns`` (JSON), ``ingest_config`` (YAML),
and the scales: ``units`` (``hnnsym.data.units.Units``).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from hnnsym.artifacts import creatable_dir, sha256
from hnnsym.config.schemas import validated
from hnnsym.data.chains import Chain, chain_mapping
from hnnsym.data.hdf5 import SPLITS, Split, write_dataset
from hnnsym.data.readers import read_table
from hnnsym.data.scaling import choose_units
from hnnsym.data.segments import (
    MIN_TRAJECTORIES,
    auto_steps,
    cut,
    limit_segments,
    segments_of,
    subsample,
)
from hnnsym.data.settings import Mapping, Options, column_names, mapping_from_config, split_rule
from hnnsym.data.splits import choose_splits, cut_at_times
from hnnsym.data.units import Units
from hnnsym.errors import DataError, UserError
from hnnsym.physics.systems import MEASURED

log = logging.getLogger(__name__)

OUT_DIR = "measured"  # default output: ${data_dir}/measured/<name>.h5


@dataclass
class Ingested:
    splits: dict[str, Split]
    obs_dt: float  # stored (scaled) units
    dim: int
    observe: str
    steps: int
    test_steps: int
    records: dict[str, list[dict]]
    notes: dict
    units: Units = field(default_factory=lambda: Units.identity(1))
    rules: dict = field(default_factory=dict)


def warn(message: str) -> None:
    """A ``warning:`` line on stderr."""
    print(f"warning: {message}", file=sys.stderr)


def ingest_table(
    table: pd.DataFrame, m: Mapping, o: Options, path: Path, labels: dict[str, str] | None = None
) -> Ingested:
    """Segments, trajectories, units and splits of a table (``read_table``) under mapping ``m``;
    ``labels``: units of the columns as recorded (``Units.labels``). ``notes["warnings"]``: what
    ``ingest`` prints as ``warning:`` lines (a split with fewer than MIN_TRAJECTORIES)."""
    o.check()
    m.check(list(table.columns), path)
    mass = np.atleast_1d(np.asarray(o.mass, dtype=np.float64))
    if mass.size not in (1, m.dim):
        raise UserError(f"ingest.mass has {mass.size} values for {m.dim} positions: give one, "
                        "or one per position")  # fmt: skip
    trial_labels = table.attrs.get("labels", {}).get(m.trial) if m.trial else None
    rules = {"val": split_rule("val", o.val), "test": split_rule("test", o.test)}
    segments, obs_dt, notes = segments_of(table, m, o)
    segments = subsample(segments, o.every)
    obs_dt *= o.every  # recording units
    times = [r for rule in rules.values() if isinstance(rule, dict) for r in rule.get("time", [])]
    segments = cut_at_times(segments, times, obs_dt)
    segments = limit_segments(segments, o.max_segment, obs_dt)
    usable = [s for s in segments if s.steps >= o.min_segment]
    notes["short"] += len(segments) - len(usable)
    if not usable:
        longest = max((s.steps for s in segments), default=0)
        raise DataError(
            f"{path}: no segment has ingest.min_segment={o.min_segment} steps (found "
            f"{len(segments)} segments, the longest {longest} steps of {obs_dt:g}); lower "
            "ingest.min_segment or raise ingest.gap_tolerance"
        )
    units = choose_units(usable, m, o, obs_dt, labels)
    picked = choose_splits(usable, rules, o.seed, obs_dt, trial_labels)
    groups = [picked["train"], picked["val"], picked["test"]]
    steps = o.steps or auto_steps([s.steps for s in usable], groups, o.test_steps, o.min_segment)
    test_steps = o.test_steps or steps
    splits, records = {}, {}
    covered = np.zeros(len(table), dtype=bool)
    notes["warnings"] = []
    for name in SPLITS:
        length = test_steps if name == "test" else steps
        parts, records[name] = [], []
        for i in picked[name]:
            pieces = cut(usable[i].states, length)
            records[name].append(usable[i].record(int(i), obs_dt, len(pieces), trial_labels))
            parts.append(pieces)
            if len(pieces):
                covered[usable[i].first_row : usable[i].last_row + 1] = True
        observed = np.concatenate(parts)
        if observed.shape[0] == 0:
            longest = max(usable[i].steps for i in picked[name])
            which = "ingest.test_steps" if name == "test" else "ingest.steps"
            raise DataError(
                f"{path}: no {name} segment is {length} steps long (the longest has {longest}); "
                f"lower {which}"
            )
        if observed.shape[0] < MIN_TRAJECTORIES:
            notes["warnings"].append(f"split {name} has {observed.shape[0]} trajector"
                 f"{'y' if observed.shape[0] == 1 else 'ies'} of {length} steps (from "
                 f"{len(picked[name])} segments), fewer than {MIN_TRAJECTORIES}: its numbers will "
                 "be noisy; give it more segments (ingest.split) or shorter trajectories "
                 "(ingest.steps / ingest.test_steps)")  # fmt: skip
        dt = obs_dt / units.time
        splits[name] = Split(units.to_scaled(observed), None, dt * np.arange(length + 1))
    notes["segments"] = len(usable)
    notes["samples"] = (int(covered.sum()), len(table))
    return Ingested(splits, obs_dt / units.time, m.dim, m.observe, steps, test_steps, records,
                    notes, units, rules)  # fmt: skip


# ---- the stage --------------------------------------------------------------------------------


def options_from_config(i: DictConfig) -> Options:
    mass = OmegaConf.to_container(i.mass) if OmegaConf.is_list(i.mass) else i.mass

    def plain(value: Any) -> Any:
        return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value

    return Options(
        dt=i.dt, gap_tolerance=float(i.gap_tolerance), jitter=float(i.jitter),
        irregular=str(i.irregular), wrapped=i.wrapped, mass=mass, min_segment=int(i.min_segment),
        steps=i.steps, test_steps=i.test_steps, max_segment=i.max_segment,
        val=plain(i.split.val), test=plain(i.split.test), seed=int(i.seed),
        every=int(i.get("every", 1)), scale=plain(i.get("scale", "auto")),
        smoothing_window=int(i.smoothing.window), smoothing_order=int(i.smoothing.order),
    )  # fmt: skip


def _unit_labels(value: Any, columns: list[str], m: Mapping) -> dict[str, str]:
    """``ingest.units`` as {column: unit} (key ``time``: the time unit; a time column's unit is
    also given under ``time``); angle columns are in rad unless given."""
    given = {} if value is None else OmegaConf.to_container(value) if OmegaConf.is_config(
        value) else value  # fmt: skip
    if not isinstance(given, dict):
        raise UserError(
            f"ingest.units must map columns to units, e.g. {{t: s, x: px}}, got {value!r}"
        )
    labels = {str(k): str(v) for k, v in given.items()}
    unknown = [k for k in labels if k not in columns and k != "time"]
    if unknown:
        raise UserError(f"ingest.units names no column {', '.join(map(repr, unknown))}; the "
                        f"columns: {', '.join(columns)} (or time)")  # fmt: skip
    for a in m.angles:
        labels.setdefault(a, "rad")
    if m.time is not None and m.time in labels:
        labels.setdefault("time", labels[m.time])
    return labels


def first_row(table: pd.DataFrame, m: Mapping, units: dict[str, str]) -> str:
    """The first data row as mapped: ``name = value unit [role]`` for every column."""
    roles: dict[str, str] = {}
    if m.time:
        roles[m.time] = "time"
    if m.trial:
        roles[m.trial] = "trial"
    for j, n in enumerate(m.positions):
        roles[n] = f"q{j + 1}" + (" angle" if n in m.angles else "")
    for key, cols in (("p", m.momenta), ("v", m.velocities)):
        if isinstance(cols, list):
            roles.update({n: f"{key}{j + 1}" for j, n in enumerate(cols)})
    line = table.attrs.get("first_line")
    cells = []
    for name, value in table.iloc[0].items():
        unit = f" {units[name]}" if name in units else ""
        cells.append(f"{name} = {value:.6g}{unit} [{roles.get(name, 'unused')}]")
    return f"first row{f' (line {line})' if line else ''} as mapped: {', '.join(cells)}"


def _rule_text(rule: Any) -> str:
    if rule is None:
        return "the rest"
    return f"fraction {rule:g}" if isinstance(rule, float) else json.dumps(rule)


def _segment_text(r: dict) -> str:
    trial = r["trial"]
    trial = (
        ""
        if trial is None
        else f"trial {trial:g} "
        if isinstance(trial, float)
        else f"trial {trial} "
    )
    return f"#{r['index']} {trial}t {r['t0']:g}..{r['t1']:g}"


def describe_units(u: Units, m: Mapping, obs_dt: float) -> str:
    """The scales chosen, in the recording's units where ``u.labels`` gives them."""
    if u.time == 1.0 and u.action == 1.0 and all(a == 1.0 for a in u.q):
        return "units: the recording's (ingest.scale=none or all scales 1)"
    t_unit = f" {u.labels['time']}" if "time" in u.labels else ""
    qs = ", ".join(
        f"{n} / {a:g}{' ' + u.labels[n] if n in u.labels else ''}" for n, a in zip(m.positions, u.q)
    )
    ps = ", ".join(f"{b:g}" for b in u.p)
    angles = [m.positions[j] for j in u.periodic]
    return (f"units: stored t = t / {u.time:g}{t_unit}, q = {qs}, p = p / b with b = ({ps}) "
            f"(action {u.action:g}, H = {u.energy:g} H~); obs_dt {obs_dt * u.time:g} -> "
            f"{obs_dt:g}; angles (periodic, unscaled): {', '.join(angles) or 'none'}")  # fmt: skip


def describe_chain(c: Chain) -> str:
    """The chain as read: links, lengths, the origin and how far the fixed point's track is."""
    links = ", ".join(
        f"{a}-{b} {length:.4g} (spread {s:.2%})"
        for a, b, length, s in zip(c.points[:-1], c.points[1:], c.lengths, c.spreads)
    )
    gap = float(np.hypot(*(np.asarray(c.origin) - np.asarray(c.fixed_mean))))
    return (f"chain {' -> '.join(c.points)}: links {links}; origin {c.origin[0]:.5g}, "
            f"{c.origin[1]:.5g} (centre of {c.points[1]}'s circle; {c.points[0]}'s mean track is "
            f"{gap:.3g} from it)")  # fmt: skip


def output_path(cfg: DictConfig) -> Path:
    """``data_file``, or ``${data_dir}/measured/<ingest.name or the source's stem>.h5``."""
    if cfg.get("data_file"):
        return Path(cfg.data_file)
    name = cfg.ingest.name or Path(str(cfg.ingest.source)).stem
    return Path(cfg.data_dir) / OUT_DIR / f"{name}.h5"


def ingest(cfg: DictConfig) -> Path:
    """Read ``ingest.source``, segment, split and write the HDF5 file; returns its path."""
    i = validated(cfg, "ingest", common=False).ingest
    if i.source is None:
        raise UserError("give the measurement file: ingest.source=<path>")
    source = Path(str(i.source))
    out = output_path(cfg)
    if out.exists() and not i.overwrite:  # before any work
        raise DataError(f"{out} already exists; pass ingest.overwrite=true to replace it, or "
                        "data_file=<path> to write elsewhere")  # fmt: skip
    creatable_dir(out.parent, "the directory of data_file")
    mapping = mapping_from_config(i)
    table = read_table(
        source, i.header, str(i.separator), column_names(i.names), column_names(i.trial) or [],
        cfg.memory_limit, None if i.comment is None else str(i.comment), int(i.skip_rows),
    )  # fmt: skip
    log.info("read %s: %d rows, columns %s", source, len(table), list(table.columns))
    chain = None
    if i.points is not None or i.chain is not None:
        if i.points is None:
            raise UserError(
                "ingest.chain needs the tracked points: ingest.points={name: [x, y], ...}"
            )
        table, mapping, chain = chain_mapping(table, mapping, i.points, i.chain, str(i.coordinates))
        log.info("%s", describe_chain(chain))
    unit_of = _unit_labels(i.get("units"), list(table.columns), mapping)
    log.info("%s", first_row(table, mapping, unit_of))
    result = ingest_table(table, mapping, options_from_config(i), source, unit_of)
    n = result.notes
    u = result.units
    every = int(i.get("every", 1))
    log.info(
        "obs_dt %g (median step%s); %d gaps, %d time restarts, %d rows with empty cells dropped, "
        "%d irregular steps (%d segments resampled); unwrapped %s",
        result.obs_dt * u.time, f" x ingest.every={every}" if every > 1 else "", n["gaps"],
        n["restarts"], n["dropped_rows"], n["irregular_steps"], n["resampled"],
        sorted(n["unwrapped"]) or "none",
    )  # fmt: skip
    log.info("%s", describe_units(u, mapping, result.obs_dt))
    log.info(
        "%d segments of >= %d steps (%d shorter dropped); T = %d steps per trajectory (%s), "
        "test %d; observe %s",
        n["segments"], i.min_segment, n["short"], result.steps,
        "ingest.steps" if i.steps else "auto: the longest keeping most samples", result.test_steps,
        result.observe,
    )  # fmt: skip
    used, total = n["samples"]
    log.info("rows used (spanned by trajectories): %d of %d (%.1f%%)", used, total,
             100 * used / max(total, 1))  # fmt: skip
    for name, split in result.splits.items():
        recs = result.records[name]
        log.info("%s (%s): %d segments -> %d trajectories; segments %s", name,
                 _rule_text(result.rules.get(name)), len(recs), split.observed.shape[0],
                 ", ".join(_segment_text(r) for r in recs))  # fmt: skip
    attrs = {
        "system": MEASURED, "system_params": {}, "dim": result.dim, "obs_dt": result.obs_dt,
        "observe": result.observe, "fine_dt": None, "integrator": None, "noise": None,
        "noise_std": None, "seed": int(i.seed), "config": None,
        "source": str(source), "source_sha256": sha256(source),
        "columns": json.dumps(mapping.as_dict()),
        "segments": json.dumps(result.records),
        "split": json.dumps({**result.rules, "seed": int(i.seed)}),
        "units": u.as_attr(),
        "ingest_config": OmegaConf.to_yaml(cfg.ingest, resolve=True),
    }  # fmt: skip
    if chain is not None:
        attrs["chain"] = chain.as_attr(
            str(i.coordinates), unit_of.get(chain.columns[chain.points[0]][0])
        )
    for message in n["warnings"]:
        warn(message)
    write_dataset(out, result.splits, attrs, overwrite=bool(i.overwrite))
    return out
