"""Fleet mode: every rank probes its node, rank 0 compares the nodes and names the odd one out.

Ranks exchange a small JSON report (findings and a few facts per node)
through a ``torch.distributed.TCPStore`` at the launcher's rendezvous address;
torch is imported only here, only in fleet mode.  Ranks on one host that saw
the same thing count as one node, so ``torchrun --nproc-per-node 8`` on four
hosts compares four nodes.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from fabricscope.bench.launch import World
from fabricscope.doctor.checks.base import compute_nics, compute_ports, finding, format_link, majority
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity, exit_code
from fabricscope.doctor.inventory import DISTANCES, Node
from fabricscope.doctor.pci import distance
from fabricscope.errors import MissingDependencyError, RunError

__all__ = [
    "Difference",
    "NodeReport",
    "compare",
    "exchange",
    "fleet_findings",
    "group_reports",
    "node_facts",
]


def _tally(values: Sequence[object]) -> str:
    """``["400", "400", "200"]`` -> ``2x 400, 1x 200``; one distinct value -> ``Nx value``."""
    counted = Counter(str(v) for v in values)
    return ", ".join(f"{n}x {v}" for v, n in sorted(counted.items(), key=lambda item: (-item[1], item[0])))


def node_facts(node: Node, expect: Expectations) -> dict[str, str]:
    """The values that should be identical on every node of a fleet, as text."""
    ports = compute_ports(node, expect)
    nics = compute_nics(node, expect)
    facts: dict[str, str] = {
        "GPUs": str(len(node.gpus)),
        "GPU models": ", ".join(sorted({f"10de:{g.device_id:04x}" for g in node.gpus if g.device_id})) or "-",
        "RDMA ports": str(len(node.ports)),
        "port states": _tally([p.state[1] if p.state else "unreadable" for p in node.ports]) or "-",
        "port rates": _tally([p.rate_text or "unknown" for p in ports]) or "-",
        "link layers": _tally([p.link_layer or "unknown" for p in node.ports]) or "-",
        "HCA firmware": ", ".join(sorted({d.fw_ver or "unreadable" for d in node.rdma})) or "-",
        "compute NICs": str(len(nics)),
        "compute NIC MTU": _tally([n.mtu if n.mtu is not None else "unreadable" for n in nics]) or "-",
        "NIC drivers": ", ".join(
            sorted({f"{n.driver} {node.modules.get(n.driver, '')}".strip() for n in nics if n.driver})
        )
        or "-",
        "NIC PCIe links": _tally(
            [format_link(d.link.current_gts, d.link.current_width) for d in _pci_of(node, nics) if d.link]
        )
        or "-",
        "GPU PCIe (best)": _tally(
            [
                format_link(d.link.capable_gts, d.link.capable_width)
                for g in node.gpus
                if (d := node.pci.get(g.pci)) is not None and d.link is not None
            ]
        )
        or "-",
        "NVIDIA driver": node.gpudirect.driver_version or "-",
        "GPUDirect RDMA": (
            "peer-memory module" if node.gpudirect.peermem else "DMA-BUF" if node.gpudirect.dmabuf_possible else "none"
        ),
        "kernel": node.kernel or "unknown",
        "TCP congestion control": node.tcp.congestion or "unknown",
        "NCCL settings": "; ".join(f"{k}={v.value}" for k, v in sorted(node.nccl.items()) if k.startswith("NCCL_"))
        or "none",
    }
    distances = _gpu_nic_distances(node, expect)
    if distances:
        facts["GPU-NIC distance"] = distances
    return facts


def _pci_of(node: Node, nics: Sequence[Any]) -> list[Any]:
    seen = {n.pci for n in nics if n.pci}
    return [node.pci[a] for a in sorted(seen) if a in node.pci]


def _gpu_nic_distances(node: Node, expect: Expectations) -> str:
    names = {p.device for p in compute_ports(node, expect)}
    nics = [node.pci[d.pci] for d in node.rdma if d.name in names and d.pci in node.pci and d.pci]
    found = []
    for gpu in node.gpus:
        device = node.pci.get(gpu.pci)
        if device is not None and nics:
            found.append(min((distance(device, n) for n in nics), key=DISTANCES.index))
    return _tally(found)


@dataclass(kw_only=True, slots=True)
class NodeReport:
    """What one rank sends to rank 0."""

    rank: int
    hostname: str
    root: str
    facts: dict[str, str]
    findings: list[Finding]
    ranks: list[int] = field(default_factory=list)
    label: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "rank": self.rank,
                "hostname": self.hostname,
                "root": self.root,
                "facts": self.facts,
                "findings": [f.to_dict() for f in self.findings],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> NodeReport:
        data = json.loads(text)
        return cls(
            rank=int(data["rank"]),
            hostname=str(data["hostname"]),
            root=str(data["root"]),
            facts={str(k): str(v) for k, v in data["facts"].items()},
            findings=[Finding.from_dict(f) for f in data["findings"]],
        )


def group_reports(reports: Sequence[NodeReport]) -> list[NodeReport]:
    """One entry per node: ranks of one host that saw the same thing merge; others keep their rank."""
    by_host: dict[str, list[NodeReport]] = defaultdict(list)
    for report in sorted(reports, key=lambda r: r.rank):
        by_host[report.hostname].append(report)
    nodes: list[NodeReport] = []
    for host, group in by_host.items():
        distinct: dict[str, NodeReport] = {}
        for report in group:
            key = json.dumps([report.facts, [f.to_dict() for f in report.findings]], sort_keys=True)
            if key in distinct:
                distinct[key].ranks.append(report.rank)
            else:
                report.ranks = [report.rank]
                distinct[key] = report
        for report in distinct.values():
            report.label = host if len(distinct) == 1 else f"{host}[rank {report.ranks[0]}]"
            nodes.append(report)
    return nodes


@dataclass(frozen=True, kw_only=True, slots=True)
class Difference:
    """A value that is not the same on every node."""

    fact: str
    common: str | None
    """The majority value; None when no value has a strict majority of nodes."""
    common_nodes: int
    total: int
    odd: dict[str, str]
    """Nodes that differ from the majority, with their value (every node when there is no majority)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "fact": self.fact,
            "common": self.common,
            "common_nodes": self.common_nodes,
            "total": self.total,
            "odd": self.odd,
        }


