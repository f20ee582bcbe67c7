"""Configuration: typed schemas with ranges (schemas), _target_ instantiation (build), and the
per-stage torch setup (runtime). ``CONF_DIR`` is the directory of the YAML configs, shipped inside
the package (``hnnsym/conf``): the one place that knows where they are."""

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def _register() -> None:
    from hnnsym.config.schemas import register_configs

    register_configs()


_register()
