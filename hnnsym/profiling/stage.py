"""The profile stage without Hydra: ``profile(cfg)`` reads the composed ``hnnsym/conf/profile.yaml``,
measures every method at every number of steps, writes profile.csv / .md / .png into the run dir
and prints the summary tables (``python -m hnnsym.profile`` is its Hydra entry)."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from hnnsym.artifacts import claim_output_dir, mark_output_dir
from hnnsym.config.runtime import keep_freed_memory
from hnnsym.profiling.outputs import summary_tables, write_outputs
from hnnsym.profiling.plan import from_config
from hnnsym.profiling.run import run_profile
from hnnsym.progress import progress

FUSED_NOTE = (
    "profile.fused_loss=true: the loss goes through hnnsym.solve_loss (a StepLoss); checkpoint and "
    "symplectic_adjoint fold it into their sweeps and never hold the trajectory or ŷ − y "
    "(saved_mb_solve = saved_mb_forward: the loss is ready with the solve); backprop, adjoint, "
    "reversible and torchdiffeq build the trajectory and evaluate the loss on it"
)


def profile(cfg: DictConfig, run_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Run the profile stage on ``cfg`` and write its outputs into ``run_dir`` (default:
    ``cfg.run_dir``); returns their paths. UserError when the config is bad."""
    methods, setting, options, notes = from_config(cfg)
    out = Path(cfg.run_dir if run_dir is None else run_dir)
    claim_output_dir(out, "profile", bool(cfg.profile.overwrite), "profile.overwrite",
                     own_files=("profile.csv",))  # fmt: skip
    if setting.fused_loss:
        notes.append(FUSED_NOTE)
    for note in notes:
        print(f"note: {note}")
    keep_freed_memory()  # timed as the other stages run (the peak-RSS workers keep glibc's defaults)
    df, run_notes = run_profile(
        methods, setting, options, progress=lambda it: progress(it, desc="steps", leave=False)
    )
    notes += run_notes
    title = (
        f"{setting.system['name']}, {cfg.integrator.name}, batch {setting.batch}, dt {setting.dt}, "
        f"{setting.dtype}, {setting.device}, {df['threads'].iloc[0]} thread(s), loss "
        + ("fused (solve_loss)" if setting.fused_loss else "on the trajectory")
    )
    mark_output_dir(out, "profile")
    paths = write_outputs(df, notes, out, title)
    print(f"# profile: {title}\n\n{summary_tables(df)}\n")
    for note in run_notes:
        print(f"note: {note}")
    print(f"wrote {paths['csv']}, {paths['md']} and {paths['png']}")
    return paths
