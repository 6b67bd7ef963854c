"""Diagnosing: probes of a node's network setup, the checks over them, and the report.

``fabricscope doctor`` on the command line; from Python::

    from fabricscope.doctor import diagnose, open_root
    report = diagnose(open_root("/"))
    for finding in report.findings: ...

Probes read sysfs and procfs under one root (:class:`SysRoot`), so a captured
tree (``--capture``) can be checked anywhere.  The names below are imported
on first use, so that registering the ``doctor`` command costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricscope.doctor.diagnosis import Diagnosis, diagnose, open_root
    from fabricscope.doctor.expect import Expectations, load_expectations
    from fabricscope.doctor.findings import Finding, Severity, exit_code
    from fabricscope.sysroot import SysRoot

__all__ = [
    "Diagnosis",
    "Expectations",
    "Finding",
    "Severity",
    "SysRoot",
    "diagnose",
    "exit_code",
    "load_expectations",
    "open_root",
]

_HOMES = {
    "Diagnosis": "diagnosis",
    "diagnose": "diagnosis",
    "open_root": "diagnosis",
    "Expectations": "expect",
    "load_expectations": "expect",
    "Finding": "findings",
    "Severity": "findings",
    "exit_code": "findings",
    "SysRoot": "fabricscope.sysroot",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fabricscope.doctor' has no attribute {name!r}")
    module = home if home.startswith("fabricscope.") else f"fabricscope.doctor.{home}"
    return getattr(importlib.import_module(module), name)
