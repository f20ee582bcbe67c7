"""``python -m hnnsym.profile``: time, memory and gradient error per gradient method (Fig. 5).

Writes ``profile.csv``, ``profile.md`` and ``profile.png`` into the run dir
(``outputs/profile/<system>/<integrator>`` by default) and prints the summary tables. The measuring
code and the column definitions are in ``hnnsym.profiling``.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from tqdm import tqdm

from hnnsym.cli import exits_cleanly
from hnnsym.profiling import from_config, run_profile, summary_tables, write_outputs


@hydra.main(version_base="1.3", config_path="../conf", config_name="profile")
@exits_cleanly
def main(cfg: DictConfig) -> None:
    methods, setting, options, notes = from_config(cfg)
    for note in notes:
        print(f"note: {note}")
    df, run_notes = run_profile(
        methods, setting, options, progress=lambda it: tqdm(it, desc="steps", leave=False)
    )
    notes += run_notes
    title = (
        f"{setting.system['name']}, {cfg.integrator.name}, batch {setting.batch}, dt {setting.dt}, "
        f"{setting.dtype}, {setting.device}, {df['threads'].iloc[0]} thread(s)"
    )
    paths = write_outputs(df, notes, Path(HydraConfig.get().runtime.output_dir), title)
    print(f"# profile: {title}\n\n{summary_tables(df)}\n")
    for note in run_notes:
        print(f"note: {note}")
    print(f"wrote {paths['csv']}, {paths['md']} and {paths['png']}")


if __name__ == "__main__":
    main()
