"""Pure parsers for the counter files the samplers read, each in the kernel's own format.

Every parser takes text and returns numbers; a line it cannot understand is
skipped and named in the returned ``bad`` list, never a crash.  Sources (the
formats were captured on a real machine; see ``tests/monitor/fixtures``):

- ``/proc/net/dev``: two header lines, then ``iface: rx{bytes packets errs
  drop fifo frame compressed multicast} tx{bytes packets errs drop fifo colls
  carrier compressed}`` (``net/core/net-procfs.c``, ``dev_seq_printf_stats``).
- ``/proc/net/snmp`` and ``/proc/net/netstat``: pairs of lines, ``Tcp: Name
  Name ...`` then ``Tcp: value value ...`` (``net/ipv4/proc.c``).
- ``ethtool -S <if>``: ``NIC statistics:`` then ``     name: value``.
- RDMA port attributes (``drivers/infiniband/core/sysfs.c``): one integer
  per counter file, ``state`` as ``4: ACTIVE``, ``rate`` as ``400 Gb/sec
  (4X NDR)``.
"""

from __future__ import annotations

import re

__all__ = [
    "NET_DEV_FIELDS",
    "parse_counter",
    "parse_ethtool_stats",
    "parse_ib_rate_bps",
    "parse_ib_state",
    "parse_net_dev",
    "parse_net_speed_bps",
    "parse_proc_table",
]

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

_MAX_COUNTER = (1 << 64) - 1
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")


def parse_counter(text: str) -> int | None:
    """A counter file's value: a whole number from 0 to 2**64-1, else None."""
    value = text.strip()
    if not value.isdigit() or len(value) > 20:
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
        if len(keys) != len(numbers) or not all(re.fullmatch(r"-?\d{1,20}", n) for n in numbers):
            bad.append(header.strip()[:80])
        else:
            tables[prefix.strip()] = {k: int(n) for k, n in zip(keys, numbers, strict=True)}
        index += 2
    return tables, bad


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """``ethtool -S <if>`` -> ``{name: value}``; lines that are not ``name: whole number`` are skipped."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        if not sep or not name.strip():
            continue
        number = parse_counter(value)
        if number is not None:
            stats[name.strip()] = number
    return stats


def parse_ib_rate_bps(text: str) -> float | None:
    """An RDMA port's ``rate`` (``400 Gb/sec (4X NDR)``) in bits per second; None when unparsable."""
    match = _RATE.match(text)
    return float(match.group(1)) * 1e9 if match else None


def parse_ib_state(text: str) -> tuple[int, str] | None:
    """``4: ACTIVE`` -> ``(4, "ACTIVE")`` (``state`` and ``phys_state`` files); None when unparsable."""
    match = _STATE.match(text)
    return (int(match.group(1)), match.group(2)) if match else None


def parse_net_speed_bps(text: str) -> float | None:
    """``/sys/class/net/<if>/speed`` (Mbit/s) in bits per second; None for ``-1`` (unknown) or garbage."""
    value = text.strip()
    if not value.isdigit() or len(value) > 9 or int(value) == 0:
        return None
    return int(value) * 1e6
