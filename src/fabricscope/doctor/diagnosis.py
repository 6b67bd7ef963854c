"""Diagnose one node from Python: probe under a root, run the checks, build the Result.

>>> from fabricscope.doctor import diagnose, open_root
>>> report = diagnose(open_root("tests/doctor/fixtures/healthy-ib-8gpu"), env={})
>>> report.exit_code
0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricscope.doctor.checks import run_checks
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, counts, exit_code, verdict
from fabricscope.doctor.inventory import Node
from fabricscope.doctor.probes.node import NodeEnv, probe_node
from fabricscope.errors import InvalidValue
from fabricscope.results import Result
from fabricscope.shown import cut
from fabricscope.sysroot import SysRoot

__all__ = ["Diagnosis", "diagnose", "doctor_result", "expand_placeholders", "open_root"]


def open_root(path: str) -> SysRoot:
    """A :class:`SysRoot` for ``path``, or a :class:`UsageError` when it is not a tree to read."""
    directory = Path(path)
    top = "give the top of a captured tree (the directory that holds sys/ and proc/)"
    shown = cut(path)
    try:
        is_dir = directory.is_dir()
        if not is_dir:
            if directory.exists():
                kind = "a file, not a directory" if directory.is_file() else "not a directory"
                raise InvalidValue(f"{shown}: {kind}; {top}, or /", key="root")
            raise InvalidValue(f"{shown}: no such directory", key="root")
        if path != "/" and not (directory / "sys").is_dir() and not (directory / "proc").is_dir():
            raise InvalidValue(f"{shown}: no sys/ or proc/ inside; {top}", key="root")
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        if isinstance(exc, InvalidValue):
            raise
        why = getattr(exc, "strerror", None) or str(exc)
        raise InvalidValue(f"{shown}: cannot be read ({why}); {top}", key="root") from None
    return SysRoot(directory)


def expand_placeholders(template: str, *, rank: int, local_rank: int) -> str:
    """``nodes/{rank}`` -> ``nodes/3``: lets ranks of one fleet read (or write) different trees."""
    return template.replace("{rank}", str(rank)).replace("{local_rank}", str(local_rank))


@dataclass(kw_only=True, slots=True)
class Diagnosis:
    """One node's probe results and the findings of every check that applied."""

    node: Node
    findings: list[Finding]
    expect: Expectations

    @property
    def exit_code(self) -> int:
        return exit_code(self.findings)


def diagnose(
    root: SysRoot, *, env: Mapping[str, str] | NodeEnv | None = None, expect: Expectations | None = None
) -> Diagnosis:
    """Probe ``root`` and run every check.  ``env`` is the NCCL environment (None: the capture's or ours)."""
    expect = expect or Expectations()
    node = probe_node(root, env)
    return Diagnosis(node=node, findings=run_checks(node, expect), expect=expect)


def doctor_result(
    findings: Sequence[Finding],
    *,
    config: dict[str, Any],
    hostname: str,
    env: dict[str, Any],
    summary: dict[str, Any] | None = None,
    node_labels: Sequence[str] | None = None,
) -> Result:
    """A Result of kind ``doctor``: one record per finding (with its node in fleet mode)."""
    records = []
    for index, item in enumerate(findings):
        record = item.to_dict()
        if node_labels is not None:
            record["node"] = node_labels[index]
        records.append(record)
    data = {
        "verdict": verdict(findings),
        "exit_code": exit_code(findings),
        "counts": counts(findings),
    }
    data.update(summary or {})
    return Result(kind="doctor", config=config, records=records, summary=data, host={"hostname": hostname}, env=env)
