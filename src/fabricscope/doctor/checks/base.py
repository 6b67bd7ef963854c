"""The check object and the vocabulary the checks share.

A check knows whether it applies to a node, looks at the :class:`Node`, and
returns findings: one per subject, ``ok`` included, so a report or a fleet can
show what was verified and not only what failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import ClassVar

from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NetInterface, Node, PcieLink, RdmaPort
from fabricscope.doctor.parsers import pcie_generation

__all__ = [
    "Check",
    "compute_nics",
    "compute_ports",
    "finding",
    "format_link",
    "format_rate",
    "majority",
]


class Check:
    """One diagnostic: subclasses set ``id``, ``title`` and ``reads`` and implement :meth:`run`."""

    id: ClassVar[str]
    title: ClassVar[str]
    """One line: what it verifies."""
    reads: ClassVar[str]
    """Where its facts come from (for ``docs/doctor.md`` and ``--list``)."""

    def applies(self, node: Node, expect: Expectations) -> bool:
        """False when the node has nothing this check is about (no RDMA ports for a port check)."""
        return True

    def run(self, node: Node, expect: Expectations) -> list[Finding]:
        raise NotImplementedError

    def finding(
        self,
        severity: Severity,
        subject: str,
        observed: str,
        expected: str = "",
        advice: str = "",
    ) -> Finding:
        return finding(self.id, severity, subject, observed, expected, advice)


def finding(
    check_id: str, severity: Severity, subject: str, observed: str, expected: str = "", advice: str = ""
) -> Finding:
    return Finding(
        id=check_id,
        severity=severity,
        subject=subject,
        observed=observed,
        expected=expected,
        advice=advice if severity >= Severity.WARN else "",
    )


def compute_ports(node: Node, expect: Expectations) -> list[RdmaPort]:
    """The RDMA ports that carry training traffic: all, or those of the expected link layer."""
    ports = node.ports
    if expect.link_layer is not None:
        ports = [p for p in ports if p.link_layer == expect.link_layer]
    return ports


def compute_nics(node: Node, expect: Expectations) -> list[NetInterface]:
    """The NICs training traffic would use.

    With RDMA: the netdevs of the compute RDMA ports (IPoIB or RoCE).
    Without: physical (non-virtual) interfaces that are up, since NCCL's socket
    transport and gloo pick among those.
    """
    if node.ports:
        labels = {p.label for p in compute_ports(node, expect)}
        return [n for n in node.nics if n.rdma in labels]
    return [n for n in node.nics if not n.virtual and n.arphrd != 772 and n.operstate == "up"]


def format_rate(gbps: float | None) -> str:
    if gbps is None:
        return "unknown"
    return f"{gbps:g} Gb/s"


def format_link(gts: float | None, width: int | None) -> str:
    """``Gen5 x16`` (with the GT/s when the generation is not a known one)."""
    generation = pcie_generation(gts)
    speed = "speed unknown" if gts is None else f"Gen{generation}" if generation else f"{gts:g} GT/s"
    lanes = "width unknown" if width is None else f"x{width}"
    return f"{speed} {lanes}"


def link_capability(link: PcieLink) -> str:
    return format_link(link.capable_gts, link.capable_width)


def majority(values: Iterable[object]) -> object | None:
    """The most common value when it is strictly the most common; None on a tie or no values."""
    ranked = Counter(values).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]
