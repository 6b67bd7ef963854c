"""What only ``ethtool`` shows: NIC statistics (PFC pauses, discards) and the link modes a NIC supports.

Neither is in sysfs.  On the live root they come from the ``SIOCETHTOOL``
ioctl, which needs no privileges and no ``ethtool`` binary:
``ETHTOOL_GDRVINFO``/``GSTRINGS``/``GSTATS`` for ``ethtool -S``, and
``ETHTOOL_GLINKSETTINGS`` for the supported link modes (so a 200G NIC linked
at 100G is seen without an expectation).  A captured tree keeps them as the
text ``ethtool`` prints, in ``fabricscope-capture/ethtool-S/<if>`` and
``fabricscope-capture/ethtool/<if>``, which is also what a person can paste
from a node that has no fabricscope.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct

from fabricscope.kernel_text import parse_ethtool_stats, parse_link_modes
from fabricscope.sysroot import CAPTURE_DIR, SysRoot

__all__ = [
    "ETHTOOL_DIR",
    "LINK_MODES",
    "LINK_MODES_DIR",
    "format_ethtool_stats",
    "format_link_modes",
    "ioctl_link_modes",
    "ioctl_stats",
    "read_stats",
    "read_supported_mbps",
]

ETHTOOL_DIR = f"{CAPTURE_DIR}/ethtool-S"
LINK_MODES_DIR = f"{CAPTURE_DIR}/ethtool"

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
_ETHTOOL_GLINKSETTINGS = 0x4C
_LINK_SETTINGS_SIZE = 48
"""``struct ethtool_link_settings`` before its ``link_mode_masks``; ``link_mode_masks_nwords`` is at byte 15."""
_NWORDS_OFFSET = 15

_MODES = """
0 10baseT/Half 1 10baseT/Full 2 100baseT/Half 3 100baseT/Full 4 1000baseT/Half 5 1000baseT/Full
12 10000baseT/Full 15 2500baseX/Full 17 1000baseKX/Full 18 10000baseKX4/Full 19 10000baseKR/Full
21 20000baseMLD2/Full 22 20000baseKR2/Full 23 40000baseKR4/Full 24 40000baseCR4/Full
25 40000baseSR4/Full 26 40000baseLR4/Full 27 56000baseKR4/Full 28 56000baseCR4/Full
29 56000baseSR4/Full 30 56000baseLR4/Full 31 25000baseCR/Full 32 25000baseKR/Full 33 25000baseSR/Full
34 50000baseCR2/Full 35 50000baseKR2/Full 36 100000baseKR4/Full 37 100000baseSR4/Full
38 100000baseCR4/Full 39 100000baseLR4_ER4/Full 40 50000baseSR2/Full 41 1000baseX/Full
42 10000baseCR/Full 43 10000baseSR/Full 44 10000baseLR/Full 45 10000baseLRM/Full 46 10000baseER/Full
47 2500baseT/Full 48 5000baseT/Full 52 50000baseKR/Full 53 50000baseSR/Full 54 50000baseCR/Full
55 50000baseLR_ER_FR/Full 56 50000baseDR/Full 57 100000baseKR2/Full 58 100000baseSR2/Full
59 100000baseCR2/Full 60 100000baseLR2_ER2_FR2/Full 61 100000baseDR2/Full 62 200000baseKR4/Full
63 200000baseSR4/Full 64 200000baseLR4_ER4_FR4/Full 65 200000baseDR4/Full 66 200000baseCR4/Full
67 100baseT1/Full 68 1000baseT1/Full 69 400000baseKR8/Full 70 400000baseSR8/Full
71 400000baseLR8_ER8_FR8/Full 72 400000baseDR8/Full 73 400000baseCR8/Full 75 100000baseKR/Full
76 100000baseSR/Full 77 100000baseLR_ER_FR/Full 78 100000baseCR/Full 79 100000baseDR/Full
80 200000baseKR2/Full 81 200000baseSR2/Full 82 200000baseLR2_ER2_FR2/Full 83 200000baseDR2/Full
84 200000baseCR2/Full 85 400000baseKR4/Full 86 400000baseSR4/Full 87 400000baseLR4_ER4_FR4/Full
88 400000baseDR4/Full 89 400000baseCR4/Full 90 100baseFX/Half 91 100baseFX/Full 92 10baseT1L/Full
93 800000baseCR8/Full 94 800000baseKR8/Full 95 800000baseDR8/Full 96 800000baseDR8_2/Full
97 800000baseSR8/Full 98 800000baseVR8/Full
"""
LINK_MODES: dict[int, str] = dict(
    (int(bit), name) for bit, name in zip(_MODES.split()[::2], _MODES.split()[1::2], strict=True)
)
"""Bit of ``enum ethtool_link_mode_bit_indices`` (``include/uapi/linux/ethtool.h``, a kernel ABI) -> the
name ``ethtool`` prints.  Only speed modes; the others (Autoneg, TP, FEC...) carry no speed."""


def _request(sock: socket.socket, ifname: str, size: int, head: str, *fields: int) -> ctypes.Array[ctypes.c_char]:
    """One SIOCETHTOOL call on ``ifname``: a buffer of ``size`` bytes that starts with ``fields`` packed as ``head``.

    The interface name goes to the kernel as the bytes it has (``os.fsencode``).
    """
    buffer = ctypes.create_string_buffer(size)
    struct.pack_into(head, buffer, 0, *fields)
    ifreq = struct.pack("16sP", os.fsencode(ifname)[:15], ctypes.addressof(buffer))
    fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, ifreq.ljust(40, b"\0"))
    return buffer


def ioctl_stats(ifname: str) -> dict[str, int] | None:
    """The driver's statistics for ``ifname`` on this machine; None when it has none or refuses."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            info = _request(sock, ifname, _DRVINFO_SIZE, "I", _ETHTOOL_GDRVINFO)
            (count,) = struct.unpack_from("I", info, _DRVINFO_N_STATS)
            if not 0 < count <= _MAX_STATS:
                return None
            size = 12 + count * _ETH_GSTRING_LEN
            names = _request(sock, ifname, size, "III", _ETHTOOL_GSTRINGS, _ETH_SS_STATS, count)
            values = _request(sock, ifname, 8 + count * 8, "II", _ETHTOOL_GSTATS, count)
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


