"""What NVML says about each GPU: busy or not, and its health; asked on the live node, replayed from a capture.

NVML (the optional ``nvidia-ml-py`` package) is asked only on the live root.
Its answers are kept as JSON in ``fabricscope-capture/nvml.json``, so a
capture replays them under ``--root`` and a fixture can hold them.  Each
answer is NVML's own value, with NVML's names (nvml.h, the NVML API
reference): persistence mode (``nvmlDeviceGetPersistenceMode``), uncorrected
ECC errors since the driver loaded and over the GPU's life
(``nvmlDeviceGetTotalEccErrors``), row remapping (``nvmlDeviceGetRemappedRows``:
pending, failed), page retirement on GPUs before Ampere (``nvmlDeviceGetRetiredPages``
for both causes, ``nvmlDeviceGetRetiredPagesPendingStatus``), the clock event (throttle) reason mask
(``nvmlDeviceGetCurrentClocksEventReasons``), the replays on its PCIe link since
the driver loaded (``nvmlDeviceGetPcieReplayCounter``), and per NVLink its state and
its DL replay, recovery and CRC counters (``nvmlDeviceGetNvLinkState``,
``nvmlDeviceGetNvLinkErrorCounter``).  A question NVML cannot answer on this
GPU (NotSupported) is None: never a finding of its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from fabricscope.doctor.inventory import Gpu, GpuHealth, NvLink
from fabricscope.doctor.probes.nvidia_smi import SMI_FILE, parse_nvidia_smi, run_nvidia_smi
from fabricscope.kernel_text import PCI_ADDRESS
from fabricscope.sysroot import CAPTURE_DIR, SysRoot

__all__ = ["ANSWERED", "MAX_LINKS", "NVML_FILE", "read_nvml"]

NVML_FILE = f"{CAPTURE_DIR}/nvml.json"
MAX_LINKS = 18
"""``NVML_NVLINK_MAX_LINKS``: links asked per GPU (H100 SXM has 18)."""
_UNCORRECTED, _VOLATILE, _AGGREGATE = 1, 0, 1
"""``NVML_MEMORY_ERROR_TYPE_UNCORRECTED``, ``NVML_VOLATILE_ECC``, ``NVML_AGGREGATE_ECC``."""
_SBE, _DBE = 0, 1
"""``NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS``, ``_DOUBLE_BIT_ECC_ERROR``."""
_DL_REPLAY, _DL_RECOVERY, _DL_CRC_FLIT = 0, 1, 2
"""``NVML_NVLINK_ERROR_DL_REPLAY``, ``_DL_RECOVERY``, ``_DL_CRC_FLIT``."""
MAX_GPUS = 64
ANSWERED = ("used", "captured", "nvidia-smi -q", "captured (nvidia-smi -q)")
"""How :func:`read_nvml` went when the driver answered for every GPU it sees (NVML, or nvidia-smi -q)."""


def read_nvml(root: SysRoot, gpus: list[Gpu]) -> tuple[str, str | None]:
    """Fill ``busy`` and ``health`` of ``gpus`` (adding GPUs sysfs missed); (how it went, CUDA driver version).

    How it went: ``used``, ``nvidia-smi -q`` (no nvidia-ml-py: its text), ``absent``
    (neither), ``failed: <why>`` on the live root; ``captured``, ``captured (nvidia-smi -q)``
    or ``not live`` for a tree.
    """
    if root.is_live:
        status, answers = _ask()
        if answers is not None:
            root.remember(NVML_FILE, json.dumps(answers, indent=1) + "\n")
        elif status == "absent":  # no nvidia-ml-py: the same answers as nvidia-smi -q prints them
            smi_status, smi = run_nvidia_smi()
            answers = None if smi is None else parse_nvidia_smi(smi)
            if smi is not None and answers is not None:
                root.remember(SMI_FILE, smi)
                status = smi_status
            elif smi_status != "absent":
                status = smi_status if smi is None else "failed: nvidia-smi -q printed no GPU block"
    else:
        text = root.text(NVML_FILE)
        if text is None:
            smi = root.text(SMI_FILE)
            if smi is None:
                return "not live", None
            answers = parse_nvidia_smi(smi)
            if answers is None:
                root.garbage(SMI_FILE, smi.splitlines()[0] if smi.strip() else smi, "the text nvidia-smi -q prints")
                return "not live", None
            answers = _parse(json.dumps(answers))  # the same checks as a captured nvml.json
            status = "captured (nvidia-smi -q)"
        else:
            answers = _parse(text)
            if answers is None:
                root.garbage(NVML_FILE, text, "the JSON fabricscope doctor --capture writes")
                return "not live", None
            status = "captured"
    if answers is None:
        return status, None
    _apply(answers, gpus)
    cuda = answers.get("cuda")
    return status, cuda if isinstance(cuda, str) else None


def _apply(answers: dict[str, Any], gpus: list[Gpu]) -> None:
    by_address = {g.pci: g for g in gpus}
    for index, item in enumerate(answers.get("gpus") or []):
        address = str(item.get("pci")).lower()
        gpu = by_address.get(address)
        if gpu is None:
            gpu = by_address[address] = Gpu(pci=address, device_id=None)
            gpus.append(gpu)
        gpu.nvml_index = index
        gpu.busy = _bool(item.get("busy"))
        gpu.health = GpuHealth(
            persistence=_bool(item.get("persistence")),
            ecc_volatile=_count(item.get("ecc_uncorrected_volatile")),
            ecc_aggregate=_count(item.get("ecc_uncorrected_aggregate")),
            remap_pending=_bool(item.get("remap_pending")),
            remap_failed=_bool(item.get("remap_failed")),
            retired_pages=_count(item.get("retired_pages")),
            retired_pending=_bool(item.get("retired_pending")),
            clock_events=_count(item.get("clock_event_reasons")),
            pcie_replays=_count(item.get("pcie_replays")),
            nvlinks=[
                NvLink(
                    link=link,
                    active=_bool(entry.get("active")),
                    replay=_count(entry.get("replay")),
                    recovery=_count(entry.get("recovery")),
                    crc=_count(entry.get("crc")),
                )
                for link, entry in enumerate((item.get("nvlink") or [])[:MAX_LINKS])
                if isinstance(entry, dict)
            ],
        )


def _parse(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        return None
    listed = data["gpus"][:MAX_GPUS]
    data["gpus"] = [g for g in listed if isinstance(g, dict) and PCI_ADDRESS.match(str(g.get("pci")))]
    if listed and not data["gpus"]:  # GPUs NVML saw, none of them readable: not a capture of NVML's answers
        return None
    for gpu in data["gpus"]:
        if not isinstance(gpu.get("nvlink"), list):
            gpu["nvlink"] = []
    return data


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64 else None


def _ask() -> tuple[str, dict[str, Any] | None]:
    """NVML's answers for every GPU it sees, as JSON-ready values."""
    try:
        import pynvml
    except ImportError:
        return "absent", None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"failed: {exc}", None
    try:
        answers: dict[str, Any] = {"driver": _text(_try(pynvml, getattr(pynvml, "nvmlSystemGetDriverVersion", None)))}
        cuda = _try(pynvml, getattr(pynvml, "nvmlSystemGetCudaDriverVersion", None))
        answers["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        answers["gpus"] = [_gpu(pynvml, index) for index in range(min(pynvml.nvmlDeviceGetCount(), MAX_GPUS))]
    except pynvml.NVMLError as exc:
        return f"failed: {exc}", None
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return "used", answers


def _gpu(nvml: Any, index: int) -> dict[str, Any]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    utilization = _try(nvml, getattr(nvml, "nvmlDeviceGetUtilizationRates", None), handle)
    remap = _try(nvml, getattr(nvml, "nvmlDeviceGetRemappedRows", None), handle)
    events = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    persistence = _try(nvml, getattr(nvml, "nvmlDeviceGetPersistenceMode", None), handle)
    ecc = getattr(nvml, "nvmlDeviceGetTotalEccErrors", None)
    retired = getattr(nvml, "nvmlDeviceGetRetiredPages", None)
    pages = [_try(nvml, retired, handle, cause) for cause in (_SBE, _DBE)]
    pending = _try(nvml, getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None), handle)
    return {
        "pci": _bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId),
        "busy": None if utilization is None else utilization.gpu > 0,
        "persistence": None if persistence is None else persistence == 1,
        "ecc_uncorrected_volatile": _try(nvml, ecc, handle, _UNCORRECTED, _VOLATILE),
        "ecc_uncorrected_aggregate": _try(nvml, ecc, handle, _UNCORRECTED, _AGGREGATE),
        "remap_pending": None if remap is None else bool(remap[2]),
        "remap_failed": None if remap is None else bool(remap[3]),
        "retired_pages": None if None in pages else sum(len(p) for p in pages),  # NotSupported from Ampere on
        "retired_pending": None if pending is None else pending == 1,
        "clock_event_reasons": _try(nvml, events, handle),
        "pcie_replays": _try(nvml, getattr(nvml, "nvmlDeviceGetPcieReplayCounter", None), handle),
        "nvlink": _links(nvml, handle),
    }


def _links(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    links = []
    state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    counter = getattr(nvml, "nvmlDeviceGetNvLinkErrorCounter", None)
    for link in range(MAX_LINKS):
        active = _try(nvml, state, handle, link)
        if active is None:  # NotSupported: no such link (or no NVLink at all)
            break
        links.append(
            {
                "active": active == 1,
                "replay": _try(nvml, counter, handle, link, _DL_REPLAY),
                "recovery": _try(nvml, counter, handle, link, _DL_RECOVERY),
                "crc": _try(nvml, counter, handle, link, _DL_CRC_FLIT),
            }
        )
    return links


def _try(nvml: Any, call: Callable[..., Any] | None, *args: Any) -> Any:
    """NVML's answer, or None when this NVML or this GPU cannot give it."""
    if call is None:
        return None
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


def _text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) else None


def _bus_id(raw: Any) -> str:
    """NVML's ``00000000:1B:00.0`` -> sysfs's ``0000:1b:00.0``."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    domain, _, rest = text.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"
