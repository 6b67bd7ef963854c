"""Fleet mode: every rank probes its node, rank 0 compares the nodes and names the odd one out.

Ranks exchange a small JSON report (findings and a few facts per node)
through a ``torch.distributed.TCPStore`` at the launcher's rendezvous address;
torch is imported only here, only in fleet mode.  Each rank first announces
its host, then probes, then sends its report, so rank 0 can name the host of
a rank that died or hung while probing.  A rank that cannot probe (its tree is
missing) sends a report that says so instead of exiting: under a launcher a
rank that exits with an error takes the whole job, and the fleet report, down.
But a rank that cannot reach the store, or whose rank 0 stops (SIGSTOP, a
hang) before the fleet report is out, exits with 3: then there is no fleet
report to save, and a rank that exited 0 would leave the launcher waiting
forever on a frozen rank 0.

Ranks of one machine (same hostname and boot id) that saw the same values
count as one node, so ``torchrun --nproc-per-node 8`` on four hosts compares
four nodes; findings that differ in passing (a counter read a moment later)
do not split them.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, Protocol, TypeVar, cast

from fabricscope.doctor.checks.base import (
    compute_nic_devices,
    compute_nics,
    compute_ports,
    finding,
    format_link,
    majority,
)
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import DoctorIncomplete, Finding, Severity
from fabricscope.doctor.inventory import Node
from fabricscope.doctor.probes.pci import nearest
from fabricscope.errors import MissingDependencyError
from fabricscope.launch import World
from fabricscope.units import format_size, is_digits

__all__ = [
    "MAX_NAMED",
    "Difference",
    "NodeReport",
    "Rendezvous",
    "Store",
    "compare",
    "failed_report",
    "fleet_findings",
    "group_reports",
    "machine_findings",
    "node_facts",
]

_T = TypeVar("_T")


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
        "CUDA (driver)": node.cuda_driver or "-",
        "GPUDirect RDMA": (
            "peer-memory module" if node.gpudirect.peermem else "DMA-BUF" if node.gpudirect.dmabuf_possible else "none"
        ),
        "kernel": node.kernel or "unknown",
        "NCCL library": node.libraries.get("NCCL", "-"),
        "NCCL (Python wheel)": node.libraries.get("NCCL (Python wheel)", "-"),
        "libibverbs (rdma-core)": node.libraries.get("libibverbs", "-"),
        "TCP congestion control": node.tcp.congestion or "unknown",
        "locked memory": _memlock(node),
        "/dev/shm": "unknown" if node.host.shm_bytes is None else format_size(node.host.shm_bytes),
        "NUMA balancing": "unknown" if node.host.numa_balancing is None else str(node.host.numa_balancing),
        "transparent huge pages": node.host.thp or "unknown",
        "CPU governor": _tally([g for g, n in node.host.governors.items() for _ in range(n)]) or "-",
        "IOMMU (GPUs, NICs)": _tally(
            [d.iommu or "none" for d in _pci_of(node, nics)]
            + [(node.pci[g.pci].iommu or "none") if g.pci in node.pci else "none" for g in node.gpus]
        )
        or "-",
        "NCCL settings": "; ".join(f"{k}={v.value}" for k, v in sorted(node.nccl.items()) if k.startswith("NCCL_"))
        or "none",
    }
    distances = _gpu_nic_distances(node, expect)
    if distances:
        facts["GPU-NIC distance"] = distances
    return facts


def _memlock(node: Node) -> str:
    if node.host.memlock is None:
        return "unknown"
    soft = node.host.memlock[0]
    return "unlimited" if soft is None else format_size(soft)


def _pci_of(node: Node, nics: Sequence[Any]) -> list[Any]:
    seen = {n.pci for n in nics if n.pci}
    return [node.pci[a] for a in sorted(seen) if a in node.pci]


def _gpu_nic_distances(node: Node, expect: Expectations) -> str:
    nics = compute_nic_devices(node, expect)
    found = []
    for gpu in node.gpus:
        device = node.pci.get(gpu.pci)
        closest = nearest(device, nics) if device is not None else None
        if closest is not None:
            found.append(closest[0])
    return _tally(found)


@dataclass(kw_only=True, slots=True)
class NodeReport:
    """What one rank sends to rank 0."""

    rank: int
    hostname: str
    root: str
    facts: dict[str, str]
    findings: list[Finding]
    boot_id: str | None = None
    shm_device: str | None = None
    """``major:minor`` of the rank's ``/dev/shm`` (NCCL's ``shmDev``); None when unknown."""
    host_id: str | None = None
    """The rank's ``NCCL_HOSTID``: NCCL's host hash is made of it instead of host name and boot id."""
    failed: bool = False
    """The rank could not probe its node: ``findings`` says why, ``facts`` is empty."""
    ranks: list[int] = field(default_factory=list)
    label: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "rank": self.rank,
                "hostname": self.hostname,
                "boot_id": self.boot_id,
                "shm_device": self.shm_device,
                "host_id": self.host_id,
                "root": self.root,
                "failed": self.failed,
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
            boot_id=None if data.get("boot_id") is None else str(data["boot_id"]),
            shm_device=None if data.get("shm_device") is None else str(data["shm_device"]),
            host_id=None if data.get("host_id") is None else str(data["host_id"]),
            root=str(data["root"]),
            failed=bool(data.get("failed", False)),
            facts={str(k): str(v) for k, v in data["facts"].items()},
            findings=[Finding.from_dict(f) for f in data["findings"]],
        )


def failed_report(rank: int, hostname: str, root: str, why: str) -> NodeReport:
    """The report of a rank that could not probe its node: one failure saying why."""
    problem = finding(
        "fleet.report",
        Severity.FAIL,
        f"rank {rank}",
        f"could not probe its node: {why}",
        "a report from every rank",
        "fix what the rank could not read (its --root tree, permissions) and rerun",
    )
    return NodeReport(rank=rank, hostname=hostname, root=root, facts={}, findings=[problem], failed=True)


def group_reports(reports: Sequence[NodeReport]) -> list[NodeReport]:
    """One entry per node: ranks of one machine with the same facts merge; others keep their rank in the label.

    A machine is its hostname and boot id; the facts are the values compared
    across the fleet, so findings that differ in passing (a counter read a
    moment later, the root path in a probe finding) never split a node.  The
    merged node keeps the lowest rank's findings.
    """
    by_host: dict[tuple[str, str | None], list[NodeReport]] = defaultdict(list)
    for report in sorted(reports, key=lambda r: r.rank):
        by_host[(report.hostname, report.boot_id)].append(report)
    names = Counter(host for host, _ in by_host)
    nodes: list[NodeReport] = []
    for (host, boot_id), group in by_host.items():
        here: list[NodeReport] = []
        by_facts: dict[str, NodeReport] = {}
        for report in group:
            report.ranks = [report.rank]
            key = json.dumps(report.facts, sort_keys=True)
            if not report.failed and key in by_facts:
                by_facts[key].ranks.append(report.rank)
                continue
            if not report.failed:
                by_facts[key] = report
            here.append(report)
        name = host if names[host] == 1 or not boot_id else f"{host} (boot {boot_id[:8]})"
        for report in here:
            report.label = name if len(here) == 1 else f"{name}[rank {report.ranks[0]}]"
        nodes.extend(here)
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
        return asdict(self)


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
    "CUDA (driver)",
    "NIC PCIe links",
    "GPU PCIe (best)",
    "GPU-NIC distance",
    "GPUDirect RDMA",
    "kernel",
    "NCCL library",
    "NCCL (Python wheel)",
    "libibverbs (rdma-core)",
    "TCP congestion control",
    "locked memory",
    "/dev/shm",
    "NUMA balancing",
    "transparent huge pages",
    "CPU governor",
    "IOMMU (GPUs, NICs)",
    "NCCL settings",
)


FLEET_CHECKS = (
    ("fleet.report", "Every rank probed its node and reported to rank 0", "the ranks' reports"),
    ("fleet.consistency", "Nodes agree on what should be the same everywhere", "the facts each rank reports"),
    (
        "fleet.machine",
        "NCCL takes the ranks of one machine for one node",
        "proc/sys/kernel/hostname and proc/sys/kernel/random/boot_id of each rank",
    ),
    (
        "fleet.shm",
        "The ranks of one machine share /dev/shm, so NCCL connects them by NVLink, PCIe and shared memory",
        "proc/self/mountinfo of each rank (the device of /dev/shm)",
    ),
)
"""Checks rank 0 runs on the reports of the whole fleet: (id, title, what they read)."""
_SAME_NODE = (
    "NCCL connects ranks by NVLink, PCIe peer-to-peer or shared memory only when they have one host hash "
    "(host name and boot id, or NCCL_HOSTID) and one /dev/shm file system (src/graph/paths.cc, "
    "src/transport/shm.cc): otherwise their traffic goes through the network"
)


def machine_findings(reports: Sequence[NodeReport]) -> list[Finding]:
    """Ranks of one machine (one boot id) that NCCL will not connect inside it: under several host names
    (containers with their own UTS namespace) and no common ``NCCL_HOSTID``, or on different ``/dev/shm``
    file systems (containers each with their own)."""
    findings = []
    by_boot: dict[str, list[NodeReport]] = defaultdict(list)
    for report in sorted(reports, key=lambda r: r.rank):
        if report.boot_id and not report.failed:
            by_boot[report.boot_id].append(report)
    for boot_id, group in by_boot.items():
        # What NCCL's host hash is made of: NCCL_HOSTID where set, else the host name (with this boot id).
        hosts = Counter(_nccl_host(r) for r in group)
        if len(hosts) > 1:
            named = ", ".join(f"{host} ({n} ranks)" if n > 1 else host for host, n in hosts.most_common(MAX_NAMED))
            findings.append(
                finding(
                    "fleet.machine",
                    Severity.WARN,
                    f"boot {boot_id[:8]}",
                    f"one machine, {len(hosts)} host names: {named}",
                    "one host name (or one NCCL_HOSTID) per machine",
                    f"{_SAME_NODE}; run the ranks of a machine in one container, or give them one NCCL_HOSTID "
                    "and the host's /dev/shm",
                )
            )
        for host in hosts:
            members = [r for r in group if _nccl_host(r) == host]
            devices = Counter(r.shm_device for r in members if r.shm_device)
            if len(devices) < 2:
                continue
            ranks = {d: [r.rank for r in members if r.shm_device == d] for d in devices}
            shown = "; ".join(f"{device} for rank{'s' * (len(r) > 1)} {_ranks(r)}" for device, r in ranks.items())
            findings.append(
                finding(
                    "fleet.shm",
                    Severity.WARN,
                    host,
                    f"{len(devices)} /dev/shm file systems: {shown}",
                    "one /dev/shm for every rank of a machine",
                    f"{_SAME_NODE}; share the host's /dev/shm (docker run --ipc=host, Kubernetes hostIPC: true) "
                    "or run the ranks of a machine in one container",
                )
            )
    return findings


def _nccl_host(report: NodeReport) -> str:
    return f"NCCL_HOSTID={report.host_id}" if report.host_id else report.hostname


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:MAX_NAMED])
    return shown + (f" and {len(ranks) - MAX_NAMED} more" if len(ranks) > MAX_NAMED else "")


def _fact_order(key: str) -> tuple[int, str]:
    return (_FACT_ORDER.index(key) if key in _FACT_ORDER else len(_FACT_ORDER), key)


def fleet_findings(
    differences: Sequence[Difference], missing: Mapping[int, str | None], timeout_s: float
) -> list[Finding]:
    """Fleet-level findings: a rank that never reported (fail, with its host when it said), a value that differs."""
    findings = []
    silent = sorted(missing.items())
    for rank, host in silent[:MAX_NAMED]:
        findings.append(
            finding(
                "fleet.report",
                Severity.FAIL,
                f"rank {rank}" + (f" on {host}" if host else ""),
                f"no report within {timeout_s:g} s"
                + (" (it started, then died or hung while probing)" if host else " (it never reached rank 0)"),
                "a report from every rank",
                "the rank died, hung or cannot reach the rendezvous address: check that node",
            )
        )
    if len(silent) > MAX_NAMED:
        rest = [rank for rank, _ in silent[MAX_NAMED:]]
        findings.append(
            finding(
                "fleet.report",
                Severity.FAIL,
                f"{len(rest)} more ranks ({rest[0]} to {rest[-1]})",
                f"no report within {timeout_s:g} s",
                "a report from every rank",
                "so many silent ranks: is WORLD_SIZE what the launcher really started? otherwise check those nodes",
            )
        )
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


class Store(Protocol):
    """What fleet mode needs of ``torch.distributed.TCPStore`` (tests pass a dictionary-backed one)."""

    def set(self, key: str, value: str) -> None: ...

    def check(self, keys: list[str]) -> bool: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...


_FINISH_MARGIN_S = 10.0
"""Seconds rank 0 gets beyond the timeout of its gathering to print and save the fleet report."""
_FAREWELL_S = 5.0
"""Seconds rank 0 waits, before it leaves, for the others to read that it is done and exit."""
_POLL_S = 0.05
MAX_NAMED = 64
"""Silent ranks named one by one (with their host); past that they are counted in one finding."""


class Rendezvous:
    """The exchange of one fleet run through the launcher's store.

    Each rank announces its host, probes, sends its report.  Rank 0 then
    gathers every report, prints the fleet and says it is done; the others
    wait, within the timeout, first for rank 0's own report (so that a rank 0
    stopped or hung while probing is noticed) and then for rank 0 to be done,
    say goodbye and exit at once.  A rank that cannot reach the store, or
    whose rank 0 never gets there, raises :class:`DoctorIncomplete` (exit 3):
    the launcher then ends the others instead of waiting forever on a frozen
    rank 0.  Rank 0 leaves last: it waits for the goodbyes, and for the
    processes of this machine that said goodbye to be gone, so that a
    launcher that sees rank 0 exit with the fleet's verdict (1 or 2) finds no
    other rank still running to stop (and report as failed).
    """

    def __init__(self, world: World, store: Store, timeout_s: float = 60.0) -> None:
        self.world = world
        self.store = store
        self.timeout_s = timeout_s
        """The longest any one store operation may take: a frozen store host never answers (torch's own
        timeout does not cover a server that accepted the request and stopped)."""
        self.prefix = f"fabricscope/doctor/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"

    @classmethod
    def connect(cls, world: World, timeout_s: float) -> Rendezvous:
        """Reach the launcher's store (rank 0 hosts it unless torchrun's agent does)."""
        # A store that cannot be reached is one line of ours, not torch's C++ log with its stack frames.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
        try:
            from torch.distributed import TCPStore  # type: ignore[attr-defined]
        except ImportError:
            raise MissingDependencyError(
                "fleet mode of fabricscope doctor exchanges reports through torch.distributed: "
                "pip install 'fabricscope[torch]'"
            ) from None
        from fabricscope.launch.rank import join_limit, stops_end_blocking_call

        hosts_store = world.rank == 0 and not world.agent_store
        where = f"{world.master_addr}:{world.master_port}"
        # Connecting retries in torch's C++ code, where a Python signal handler never runs: a Ctrl-C
        # while rank 0 has not opened the store yet would wait for the launcher's kill.  A store host
        # stopped once it listens takes the connection and never answers, and torch's timeout does not
        # cover that: past the limit the rank ends with the line below.
        limit = join_limit(timeout_s)
        late = (
            f"error: rank {world.rank}: cannot reach the rendezvous store at {where} within {limit:g} s "
            "(it took the connection and did not answer: its host, rank 0 or the launcher, is stopped or hung)"
        )
        try:
            with stops_end_blocking_call(
                world.rank,
                limit_s=limit,
                late=late,
                late_code=DoctorIncomplete.exit_code,
                said="interrupted while starting up: nothing was checked",
            ):
                store = TCPStore(
                    world.master_addr,
                    world.master_port,
                    world_size=world.world_size if hosts_store else None,
                    is_master=hosts_store,
                    timeout=timedelta(seconds=timeout_s),
                    wait_for_workers=False,
                )
        except (RuntimeError, OSError) as exc:
            raise DoctorIncomplete(
                f"rank {world.rank}: cannot reach the rendezvous store at {where} "
                f"within {timeout_s:g} s ({_first_line(exc)}); is rank 0 running?"
            ) from None
        return cls(world, store, timeout_s)

    def _store(self, doing: str, action: Callable[[], _T]) -> _T:
        """``action`` on the store, within :attr:`timeout_s`, in a daemon thread that may stay blocked for good."""
        outcome: list[tuple[bool, Any]] = []

        def call() -> None:
            try:
                outcome.append((True, action()))
            except BaseException as exc:  # handed to the caller below
                outcome.append((False, exc))

        worker = threading.Thread(target=call, name="fabricscope-doctor-store", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        where = f"{self.world.master_addr}:{self.world.master_port}"
        if not outcome:
            raise _NoAnswer(
                f"rank {self.world.rank}: the rendezvous store at {where} did not answer within "
                f"{self.timeout_s:g} s while {doing} (its host, rank 0 or the launcher, is stopped or hung)"
            )
        done, value = outcome[0]
        if done:
            return cast(_T, value)
        if isinstance(value, (RuntimeError, OSError)):  # torch's DistError is a RuntimeError
            raise DoctorIncomplete(
                f"rank {self.world.rank}: lost the rendezvous store at {where} while {doing} ({_first_line(value)})"
            ) from None
        raise value

    def _has(self, key: str, doing: str) -> bool:
        return self._store(doing, lambda: self.store.check([self.prefix + key]))

    def _set(self, key: str, value: str, doing: str) -> None:
        self._store(doing, lambda: self.store.set(self.prefix + key, value))

    def _get(self, key: str, doing: str) -> str:
        return self._store(doing, lambda: self.store.get(self.prefix + key)).decode("utf-8")

    def _wait(self, keys: Sequence[str], timeout_s: float, doing: str) -> bool:
        """Whether every key is set within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not all(self._has(k, doing) for k in keys):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def share(self, key: str, value: str) -> None:
        """Rank 0: tell every rank ``value`` under ``key`` (read with :meth:`shared`)."""
        self._set(key, value, f"sharing {key}")

    def shared(self, key: str, timeout_s: float, doing: str) -> str | None:
        """What rank 0 shared under ``key``, once it has; None when it has not within ``timeout_s``."""
        if not self._wait([key], timeout_s, doing):
            return None
        return self._get(key, doing)

    def announce(self, hostname: str) -> None:
        """Say which host this rank runs on, before probing (so a rank that hangs can be named)."""
        self._set(f"host/{self.world.rank}", hostname, "announcing its host")

    def send(self, payload: str) -> None:
        self._set(f"report/{self.world.rank}", payload, "sending its report")
        self._store("counting its report", lambda: self.store.add(self.prefix + "reported", 1))

    def _reported(self, doing: str) -> int:
        """How many ranks have sent their report (one counter: a world of any size is one query)."""
        return int(self._store(doing, lambda: self.store.add(self.prefix + "reported", 0)))

    def gather(self, timeout_s: float) -> tuple[list[str], dict[int, str | None]]:
        """Rank 0: every report received within ``timeout_s``, and the ranks that sent none (with their host).

        Bounded whatever the world's size: the wait polls one counter, and the
        reports are then read for at most ``timeout_s`` more; ranks past that
        (a launcher that claims 100,000 ranks of which 3 exist) count as silent,
        and only the first :data:`MAX_NAMED` silent ranks are asked for their host.
        """
        doing = "gathering the reports"
        size = self.world.world_size
        deadline = time.monotonic() + timeout_s
        while self._reported(doing) < size and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        received: list[str] = []
        missing: dict[int, str | None] = {}
        reading_until = time.monotonic() + timeout_s
        for rank in range(size):
            if time.monotonic() > reading_until:
                missing.update(dict.fromkeys(range(rank, size)))
                break
            key = f"report/{rank}"
            if self._has(key, doing):
                received.append(self._get(key, doing))
                continue
            host_key = f"host/{rank}"
            named = len(missing) < MAX_NAMED and self._has(host_key, doing)
            missing[rank] = self._get(host_key, doing) if named else None
        return received, missing

    def finish(self, reported: Sequence[int]) -> None:
        """Rank 0, once the fleet report is out: say so, and wait (briefly) for the ranks that reported to read it.

        Where rank 0 hosts the store, it dies with rank 0, so the others must
        have read this first; they leave after rank 0.  Where torchrun's agent
        hosts it, the others leave first: rank 0 also waits for the processes
        of this machine that said goodbye to be gone.  Nothing here can change
        the verdict already printed: a store lost now is not an error.
        """
        doing = "waiting for the others to leave"
        deadline = time.monotonic() + _FAREWELL_S
        with contextlib.suppress(DoctorIncomplete):
            self._set("done", "1", "saying it is done")
            byes = [f"bye/{rank}" for rank in reported if rank != self.world.rank]
            self._wait(byes, _FAREWELL_S, doing)
            if not self.world.agent_store:
                return
            here = _machine()
            pids = []
            for key in byes:
                machine, _, pid = (self._get(key, doing) if self._has(key, doing) else "").rpartition(" ")
                if machine == here and is_digits(pid) and int(pid) != os.getpid():
                    pids.append(int(pid))
            while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(_POLL_S)

    def await_rank0(self, timeout_s: float) -> None:
        """Every other rank, once its report is sent: return once rank 0 is done (the caller then exits at once).

        Rank 0 gets ``timeout_s`` for its probe, as every rank does, then its
        gathering's ``timeout_s`` and a margin to print; past either, raise.
        Where rank 0 hosts the store, also wait for rank 0 to exit (its store
        closes): a rank 0 that freezes on its way out stops answering, and
        this rank raises instead of leaving the launcher waiting on it.
        """
        doing = "waiting for rank 0"
        if not self._wait(["report/0"], timeout_s, doing):
            raise DoctorIncomplete(
                f"rank {self.world.rank}: rank 0 sent no report within {timeout_s:g} s "
                "(it is stopped, hung or dead): no fleet report"
            )
        finish_s = timeout_s + _FINISH_MARGIN_S
        if not self._wait(["done"], finish_s, doing):
            raise DoctorIncomplete(
                f"rank {self.world.rank}: rank 0 did not finish the fleet report within {finish_s:g} s "
                "(it is stopped, hung or dead)"
            )
        with contextlib.suppress(DoctorIncomplete):  # rank 0 stops waiting for this soon enough
            self._set(f"bye/{self.world.rank}", f"{_machine()} {os.getpid()}", "leaving")
        if not self.world.agent_store:
            # Rank 0 waits up to _FAREWELL_S for every rank's goodbye (one may be stopped): no sooner gone.
            self._await_exit_of_rank0(timeout_s + _FAREWELL_S)

    def _await_exit_of_rank0(self, timeout_s: float) -> None:
        """Until rank 0's store closes (rank 0 exited); raise if it stops answering (frozen) or never closes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self._has("done", "waiting for rank 0 to exit")
            except _NoAnswer:
                raise
            except DoctorIncomplete:
                return  # refused or reset: rank 0 has exited
            time.sleep(_POLL_S)
        raise DoctorIncomplete(f"rank {self.world.rank}: rank 0 did not exit within {timeout_s:g} s of the report")


class _NoAnswer(DoctorIncomplete):
    """The store took a request and never answered: its host is stopped or hung."""


def _machine() -> str:
    """This machine: its boot id (two hosts may share a name), else its hostname."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


def _running(pid: int) -> bool:
    """Whether a process of this machine still runs (a zombie, exited and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(") ", 1)[1][:1] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _first_line(exc: BaseException) -> str:
    """The message of a torch error without the C++ stack frames that may follow it."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
