"""NVIDIA Xid errors in the kernel log: ``/dev/kmsg`` on a live node, a captured ``dmesg`` under ``--root``.

The driver logs each GPU error as one line (NVIDIA's "Xid Errors" catalog,
docs.nvidia.com/deploy/xid-errors)::

    NVRM: Xid (PCI:0000:17:00): 79, pid=1234, name=python, GPU has fallen off the bus.

in ``/dev/kmsg``'s record format (``6,1234,5678901,-;NVRM: ...``), in
``dmesg``'s (``[ 1234.567890] NVRM: ...``, ``[Tue Dec  1 12:00:00 2026] ...``)
or, from older drivers, without ``PCI:``.  Only those lines are kept, and a
capture stores only them (``fabricscope-capture/dmesg``), so a capture of a
node with a long log still replays the same findings.  The live read is
bounded: at most :data:`MAX_RECORDS` records, never blocking.
"""

from __future__ import annotations

import errno
import os
import re
from collections import Counter

from fabricscope.doctor.inventory import Xid
from fabricscope.sysroot import CAPTURE_DIR, SysRoot

__all__ = ["KERNEL_LOG", "MAX_RECORDS", "parse_xids", "probe_xids"]

KERNEL_LOG = f"{CAPTURE_DIR}/dmesg"
"""Where a capture keeps the kernel log's Xid lines, and where ``--root`` looks for a ``dmesg`` of the node."""
MAX_RECORDS = 200_000
"""Most ``/dev/kmsg`` records read (the ring buffer holds a few thousand; a flood cannot stall the doctor)."""
MAX_KEPT = 1000
"""Most Xid lines kept for a capture (the last ones)."""

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\): ([0-9]{1,4}),\s*(.{0,300})"
)
_PREFIX = re.compile(r"^(?:pid=[^,]{0,40},\s*)?(?:name=[^,]{0,80},\s*)?")


def parse_xids(text: str) -> list[Xid]:
    """Every Xid in a kernel log text, one :class:`Xid` per (GPU, code), in the order first seen."""
    counts: Counter[tuple[str, int]] = Counter()
    last: dict[tuple[str, int], str] = {}
    for line in text.splitlines():
        match = _XID.search(line)
        if not match:
            continue
        key = (match.group(1).lower(), int(match.group(2)))
        counts[key] += 1
        last[key] = _PREFIX.sub("", match.group(3).strip())[:160]
    return [
        Xid(device=device, code=code, count=counts[(device, code)], message=last[(device, code)])
        for device, code in counts
    ]


def probe_xids(root: SysRoot) -> tuple[list[Xid] | None, str]:
    """The Xids of the node and where they were read; (None, why) when no kernel log could be read."""
    if not root.is_live:
        text = root.text(KERNEL_LOG)
        if text is None:
            problem = root.read_problem(KERNEL_LOG)
            return None, f"no {KERNEL_LOG} in the tree" if problem in (None, "missing") else f"{KERNEL_LOG}: {problem}"
        return parse_xids(text), KERNEL_LOG
    lines, why = _read_kmsg()
    if lines is None:
        return None, why
    root.remember(KERNEL_LOG, "".join(f"{line}\n" for line in lines))
    return parse_xids("\n".join(lines)), why


def _read_kmsg(path: str = "/dev/kmsg") -> tuple[list[str] | None, str]:
    """The Xid lines of ``/dev/kmsg`` (the last :data:`MAX_KEPT`), or None and why it could not be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        hint = (
            " (run doctor as root, or set kernel.dmesg_restrict=0)" if exc.errno in (errno.EPERM, errno.EACCES) else ""
        )
        return None, f"{path}: {exc.strerror or exc}{hint}"
    kept: list[str] = []
    try:
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while we read: go on with the next
                    continue
                return None, f"{path}: {exc.strerror or exc}"
            if not record:
                break
            text = record.decode("utf-8", "replace")
            if "NVRM: Xid" in text:
                kept.append(text.split(";", 1)[-1].splitlines()[0])
                del kept[:-MAX_KEPT]
    finally:
        os.close(fd)
    return kept, path
