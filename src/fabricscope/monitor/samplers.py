"""Samplers: each reads one family of counters under a :class:`~fabricscope.sysroot.SysRoot` into a snapshot.

Every read goes through the root, so a captured tree or a fixture drives the
samplers exactly as the live ``/`` does.  A file that cannot be read or
understood is a note (said once), never a crash; a family that is absent
(no RDMA devices, no ``ethtool``, no NVIDIA driver) is skipped quietly.
Locations and units: ``Documentation/ABI/testing/sysfs-class-net`` and
``Documentation/ABI/stable/sysfs-class-infiniband`` in the Linux tree,
``net/ipv4/proc.c`` for the TCP counters.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from fabricscope.kernel_text import (
    parse_counter,
    parse_ethtool_stats,
    parse_ib_rate,
    parse_ib_state,
    parse_net_dev,
    parse_net_speed,
    parse_proc_table,
)
from fabricscope.monitor.samples import Counter, CounterSource, Link, Notes, Port, Snapshot
from fabricscope.shown import quoted
from fabricscope.sysroot import CAPTURE_DIR, NotAFileError, SysRoot

__all__ = [
    "ETHTOOL_STATS",
    "RDMA_SATURATING_BITS",
    "TCP_COUNTERS",
    "EthtoolSampler",
    "GpuSampler",
    "NetDevSampler",
    "RdmaSampler",
    "Sampler",
    "TcpSampler",
    "default_samplers",
    "take_snapshot",
]

TCP_COUNTERS = {
    "Tcp": ("InSegs", "OutSegs", "RetransSegs", "InErrs", "OutRsts", "EstabResets", "AttemptFails"),
    "TcpExt": ("TCPTimeouts", "TCPLostRetransmit", "TCPSynRetrans", "TCPFastRetrans", "ListenDrops", "ListenOverflows"),
}
"""Counters kept from ``/proc/net/snmp`` (``Tcp:``) and ``/proc/net/netstat`` (``TcpExt:``)."""

RDMA_SATURATING_BITS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}
"""Widths of the IB PortCounters error fields (kernel ``PORT_PMA_ATTR`` table): they stop at their
maximum instead of wrapping (IBA 16.1.3.5), so a counter at its maximum no longer counts."""

ETHTOOL_STATS = re.compile(r"pause|discard|out_of_buffer|link_down_events|crc_errors|_marked|storm|buf_discard")
"""The ``ethtool -S`` counters kept: pause and PFC frames per priority, discards, link downs, CRC errors, ECN marks."""

_QUIET = {errno.ENOENT, errno.EINVAL, errno.EOPNOTSUPP, errno.ENODEV, errno.ENXIO}
"""Read errors that mean "not there" or "not supported here" in sysfs: not worth a note."""
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,64}$")


class Sampler(Protocol):
    def sample(self, snap: Snapshot, notes: Notes) -> None: ...


def _why(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def _read(root: SysRoot, rel: str, notes: Notes, *, quiet_missing: bool = True) -> str | None:
    try:
        return root.read_now(rel)
    except OSError as exc:
        if isinstance(exc, NotAFileError) or not (quiet_missing and exc.errno in _QUIET):
            notes.once(f"read:{rel}", f"{rel}: unreadable ({_why(exc)}); not sampled")
        return None


def _listdir(root: SysRoot, rel: str, notes: Notes) -> list[str]:
    try:
        names = root.listdir_now(rel)
    except OSError as exc:
        if exc.errno not in _QUIET:
            notes.once(f"list:{rel}", f"{rel}: cannot list ({_why(exc)}); not sampled")
        return []
    good = [n for n in names if _SAFE_NAME.match(n) and n not in (".", "..")]
    if len(good) != len(names):
        notes.once(f"names:{rel}", f"{rel}: entries with unexpected names skipped")
    return good


VIRTUAL_INTERFACES = re.compile(r"(lo|veth.*|docker.*|br-.*|virbr.*|cni.*|flannel.*|cali.*|vxlan.*|tunl.*|ifb.*)")
"""Interfaces left out unless named (``--interfaces``) or all are asked for (``--all-interfaces``): loopback,
and the software devices of containers, bridges and tunnels, whose bytes are also counted on the NIC they
ride (the device exclusions node_exporter's netdev collector is commonly run with)."""


class NetDevSampler:
    """``/proc/net/dev`` byte, packet, error and drop counters, with each interface's speed and state."""

    __slots__ = ("every", "only", "root", "speeds")

    def __init__(
        self,
        root: SysRoot,
        only: Iterable[str] | None = None,
        *,
        every: bool = False,
        speeds: Mapping[str, float] | None = None,
    ) -> None:
        self.root = root
        self.only = frozenset(only) if only else None
        self.every = every
        """Also loopback and virtual interfaces (:data:`VIRTUAL_INTERFACES`); named ones always count."""
        self.speeds = dict(speeds or {})
        """``--link-speed``: line rates (bits/s) the user gives, where the kernel reports none (virtio's -1)."""

    def sample(self, snap: Snapshot, notes: Notes) -> None:
        text = _read(self.root, "proc/net/dev", notes, quiet_missing=False)
        if text is None:
            return
        interfaces, bad = parse_net_dev(text)
        for line in bad:
            notes.once(f"netdev:{line[:40]}", f"proc/net/dev: a line not understood, skipped: {quoted(line)}")
        for name, values in interfaces.items():
            if self.only is not None and name not in self.only:
                continue
            if self.only is None and not self.every and VIRTUAL_INTERFACES.fullmatch(name):
                continue
            if not _SAFE_NAME.match(name):
                notes.once(f"netdev-name:{name[:40]}", f"proc/net/dev: interface name {quoted(name, 40)} skipped")
                continue
            port = Port("net", name)
            for field, value in values.items():
                snap.counters[(port, Counter(field))] = value
            base = f"sys/class/net/{name}"
            flaps = _read(self.root, f"{base}/carrier_changes", notes)
            if flaps is not None and (count := parse_counter(flaps)) is not None:
                snap.counters[(port, Counter("carrier_changes"))] = count
            snap.links[port] = self._link(base, notes, self.speeds.get(name))

    def _link(self, base: str, notes: Notes, given_bps: float | None = None) -> Link:
        speed_text = _read(self.root, f"{base}/speed", notes)
        mbps = parse_net_speed(speed_text)
        speed = None if mbps is None else mbps * 1e6
        if given_bps is not None:  # the user's rate wins: a kernel's figure for a virtual NIC is often a guess
            speed = given_bps
        state = (_read(self.root, f"{base}/operstate", notes) or "").strip()
        if state == "up":
            up: bool | None = True
        elif state in ("down", "lowerlayerdown", "notpresent", "dormant"):
            up = False
        else:  # "unknown" (lo, some virtual NICs): the carrier says
            carrier = (_read(self.root, f"{base}/carrier", notes) or "").strip()
            up = {"1": True, "0": False}.get(carrier)
        return Link(speed_bps=speed, up=up, state=state or "unknown")


class TcpSampler:
    """TCP segments, retransmissions, timeouts and listen drops from ``/proc/net/snmp`` and ``/proc/net/netstat``."""

    __slots__ = ("root",)
    PORT = Port("tcp")

    def __init__(self, root: SysRoot) -> None:
        self.root = root

    def sample(self, snap: Snapshot, notes: Notes) -> None:
        for rel, table in (("proc/net/snmp", "Tcp"), ("proc/net/netstat", "TcpExt")):
            text = _read(self.root, rel, notes, quiet_missing=table == "TcpExt")
            if text is None:
                continue
            tables, bad = parse_proc_table(text)
            if table in tables:
                values = tables[table]
            elif any(b.startswith(f"{table}:") for b in bad):
                notes.once(f"tcp:{rel}", f"{rel}: the {table} lines are not understood; not sampled")
                continue
            else:
                notes.once(f"tcp:{rel}", f"{rel}: no {table} lines; not sampled")
                continue
            for name in TCP_COUNTERS[table]:
                value = values.get(name)
                if value is not None and value >= 0:
                    snap.counters[(self.PORT, Counter(name))] = value


class RdmaSampler:
    """RDMA port counters (``counters/`` and ``hw_counters/``), rate and state under ``/sys/class/infiniband``."""

    __slots__ = ("root",)

    def __init__(self, root: SysRoot) -> None:
        self.root = root

    def sample(self, snap: Snapshot, notes: Notes) -> None:
        for device in _listdir(self.root, "sys/class/infiniband", notes):
            for number in _listdir(self.root, f"sys/class/infiniband/{device}/ports", notes):
                self._port(snap, notes, device, number)

    def _port(self, snap: Snapshot, notes: Notes, device: str, number: str) -> None:
        port = Port("rdma", device, number)
        base = f"sys/class/infiniband/{device}/ports/{number}"
        for folder, source in (("counters", CounterSource.KERNEL), ("hw_counters", CounterSource.HW)):
            for name in _listdir(self.root, f"{base}/{folder}", notes):
                if name == "lifespan":  # hw_counters' cache time in ms, not a counter
                    continue
                rel = f"{base}/{folder}/{name}"
                text = _read(self.root, rel, notes)
                if text is None:
                    continue
                value = parse_counter(text)
                if value is None:
                    notes.once(f"garbage:{rel}", f"{rel}: {quoted(text.strip(), 30)} is not a counter; not sampled")
                    continue
                snap.counters[(port, Counter(name, source))] = value
        rate = _read(self.root, f"{base}/rate", notes)
        state = _read(self.root, f"{base}/state", notes)
        phys = _read(self.root, f"{base}/phys_state", notes)
        parsed_state = parse_ib_state(state) if state is not None else None
        parsed_phys = parse_ib_state(phys) if phys is not None else None
        up = None
        if parsed_state is not None:
            up = parsed_state[1] == "ACTIVE" and (parsed_phys is None or parsed_phys[1] == "LinkUp")
        label = parsed_state[1] if parsed_state else "unknown"
        if parsed_phys is not None and parsed_phys[1] != "LinkUp":
            label = f"{label}/{parsed_phys[1]}"
        gbps = parse_ib_rate(rate)
        snap.links[port] = Link(speed_bps=None if gbps is None else gbps * 1e9, up=up, state=label)


class EthtoolSampler:
    """Pause, PFC and discard counters from ``ethtool -S`` (live), or from a capture's ``ethtool-S/<if>``."""

    __slots__ = ("_binary", "_broken", "root")

    def __init__(self, root: SysRoot) -> None:
        self.root = root
        self._binary = shutil.which("ethtool") if root.is_live else None
        self._broken: set[str] = set()

    def sample(self, snap: Snapshot, notes: Notes) -> None:
        for name in self._physical(notes):
            if name in self._broken:
                continue
            text = self._stats_text(name, notes)
            if text is None:
                continue
            port = Port("net", name)
            for stat, value in (parse_ethtool_stats(text) or {}).items():
                if ETHTOOL_STATS.search(stat):
                    snap.counters[(port, Counter(stat, CounterSource.ETHTOOL))] = value

    def _physical(self, notes: Notes) -> list[str]:
        names = _listdir(self.root, "sys/class/net", notes)
        physical = [n for n in names if self.root.exists(f"sys/class/net/{n}/device")]
        if physical and self.root.is_live and self._binary is None:
            notes.once("ethtool:missing", "ethtool is not installed: pause, PFC and discard counters not sampled")
            return []
        return physical

    def _stats_text(self, name: str, notes: Notes) -> str | None:
        if not self.root.is_live:
            try:
                return self.root.read_now(f"{CAPTURE_DIR}/ethtool-S/{name}")
            except OSError:
                return None
        assert self._binary is not None
        try:
            done = subprocess.run([self._binary, "-S", name], capture_output=True, text=True, timeout=2, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._broken.add(name)
            notes.once(f"ethtool:{name}", f"ethtool -S {name} failed ({exc}); its counters are not sampled")
            return None
        if done.returncode != 0:
            self._broken.add(name)  # e.g. "no stats available" for a driver without them: quiet
            return None
        return done.stdout


class GpuSampler:
    """GPU utilization and PCIe and NVLink throughput through NVML (nvidia-ml-py), on the live root only."""

    __slots__ = ("_handles", "_nvml", "root")

    def __init__(self, root: SysRoot) -> None:
        self.root = root
        self._nvml: Any = None
        self._handles: list[Any] | None = None

    def sample(self, snap: Snapshot, notes: Notes) -> None:
        handles = self._open(notes)
        nvml = self._nvml
        for index, handle in enumerate(handles):
            port = Port("gpu", str(index))
            for name in ("utilization_pct", "pcie_tx_kBps", "pcie_rx_kBps"):
                try:
                    if name == "utilization_pct":
                        value = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    else:
                        which = nvml.NVML_PCIE_UTIL_TX_BYTES if "tx" in name else nvml.NVML_PCIE_UTIL_RX_BYTES
                        value = nvml.nvmlDeviceGetPcieThroughput(handle, which)
                    snap.gauges[(port, name)] = float(value)
                except Exception as exc:  # NVMLError_NotSupported and friends: one note, go on
                    notes.once(f"nvml:{index}:{name}", f"gpu{index}: NVML cannot give {name} ({exc})")
            self._nvlink(snap, notes, port, handle)

    def _nvlink(self, snap: Snapshot, notes: Notes, port: Port, handle: Any) -> None:
        nvml = self._nvml
        fields = (
            ("nvlink_tx_kib", getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)),
            ("nvlink_rx_kib", getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)),
        )
        wanted = [(name, fid) for name, fid in fields if fid is not None]
        if not wanted:
            return
        try:
            values = nvml.nvmlDeviceGetFieldValues(handle, [fid for _, fid in wanted])
        except Exception as exc:
            notes.once(f"nvml:{port.device}:nvlink", f"{port.label}: NVML cannot give NVLink throughput ({exc})")
            return
        for (name, _), value in zip(wanted, values, strict=False):
            if getattr(value, "nvmlReturn", 1) == 0:
                snap.counters[(port, Counter(name, CounterSource.NVML))] = int(value.value.ullVal)

    def _open(self, notes: Notes) -> Sequence[Any]:
        if self._handles is not None:
            return self._handles
        self._handles = []
        if not self.root.is_live:
            return self._handles
        try:
            import pynvml  # the nvidia-ml-py wheel
        except ImportError:
            if os.path.exists("/proc/driver/nvidia"):
                notes.once("nvml:missing", "NVIDIA driver found but nvidia-ml-py is not installed: GPUs not sampled")
            return self._handles
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # NVMLError: no driver, no GPU, a mismatched library
            if os.path.exists("/proc/driver/nvidia"):
                notes.once("nvml:init", f"NVML did not start ({exc}): GPUs not sampled")
            self._handles = []
        self._nvml = pynvml
        return self._handles


def default_samplers(
    root: SysRoot,
    interfaces: Iterable[str] | None = None,
    *,
    gpus: bool = True,
    every_interface: bool = False,
    link_speeds: Mapping[str, float] | None = None,
) -> list[Sampler]:
    """Every sampler that applies; ``interfaces`` limits the NICs (``None``: all but loopback and virtual
    ones, or all with ``every_interface``)."""
    samplers: list[Sampler] = [
        NetDevSampler(root, interfaces, every=every_interface, speeds=link_speeds),
        TcpSampler(root),
        RdmaSampler(root),
    ]
    samplers.append(EthtoolSampler(root))
    if gpus:
        samplers.append(GpuSampler(root))
    return samplers


def take_snapshot(samplers: Sequence[Sampler], notes: Notes) -> Snapshot:
    """One pass over ``samplers``, stamped with the monotonic clock when it began."""
    snap = Snapshot(time_s=time.monotonic(), wall_time=time.time())
    for sampler in samplers:
        sampler.sample(snap, notes)
    return snap
