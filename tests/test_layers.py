"""The package's layers point down: every ``import`` of an hnnsym module, read with ``ast`` from the
source (imports inside functions and under ``if TYPE_CHECKING:`` included: both are dependencies a
reader must follow), goes to a lower layer or stays inside its own unit (subpackage or top-level
module).

Layers, lowest first (docs/concepts/architecture.md):

0. ``errors``: the exceptions every layer raises; ``conf``, the YAML configs' package (no code).
1. ``ode``: the kernel (integrators, gradient methods, capabilities), nothing but errors below.
2. ``physics``: models, systems, constraints.
3. ``version``, ``progress``, ``resources``: leaf helpers of the stages (no hnnsym imports but
   errors); above the kernel so that it stays free of them.
4. ``artifacts``: files, run dirs, output markers (uses ``version``).
5. ``config``: building configured objects (``data`` reads its config through it, so it sits
   just below data).
6. ``data``: simulation, files, ingestion.
7. ``checkpoints`` (what training writes and evaluation reads) and ``compatibility`` (which
   model fits which data: reasons that train and evaluate turn into errors): below the stages
   that share them.
8. ``training``, ``evaluation``, ``profiling``: the stages; siblings, none imports another.
9. ``reporting``: reads the stages' outputs.
10. Entry points: the package root, ``api``, ``cli``, ``launchers``, ``sweeps`` and the
    top-level Hydra shims (``generate``, ``train``, ...); these may import one another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hnnsym

ROOT = Path(hnnsym.__file__).parent

ENTRY = 10
LAYERS: dict[str, int] = {
    "errors": 0,
    "signals": 0,
    "conf": 0,
    "ode": 1,
    "physics": 2,
    "version": 3,
    "progress": 3,
    "resources": 3,
    "artifacts": 4,
    "config": 5,
    "data": 6,
    "checkpoints": 7,
    "compatibility": 7,
    "training": 8,
    "evaluation": 8,
    "profiling": 8,
    "reporting": 9,
    **dict.fromkeys(
        [
            "__init__", "api", "cli", "launchers", "sweeps", "convert_checkpoint",
            "generate", "ingest", "train", "evaluate", "profile", "report",
            "table1", "table_chain", "table_ddlm",
        ],
        ENTRY,
    ),
}  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def unit(module: str) -> str:
    """The top-level name a module belongs to: ``hnnsym.ode.dynamics`` -> ``ode``, the package
    root ``hnnsym`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[str]:
    """The hnnsym modules ``path`` imports (``from hnnsym import x``: ``hnnsym.x`` when x is a
    module, else the package root)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "hnnsym"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "hnnsym":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (ROOT.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    ROOT.parent / sub.replace(".", "/") / "__init__.py"
                ).exists()
                found.append(sub if is_module else node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import; write hnnsym.<module>")
    return found


def edges() -> list[tuple[str, str]]:
    return [
        (module_name(path), target)
        for path in sorted(ROOT.rglob("*.py"))
        for target in imports(path)
    ]


def test_every_module_has_a_layer():
    units = {unit(module_name(path)) for path in ROOT.rglob("*.py")}
    assert not units - set(LAYERS), f"put these in LAYERS of {__file__}: {units - set(LAYERS)}"


def test_imports_point_down():
    wrong = []
    for source, target in edges():
        a, b = unit(source), unit(target)
        if a == b:
            continue
        if LAYERS[b] < LAYERS[a] or LAYERS[a] == LAYERS[b] == ENTRY:
            continue
        how = "sideways" if LAYERS[a] == LAYERS[b] else "up"
        wrong.append(
            f"{source} ({a}, layer {LAYERS[a]}) imports {target} {how} (layer {LAYERS[b]})"
        )
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The parser finds imports in functions and under TYPE_CHECKING (so the test above could
    fail)."""
    path = tmp_path / "probe.py"
    path.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hnnsym.training.trainer import Trainer\n"
        "def f():\n    import hnnsym.reporting.tables\n    from hnnsym import errors, __version__\n"
    )
    assert imports(path) == [
        "hnnsym.training.trainer",
        "hnnsym.reporting.tables",
        "hnnsym.errors",
        "hnnsym",
    ]
