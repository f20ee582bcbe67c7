"""The Hydra configs of every stage (YAML). A package so that Hydra finds them as
``pkg://hnnsym.conf`` when hnnsym is installed; ``hnnsym.config.CONF_DIR`` is their directory."""
