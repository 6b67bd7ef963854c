"""Node-wide facts: name, kernel, GPUDirect RDMA support, TCP tuning, module versions, kernel settings."""

from __future__ import annotations

import math
import re
import socket

from fabricscope.doctor.inventory import GpuDirect, HostTuning, TcpTuning
from fabricscope.kernel_text import (
    parse_choice,
    parse_int,
    parse_kernel_release,
    parse_limits,
    parse_meminfo,
    parse_mountinfo_device,
    parse_mounts,
    parse_nvidia_driver,
    parse_size_option,
    parse_sysctl_ints,
    parsed,
)
from fabricscope.shown import cut
from fabricscope.sysroot import SysRoot
from fabricscope.units import is_digits

__all__ = [
    "MAX_CPUS",
    "PEERMEM_FILES",
    "probe_boot_id",
    "probe_gpudirect",
    "probe_host",
    "probe_hostname",
    "probe_libraries",
    "probe_modules",
    "probe_tcp",
    "probe_uptime",
]

MAX_CPUS = 4096
"""CPUs whose governor is read; past it the rest are left out (a crafted tree cannot make the probe slow)."""

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


MAX_UPTIME_S = 100 * 365 * 86400.0
"""A longer uptime than a century is not a machine's: the file is not ``/proc/uptime``."""


def probe_uptime(root: SysRoot) -> float | None:
    """``proc/uptime``: seconds since boot (its first field; the second is idle time summed over CPUs)."""
    text = root.text("proc/uptime")
    if text is None:
        return None
    fields = text.split()
    try:
        seconds = float(fields[0]) if len(fields) == 2 and len(fields[0]) <= 20 else math.nan
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_UPTIME_S:
        root.garbage("proc/uptime", text, "two numbers: seconds up and seconds idle")
        return None
    return seconds


def probe_gpudirect(root: SysRoot) -> GpuDirect:
    peermem = next((path for path in PEERMEM_FILES if root.text(path) is not None), None)
    if peermem is None:  # a version file there but unreadable: its module's folder says it is loaded
        peermem = next(
            (f"{path.rsplit('/', 1)[0]}, version unreadable" for path in PEERMEM_FILES if root.exists(path)), None
        )
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


def probe_host(root: SysRoot) -> HostTuning:
    """Kernel settings of the node as a whole (see :class:`~fabricscope.doctor.inventory.HostTuning`).

    The locked-memory limit is this process's (``/proc/self/limits``): under
    the launcher that runs training (srun, torchrun, mpirun, a container) it is
    the limit the training ranks inherit.
    """
    host = HostTuning(
        numa_balancing=parsed(root, "proc/sys/kernel/numa_balancing", parse_int, "0, 1 or 2"),
        cmdline=root.text("proc/cmdline"),
        iommu_units=len(root.listdir("sys/class/iommu")) if root.is_dir("sys/class/iommu") else None,
        thp=parse_choice(root.text("sys/kernel/mm/transparent_hugepage/enabled")),
    )
    for cpu in root.listdir("sys/devices/system/cpu")[: MAX_CPUS + 64]:
        if is_digits(cpu[3:]) and cpu.startswith("cpu") and sum(host.governors.values()) < MAX_CPUS:
            governor = root.text(f"sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor")
            if governor and len(governor) <= 32:
                host.governors[governor] = host.governors.get(governor, 0) + 1
    limits = parsed(root, "proc/self/limits", parse_limits, "the kernel's limits table")
    if limits is not None and "Max locked memory" in limits:
        host.memlock = limits["Max locked memory"]
        host.memlock_source = "proc/self/limits"
    meminfo = parse_meminfo(root.text("proc/meminfo"))
    host.mem_total = meminfo.get("MemTotal") if meminfo else None
    host.huge_pages = probe_huge_pages(root, meminfo)
    host.shm_device = parse_mountinfo_device(root.text("proc/self/mountinfo"), "/dev/shm")
    mounts = parse_mounts(root.text("proc/self/mounts"))
    shm = [m for m in mounts or [] if m[1] == "/dev/shm"]
    if mounts is not None and not shm:
        host.shm_source = "no /dev/shm mount (proc/self/mounts)"
    elif shm:
        options = shm[-1][3]  # the last mount over a point is the one in effect
        size = parse_size_option(options) if shm[-1][2] == "tmpfs" else None
        if size is not None:
            host.shm_bytes, host.shm_source = size, "the size= of the /dev/shm mount (proc/self/mounts)"
        elif shm[-1][2] == "tmpfs" and host.mem_total is not None:  # tmpfs without size=: half of RAM
            host.shm_bytes, host.shm_source = host.mem_total // 2, "a tmpfs without size=: half of MemTotal"
    return host


