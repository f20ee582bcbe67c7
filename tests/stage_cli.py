"""Running a stage as a user does (``python -m hnnsym.<stage>`` in a process of its own, forked
from a warm interpreter: ``stage_server``) and checking what it promises on bad input: one
``error:`` line, exit 2, no traceback, files left as they were."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# A tiny data file of double_well for the CLI tests: seconds to generate.
TINY_GENERATE = ("generate.n_train=96", "generate.n_val=32", "generate.n_test=4",
                 "generate.test_steps=20", "generate.train_steps=12")  # fmt: skip


def run_stage(
    stage: str, *overrides: str, cwd: Path | None = None, timeout: float = 600, **popen
) -> subprocess.CompletedProcess:
    """``python -m hnnsym.<stage> <overrides>`` with one torch thread and no HYDRA_FULL_ERROR.
    Run by a fork of a warm interpreter on Linux (``stage_server``: the same command in a
    process of its own, without paying the imports again), or as a subprocess of its own where
    ``popen`` asks for more than an environment (``preexec_fn``, say), the environment sets
    what Python reads as it starts (``PYTHONPATH``, say), or forking a process that has
    imported these libraries is not safe (macOS)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    env.pop("HNNSYM_DEBUG", None)
    extra = popen.pop("env", {})
    env.update(extra)
    cmd = [sys.executable, "-m", f"hnnsym.{stage}", *overrides]
    fresh = popen or any(name.startswith("PYTHON") for name in extra)
    if fresh or not sys.platform.startswith("linux"):
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, **popen
        )
    return _forked(cmd, env, Path(cwd or os.getcwd()), timeout)


_server: list[subprocess.Popen] = []


def _forked(cmd: list[str], env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` (``python -m <module> <args>``) run by the warm interpreter of this test process,
    started on first use."""
    if not _server or _server[0].poll() is not None:
        server = Path(__file__).with_name("stage_server.py")
        _server[:] = [subprocess.Popen(
            [sys.executable, str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )]  # fmt: skip
    server = _server[0]
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        request = {"module": cmd[2], "args": cmd[3:], "cwd": str(cwd), "env": env,
                   "stdout": str(out), "stderr": str(err), "timeout": timeout}  # fmt: skip
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the stage server ended (exit {server.wait()})")
        returncode = json.loads(answer)["returncode"]
        stdout, stderr = (p.read_text() if p.exists() else "" for p in (out, err))
    if returncode is None:
        raise subprocess.TimeoutExpired(cmd, timeout, stdout, stderr)
    return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, exactly one ``error:`` line on stderr holding every fragment, no traceback.
    Returns the error line."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` (or of ``root`` itself), by relative path."""
    root = Path(root)
    if root.is_file():
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
