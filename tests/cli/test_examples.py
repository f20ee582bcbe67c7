"""Every script in examples/ runs, on its own tiny default budget, as a user would run it (a
subprocess, this checkout's hnnsym first on the path), exits 0 and prints the check it made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "neural_ode_odeint.py": "loss decreased: True",
    "symplectic_adjoint_training_loop.py": "loss decreased: True",
    "custom_hamiltonian.py": "energy conserved: True",
}


def test_every_example_is_run_here():
    assert sorted(p.name for p in (REPO / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / script)],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert EXAMPLES[script] in run.stdout, run.stdout
