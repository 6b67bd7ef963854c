"""GPU health from ``nvidia-smi -q`` where NVML's Python binding is not installed.

Every node with an NVIDIA driver has ``nvidia-smi``; few training images have
``nvidia-ml-py``.  ``nvidia-smi -q`` prints the same NVML answers as indented
``Key : Value`` text, one block per GPU (``GPU 00000000:19:00.0``).  This module
turns that text into the answers :mod:`fabricscope.doctor.probes.nvml` keeps
(persistence, uncorrected ECC errors, row remapping, retired pages, clock event
reasons, PCIe replays), so every NVML check runs on it.  Both layouts the
driver has printed are read: ECC errors as ``SRAM/DRAM Uncorrectable`` (R510
and later) or as ``Double Bit`` ... ``Total`` (earlier), clock reasons under
``Clocks Event Reasons`` (R535 and later) or ``Clocks Throttle Reasons``.
NVLink state is not in ``-q``: NVLink is not judged from it.  A capture keeps
the text in ``fabricscope-capture/nvidia-smi-q``, which is also what a person
can paste from a node: ``nvidia-smi -q > tree/fabricscope-capture/nvidia-smi-q``.
"""

from __future__ import annotations

import re
from typing import Any

from fabricscope.doctor.probes.tools import run_tool
from fabricscope.sysroot import CAPTURE_DIR

__all__ = ["CLOCK_EVENT_BITS", "SMI_FILE", "SMI_TIMEOUT_S", "parse_nvidia_smi", "run_nvidia_smi"]

SMI_FILE = f"{CAPTURE_DIR}/nvidia-smi-q"
SMI_TIMEOUT_S = 20.0
"""How long ``nvidia-smi -q`` may take (it hangs on a GPU that fell off the bus: then it says nothing)."""
CLOCK_EVENT_BITS = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}
"""``nvidia-smi -q``'s clock reason names -> NVML's ``nvmlClocksEventReason*`` bits (nvml.h)."""
_CLOCK_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
_PENDING_PAGES = (
    "Retired Pages/Pending Page Blacklist",
    "Retired Pages/Pending Page Retirement",
    "Retired Pages/Pending",
)
"""Where drivers have said whether a page retirement waits for a reload (the name changed over releases)."""
_CUDA = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])\s*$")
_COUNT = re.compile(r"^[0-9]{1,19}$")
MAX_GPUS = 64
MAX_LINES = 200_000


def run_nvidia_smi() -> tuple[str, str | None]:
    """(how it went, the text): ``absent`` without the binary, ``failed: ...`` when it did not answer."""
    status, text = run_tool("nvidia-smi", ["-q"], SMI_TIMEOUT_S)
    return ("nvidia-smi -q", text) if text is not None else (status, None)


def parse_nvidia_smi(text: str) -> dict[str, Any] | None:
    """``nvidia-smi -q`` -> the answers :mod:`~fabricscope.doctor.probes.nvml` keeps; None when it is not that text."""
    top: dict[str, str] = {}
    blocks: list[tuple[str, dict[str, str]]] = []
    fields = top
    path: list[str] = []
    for line in text.splitlines()[:MAX_LINES]:
        if not line.strip() or line.startswith("="):
            continue
        gpu = _GPU.match(line)
        if gpu is not None:
            if len(blocks) == MAX_GPUS:
                break
            domain, bus, device, function = gpu.groups()
            fields, path = {}, []
            blocks.append((f"{int(domain, 16):04x}:{bus}:{device}.{function}".lower(), fields))
            continue
        level = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, value = line.strip().partition(":")
        path = path[: max(level - 1, 0)]
        if sep:
            fields["/".join([*path, key.strip()])] = value.strip()
        else:
            path.append(key.strip())
    if not blocks or "Driver Version" not in top:
        return None
    cuda = top.get("CUDA Version", "")
    return {
        "driver": top.get("Driver Version"),
        "cuda": cuda if _CUDA.match(cuda) else None,
        "gpus": [_gpu(address, values) for address, values in blocks],
    }


def _gpu(address: str, values: dict[str, str]) -> dict[str, Any]:
    utilization = values.get("Utilization/Gpu", "").removesuffix("%").strip()
    retired = [_count(values.get(f"Retired Pages/{kind} Bit ECC")) for kind in ("Single", "Double")]
    pending_page = next((values[key] for key in _PENDING_PAGES if key in values), None)
    return {
        "pci": address,
        "busy": int(utilization) > 0 if _COUNT.match(utilization) else None,
        "persistence": _switch(values.get("Persistence Mode"), "Enabled", "Disabled"),
        "ecc_uncorrected_volatile": _uncorrected(values, "ECC Errors/Volatile"),
        "ecc_uncorrected_aggregate": _uncorrected(values, "ECC Errors/Aggregate"),
        "remap_pending": _switch(values.get("Remapped Rows/Pending"), "Yes", "No"),
        "remap_failed": _switch(values.get("Remapped Rows/Remapping Failure Occurred"), "Yes", "No"),
        "retired_pages": None if None in retired else sum(n for n in retired if n is not None),
        "retired_pending": _switch(pending_page, "Yes", "No"),
        "clock_event_reasons": _clock_events(values),
        "pcie_replays": _count(values.get("PCI/Replays Since Reset")),
        "nvlink": [],
    }


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and _COUNT.match(value) else None


def _switch(value: str | None, on: str, off: str) -> bool | None:
    return True if value == on else False if value == off else None


def _uncorrected(values: dict[str, str], section: str) -> int | None:
    """Uncorrected errors of one ECC section: ``Double Bit/Total`` where the driver prints it, else the sum of
    its ``... Uncorrectable ...`` entries (SRAM and DRAM); None when none is a number (N/A: ECC off or absent)."""
    total = values.get(f"{section}/Double Bit/Total")
    if total is not None:
        return _count(total)
    counts = [
        _count(value)
        for key, value in values.items()
        if key.startswith(section + "/") and "Uncorrectable" in key.rsplit("/", 1)[-1]
    ]
    numbers = [n for n in counts if n is not None]
    return sum(numbers) if numbers else None


def _clock_events(values: dict[str, str]) -> int | None:
    section = next((s for s in _CLOCK_SECTIONS if any(k.startswith(s + "/") for k in values)), None)
    if section is None:
        return None
    mask = 0
    for key, value in values.items():
        if key.startswith(section + "/") and value == "Active":
            mask |= CLOCK_EVENT_BITS.get(key.rsplit("/", 1)[-1], 0)
    return mask
