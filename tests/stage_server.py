"""A warm interpreter for the CLI tests (``stage_cli.run_stage``): it imports torch, Hydra and the
libraries the stages use once, then forks one child per request that runs ``python -m
hnnsym.<stage> <overrides>`` as that command does: in a process of its own, with its argv, working
directory and environment, stdin from /dev/null, stdout and stderr to files, and its exit status.
What the child skips is the imports, most of a stage process's start (``import hnnsym.cli,
hnnsym.training.stage`` takes 1.9 of the 2.2 s in which ``python -m hnnsym.train threads=0``
refuses its option, on one core). The stage module itself is not imported here, so each child
runs it fresh as ``__main__``.

Requests come on stdin, one JSON object per line: {"module", "args", "cwd", "env", "stdout",
"stderr", "timeout"}. Each answer is one line on stdout: {"returncode"}, None where the child ran
past its timeout and was killed.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback

# what the stages import, most of it once Hydra has composed; OMP_NUM_THREADS=1 (set by the client)
# keeps OpenMP from starting a thread team here, which a forked child could not use
WARM = (
    "torch",
    "hydra",
    "omegaconf",
    "h5py",
    "pandas",
    "scipy.signal",
    "matplotlib.figure",
    "hnnsym.cli",
    "hnnsym.data.simulate",
    "hnnsym.data.ingest",
    "hnnsym.training.stage",
    "hnnsym.evaluation.stage",
    "hnnsym.reporting.stage",
    "hnnsym.profiling.stage",
)


def _child(request: dict) -> None:
    """Run the stage as ``python -m`` would, then exit with its status (never returns)."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # python -m puts the working directory first
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:  # sys.exit("message"): printed, status 1
                print(stop.code, file=sys.stderr)
        except KeyboardInterrupt:  # Python then ends by SIGINT itself (status -2 to the parent)
            traceback.print_exc()
            code = -signal.SIGINT
        except BaseException:  # noqa: BLE001  (an uncaught error: its traceback, status 1)
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit status (-signal where a signal ended it), or None after ``timeout``
    seconds, the child killed."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


def main() -> None:
    sys.path.pop(0)  # this file's folder (tests/), which a stage process does not see
    for name in WARM:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        returncode = _wait(pid, request["timeout"])
        print(json.dumps({"returncode": returncode}), flush=True)


if __name__ == "__main__":
    main()
