"""The NCCL settings a job on this node would get, where each comes from, and how NCCL reads them.

NCCL (``src/misc/param.cc``) reads ``NAME=value`` lines from ``$NCCL_CONF_FILE``
(2.23+, when set and not empty; else ``~/.nccl.conf`` in the home directory of
the user's passwd entry, not ``$HOME``) and then ``/etc/nccl.conf``, skipping
lines that start with ``#``, and sets each with ``setenv(name, value, 0)``: the
environment wins, then the first file, then the second; within a file the
first line for a name wins.  The name is everything before the first ``=``,
spaces included, so ``NCCL_DEBUG = INFO`` sets a variable NCCL never reads;
the value is everything after it up to the newline, a ``\\r`` included.

Values are read the way NCCL reads them: integer parameters with ``strtoll``
(base 0, so ``0x3`` is 3, ``010`` is 8 and ``3x`` is 3), interface lists
(``NCCL_IB_HCA``, ``NCCL_SOCKET_IFNAME``) with ``parseStringList`` and
``matchIfList`` (``src/misc/utils.cc``): no space is trimmed, entries are
prefixes unless the list starts with ``=``, ``^`` excludes, and ``:port``
selects a port (read with ``atoi``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fabricscope.doctor.inventory import NcclSetting
from fabricscope.sysroot import SysRoot

__all__ = [
    "InterfaceList",
    "conf_files",
    "nccl_int",
    "parse_interface_list",
    "parse_nccl_conf",
    "probe_nccl",
]

_STRTOLL = re.compile(r"^[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_INT64 = 1 << 63
_ATOI = re.compile(r"^[ \t\n\v\f\r]*([+-]?\d{1,9})", re.ASCII)


def nccl_int(value: str) -> tuple[int | None, str]:
    """An integer parameter as NCCL reads it (``strtoll(value, NULL, 0)``), and the text after the number.

    ``"3"`` -> (3, ""); ``"3x"`` -> (3, "x"); ``"0x3"`` -> (3, ""); ``"abc"``
    -> (0, "abc") (no digits read as 0); ``""`` -> (None, "") (unset: NCCL
    keeps its default); a value out of 64-bit range -> (None, value) (NCCL
    keeps its default).
    """
    if value == "":
        return None, ""
    match = _STRTOLL.match(value)
    if match is None:
        return 0, value
    sign, digits = match.groups()
    if len(digits) > 40:
        return None, value
    number = int(digits, 16 if digits[:2].lower() == "0x" else 8 if digits.startswith("0") else 10)
    number = -number if sign == "-" else number
    if not -_INT64 <= number < _INT64:
        return None, value
    return number, value[match.end() :]


def _atoi(text: str) -> int:
    """C's ``atoi``: leading blanks, a sign, decimal digits; 0 when there are none."""
    match = _ATOI.match(text)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True, slots=True)
class InterfaceList:
    """A parsed ``NCCL_IB_HCA``/``NCCL_SOCKET_IFNAME`` value."""

    exclude: bool
    exact: bool
    entries: tuple[tuple[str, int | None], ...]
    """(name or prefix, port or None), exactly as NCCL splits them (no space trimmed)."""

    def matches(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use ``name`` (port ``port``, None for any) under this list."""
        hit = any(_entry_matches(name, port, entry, entry_port, self.exact) for entry, entry_port in self.entries)
        return hit != self.exclude

    def entry_hits(self, entry: str, entry_port: int | None, name: str, port: int | None = None) -> bool:
        """Whether one entry (``mlx5_1:1``) matches ``name``/``port``, ignoring ``^``."""
        return _entry_matches(name, port, entry, entry_port, self.exact)


def _entry_matches(name: str, port: int | None, entry: str, entry_port: int | None, exact: bool) -> bool:
    named = name == entry if exact else name.startswith(entry)
    return named and (port is None or entry_port is None or port == entry_port)


def parse_interface_list(value: str) -> InterfaceList:
    """``^=mlx5_0:1,mlx5_1`` -> exclude, exact, ((mlx5_0, 1), (mlx5_1, None)).

    As NCCL: ``^`` first, then ``=``; entries split at ``,``; ``:port`` read
    with ``atoi`` (``mlx5_0:x`` is port 0, which no device has); empty entries
    dropped; nothing trimmed, so ``" mlx5_1"`` is an entry starting with a space.
    """
    text = value
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    entries = []
    for item in text.split(","):
        name, colon, rest = item.partition(":")
        if name:
            entries.append((name, _atoi(rest) if colon else None))
    return InterfaceList(exclude=exclude, exact=exact, entries=tuple(entries))


def parse_nccl_conf(text: str, source: str) -> tuple[list[NcclSetting], list[str]]:
    """The settings of one NCCL config file, and the lines NCCL would misread or ignore."""
    settings: list[NcclSetting] = []
    problems: list[str] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        where = f"{source}:{number}"
        name, sep, value = line.partition("=")
        if not sep:
            if not line.lstrip().startswith("#"):
                problems.append(f"{where}: {line.strip()!r} has no '=' and is ignored by NCCL")
            continue
        if name != name.strip():
            problems.append(
                f"{where}: NCCL reads the name {name!r} (spaces included) from {line.strip()!r}, "
                f"so {name.strip()} is not set by this line"
            )
            continue
        if value.endswith("\r"):
            problems.append(
                f"{where}: {name} ends with a carriage return (a DOS line end) that NCCL keeps in the value "
                f"{value!r}: save the file with Unix line ends"
            )
        elif value != value.strip():
            problems.append(f"{where}: {name} is set to {value!r}, spaces included, which NCCL does not trim")
        settings.append(NcclSetting(name=name, value=value, source=where))
    return settings, problems


def conf_files(env: Mapping[str, str], home: str | None) -> list[str]:
    """Config files NCCL reads, in order: ``$NCCL_CONF_FILE`` or ``<home>/.nccl.conf``, then ``/etc/nccl.conf``.

    ``home`` is the home directory of the user's passwd entry (NCCL's
    ``getpwuid(getuid())->pw_dir``), None when unknown.
    """
    first = env.get("NCCL_CONF_FILE")
    files: list[str] = []
    if first:
        files.append(first)
    elif home:
        files.append(f"{home.rstrip('/')}/.nccl.conf")
    files.append("/etc/nccl.conf")
    return files


def probe_nccl(root: SysRoot, env: Mapping[str, str], home: str | None) -> tuple[dict[str, NcclSetting], list[str]]:
    """Effective NCCL settings (environment over files), and problems in the files."""
    settings: dict[str, NcclSetting] = {
        name: NcclSetting(name=name, value=value, source="environment")
        for name, value in sorted(env.items())
        if name.startswith("NCCL_")
    }
    problems: list[str] = []
    for path in conf_files(env, home):
        text = root.raw(path)
        if text is None:  # NCCL skips it silently; an unreadable NCCL_CONF_FILE is Node.nccl_conf_unreadable
            continue
        found, bad = parse_nccl_conf(text, path)
        problems.extend(bad)
        for setting in found:
            settings.setdefault(setting.name, setting)
    return settings, problems
