"""Node-wide facts: name, kernel, GPUDirect RDMA support, TCP tuning, module versions."""

from __future__ import annotations

import socket

from fabricscope.doctor.inventory import GpuDirect, TcpTuning
from fabricscope.kernel_text import parse_int, parse_kernel_release, parse_nvidia_driver, parse_sysctl_ints, parsed
from fabricscope.sysroot import SysRoot

__all__ = ["PEERMEM_FILES", "probe_boot_id", "probe_gpudirect", "probe_hostname", "probe_modules", "probe_tcp"]

PEERMEM_FILES = (
    "sys/kernel/mm/memory_peers/nv_mem/version",
    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "sys/module/nvidia_peermem/version",
)
"""Any of these means a GPU peer-memory module is loaded (NCCL ``src/transport/net_ib/gdr.cc``)."""


def probe_hostname(root: SysRoot) -> str:
    name = root.text("proc/sys/kernel/hostname")
    if name:
        return name
    return socket.gethostname() if root.is_live else f"<{root.path}>"


def probe_boot_id(root: SysRoot) -> str | None:
    """``proc/sys/kernel/random/boot_id``: one per boot of one machine (containers share their host's)."""
    text = root.text("proc/sys/kernel/random/boot_id")
    return text if text and len(text) <= 64 else None


def probe_gpudirect(root: SysRoot) -> GpuDirect:
    peermem = next((path for path in PEERMEM_FILES if root.text(path) is not None), None)
    text = root.text("proc/driver/nvidia/version")
    driver = parse_nvidia_driver(text)
    if text is not None and driver is None:
        root.garbage("proc/driver/nvidia/version", text.splitlines()[0] if text else text, "an 'NVRM version:' line")
    return GpuDirect(
        peermem=peermem,
        driver_version=driver[0] if driver else root.text("sys/module/nvidia/version"),
        open_kernel_module=driver[1] if driver else None,
        kernel=parse_kernel_release(root.text("proc/sys/kernel/osrelease")),
    )


def probe_tcp(root: SysRoot) -> TcpTuning:
    ints = "whole numbers"
    available = root.text("proc/sys/net/ipv4/tcp_available_congestion_control")
    congestion = root.text("proc/sys/net/ipv4/tcp_congestion_control")
    if congestion == "":
        root.garbage("proc/sys/net/ipv4/tcp_congestion_control", congestion, "an algorithm name like cubic")
    return TcpTuning(
        rmem_max=parsed(root, "proc/sys/net/core/rmem_max", _bytes, "a number of bytes"),
        wmem_max=parsed(root, "proc/sys/net/core/wmem_max", _bytes, "a number of bytes"),
        tcp_rmem=parsed(root, "proc/sys/net/ipv4/tcp_rmem", _three_ints, f"three {ints}"),
        tcp_wmem=parsed(root, "proc/sys/net/ipv4/tcp_wmem", _three_ints, f"three {ints}"),
        congestion=congestion or None,
        available_congestion=tuple(available.split()) if available else None,
        window_scaling=parsed(root, "proc/sys/net/ipv4/tcp_window_scaling", parse_int, "0 or 1"),
        sack=parsed(root, "proc/sys/net/ipv4/tcp_sack", parse_int, "0 or 1"),
    )


def _bytes(text: str | None) -> int | None:
    value = parse_int(text)
    return value if value is not None and value >= 0 else None


def _three_ints(text: str | None) -> tuple[int, ...] | None:
    values = parse_sysctl_ints(text)
    return values if values is not None and len(values) == 3 and min(values) >= 0 else None


def probe_modules(root: SysRoot, names: set[str]) -> dict[str, str]:
    """``/sys/module/<name>/version`` of the drivers behind NICs and GPUs (in-tree ones often have none)."""
    versions: dict[str, str] = {}
    for name in sorted(names):
        version = root.text(f"sys/module/{name}/version")
        if version:
            versions[name] = version
    return versions
