"""Configuration: typed schemas with ranges (schemas), _target_ instantiation (build), and the
per-stage torch setup (runtime). ``CONF_DIR`` is the directory of the YAML configs, shipped inside
the package (``hnnsym/conf``): the one place that knows where they are. Importing this package
stores the configs declared in Python (the train section, ``schemas.TrainOptions``) in Hydra's
ConfigStore, where every stage's defaults list finds them."""

from pathlib import Path

from hnnsym.config.schemas import register_configs

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

register_configs()
