"""NVIDIA GPUs: found in sysfs by PCI class and vendor, enriched by NVML when it is there.

sysfs alone finds every GPU the bus enumerated (class ``0x0302xx`` 3D
controller or ``0x0300xx`` VGA, vendor ``0x10de``), with or without a driver.
NVML (the optional ``nvidia-ml-py`` package, imported only here and only for
the live root) adds which GPUs are busy, so a PCIe link that trained down on an
idle GPU is told apart from one that is slow under load.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fabricscope.doctor.inventory import Gpu, PciDevice
from fabricscope.doctor.probes.pci import probe_pci
from fabricscope.kernel_text import parse_hex
from fabricscope.sysroot import SysRoot

__all__ = ["NVIDIA", "add_nvml", "is_gpu_class", "probe_gpus"]

NVIDIA = 0x10DE
_GPU_CLASSES = (0x0302, 0x0300)


def is_gpu_class(class_code: int | None) -> bool:
    """3D controller (0x0302xx) or VGA controller (0x0300xx); NVSwitch bridges (0x0680xx) are not GPUs."""
    return class_code is not None and (class_code >> 8) in _GPU_CLASSES


def probe_gpus(root: SysRoot, pci: dict[str, PciDevice]) -> tuple[list[Gpu], str]:
    """The NVIDIA GPUs under the root, and how NVML went (``used``, ``absent``, ``failed: ...``)."""
    gpus: list[Gpu] = []
    for address in root.listdir("sys/bus/pci/devices"):
        if parse_hex(root.text(f"sys/bus/pci/devices/{address}/vendor")) != NVIDIA:
            continue
        if not is_gpu_class(parse_hex(root.text(f"sys/bus/pci/devices/{address}/class"))):
            continue
        device = probe_pci(root, address.lower(), pci)
        if device is not None:
            gpus.append(Gpu(pci=device.address, device_id=device.device))
    if not root.is_live:
        return gpus, "not live"
    return gpus, add_nvml(gpus)


def _bus_id(raw: Any) -> str:
    """NVML's ``00000000:1B:00.0`` -> sysfs's ``0000:1b:00.0``."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def add_nvml(gpus: list[Gpu]) -> str:
    """Mark busy GPUs and add those sysfs missed; returns ``used``, ``absent`` or ``failed: <why>``."""
    try:
        import pynvml
    except ImportError:
        return "absent"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"failed: {exc}"
    try:
        by_address = {g.pci: g for g in gpus}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            address = _bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            gpu = by_address.get(address)
            if gpu is None:
                gpu = Gpu(pci=address, device_id=None)
                gpus.append(gpu)
            gpu.nvml_index = index
            gpu.busy = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu > 0
    except pynvml.NVMLError as exc:
        return f"failed: {exc}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return "used"
