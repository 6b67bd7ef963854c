"""How much memory this process may still use: the host's, or less in a container.

A container's limit lives in its cgroup, not in ``/proc/meminfo``: a job in a
3 GiB cgroup on a 64 GiB host that sizes its buffers by the host's free memory
is killed by the OOM killer.  :func:`available_bytes` takes the smaller of the
host's available memory and the room left under every cgroup limit above this
process (cgroup v2 ``memory.max``/``memory.current``, or v1
``memory.limit_in_bytes``/``memory.usage_in_bytes``).

Paths are read under ``root`` so tests can point it at a captured tree.
"""

from __future__ import annotations

import os

from fabricscope.units import is_digits

__all__ = ["available_bytes", "cgroup_room_bytes"]

_NO_LIMIT = 1 << 60
"""cgroup v1 writes "no limit" as a number near 2**63: treat anything this large as none."""


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(4096).strip()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    if text is None or not is_digits(text):
        return None  # "max" (v2: no limit), missing or unreadable
    value = int(text)
    return value if value < _NO_LIMIT else None


def _room_along(base: str, relative: str, limit_file: str, usage_file: str) -> int | None:
    """The smallest limit minus usage from the cgroup ``relative`` up to the hierarchy's top."""
    room: int | None = None
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        folder = os.path.join(base, *parts[:depth])
        limit = _number(_read(os.path.join(folder, limit_file)))
        if limit is None:
            continue
        usage = _number(_read(os.path.join(folder, usage_file))) or 0
        here = max(0, limit - usage)
        room = here if room is None else min(room, here)
    return room


def cgroup_room_bytes(root: str = "/") -> int | None:
    """Bytes left under this process's cgroup memory limits, or None when no limit applies."""
    listing = _read(os.path.join(root, "proc/self/cgroup"))
    if not listing:
        return None
    rooms: list[int] = []
    for line in listing.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":  # cgroup v2, the unified hierarchy
            found = _room_along(os.path.join(root, "sys/fs/cgroup"), path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            found = _room_along(
                os.path.join(root, "sys/fs/cgroup/memory"), path, "memory.limit_in_bytes", "memory.usage_in_bytes"
            )
        else:
            continue
        if found is not None:
            rooms.append(found)
    return min(rooms) if rooms else None


def available_bytes(root: str = "/") -> int:
    """Memory this process may still allocate: the host's available memory, capped by its cgroup."""
    import psutil

    host = int(psutil.virtual_memory().available)
    room = cgroup_room_bytes(root)
    return host if room is None else min(host, room)