def ioctl_link_modes(ifname: str) -> list[int] | None:
    """Bits of the link modes ``ifname`` supports (``ETHTOOL_GLINKSETTINGS``); None when the driver has none.

    Two calls, as the kernel asks: the first with no mask words returns how many
    there are (negated), the second reads them: supported, advertised, partner's.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            probe = _request(sock, ifname, _LINK_SETTINGS_SIZE, "I", _ETHTOOL_GLINKSETTINGS)
            (nwords,) = struct.unpack_from("b", probe, _NWORDS_OFFSET)
            if not -127 <= nwords < 0:
                return None
            words = -nwords
            size = _LINK_SETTINGS_SIZE + 12 * words
            settings = _request(sock, ifname, size, f"I{_NWORDS_OFFSET - 4}xb", _ETHTOOL_GLINKSETTINGS, words)
    except OSError:
        return None
    supported = struct.unpack_from(f"{words}I", settings, _LINK_SETTINGS_SIZE)
    bits = [w * 32 + b for w, word in enumerate(supported) for b in range(32) if word >> b & 1]
    return bits or None


def format_link_modes(ifname: str, bits: list[int]) -> str:
    """The ``ethtool <if>`` text for these supported modes (what :func:`parse_link_modes` reads)."""
    names = [LINK_MODES[b] for b in bits if b in LINK_MODES] or ["Not reported"]
    lines = [f"Settings for {ifname}:", f"\tSupported link modes:   {names[0]}"]
    lines.extend(f"\t                        {name}" for name in names[1:])
    return "\n".join(lines) + "\n"


def read_supported_mbps(root: SysRoot, ifname: str) -> int | None:
    """The fastest link mode ``ifname`` supports, Mb/s: by ioctl on the live root, else from the capture."""
    rel = f"{LINK_MODES_DIR}/{ifname}"
    if root.is_live:
        bits = None
        with contextlib.suppress(ValueError):
            bits = ioctl_link_modes(ifname)
        if bits is None:
            return None
        modes = format_link_modes(ifname, bits)
        root.remember(rel, modes)
        return parse_link_modes(modes)
    text = root.text(rel)
    supported = parse_link_modes(text)
    if text is not None and supported is None and "Not reported" not in text:
        root.garbage(rel, text, "'ethtool <if>' output with 'Supported link modes:'")
    return supported


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
