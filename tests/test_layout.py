"""Command packages sit side by side over the shared layer: none imports another.

The shared layer is the top-level modules (results, units, userfiles, options, schema, sweep,
ops, table, ...), ``launch`` and ``store`` (where every Result is kept: the history, RUN
resolution and ``--save``).  The one exception is ``report``, which draws a model prediction
for ``--predict CLUSTER`` through the model's library.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fabricscope"
COMMANDS = ("bench", "model", "doctor", "monitor", "pairs", "dataload", "report")
ALLOWED = {("report", "model")}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("package", COMMANDS)
def test_a_command_package_imports_no_other(package: str) -> None:
    others = [p for p in COMMANDS if p != package and (package, p) not in ALLOWED]
    offending = sorted(
        f"{path.relative_to(SRC)} imports {name}"
        for path in (SRC / package).rglob("*.py")
        for name in _imports(path)
        if any(name == f"fabricscope.{other}" or name.startswith(f"fabricscope.{other}.") for other in others)
    )
    assert offending == []


def test_the_shared_layer_imports_no_command_package() -> None:
    shared = [*SRC.glob("*.py"), *(SRC / "launch").rglob("*.py"), *(SRC / "store").rglob("*.py")]
    offending = sorted(
        f"{path.relative_to(SRC)} imports {name}"
        for path in shared
        for name in _imports(path)
        if path.name != "cli.py"  # the top-level CLI lists the command modules
        and any(name.startswith(f"fabricscope.{command}") for command in COMMANDS)
    )
    assert offending == []


RANK_LIFE = ("signal.signal", "finish_process", "tightest_free_bytes", "join_group", "decide(")
"""The life of a measuring rank: its one home is launch/lifecycle.py (and the rank helpers it uses)."""


@pytest.mark.parametrize("package", ["bench", "pairs"])
def test_a_measuring_worker_lives_by_launch_lifecycle(package: str) -> None:
    """bench and pairs ranks join, fit, stop and end through launch.lifecycle: no second copy in a command."""
    offending = sorted(
        f"{path.relative_to(SRC)}: {needle}"
        for path in (SRC / package).rglob("*.py")
        for needle in RANK_LIFE
        if needle in path.read_text(encoding="utf-8")
    )
    assert offending == []
    worker = (SRC / package / "worker.py").read_text(encoding="utf-8")
    assert "lifecycle.run_rank(" in worker and "lifecycle.conclude(" in worker
