"""GPU discovery: sysfs by class and vendor; NVML (absent here) through a stand-in module."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest
from doctor_helpers import FIXTURES

from fabricscope.doctor.inventory import Gpu, PciDevice
from fabricscope.doctor.probes.gpus import add_nvml, is_gpu_class, probe_gpus
from fabricscope.sysroot import SysRoot


def test_classes() -> None:
    assert is_gpu_class(0x030200) and is_gpu_class(0x030000)
    assert not is_gpu_class(0x068000)  # NVSwitch
    assert not is_gpu_class(0x020700) and not is_gpu_class(None)


def test_sysfs_finds_gpus_without_nvml() -> None:
    pci: dict[str, PciDevice] = {}
    gpus, nvml = probe_gpus(SysRoot(FIXTURES / "roce-4gpu"), pci)
    assert [g.pci for g in gpus] == ["0000:1a:00.0", "0000:1e:00.0", "0000:97:00.0", "0000:98:00.0"]
    assert {g.device_id for g in gpus} == {0x26B9}
    assert nvml == "not live"  # a captured tree is never asked about this machine's NVML


@dataclass
class _Util:
    gpu: int


@dataclass
class _Pci:
    busId: bytes  # NVML's own spelling


def fake_nvml(bus_ids: list[bytes], utilization: list[int], fail_init: bool = False) -> types.ModuleType:
    module = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    module.NVMLError = NVMLError  # type: ignore[attr-defined]
    module.nvmlInit = init  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(bus_ids)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    module.nvmlDeviceGetPciInfo = lambda h: _Pci(bus_ids[h])  # type: ignore[attr-defined]
    module.nvmlDeviceGetUtilizationRates = lambda h: _Util(utilization[h])  # type: ignore[attr-defined]
    return module


def test_nvml_marks_busy_gpus_and_adds_ones_sysfs_missed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([b"00000000:1A:00.0", b"00000000:C1:00.0"], [0, 87]))
    gpus = [Gpu(pci="0000:1a:00.0", device_id=0x26B9)]
    assert add_nvml(gpus) == "used"
    assert (gpus[0].nvml_index, gpus[0].busy) == (0, False)
    assert (gpus[1].pci, gpus[1].nvml_index, gpus[1].busy) == ("0000:c1:00.0", 1, True)


def test_nvml_failure_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], [], fail_init=True))
    assert add_nvml([]) == "failed: Driver Not Loaded"


def test_nvml_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as when nvidia-ml-py is not installed
    assert add_nvml([]) == "absent"
