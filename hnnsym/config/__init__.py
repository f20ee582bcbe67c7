"""Configuration: typed schemas with ranges (schemas), _target_ instantiation (build), and the
per-stage torch setup (runtime)."""
