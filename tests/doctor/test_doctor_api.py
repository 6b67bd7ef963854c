"""The public API of fabricscope.doctor: explicit, sorted, importable, and its doc example runs."""

from __future__ import annotations

import doctest

import pytest
from doctor_helpers import REPO

import fabricscope.doctor
from fabricscope.doctor import diagnosis


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = fabricscope.doctor.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(fabricscope.doctor, name) is not None
    assert callable(fabricscope.doctor.diagnose)  # the function, not the module of a similar name
    with pytest.raises(AttributeError):
        _ = fabricscope.doctor.no_such_name


def test_docstring_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    failures, tried = doctest.testmod(diagnosis, report=True)
    assert tried > 0 and failures == 0


def test_every_check_is_documented() -> None:
    from fabricscope.doctor.checks import CHECKS

    text = (REPO / "docs/doctor.md").read_text(encoding="utf-8")
    for check in CHECKS:
        assert f"`{check.id}`" in text, check.id
    assert "`fleet.report`" in text and "`fleet.consistency`" in text and "`fleet.pairs`" in text


def _doctor_imports() -> dict[str, set[str]]:
    """Each module of fabricscope.doctor and the doctor modules it imports, at any depth of its code."""
    import ast

    package = REPO / "src/fabricscope/doctor"
    graph: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        name = "fabricscope.doctor." + ".".join(path.relative_to(package).with_suffix("").parts)
        name = name.removesuffix(".__init__")
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fabricscope.doctor"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("fabricscope.doctor"))
        graph[name] = found
    return graph


def test_no_import_circle_between_modules() -> None:
    """Function-level imports count too: cli and fleet_run share what they need through invocation."""
    graph = _doctor_imports()
    assert "fabricscope.doctor.cli" not in graph["fabricscope.doctor.fleet_run"]
    assert "fabricscope.doctor.invocation" in graph["fabricscope.doctor.fleet_run"]

    def reaches(start: str, goal: str) -> bool:
        seen: set[str] = set()
        todo = list(graph.get(start, set()))
        while todo:
            module = todo.pop()
            if module == goal:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, set()))
        return False

    circles = sorted(m for m in graph if m != "fabricscope.doctor" and reaches(m, m))
    assert circles == []
