"""Markers every test file shares: ``slow`` on each test that starts a process or a server.

``pytest -m "not slow"`` is then the fast subset (the library and the in-process CLI), and
``pytest`` the whole suite.  A test is slow when it, or a fixture it uses, starts another
process: the CLI in a subprocess, torch.distributed ranks, mpirun or torchrun, Prometheus,
node_exporter or Chromium (the ``multiprocess`` marker counts too).
"""

from __future__ import annotations

import compileall
import inspect
import os
import re
from typing import Any

import pytest

_STARTS_A_PROCESS = re.compile(
    r"\b(run_cli|start_cli|run_ranks|start_measuring|require_mpirun|subprocess\.(run|Popen|check_output|call)"
    r"|chromium|Popen)\s*\("
)


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def _calls_a_starter(func: Any, seen: dict[Any, bool], depth: int = 3) -> bool:
    """Whether ``func`` starts a process, itself or through the functions of its module it calls."""
    if func in seen:
        return seen[func]
    seen[func] = False  # a cycle of helpers starts nothing by itself
    source = _source(func)
    found = bool(_STARTS_A_PROCESS.search(source))
    if not found and depth > 0:
        names = getattr(func, "__globals__", {})
        for name in set(_CALLED.findall(source)):
            helper = names.get(name)
            if inspect.isfunction(helper) and helper is not func and _calls_a_starter(helper, seen, depth - 1):
                found = True
                break
    seen[func] = found
    return found


def _starts_a_process(item: pytest.Item, seen: dict[Any, bool]) -> bool:
    if item.get_closest_marker("multiprocess"):
        return True
    function = getattr(item, "function", None)
    if function is not None and _calls_a_starter(function, seen):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info is not None else ():
        if any(_calls_a_starter(definition.func, seen) for definition in definitions):
            return True
    return False


LONGEST_FIRST = (
    "tests/test_pairs_runs.py",
    "tests/test_bench_faults.py",
    "tests/test_bench_runs.py",
    "tests/doctor/test_doctor_fleet.py",
    "tests/doctor/test_doctor_bench.py",
    "tests/test_closed_streams.py",
    "tests/model/test_prediction_path.py",
    "tests/store/test_store_save.py",
    "tests/test_stdout_is_data.py",
    "tests/test_bench_ps.py",
    "tests/report/test_report.py",
    "tests/test_spawn.py",
    "tests/test_bench_stopped.py",
)
"""Files that take longest (a minute or more of a worker, most of it ranks starting and timing out:
``pytest --durations=0``), run first.  With ``--dist loadfile --no-loadscope-reorder`` (the README's
command) xdist hands files out in this order, so a long file does not start last and end the run alone
while the other workers idle; xdist's own reorder puts the files with the most tests first, and these
have few."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[Any, bool] = {}
    for item in items:
        if _starts_a_process(item, seen):
            item.add_marker(pytest.mark.slow)
    first = {name: index for index, name in enumerate(LONGEST_FIRST)}
    # A stable sort: inside a file, and among the other files, the collection order stays.
    items.sort(key=lambda item: first.get(item.nodeid.split("::", 1)[0], len(first)))


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's modules once for the whole run (the controller does it, not each xdist worker).

    Most slow tests start ``python -m fabricscope`` or ranks that import it.  Where the environment sets
    ``PYTHONDONTWRITEBYTECODE`` (this project's machines do), no import writes the bytecode it compiled,
    so every one of those processes compiled every module it imported again: about a fifth of a second
    per command line, minutes over the suite.  ``compileall`` writes it whatever that variable says.
    """
    if hasattr(config, "workerinput"):
        return
    import fabricscope

    compileall.compile_dir(os.path.dirname(fabricscope.__file__), quiet=2)
