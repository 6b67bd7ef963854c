"""GPU discovery: sysfs by class and vendor; NVML (absent here) through a stand-in module."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES

from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.inventory import Gpu, PciDevice
from fabricscope.doctor.probes.gpus import is_gpu_class, probe_gpus
from fabricscope.doctor.probes.nvml import read_nvml
from fabricscope.sysroot import SysRoot


def test_classes() -> None:
    assert is_gpu_class(0x030200) and is_gpu_class(0x030000)
    assert not is_gpu_class(0x068000)  # NVSwitch
    assert not is_gpu_class(0x020700) and not is_gpu_class(None)


def test_sysfs_finds_gpus_without_nvml() -> None:
    pci: dict[str, PciDevice] = {}
    gpus, nvml, _ = probe_gpus(SysRoot(FIXTURES / "roce-4gpu"), pci)
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
    assert read_nvml(SysRoot("/"), gpus)[0] == "used"
    assert (gpus[0].nvml_index, gpus[0].busy) == (0, False)
    assert (gpus[1].pci, gpus[1].nvml_index, gpus[1].busy) == ("0000:c1:00.0", 1, True)


def test_nvml_failure_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], [], fail_init=True))
    assert read_nvml(SysRoot("/"), []) == ("failed: Driver Not Loaded", None)


def test_nvml_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as when nvidia-ml-py is not installed
    monkeypatch.setenv("PATH", str(tmp_path))  # and no nvidia-smi to fall back on
    assert read_nvml(SysRoot("/"), []) == ("absent", None)


def _health(findings: list[Finding]) -> list[tuple[str, Severity, str, str]]:
    """The NVML health findings (gpu.count and gpu.xid name where they read: used/captured, kmsg/dmesg)."""
    kept = ("gpu.ecc", "gpu.nvlink", "gpu.clocks", "gpu.persistence")
    return [(f.id, f.severity, f.subject, f.observed) for f in findings if f.id in kept]


def fake_nvml_health(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML as nvidia-ml-py answers on an idle H100 with one sick GPU: the calls and return shapes of nvml.h."""
    module = fake_nvml([b"00000000:19:00.0", b"00000000:2A:00.0"], [0, 0])
    errors = module.NVMLError  # type: ignore[attr-defined]

    def not_supported(*args: object) -> None:
        raise errors("Not Supported")

    module.nvmlSystemGetDriverVersion = lambda: "535.161.08"  # type: ignore[attr-defined]
    module.nvmlSystemGetCudaDriverVersion = lambda: 12020  # type: ignore[attr-defined]
    module.nvmlDeviceGetPersistenceMode = lambda h: 1 - h  # type: ignore[attr-defined]  # the second is off
    module.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: 3 * h  # type: ignore[attr-defined]
    module.nvmlDeviceGetRemappedRows = lambda h: (0, h, h, 0)  # type: ignore[attr-defined]
    module.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1 | (0x40 * h)  # type: ignore[attr-defined]
    module.nvmlDeviceGetNvLinkState = lambda h, link: 1 if link < 18 else not_supported()  # type: ignore[attr-defined]
    module.nvmlDeviceGetNvLinkErrorCounter = not_supported  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)


def test_nvml_health_is_asked_live_and_replayed_from_the_capture(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fabricscope.doctor.capture import write_capture
    from fabricscope.doctor.diagnosis import diagnose

    fake_nvml_health(monkeypatch)
    live = SysRoot("/")
    gpus: list[Gpu] = []
    assert read_nvml(live, gpus) == ("used", "12.2")
    healthy, sick = (g.health for g in gpus)
    assert healthy is not None and sick is not None
    assert (healthy.persistence, sick.persistence) == (True, False)
    assert (sick.ecc_volatile, sick.remap_pending, sick.clock_events) == (3, True, 0x41)
    assert len(healthy.nvlinks) == 18 and healthy.nvlinks[0].crc is None  # NotSupported is None, not 0
    before = diagnose(live, env={})
    write_capture(live, str(tmp_path / "capture"), {}, before.node.hostname)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the replay never asks NVML
    after = diagnose(SysRoot(tmp_path / "capture"))
    assert after.node.nvml == "captured" and after.node.cuda_driver == "12.2"
    shown = _health(before.findings)
    assert shown == _health(after.findings)
    assert ("gpu.ecc", Severity.FAIL, "GPU 0000:2a:00.0") in {(f[0], f[1], f[2]) for f in shown}
    assert ("gpu.clocks", Severity.FAIL, "GPU 0000:2a:00.0") in {(f[0], f[1], f[2]) for f in shown}


def test_retired_pages_of_gpus_before_ampere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """NVML as it answers on V100s, which retire pages instead of remapping rows: one clean, one with a
    retirement pending, one at DCGM's limit; asked live, then replayed from the capture."""
    from fabricscope.doctor.capture import write_capture
    from fabricscope.doctor.diagnosis import diagnose

    module = fake_nvml([b"00000000:1A:00.0", b"00000000:1B:00.0", b"00000000:1C:00.0"], [0, 0, 0])
    errors = module.NVMLError  # type: ignore[attr-defined]

    def not_supported(*args: object) -> None:
        raise errors("Not Supported")

    pages = {0: ([], []), 1: ([0x2F000], [0x1A2000]), 2: ([0x1000 * i for i in range(60)], [0x9000, 0xA000, 0xB000])}
    module.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: 0  # type: ignore[attr-defined]
    module.nvmlDeviceGetRemappedRows = not_supported  # type: ignore[attr-defined]
    module.nvmlDeviceGetRetiredPages = lambda h, cause: pages[h][cause]  # type: ignore[attr-defined]
    module.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: int(h == 1)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    live = SysRoot("/")
    gpus: list[Gpu] = []
    read_nvml(live, gpus)
    assert [(g.health.retired_pages, g.health.retired_pending) for g in gpus if g.health] == [
        (0, False),
        (2, True),
        (63, False),
    ]
    before = diagnose(live, env={})
    write_capture(live, str(tmp_path / "capture"), {}, before.node.hostname)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    after = diagnose(SysRoot(tmp_path / "capture"))
    ecc = [(f.severity, f.subject, f.observed) for f in after.findings if f.id == "gpu.ecc"]
    assert ecc == [(f.severity, f.subject, f.observed) for f in before.findings if f.id == "gpu.ecc"]
    zero = "uncorrected ECC 0 since the driver loaded, 0 in the GPU's life"
    assert ecc == [
        (Severity.OK, "GPU 0000:1a:00.0", f"{zero}; 0 pages retired"),
        (Severity.WARN, "GPU 0000:1b:00.0", f"{zero}; 2 pages retired; a page retirement is pending"),
        (Severity.FAIL, "GPU 0000:1c:00.0", f"{zero}; 63 pages retired"),
    ]
    [pending] = [f for f in after.findings if f.id == "gpu.ecc" and f.severity is Severity.WARN]
    assert "until the driver reloads" in pending.advice


@pytest.mark.parametrize("text", ["{", "[]", '{"gpus": 3}', '{"gpus": [{"pci": 7, "persistence": "yes"}]}'])
def test_a_garbled_nvml_capture_is_a_note_not_a_crash(tmp_path: Path, text: str) -> None:
    import shutil

    from fabricscope.doctor.diagnosis import diagnose

    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / "fabricscope-capture/nvml.json").write_text(text)
    report = diagnose(SysRoot(tree), env={})
    assert not [f for f in report.findings if f.id.startswith("gpu.") and f.severity >= Severity.WARN]
