"""The NCCL settings a job on this node would get, and where each comes from.

NCCL (``src/misc/param.cc``) reads ``NAME=value`` lines from ``$NCCL_CONF_FILE``
(2.23+; else ``~/.nccl.conf``) and then ``/etc/nccl.conf``, skipping lines that
start with ``#``, and sets each with ``setenv(name, value, 0)``: the
environment wins, then the first file, then the second; within a file the
first line for a name wins.  The name is everything before the first ``=``,
spaces included, so ``NCCL_DEBUG = INFO`` sets a variable NCCL never reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from fabricscope.doctor.inventory import NcclSetting
from fabricscope.doctor.sysroot import SysRoot

__all__ = ["conf_files", "parse_nccl_conf", "probe_nccl"]


def parse_nccl_conf(text: str, source: str) -> tuple[list[NcclSetting], list[str]]:
    """The settings of one NCCL config file, and the lines NCCL would misread or ignore."""
    settings: list[NcclSetting] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
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
        if value != value.strip():
            problems.append(f"{where}: {name} is set to {value!r}, spaces included, which NCCL may not accept")
        settings.append(NcclSetting(name=name, value=value, source=where))
    return settings, problems


def conf_files(env: Mapping[str, str]) -> list[str]:
    """Config files NCCL reads, in order: ``$NCCL_CONF_FILE`` or ``~/.nccl.conf``, then ``/etc/nccl.conf``."""
    first = env.get("NCCL_CONF_FILE")
    files: list[str] = []
    if first:
        files.append(first)
    elif env.get("HOME"):
        files.append(f"{env['HOME'].rstrip('/')}/.nccl.conf")
    files.append("/etc/nccl.conf")
    return files


def probe_nccl(root: SysRoot, env: Mapping[str, str]) -> tuple[dict[str, NcclSetting], list[str]]:
    """Effective NCCL settings (environment over files), and problems in the files."""
    settings: dict[str, NcclSetting] = {
        name: NcclSetting(name=name, value=value, source="environment")
        for name, value in sorted(env.items())
        if name.startswith("NCCL_")
    }
    problems: list[str] = []
    for path in conf_files(env):
        text = root.text(path)
        if text is None:
            if path == env.get("NCCL_CONF_FILE"):
                problems.append(f"NCCL_CONF_FILE={path} cannot be read under {root.path}")
            continue
        found, bad = parse_nccl_conf(text, path)
        problems.extend(bad)
        for setting in found:
            settings.setdefault(setting.name, setting)
    return settings, problems
