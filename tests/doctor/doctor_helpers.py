"""Helpers for the doctor tests: fixture trees, a one-call diagnosis, the real CLI.

Imported as ``from doctor_helpers import ...`` (pytest puts ``tests/doctor`` on the path).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from fabricscope.doctor.diagnosis import Diagnosis, diagnose, open_root
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from helpers import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]


def run_fixture(name: str, env: Mapping[str, str] | None = None, expect: Expectations | None = None) -> Diagnosis:
    """Diagnose a fixture tree with an explicit NCCL environment (empty unless given)."""
    return diagnose(open_root(str(FIXTURES / name)), env=dict(env or {}), expect=expect)


def only(findings: list[Finding], check_id: str, severity: Severity | None = None) -> list[Finding]:
    """The findings of one check, optionally of one severity."""
    return [f for f in findings if f.id == check_id and (severity is None or f.severity is severity)]


def subjects(findings: list[Finding], check_id: str, severity: Severity) -> set[str]:
    return {f.subject for f in only(findings, check_id, severity)}


def cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real command line, ``python -m fabricscope doctor ...`` (the one runner of tests/helpers.py)."""
    return run_cli(["doctor", *args], env=env, timeout=timeout, cwd=REPO)