def compare(facts: dict[str, dict[str, str]]) -> list[Difference]:
    """Values that differ across nodes, with the odd nodes named.

    The odd ones are the nodes whose value differs from the one most nodes
    share; with two nodes, or a tie, there is no majority and every value is listed.
    """
    total = len(facts)
    keys = sorted({k for values in facts.values() for k in values}, key=_fact_order)
    differences = []
    for key in keys:
        values = {node: node_facts.get(key, "-") for node, node_facts in facts.items()}
        if len(set(values.values())) <= 1:
            continue
        common = majority(values.values()) if total > 2 else None
        common_text = None if common is None else str(common)
        odd = {node: value for node, value in values.items() if value != common_text}
        differences.append(
            Difference(
                fact=key,
                common=common_text,
                common_nodes=total - len(odd) if common_text is not None else 0,
                total=total,
                odd=odd,
            )
        )
    return differences


_FACT_ORDER = (
    "GPUs",
    "GPU models",
    "compute NICs",
    "RDMA ports",
    "port states",
    "port rates",
    "link layers",
    "compute NIC MTU",
    "HCA firmware",
    "NIC drivers",
    "NVIDIA driver",
    "NIC PCIe links",
    "GPU PCIe (best)",
    "GPU-NIC distance",
    "GPUDirect RDMA",
    "kernel",
    "TCP congestion control",
    "NCCL settings",
)


def _fact_order(key: str) -> tuple[int, str]:
    return (_FACT_ORDER.index(key) if key in _FACT_ORDER else len(_FACT_ORDER), key)


def fleet_findings(differences: Sequence[Difference], missing: Sequence[int], timeout_s: float) -> list[Finding]:
    """Fleet-level findings: a rank that never reported (fail), a value that differs (warn)."""
    findings = [
        finding(
            "fleet.report",
            Severity.FAIL,
            f"rank {rank}",
            f"no report within {timeout_s:g} s",
            "a report from every rank",
            "the rank died, hung or cannot reach the rendezvous address: check that node",
        )
        for rank in missing
    ]
    for diff in differences:
        odd = ", ".join(f"{node} ({value})" for node, value in diff.odd.items())
        if diff.common is None:
            observed, expected = f"no majority: {odd}", "one value on every node"
        else:
            observed = f"odd: {odd}"
            expected = f"{diff.common} ({diff.common_nodes} of {diff.total} nodes)"
        findings.append(
            finding(
                "fleet.consistency",
                Severity.WARN,
                diff.fact,
                observed,
                expected,
                "bring the odd nodes in line with the rest (same firmware, driver, MTU, links, settings); "
                "the fleet runs at the speed of its slowest node",
            )
        )
    return findings


def fleet_exit(nodes: Sequence[NodeReport], extra: Sequence[Finding]) -> int:
    return exit_code([f for n in nodes for f in n.findings] + list(extra))


def exchange(world: World, payload: str, timeout_s: float) -> tuple[list[str], list[int]] | None:
    """Send this rank's report; on rank 0 return every report received and the ranks that sent none."""
    try:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]
    except ImportError:
        raise MissingDependencyError(
            "fleet mode of fabricscope doctor exchanges reports through torch.distributed: "
            "pip install 'fabricscope[torch]'"
        ) from None
    hosts_store = world.rank == 0 and not world.agent_store
    try:
        store = TCPStore(
            world.master_addr,
            world.master_port,
            world_size=world.world_size if hosts_store else None,
            is_master=hosts_store,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as exc:
        raise RunError(
            f"rank {world.rank}: cannot reach the rendezvous store at {world.master_addr}:{world.master_port} ({exc})"
        ) from None
    prefix = f"fabricscope/doctor/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    store.set(f"{prefix}{world.rank}", payload)
    if world.rank != 0:
        return None
    keys = [f"{prefix}{rank}" for rank in range(world.world_size)]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not all(store.check([k]) for k in keys):
        time.sleep(0.05)
    received, missing = [], []
    for rank, key in enumerate(keys):
        if store.check([key]):
            received.append(store.get(key).decode("utf-8"))
        else:
            missing.append(rank)
    return received, missing
