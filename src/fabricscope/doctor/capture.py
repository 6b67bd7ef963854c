"""``--capture DIR``: copy what the probes read into a tree that ``--root DIR`` reads back.

The copy keeps sysfs's shape: symlinks stay symlinks with the same relative
targets (``class/net/ib0 -> ../../devices/pci0000:15/...``), so PCI paths and
GPU-to-NIC distances come out the same.  Files are written with the text the
probes saw; reads that failed (EINVAL, EACCES...) are listed in
``fabricscope-capture/manifest.json`` so they fail the same way later, and
``ethtool -S`` counters go to ``fabricscope-capture/ethtool-S/<if>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from fabricscope import __version__
from fabricscope.errors import InvalidValue, RunError
from fabricscope.sysroot import CAPTURE_DIR, MANIFEST, SysRoot

__all__ = ["CAPTURE_FORMAT", "CAPTURE_VERSION", "check_capture_target", "write_capture"]

CAPTURE_FORMAT = "fabricscope-capture"
CAPTURE_VERSION = 2
"""Manifest history: 1 - errors, env, hostname, created, source_root, fabricscope; 2 - home (the user's
passwd home directory, where NCCL looks for ~/.nccl.conf), and files are written as read (no newline added)."""
_MAX_HOPS = 40


def check_capture_target(dest: str) -> None:
    """Refuse a target that exists and is not an empty directory (before probing anything)."""
    path = Path(dest)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InvalidValue(f"{dest}: exists and is not an empty directory; give a new path", key="capture")


def _confined(folder: str, target: str) -> str:
    """A link's target as the copy holds it, the link being in ``folder`` (relative to the root): an
    absolute target re-rooted, and no ``..`` past the root (dropped: at a root ``..`` stays there, as under
    chroot), every other ``..`` kept as it is (``type/..`` fails where ``type`` is a file: normalizing it
    would read what the source could not)."""
    depth = len(folder.split("/")) if folder else 0
    absolute = target.startswith("/")
    kept = [".."] * depth if absolute else []
    level = 0 if absolute else depth
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if level == 0:
                continue
            level -= 1
        else:
            level += 1
        kept.append(part)
    return "/".join(kept) or "."


class _Copier:
    def __init__(self, source: Path, dest: Path) -> None:
        self.source = source
        self.dest = dest
        self.done: set[str] = set()

    def materialize(self, rel: str) -> str | None:
        """Recreate ``rel`` in the copy (links as links, directories as directories); its real path."""
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        current = ""
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                current = os.path.dirname(current)
                continue
            step = f"{current}/{part}" if current else part
            src = self.source / step
            if src.is_symlink():
                hops += 1
                if hops > _MAX_HOPS:
                    return None
                target = _confined(current, os.readlink(src))
                self._link(step, target)
                parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                continue
            if src.is_dir():
                (self.dest / step).mkdir(parents=True, exist_ok=True)
            current = step
        return current

    def escaping_links(self) -> list[str]:
        """Links written whose target the kernel could follow out of the copy (through other links);
        :func:`_confined` keeps each target inside by its own words only."""
        base = os.path.realpath(self.dest)
        found = []
        for step in sorted(self.done):
            real = os.path.realpath(self.dest / step)
            if real != base and not real.startswith(base + "/"):
                found.append(step)
        return found

    def _link(self, step: str, target: str) -> None:
        path = self.dest / step
        if step in self.done or path.is_symlink():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
        self.done.add(step)

    def write(self, rel: str, text: str) -> None:
        parent = os.path.dirname(rel)
        real_parent = self.materialize(parent) if parent else ""
        if real_parent is None:
            return
        target = self.dest / real_parent / os.path.basename(rel)
        if target.is_dir() or target.is_symlink():
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def write_capture(root: SysRoot, dest: str, env: Mapping[str, str], hostname: str, home: str | None = None) -> int:
    """Copy every file ``root`` has read so far into ``dest``; returns the number of files written.

    ``env`` and ``home`` are the environment the NCCL settings were read from
    and the user's home directory; the manifest keeps the ``NCCL_*`` variables,
    ``HOME`` and ``home``.
    """
    path = Path(dest)
    copier = _Copier(root.path, path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        written = 0
        errors = root.read_errors()
        for rel, text in sorted(root.read_paths().items()):
            if text is not None:
                copier.write(rel, text)
                written += 1
            elif errors.get(rel) not in (None, "ENOENT", "ENOTDIR") and os.path.dirname(rel):
                copier.materialize(os.path.dirname(rel))  # so the failing file's directory exists
        for rel, names in sorted(root.listings().items()):
            real = copier.materialize(rel)
            if real is None:
                continue
            for name in names:
                entry = f"{rel}/{name}" if rel else name
                if (root.path / entry).is_symlink() or (root.path / entry).is_dir():
                    copier.materialize(entry)
        for rel in root.touched():
            copier.materialize(rel)
        for step in copier.escaping_links():  # out through other links: not kept, so never followed
            os.unlink(path / step)
        for rel, text in root.extras().items():
            target = path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            written += 1
        manifest = {
            "format": CAPTURE_FORMAT,
            "version": CAPTURE_VERSION,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "hostname": hostname,
            "source_root": str(root.path),
            "fabricscope": __version__,
            "env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_") or k == "HOME"},
            "home": home,
            "errors": {k: v for k, v in sorted(root.read_errors().items()) if v not in ("ENOENT", "ENOTDIR")},
        }
        (path / CAPTURE_DIR).mkdir(exist_ok=True)
        (path / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise RunError(f"--capture {dest}: cannot write the capture ({exc.strerror or exc})") from None
    return written
