"""The check object and the vocabulary the checks share.

A check knows whether it applies to a node, looks at the :class:`Node`, and
returns findings: one per subject, ``ok`` included, so a report or a fleet can
show what was verified and not only what failed.

Which RDMA ports and NICs carry training traffic (the *compute* ones) is
decided here, once for every check: the names ``--expect nic.devices`` lists;
else the ports ``NCCL_IB_HCA`` lets NCCL use (its ``=``, ``^`` and ``:port``
syntax, as NCCL matches it); else the ports of ``--expect nic.link_layer``;
else every RDMA port.  Without RDMA ports, the physical NICs that are up.
Within one :func:`one_run` (every check over one node) the choice is made once
and shared; outside it, each call decides anew.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import NetInterface, Node, PciDevice, RdmaPort
from fabricscope.doctor.probes.nccl import parse_interface_list
from fabricscope.doctor.probes.net import ARPHRD_LOOPBACK
from fabricscope.kernel_text import pcie_generation

T = TypeVar("T")

__all__ = [
    "Check",
    "Compute",
    "compute",
    "compute_nic_devices",
    "compute_nics",
    "compute_ports",
    "finding",
    "format_link",
    "format_rate",
    "is_active",
    "majority",
    "more_than_expected",
    "one_run",
    "per_run",
    "rate_finding",
]

_ACTIVE = 4


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


def more_than_expected(found: int, expected: int, things: str, key: str, source: str | None, hint: str = "") -> str:
    """Advice when a node has more ``things`` than expected: nothing is missing; the expectation may be wrong."""
    where = f"{key} in {source}" if source else key
    return (
        f"{found} {things} found where {expected} are expected: none is missing or off the bus; "
        f"the expectation may be wrong ({where}), or this node is not of the kind it describes{hint}"
    )


def is_active(port: RdmaPort) -> bool:
    """State ``4: ACTIVE``: the only state in which NCCL uses a port."""
    return port.state is not None and port.state[0] == _ACTIVE


@dataclass(frozen=True, slots=True)
class Compute:
    """The compute ports and NICs of a node, and what chose them."""

    ports: list[RdmaPort]
    nics: list[NetInterface]
    chosen_by: str
    """``--expect nic.devices``, ``NCCL_IB_HCA=... (/etc/nccl.conf:3)``, ``--expect nic.link_layer``, ..."""
    missing: list[str]
    """Names ``--expect nic.devices`` lists that the node does not have."""


_CHOSEN: ContextVar[dict[tuple[str, int, int], Any] | None] = ContextVar("compute_chosen", default=None)
"""What :func:`per_run` made for each (what, node, expectations) inside :func:`one_run`; None outside one."""


@contextmanager
def one_run() -> Iterator[None]:
    """Every check of one run over a node that does not change meanwhile: :func:`compute` decides once."""
    token = _CHOSEN.set({})
    try:
        yield
    finally:
        _CHOSEN.reset(token)


def per_run(what: str, node: Node, expect: Expectations, make: Callable[[Node, Expectations], T]) -> T:
    """``make(node, expect)``, made once per :func:`one_run` (several checks ask for the same devices)."""
    chosen = _CHOSEN.get()
    if chosen is None:
        return make(node, expect)
    key = (what, id(node), id(expect))
    if key not in chosen:
        chosen[key] = make(node, expect)
    made: T = chosen[key]
    return made


def compute(node: Node, expect: Expectations) -> Compute:
    """The RDMA ports and NICs that carry training traffic (see the module docstring)."""
    return per_run("compute", node, expect, _compute)


def _compute(node: Node, expect: Expectations) -> Compute:
    ports = node.ports
    hca = node.nccl.get("NCCL_IB_HCA")
    if expect.compute_devices:
        wanted = expect.compute_devices
        chosen = [p for p in ports if _named(p, wanted)]
        nics = [n for n in node.nics if n.name in wanted or n.rdma in {p.label for p in chosen}]
        chosen_by = "--expect nic.devices"
        known = {d.name for d in node.rdma} | {p.netdev for p in ports if p.netdev} | {n.name for n in node.nics}
        labels = {f"{p.device}:{p.port}" for p in ports}
        missing = [w for w in wanted if w not in known and w not in labels]
        return Compute(ports=chosen, nics=nics, chosen_by=chosen_by, missing=missing)
    if ports and hca is not None:
        selection = parse_interface_list(hca.value)
        chosen = [p for p in ports if selection.matches(p.device, p.port)]
        chosen_by = f"NCCL_IB_HCA={hca.value} ({hca.source})"
    elif ports and expect.link_layer is not None:
        chosen = [p for p in ports if p.link_layer == expect.link_layer]
        chosen_by = "--expect nic.link_layer"
    elif ports:
        chosen, chosen_by = ports, "default: every RDMA port"
    else:
        nics = [n for n in node.nics if not n.virtual and n.arphrd != ARPHRD_LOOPBACK and n.operstate == "up"]
        return Compute(ports=[], nics=nics, chosen_by="default: the physical NICs that are up", missing=[])
    labels = {p.label for p in chosen}
    return Compute(ports=chosen, nics=[n for n in node.nics if n.rdma in labels], chosen_by=chosen_by, missing=[])


def _named(port: RdmaPort, names: Iterable[str]) -> bool:
    return any(name in (port.device, f"{port.device}:{port.port}", port.netdev) for name in names)


def compute_ports(node: Node, expect: Expectations) -> list[RdmaPort]:
    """The RDMA ports that carry training traffic."""
    return compute(node, expect).ports


def compute_nics(node: Node, expect: Expectations) -> list[NetInterface]:
    """The NICs training traffic would use: the netdevs of the compute ports, or the physical NICs that are up."""
    return compute(node, expect).nics


def compute_nic_devices(node: Node, expect: Expectations) -> list[tuple[str, PciDevice]]:
    """The PCI devices of the compute RDMA devices, by name (for GPU-to-NIC distances)."""
    names = {p.device for p in compute_ports(node, expect)}
    return [(d.name, node.pci[d.pci]) for d in node.rdma if d.name in names and d.pci is not None and d.pci in node.pci]


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


def majority(values: Iterable[object]) -> object | None:
    """The most common value when it is strictly the most common; None on a tie or no values."""
    ranked = Counter(values).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def rate_finding(
    check: Check,
    subject: str,
    seen: str,
    gbps: float,
    *,
    wanted: float | None,
    twins: float | None,
    supported: float | None,
    advice: str,
) -> Finding:
    """A link rate judged against the expected rate (fail below it), else its twins and the NIC's fastest mode (warn).

    ``twins`` is the fastest rate of the same model on this node; ``supported``
    the fastest link mode the NIC itself supports (``ethtool``).  With an
    expected rate, only that rate counts: a 200G NIC meant to run at 100G is fine.
    """
    if wanted is not None:
        if gbps < wanted:
            return check.finding(
                Severity.FAIL, subject, seen, format_rate(wanted), f"below the expected rate: {advice}"
            )
        return check.finding(Severity.OK, subject, seen, format_rate(wanted))
    best = [(value, why) for value, why in ((supported, "the NIC's fastest mode"), (twins, "like its twins")) if value]
    top = max(best, default=None, key=lambda item: item[0])
    if top is not None and gbps < top[0]:
        return check.finding(
            Severity.WARN,
            subject,
            seen,
            f"{format_rate(top[0])} ({top[1]})",
            f"the link negotiated below {top[1]}: {advice}; a compute port slower on purpose is declared "
            "with --expect nic.rate",
        )
    return check.finding(Severity.OK, subject, seen)
