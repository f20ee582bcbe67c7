# Every target installs first (a no-op when pyproject.toml has not changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0

.PHONY: install test lint format demo bench figure5 clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev,sweeps,bench]'
	touch $(STAMP)

install: $(STAMP)

test: install
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: install
	$(PY) -m hnnsym.generate system=henon_heiles experiment=demo
	$(PY) -m hnnsym.train system=henon_heiles experiment=demo
	$(PY) -m hnnsym.evaluate system=henon_heiles experiment=demo

clean:
	rm -rf outputs data/*/ .pytest_cache
