"""The GPU sampler through NVML.  No GPU exists here, so a stand-in ``pynvml`` replays what nvidia-ml-py returns
(its function names, its structures' fields, its NotSupported error); everything around it is real."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from fabricscope.monitor.deltas import Tracker
from fabricscope.monitor.samplers import GpuSampler, take_snapshot
from fabricscope.monitor.samples import Notes, Port
from fabricscope.monitor.summary import Summary, interval_records
from fabricscope.sysroot import SysRoot


class NVMLError_NotSupported(Exception):
    def __str__(self) -> str:
        return "Not Supported"


def fake_nvml(utilization: list[int]) -> types.ModuleType:
    """Two GPUs; GPU 1 does not support PCIe throughput; NVLink counters grow by 1 GiB a sample."""
    module = types.ModuleType("pynvml")
    state = {"calls": 0}
    module.NVML_PCIE_UTIL_TX_BYTES = 0  # type: ignore[attr-defined]
    module.NVML_PCIE_UTIL_RX_BYTES = 1  # type: ignore[attr-defined]
    module.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138  # type: ignore[attr-defined]
    module.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139  # type: ignore[attr-defined]
    module.nvmlInit = lambda: None  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]

    def utilization_rates(handle: int) -> Any:
        state["calls"] += 1
        return types.SimpleNamespace(gpu=utilization[min(state["calls"] // 2, len(utilization) - 1)], memory=10)

    def pcie(handle: int, counter: int) -> int:
        if handle == 1:
            raise NVMLError_NotSupported()
        return 2_000_000 if counter == 0 else 1_000_000  # KB/s

    def field_values(handle: int, ids: list[int]) -> list[Any]:
        value = (state["calls"] + 1) * (1 << 20)  # KiB
        return [types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(ullVal=value)) for _ in ids]

    module.nvmlDeviceGetUtilizationRates = utilization_rates  # type: ignore[attr-defined]
    module.nvmlDeviceGetPcieThroughput = pcie  # type: ignore[attr-defined]
    module.nvmlDeviceGetFieldValues = field_values  # type: ignore[attr-defined]
    return module


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    module = fake_nvml([50, 90, 100])
    monkeypatch.setitem(sys.modules, "pynvml", module)
    yield module


def test_gpu_utilization_pcie_and_nvlink(nvml: types.ModuleType) -> None:
    notes = Notes()
    tracker = Tracker(notes)
    sampler = GpuSampler(SysRoot("/"))
    summary = Summary()
    for t in range(3):
        snap = take_snapshot([sampler], notes)
        snap.time_s = float(t)
        interval = tracker.update(snap)
        if interval is not None:
            summary.add(interval_records(interval, 0.0))
    gpu0 = Port("gpu", "0")
    assert snap.gauges[(gpu0, "pcie_tx_kBps")] == 2_000_000
    assert (Port("gpu", "1"), "pcie_tx_kBps") not in snap.gauges
    assert [n for n in notes.said if "pcie" in n] == [
        "gpu1: NVML cannot give pcie_tx_kBps (Not Supported)",
        "gpu1: NVML cannot give pcie_rx_kBps (Not Supported)",
    ]  # once each, though asked at every sample
    assert interval is not None and interval.gpus[gpu0]["nvlink_tx_kib_per_s"] > 0
    gpus = summary.to_dict()["gpus"]
    assert set(gpus) == {"gpu0", "gpu1"}
    assert gpus["gpu0"]["utilization_pct_peak"] >= 90


def test_no_nvml_is_quiet_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as when nvidia-ml-py is absent
    notes = Notes()
    snap = take_snapshot([GpuSampler(SysRoot("/"))], notes)
    assert not snap.gauges
    import os

    assert bool(notes.said) == os.path.exists("/proc/driver/nvidia")


def test_a_captured_tree_never_asks_nvml(nvml: types.ModuleType, tmp_path: Any) -> None:
    (tmp_path / "proc").mkdir()
    snap = take_snapshot([GpuSampler(SysRoot(tmp_path))], Notes())
    assert not snap.gauges  # the GPUs of this machine are not the tree's
