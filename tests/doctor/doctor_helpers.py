"""Helpers for the doctor tests: fixture trees, a one-call diagnosis, the real CLI.

Imported as ``from doctor_helpers import ...`` (pytest puts ``tests/doctor`` on the path).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from fabricscope.doctor.diagnosis import Diagnosis, diagnose, open_root
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity

FIXTURES = Path(__file__).parent / "fixtures"
DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_", "MASTER_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")


def run_fixture(name: str, env: Mapping[str, str] | None = None, expect: Expectations | None = None) -> Diagnosis:
    """Diagnose a fixture tree with an explicit NCCL environment (empty unless given)."""
    return diagnose(open_root(str(FIXTURES / name)), env=dict(env or {}), expect=expect)


def only(findings: list[Finding], check_id: str, severity: Severity | None = None) -> list[Finding]:
    """The findings of one check, optionally of one severity."""
    return [f for f in findings if f.id == check_id and (severity is None or f.severity is severity)]


def subjects(findings: list[Finding], check_id: str, severity: Severity) -> set[str]:
    return {f.subject for f in only(findings, check_id, severity)}


def cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the real command line, ``python -m fabricscope doctor ...``, free of the runner's NCCL and launcher vars."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", *_LAUNCHER_VARS))}
    full_env.pop("FABRICSCOPE_LAUNCHER", None)
    full_env["COLUMNS"] = "200"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fabricscope", "doctor", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
