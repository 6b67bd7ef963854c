"""NVIDIA GPUs: found in sysfs by PCI class and vendor, enriched by NVML when it is there.

sysfs alone finds every GPU the bus enumerated (class ``0x0302xx`` 3D
controller or ``0x0300xx`` VGA, vendor ``0x10de``), with or without a driver.
NVML (:mod:`~fabricscope.doctor.probes.nvml`) adds which GPUs are busy, so a
PCIe link that trained down on an idle GPU is told apart from one that is slow
under load, and what it says of their health.
"""

from __future__ import annotations

from fabricscope.doctor.inventory import Gpu, PciDevice
from fabricscope.doctor.probes.nvml import read_nvml
from fabricscope.doctor.probes.pci import probe_pci
from fabricscope.kernel_text import parse_hex
from fabricscope.sysroot import SysRoot

__all__ = ["NVIDIA", "is_gpu_class", "probe_gpus"]

NVIDIA = 0x10DE
_GPU_CLASSES = (0x0302, 0x0300)


def is_gpu_class(class_code: int | None) -> bool:
    """3D controller (0x0302xx) or VGA controller (0x0300xx); NVSwitch bridges (0x0680xx) are not GPUs."""
    return class_code is not None and (class_code >> 8) in _GPU_CLASSES


def probe_gpus(root: SysRoot, pci: dict[str, PciDevice]) -> tuple[list[Gpu], str, str | None]:
    """The NVIDIA GPUs under the root, how NVML went (``used``, ``absent``, ``failed: ...``, ``captured``,
    ``not live``) and the CUDA version the driver supports."""
    gpus: list[Gpu] = []
    for address in root.listdir("sys/bus/pci/devices"):
        if parse_hex(root.text(f"sys/bus/pci/devices/{address}/vendor")) != NVIDIA:
            continue
        if not is_gpu_class(parse_hex(root.text(f"sys/bus/pci/devices/{address}/class"))):
            continue
        device = probe_pci(root, address.lower(), pci)
        if device is not None:
            gpus.append(Gpu(pci=device.address, device_id=device.device))
    status, cuda = read_nvml(root, gpus)
    return gpus, status, cuda