HUGE_PAGES = "sys/kernel/mm/hugepages"
_POOL = re.compile(r"^hugepages-([0-9]{1,12})kB$")


def probe_huge_pages(
    root: SysRoot, meminfo: dict[str, int] | None
) -> list[tuple[int, int | None, int | None, int | None]] | None:
    """Each persistent huge page pool: (page size, pages, free, reserved), from ``sys/kernel/mm/hugepages``
    (every size), else from ``proc/meminfo`` (the default size only: a 1 GiB pool beside 2 MiB default
    pages is not in its ``HugePages_*`` lines)."""
    pools: list[tuple[int, int | None, int | None, int | None]] = []
    for entry in root.listdir(HUGE_PAGES)[:16]:
        match = _POOL.match(entry)
        if match is None:
            continue
        counts = [
            parsed(root, f"{HUGE_PAGES}/{entry}/{name}", parse_int, "a page count")
            for name in ("nr_hugepages", "free_hugepages", "resv_hugepages")
        ]
        pages, free, promised = (n if isinstance(n, int) and 0 <= n < 1 << 48 else None for n in counts)
        pools.append((int(match.group(1)) * 1024, pages, free, promised))  # None: could not be read
    if pools:
        return sorted(pools)
    keys = ("Hugepagesize", "HugePages_Total", "HugePages_Free", "HugePages_Rsvd")
    if meminfo and meminfo.get("HugePages_Total") == 0:
        return [(meminfo.get("Hugepagesize", 0), 0, 0, 0)]
    if meminfo and all(key in meminfo for key in keys[:3]):
        return [(meminfo[keys[0]], meminfo[keys[1]], meminfo[keys[2]], meminfo.get(keys[3], 0))]
    return None


NCCL_WHEEL_FILE = "fabricscope-capture/nccl-wheel"
"""Where a capture keeps the NCCL wheel of the Python that took it (a fact, not a file of the node)."""
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "usr/local/cuda/lib64",
    "usr/local/nccl/lib",
)
"""Where distribution packages (libnccl2, rdma-core's libibverbs1) and NVIDIA's CUDA install put their
libraries; the versioned file name is the target of the ``.so.N`` link ldconfig makes."""


def probe_libraries(root: SysRoot) -> dict[str, str]:
    """Versions of the libraries a training job loads, from the ``libnccl.so.2`` and ``libibverbs.so.1``
    links of the system's library folders (``libnccl.so.2.21.5`` -> ``2.21.5``), and the NCCL wheel
    of this Python (``nvidia-nccl-cu12``, which torch's CUDA builds load), on the live node or as a
    capture recorded it."""
    found: dict[str, str] = {}
    for folder in LIBRARY_DIRS:
        for key, stem in (("NCCL", "libnccl.so.2"), ("libibverbs", "libibverbs.so.1")):
            target = root.link_name(f"{folder}/{stem}")
            if target and target.startswith(stem + ".") and key not in found:
                found[key] = f"{cut(target[len(stem) - 1 :], 40)} ({folder})"
    wheel = _nccl_wheel() if root.is_live else root.text(NCCL_WHEEL_FILE)
    if wheel and wheel.strip():
        wheel = cut(wheel.strip().splitlines()[0], 80)  # a captured file holds what anyone wrote there
        root.remember(NCCL_WHEEL_FILE, wheel)
        found["NCCL (Python wheel)"] = wheel
    return found


def _nccl_wheel() -> str | None:
    """``nvidia-nccl-cu12 2.21.5``: the NCCL wheel installed for this Python, if any."""
    from importlib import metadata

    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return None
