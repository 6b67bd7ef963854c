"""NIC statistics that only ``ethtool -S`` shows (PFC pauses, discards, link-down events).

They are not in sysfs.  On the live root they come from the ``SIOCETHTOOL``
ioctl (``ETHTOOL_GDRVINFO`` for the count, ``ETHTOOL_GSTRINGS`` for the names,
``ETHTOOL_GSTATS`` for the values), which needs no privileges and no
``ethtool`` binary.  A captured tree keeps them as ``ethtool -S`` text in
``fabricscope-capture/ethtool-S/<if>``, which is also what a person can paste
from a node that has no fabricscope.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import socket
import struct

from fabricscope.doctor.parsers import parse_ethtool_stats
from fabricscope.doctor.sysroot import CAPTURE_DIR, SysRoot

__all__ = ["ETHTOOL_DIR", "format_ethtool_stats", "ioctl_stats", "read_stats"]

ETHTOOL_DIR = f"{CAPTURE_DIR}/ethtool-S"

_SIOCETHTOOL = 0x8946
_ETHTOOL_GDRVINFO = 0x03
_ETHTOOL_GSTRINGS = 0x1B
_ETHTOOL_GSTATS = 0x1D
_ETH_SS_STATS = 1
_ETH_GSTRING_LEN = 32
_DRVINFO_SIZE = 196
_DRVINFO_N_STATS = 180
"""Offset of ``n_stats`` in ``struct ethtool_drvinfo`` (after five 32-byte strings and 12 reserved bytes)."""
_MAX_STATS = 1 << 16


def _ioctl(sock: socket.socket, ifname: str, buffer: ctypes.Array[ctypes.c_char]) -> None:
    ifreq = struct.pack("16sP", ifname.encode()[:15], ctypes.addressof(buffer))
    fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifreq.ljust(40, b"\0"))


def ioctl_stats(ifname: str) -> dict[str, int] | None:
    """The driver's statistics for ``ifname`` on this machine; None when it has none or refuses."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            info = ctypes.create_string_buffer(_DRVINFO_SIZE)
            struct.pack_into("I", info, 0, _ETHTOOL_GDRVINFO)
            _ioctl(sock, ifname, info)
            (count,) = struct.unpack_from("I", info, _DRVINFO_N_STATS)
            if not 0 < count <= _MAX_STATS:
                return None
            names = ctypes.create_string_buffer(12 + count * _ETH_GSTRING_LEN)
            struct.pack_into("III", names, 0, _ETHTOOL_GSTRINGS, _ETH_SS_STATS, count)
            _ioctl(sock, ifname, names)
            values = ctypes.create_string_buffer(8 + count * 8)
            struct.pack_into("II", values, 0, _ETHTOOL_GSTATS, count)
            _ioctl(sock, ifname, values)
    except OSError:
        return None
    (returned,) = struct.unpack_from("I", values, 4)
    stats: dict[str, int] = {}
    for i in range(min(count, returned)):
        raw = names.raw[12 + i * _ETH_GSTRING_LEN : 12 + (i + 1) * _ETH_GSTRING_LEN]
        name = raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()
        if name:
            (stats[name],) = struct.unpack_from("Q", values, 8 + i * 8)
    return stats or None


def format_ethtool_stats(stats: dict[str, int]) -> str:
    """The ``ethtool -S`` text for these counters (what :func:`parse_ethtool_stats` reads)."""
    lines = ["NIC statistics:"]
    lines.extend(f"     {name}: {value}" for name, value in stats.items())
    return "\n".join(lines) + "\n"


def read_stats(root: SysRoot, ifname: str) -> dict[str, int] | None:
    """``ethtool -S`` counters of ``ifname``: by ioctl on the live root, else from the captured text."""
    if root.is_live:
        stats = None
        with contextlib.suppress(ValueError):
            stats = ioctl_stats(ifname)
        if stats is not None:
            root.remember(f"{ETHTOOL_DIR}/{ifname}", format_ethtool_stats(stats))
        return stats
    rel = f"{ETHTOOL_DIR}/{ifname}"
    text = root.text(rel)
    stats = parse_ethtool_stats(text)
    if text is not None and stats is None:
        root.garbage(rel, text, "'ethtool -S' output")
    return stats
