"""Findings: what one check saw on one subject, how bad it is, and what fixes it.

Exit codes follow the Nagios convention that Meta's GCM uses: 0 when
everything is ok (or merely informative), 1 when something deserves a look
(warn), 2 when something is wrong (fail), and 3 (UNKNOWN) when the doctor
itself could not complete (a report it cannot write, a crash): no verdict.
A usage error is also 2, but prints one ``error:`` line and no report.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from fabricscope.errors import RunError

__all__ = [
    "AREAS",
    "EXIT_UNKNOWN",
    "DoctorIncomplete",
    "Finding",
    "Severity",
    "counts",
    "exit_code",
    "verdict",
    "worst",
]

EXIT_UNKNOWN = 3
"""Exit status when the doctor could not complete (Nagios UNKNOWN)."""

AREAS = ("probe", "nic", "rdma", "pcie", "gpu", "topology", "gpudirect", "host", "nccl", "tcp", "bench", "fleet")
"""Report order of the areas a finding can belong to."""


class Severity(enum.IntEnum):
    """How bad a finding is; ordered so that ``max()`` gives the worst."""

    OK = 0
    INFO = 1
    WARN = 2
    FAIL = 3

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def parse(cls, text: str) -> Severity:
        return cls[text.upper()]


_LABELS = {severity: severity.name.lower() for severity in Severity}
"""Each severity's word (``warn``), made once: the report asks for it per row."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One check's verdict on one subject (a NIC, a port, a GPU, a setting)."""

    id: str
    """The check that made it, ``area.name`` (``rdma.port_state``)."""
    severity: Severity
    subject: str
    """What it is about: ``mlx5_3/1``, ``eth0``, ``GPU 0000:19:00.0``, ``NCCL_IB_HCA``."""
    observed: str
    expected: str = ""
    advice: str = ""
    """The fix, for warn and fail; empty when there is nothing to do."""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.label
        data["area"] = self.area
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            id=str(data["id"]),
            severity=Severity.parse(str(data["severity"])),
            subject=str(data.get("subject", "")),
            observed=str(data.get("observed", "")),
            expected=str(data.get("expected", "")),
            advice=str(data.get("advice", "")),
        )


def worst(findings: Iterable[Finding]) -> Severity:
    return max((f.severity for f in findings), default=Severity.OK)


def verdict(findings: Iterable[Finding]) -> str:
    """``ok`` (info included), ``warn`` or ``fail``: the word of the report's verdict line and of ``--json``."""
    severity = worst(findings)
    return severity.label if severity >= Severity.WARN else Severity.OK.label


def exit_code(findings: Iterable[Finding]) -> int:
    """0 all ok (info included), 1 warnings, 2 failures: :func:`verdict` as a number."""
    return {Severity.FAIL.label: 2, Severity.WARN.label: 1}.get(verdict(findings), 0)


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    result = {s.label: 0 for s in Severity}
    for finding in findings:
        result[finding.severity.label] += 1
    return result


class DoctorIncomplete(RunError):
    """The doctor could not complete (a report it cannot write, a rendezvous it cannot reach, a crash): exit 3."""

    exit_code = EXIT_UNKNOWN
