"""The text Linux writes in sysfs and procfs (and ``ethtool`` prints), parsed in one place.

Each ``parse_*`` function takes the text of one file as the kernel writes it
and returns a value, or None when the text does not say (``-1``, ``Unknown``,
garbage).  None of them raises on bad input, however long or strange: digit
runs are bounded (a 64-bit counter has at most 20 digits; Python refuses to
convert more than 4300).  The doctor's probes and the monitor's samplers both
read through these, so ``/sys/class/net/<if>/speed = 4294967295`` means one
thing ("unknown") everywhere.  :func:`parsed` reads a file under a root,
applies a parser and notes text the parser rejects.

Formats and their kernel sources:

- ``/proc/net/dev``: two header lines, then ``iface: rx{bytes packets errs
  drop fifo frame compressed multicast} tx{bytes packets errs drop fifo colls
  carrier compressed}`` (``net/core/net-procfs.c``, ``dev_seq_printf_stats``).
- ``/proc/net/snmp`` and ``/proc/net/netstat``: pairs of lines, ``Tcp: Name
  Name ...`` then ``Tcp: value value ...`` (``net/ipv4/proc.c``).
- ``ethtool -S <if>``: ``NIC statistics:`` then ``     name: value``.
- RDMA port attributes (``drivers/infiniband/core/sysfs.c``): one integer
  per counter file, ``state`` as ``4: ACTIVE``, ``rate`` as ``400 Gb/sec
  (4X NDR)``.
- PCIe link attributes (``drivers/pci/pci-sysfs.c``): ``16.0 GT/s PCIe``
  (``8 GT/s`` before 5.7), a bare lane count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fabricscope.sysroot import SysRoot

__all__ = [
    "NET_DEV_FIELDS",
    "NET_SPEED_UNKNOWN",
    "PCIE_SPEED_UNKNOWN",
    "PCI_ADDRESS",
    "gid_is_link_local",
    "gid_is_zero",
    "parse_aer",
    "parse_choice",
    "parse_counter",
    "parse_cpu_list",
    "parse_ethtool_stats",
    "parse_hex",
    "parse_ib_rate",
    "parse_ib_state",
    "parse_int",
    "parse_kernel_release",
    "parse_limits",
    "parse_link_modes",
    "parse_meminfo",
    "parse_mountinfo_device",
    "parse_mounts",
    "parse_net_dev",
    "parse_net_speed",
    "parse_nvidia_driver",
    "parse_pcie_speed",
    "parse_pcie_width",
    "parse_proc_table",
    "parse_size_option",
    "parse_sysctl_ints",
    "parsed",
    "pcie_generation",
]

T = TypeVar("T")

NET_DEV_FIELDS = (
    "rx_bytes",
    "rx_packets",
    "rx_errors",
    "rx_dropped",
    "rx_fifo_errors",
    "rx_frame_errors",
    "rx_compressed",
    "rx_multicast",
    "tx_bytes",
    "tx_packets",
    "tx_errors",
    "tx_dropped",
    "tx_fifo_errors",
    "tx_collisions",
    "tx_carrier_errors",
    "tx_compressed",
)
"""The 16 columns of ``/proc/net/dev``, named as ``/sys/class/net/<if>/statistics/`` names them."""

PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
"""A PCI function address as sysfs names it: ``0000:17:00.0``."""

NET_SPEED_UNKNOWN = ("-1", "0", "4294967295")
"""``/sys/class/net/<if>/speed`` texts that mean "unknown": -1 (and 0, or -1 printed unsigned by some drivers)."""
PCIE_SPEED_UNKNOWN = ("Unknown", "Unknown speed")
"""``*_link_speed`` texts that mean "unknown": ``Unknown`` (5.7+) and ``Unknown speed`` (older kernels)."""

_MAX_COUNTER = (1 << 64) - 1
_INT = re.compile(r"^[+-]?\d{1,20}$", re.ASCII)
_HEX = re.compile(r"^0x[0-9a-f]{1,16}$")
_IB_STATE = re.compile(r"^\s*(\d{1,3})\s*:\s*(\S.*?)\s*$", re.ASCII)
_IB_RATE = re.compile(r"^\s*(\d{1,6}(?:\.\d{1,3})?)\s*Gb/sec\s*(?:\((.*)\))?\s*$", re.ASCII)
_PCIE_SPEED = re.compile(r"^\s*(\d{1,4}(?:\.\d{1,3})?)\s*GT/s(?:\s+PCIe)?\s*$", re.ASCII)
_NV_DRIVER = re.compile(r"Kernel Module(?: for \w+)?\s+([0-9][0-9.]*)")
_AER_LINE = re.compile(r"^[ \t]*(\S+)[ \t]+([0-9]{1,20})[ \t\r]*$", re.MULTILINE | re.ASCII)
"""A line of an ``aer_dev_*`` file: a name and a count (the file is read in one ``findall``: a device has 3)."""
_AER_SEEN: dict[str, dict[str, int]] = {}
"""Texts of ``aer_dev_*`` files already parsed (a node's devices mostly hold the same all-zero text)."""
_LINK_MODE = re.compile(r"^(\d{1,9})base\S*/(Full|Half)$", re.ASCII)
_TABLE_NUMBER = re.compile(r"-?\d{1,20}\Z", re.ASCII)
_GID = re.compile(r"[0-9a-fA-F]{1,4}(?::[0-9a-fA-F]{1,4}){7}\Z")
_SIZE_OPTION = re.compile(r"([0-9]{1,20})([kmgtKMGT]?)\Z")
_MEMINFO_LINE = re.compile(r"^([A-Za-z0-9_()]{1,40}):\s+([0-9]{1,20})(?:\s+kB)?\s*$")
_CPU_RANGE = re.compile(r"([0-9]{1,6})(?:-([0-9]{1,6}))?\Z")

# Transfer rate per lane (GT/s) -> PCIe generation.
_GENERATIONS = ((2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6), (128.0, 7))


def parsed(
    root: SysRoot,
    rel: str,
    parse: Callable[[str | None], T | None],
    expected: str,
    *,
    required: bool = False,
    unknown: tuple[str, ...] = (),
) -> T | None:
    """Read ``rel`` under ``root`` and parse it; text the parser rejects is noted as an anomaly.

    ``unknown`` lists texts that legitimately mean "unknown" (``-1``, ``Unknown``).
    """
    text = root.text(rel, required=required)
    if text is None or text in unknown:
        return None
    value = parse(text)
    if value is None:
        root.garbage(rel, text, expected)
    return value


def parse_int(text: str | None) -> int | None:
    """A decimal integer (``mtu``, ``numa_node``, counters); None for anything else."""
    if text is None:
        return None
    value = text.strip()
    return int(value) if _INT.match(value) else None


def parse_counter(text: str | None) -> int | None:
    """A counter file's value: a whole number from 0 to 2**64-1, else None."""
    if text is None:
        return None
    value = text.strip()
    if not value.isascii() or not value.isdigit() or len(value) > 20:
        return None
    number = int(value)
    return number if number <= _MAX_COUNTER else None


def parse_net_dev(text: str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """``/proc/net/dev`` -> ``{iface: {rx_bytes: ..., ...}}`` and the lines that made no sense."""
    interfaces: dict[str, dict[str, int]] = {}
    bad: list[str] = []
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        values = [parse_counter(v) for v in rest.split()]
        if not sep or not name or len(values) != len(NET_DEV_FIELDS) or None in values:
            if line.strip():
                bad.append(line.strip())
            continue
        interfaces[name] = {field: v for field, v in zip(NET_DEV_FIELDS, values, strict=True) if v is not None}
    return interfaces, bad


def parse_proc_table(text: str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """``/proc/net/snmp`` or ``/proc/net/netstat`` -> ``{"Tcp": {"OutSegs": ...}, "TcpExt": {...}}``.

    Values may be negative (``Tcp: MaxConn`` is ``-1``).  A header without its
    value line, or a value line of another length, is reported in ``bad``.
    """
    tables: dict[str, dict[str, int]] = {}
    bad: list[str] = []
    lines = [line for line in text.splitlines() if line.strip()]
    index = 0
    while index < len(lines):
        header = lines[index]
        prefix, sep, names = header.partition(":")
        following = lines[index + 1] if index + 1 < len(lines) else ""
        vprefix, vsep, values = following.partition(":")
        if not sep or not vsep or vprefix != prefix:
            bad.append(header.strip()[:80])
            index += 1
            continue
        keys = names.split()
        numbers = values.split()
        if len(keys) != len(numbers) or not all(_TABLE_NUMBER.match(n) for n in numbers):
            bad.append(header.strip()[:80])
        else:
            tables[prefix.strip()] = {k: int(n) for k, n in zip(keys, numbers, strict=True)}
        index += 2
    return tables, bad


def parse_hex(text: str | None) -> int | None:
    """A ``0x``-prefixed number such as a PCI ``vendor`` (``0x10de``) or ``class`` (``0x030200``)."""
    if text is None:
        return None
    value = text.strip().lower()
    if not _HEX.match(value):
        return None
    return int(value, 16)


def parse_net_speed(text: str | None) -> int | None:
    """``/sys/class/net/<if>/speed`` in Mb/s; None for the unknowns (:data:`NET_SPEED_UNKNOWN`) and garbage."""
    value = parse_int(text)
    if value is None or value <= 0 or value >= 0xFFFFFFFF:
        return None
    return value


def parse_ib_state(text: str | None) -> tuple[int, str] | None:
    """An RDMA port ``state``/``phys_state``: ``4: ACTIVE`` -> ``(4, "ACTIVE")``."""
    if text is None:
        return None
    match = _IB_STATE.match(text)
    if not match:
        return None
    return int(match.group(1)), match.group(2)


def parse_ib_rate(text: str | None) -> float | None:
    """An RDMA port ``rate``: ``400 Gb/sec (4X NDR)`` -> 400.0 (Gb/s); ``2.5 Gb/sec (1X SDR)`` -> 2.5."""
    if text is None:
        return None
    match = _IB_RATE.match(text)
    if not match:
        return None
    return float(match.group(1))


def parse_pcie_speed(text: str | None) -> float | None:
    """``current_link_speed``/``max_link_speed`` in GT/s.

    Accepts the modern ``16.0 GT/s PCIe`` and the old (kernel 5.6 and earlier)
    ``8 GT/s``; the unknowns (:data:`PCIE_SPEED_UNKNOWN`) and anything else give None.
    """
    if text is None:
        return None
    match = _PCIE_SPEED.match(text)
    return float(match.group(1)) if match else None


def parse_pcie_width(text: str | None) -> int | None:
    """``current_link_width``/``max_link_width``: a bare lane count (``16``); 0 and garbage give None."""
    value = parse_int(text)
    if value is None or value <= 0 or value > 64:
        return None
    return value


def pcie_generation(gts: float | None) -> int | None:
    """PCIe generation of a per-lane rate: 2.5 -> 1, 8.0 -> 3, 32.0 -> 5."""
    if gts is None:
        return None
    for rate, generation in _GENERATIONS:
        if abs(gts - rate) < 0.01:
            return generation
    return None


def parse_sysctl_ints(text: str | None) -> tuple[int, ...] | None:
    """A sysctl of whitespace-separated integers (``tcp_rmem``: ``4096 131072 33554432``)."""
    if text is None:
        return None
    fields = text.split()
    if not fields or len(fields) > 16 or not all(_INT.match(f) for f in fields):
        return None
    return tuple(int(f) for f in fields)


def parse_ethtool_stats(text: str | None) -> dict[str, int] | None:
    """The output of ``ethtool -S <if>``: ``NIC statistics:`` then ``name: value`` lines.

    Lines that are not ``name: whole number`` (0 to 2**64-1, as drivers print
    their u64 counters) are skipped; no counter at all gives None.
    """
    if text is None:
        return None
    stats: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        if not sep or not name.strip():
            continue
        number = parse_counter(value)
        if number is not None:
            stats[name.strip()] = number
    return stats or None


def parse_link_modes(text: str | None) -> int | None:
    """The fastest full-duplex mode, in Mb/s, under ``Supported link modes:`` in ``ethtool <if>`` output.

    ``200000baseCR4/Full`` -> 200000.  None when the section is missing or
    lists no speed (``Not reported``, as virtio NICs say).
    """
    if text is None:
        return None
    speeds: list[int] = []
    inside = False
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key.strip():
            inside = key.strip() == "Supported link modes"
            line = rest
        if inside:
            for token in line.split():
                match = _LINK_MODE.match(token)
                if match and match.group(2) == "Full":
                    speeds.append(int(match.group(1)))
    return max(speeds) if speeds else None


def _gid_address(gid: str) -> int | None:
    """A GID as sysfs writes it (eight groups of hex digits, ``fe80:0000:...``) as a 128-bit number."""
    text = gid.strip()
    if not _GID.match(text):
        return None
    value = 0
    for group in text.split(":"):
        value = value << 16 | int(group, 16)
    return value


def gid_is_zero(gid: str | None) -> bool:
    """An unused GID table entry reads as all zeros (or cannot be parsed at all)."""
    address = _gid_address(gid) if gid is not None else None
    return not address


def gid_is_link_local(gid: str | None) -> bool:
    """A ``fe80::/10`` GID: usable only inside one L2 segment, never routed (RoCE v2 needs more)."""
    address = _gid_address(gid) if gid is not None else None
    return address is not None and address >> 118 == 0xFE80 >> 6


def parse_kernel_release(text: str | None) -> tuple[int, int] | None:
    """``/proc/sys/kernel/osrelease``: ``5.15.0-105-generic`` -> (5, 15)."""
    if text is None:
        return None
    match = re.match(r"^\s*(\d{1,4})\.(\d{1,4})", text, re.ASCII)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_nvidia_driver(text: str | None) -> tuple[str, bool] | None:
    """``/proc/driver/nvidia/version``: the driver version and whether it is the open kernel module.

    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...``
    -> ``("550.54.15", True)``; the proprietary module says ``NVIDIA UNIX x86_64 Kernel Module``.
    """
    if text is None:
        return None
    first = text.splitlines()[0] if text.strip() else ""
    match = _NV_DRIVER.search(first)
    if not match:
        return None
    return match.group(1), "Open Kernel Module" in first


def parse_limits(text: str | None) -> dict[str, tuple[int | None, int | None]] | None:
    """``/proc/<pid>/limits`` -> ``{"Max locked memory": (soft, hard)}`` in the file's units; None = unlimited.

    The kernel prints ``Limit  Soft Limit  Hard Limit  Units`` columns padded
    with spaces (``fs/proc/base.c``, ``proc_pid_limits``); a limit name has
    spaces of its own, so each line is read from the right.
    """
    if text is None:
        return None
    limits: dict[str, tuple[int | None, int | None]] = {}
    for line in text.splitlines()[1:]:
        match = _LIMIT.match(line)
        if match:
            limits[match.group(1)] = (_limit(match.group(2)), _limit(match.group(3)))
    return limits or None


_LIMIT = re.compile(r"^(Max [a-z ]{1,40}?)\s{2,}(unlimited|[0-9]{1,20})\s+(unlimited|[0-9]{1,20})(?:\s+\S+)?\s*$")


def _limit(text: str) -> int | None:
    return None if text == "unlimited" else int(text)


def parse_mounts(text: str | None) -> list[tuple[str, str, str, str]] | None:
    """``/proc/mounts`` -> ``[(source, mount point, type, options)]``; octal escapes (``\\040``) decoded."""
    if text is None:
        return None
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            source, point, kind, options = (_unescape(f) for f in fields[:4])
            mounts.append((source, point, kind, options))
    return mounts


def parse_mountinfo_device(text: str | None, path: str) -> str | None:
    """``major:minor`` of the file system ``path`` lies on, from ``/proc/<pid>/mountinfo`` (what ``stat``'s
    ``st_dev`` gives), found as the kernel walks a path: from the namespace's root mount down the folders of
    ``path``, at each one the mount on it whose parent is the mount reached so far, and the mounts stacked on
    that (each one's parent is the one it covers); the file's line order is not the mount order.  None when
    the text does not say (unreadable, or not that file's format)."""
    if text is None:
        return None
    mounts: list[tuple[int, int, str, str]] = []  # (mount id, parent id, major:minor, mount point)
    for line in text.splitlines()[:100_000]:
        fields = line.split()
        if len(fields) >= 5 and _MOUNT_ID.match(fields[0]) and _MOUNT_ID.match(fields[1]) and _DEVICE.match(fields[2]):
            mounts.append((int(fields[0]), int(fields[1]), fields[2], _unescape(fields[4])))
    ids = {m[0] for m in mounts}
    roots = [m for m in mounts if m[3] == "/" and m[1] not in ids] or [m for m in mounts if m[3] == "/"]
    if not roots:
        return None
    children: dict[tuple[int, str], tuple[int, int, str, str]] = {}
    for mount in mounts:
        children[(mount[1], mount[3])] = mount  # the last listed of a parent's mounts on one point
    current = roots[-1]
    parts = [p for p in path.split("/") if p]
    for prefix in ["/", *("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))]:
        seen = {current[0]}
        while (above := children.get((current[0], prefix))) is not None and above[0] not in seen:
            seen.add(above[0])
            current = above
    return current[2]


_DEVICE = re.compile(r"^[0-9]{1,10}:[0-9]{1,10}$")
_MOUNT_ID = re.compile(r"^[0-9]{1,10}$")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_size_option(options: str, name: str = "size") -> int | None:
    """A tmpfs ``size=`` mount option in bytes: ``size=65536k`` -> 67108864 (as ``/proc/mounts`` shows it)."""
    for option in options.split(","):
        key, sep, value = option.partition("=")
        if key == name and sep:
            match = _SIZE_OPTION.match(value)
            if match:
                return int(match.group(1)) << (10 * " kmgt".index(match.group(2).lower() or " "))
    return None


def parse_meminfo(text: str | None) -> dict[str, int] | None:
    """``/proc/meminfo`` -> ``{"MemTotal": bytes, ...}`` (the file says kB, meaning KiB)."""
    if text is None:
        return None
    values = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line)
        if match:
            scale = 1024 if line.rstrip().endswith("kB") else 1
            values[match.group(1)] = int(match.group(2)) * scale
    return values or None


def parse_choice(text: str | None) -> str | None:
    """The bracketed choice of a sysfs selector: ``always [madvise] never`` -> ``madvise``."""
    if text is None:
        return None
    match = re.search(r"\[([A-Za-z0-9_+-]{1,32})\]", text)
    return match.group(1) if match else None


def parse_cpu_list(text: str | None) -> frozenset[int] | None:
    """A CPU list (``cpulist``, ``smp_affinity_list``): ``0-3,8,10-11`` -> {0,1,2,3,8,10,11}; None if garbage.

    At most 65,536 CPUs: a crafted range cannot make a huge set.  A short list is parsed once (a node's
    NIC interrupts mostly share a handful of affinity lists), a long one each time.
    """
    if text is None:
        return None
    known = _CPU_LISTS.get(text, _UNSEEN)
    if known is not _UNSEEN:
        return known
    value = _cpu_list(text)
    if len(_CPU_LISTS) < _CPU_LISTS_KEPT and len(text) <= 64 and (value is None or len(value) <= 1024):
        _CPU_LISTS[text] = value
    return value


_CPU_LISTS: dict[str, frozenset[int] | None] = {}
"""Short CPU lists already parsed, a few dozen at most (:data:`_CPU_LISTS_KEPT`) of up to 1,024 CPUs each,
so that a hostile tree cannot make them large."""
_CPU_LISTS_KEPT = 64
_UNSEEN = frozenset({-1})


def _cpu_list(text: str) -> frozenset[int] | None:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        match = _CPU_RANGE.match(part.strip())
        if not match:
            return None
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low or high >= 1 << 16:
            return None
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def parse_aer(text: str | None) -> dict[str, int] | None:
    """``aer_dev_correctable``/``_nonfatal``/``_fatal``: ``RxErr 0`` lines -> ``{"RxErr": 0, ..., "TOTAL": n}``.

    The kernel ends each file with ``TOTAL_ERR_COR``, ``TOTAL_ERR_NONFATAL``
    or ``TOTAL_ERR_FATAL`` (``drivers/pci/pcie/aer.c``); it is kept as ``TOTAL``.
    """
    if text is None:
        return None
    known = _AER_SEEN.get(text)
    if known is not None:
        return dict(known)
    counts: dict[str, int] = {}
    for name, digits in _AER_LINE.findall(text):
        value = int(digits)
        if value <= _MAX_COUNTER:
            counts["TOTAL" if name.startswith("TOTAL_ERR_") else name[:40]] = value
    if "TOTAL" not in counts:
        return None
    if len(_AER_SEEN) < 64:
        _AER_SEEN[text] = counts
    return dict(counts)
