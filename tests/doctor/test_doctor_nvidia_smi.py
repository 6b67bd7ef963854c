"""GPU health from ``nvidia-smi -q`` where nvidia-ml-py is not installed: its text in both driver layouts,
a real ``nvidia-smi`` process (a stand-in on PATH), the capture and its replay."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, only, run_fixture

from fabricscope.doctor.diagnosis import diagnose
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.inventory import Gpu
from fabricscope.doctor.probes.nvidia_smi import SMI_FILE, parse_nvidia_smi
from fabricscope.doctor.probes.nvml import NVML_FILE, read_nvml
from fabricscope.sysroot import SysRoot

HEADER = """
==============NVSMI LOG==============

Timestamp                                 : Tue Mar 12 09:41:07 2024
Driver Version                            : {driver}
CUDA Version                              : {cuda}

Attached GPUs                             : {count}
"""

R535_GPU = """GPU {bus}
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Architecture                  : Hopper
    Persistence Mode                      : {persistence}
    GPU Reset Status
        Reset Required                    : No
    PCI
        Bus                               : 0x19
        Bus Id                            : {bus}
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 5
            Link Width
                Max                       : 16x
                Current                   : 16x
        Replays Since Reset               : {replays}
        Replay Number Rollovers           : 0
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : {idle}
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Not Active
        HW Slowdown                       : {hw}
            HW Thermal Slowdown           : {hw_thermal}
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
    Utilization
        Gpu                               : {util} %
        Memory                            : 0 %
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 177
            DRAM Uncorrectable            : {dram_volatile}
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 177
            DRAM Uncorrectable            : {dram_aggregate}
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 1
        Uncorrectable Error               : 0
        Pending                           : {remap_pending}
        Remapping Failure Occurred        : {remap_failed}
        Bank Remap Availability Histogram
            Max                           : 639 bank(s)
            High                          : 1 bank(s)
            Partial                       : 0 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
    Temperature
        GPU Current Temp                  : 33 C
"""
"""One GPU as R535 drivers print it: SRAM/DRAM ECC counts, Clocks Event Reasons, Remapped Rows."""

R470_GPU = """GPU {bus}
    Product Name                          : Tesla V100-SXM2-32GB
    Persistence Mode                      : Enabled
    PCI
        Bus Id                            : {bus}
        Replays Since Reset               : 3
    Clocks Throttle Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
    Utilization
        Gpu                               : 87 %
    ECC Errors
        Volatile
            Single Bit            
                Device Memory             : 4
                Register File             : 0
                Total                     : 4
            Double Bit            
                Device Memory             : 1
                Register File             : 0
                L1 Cache                  : 0
                L2 Cache                  : 0
                Texture Memory            : N/A
                Total                     : 1
        Aggregate
            Single Bit            
                Total                     : 9
            Double Bit            
                Total                     : 2
    Retired Pages
        Single Bit ECC                    : 2
        Double Bit ECC                    : 1
        Pending Page Blacklist            : Yes
    Remapped Rows                         : N/A
"""
"""One GPU as R470 drivers print it (a V100): Double Bit totals, Clocks Throttle Reasons, retired pages."""

HEALTHY = {
    "persistence": "Enabled",
    "replays": 0,
    "idle": "Active",
    "hw": "Not Active",
    "hw_thermal": "Not Active",
    "util": 0,
    "dram_volatile": 0,
    "dram_aggregate": 0,
    "remap_pending": "No",
    "remap_failed": "No",
}


def smi_text(buses: list[str], sick: dict[str, dict[str, object]] | None = None) -> str:
    blocks = [R535_GPU.format(bus=bus, **{**HEALTHY, **(sick or {}).get(bus, {})}) for bus in buses]
    return HEADER.format(driver="535.161.08", cuda="12.2", count=len(buses)) + "".join(blocks)


BUSES = [f"00000000:{b}:00.0" for b in ("19", "2A", "3B", "4C", "9B", "AC", "BD", "CE")]
"""The GPUs of healthy-ib-8gpu as nvidia-smi names them."""
SICK = {
    "00000000:2A:00.0": {"dram_volatile": 2, "dram_aggregate": 2, "remap_pending": "Yes"},
    "00000000:3B:00.0": {"idle": "Not Active", "hw": "Active", "hw_thermal": "Active", "persistence": "Disabled"},
}


def test_both_driver_layouts_give_nvml_s_answers() -> None:
    answers = parse_nvidia_smi(smi_text(BUSES[:3], SICK))
    assert answers is not None and (answers["driver"], answers["cuda"]) == ("535.161.08", "12.2")
    healthy, ecc, hot = answers["gpus"]
    assert healthy == {
        "pci": "0000:19:00.0",
        "busy": False,
        "persistence": True,
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "remap_pending": False,
        "remap_failed": False,
        "retired_pages": None,
        "retired_pending": None,
        "clock_event_reasons": 0x1,
        "pcie_replays": 0,
        "nvlink": [],
    }
    assert (ecc["ecc_uncorrected_volatile"], ecc["remap_pending"]) == (2, True)
    assert (hot["clock_event_reasons"], hot["persistence"]) == (0x8 | 0x40, False)
    old = parse_nvidia_smi(
        HEADER.format(driver="470.223.02", cuda="11.4", count=1) + R470_GPU.format(bus="00000000:1A:00.0")
    )
    assert old is not None
    [v100] = old["gpus"]
    assert (v100["ecc_uncorrected_volatile"], v100["ecc_uncorrected_aggregate"]) == (1, 2)  # Double Bit totals
    assert (v100["retired_pages"], v100["retired_pending"], v100["remap_pending"]) == (3, True, None)
    assert (v100["clock_event_reasons"], v100["busy"], v100["pcie_replays"]) == (0x4, True, 3)


@pytest.mark.parametrize(
    "text",
    ["", "garbage", "GPU 00000000:19:00.0\n", "Driver Version : 1\n", "9" * 5000, "GPU 00000000:19:00.0\n" * 100],
)
def test_what_is_not_its_text_is_none(text: str) -> None:
    assert parse_nvidia_smi(text) is None


def test_a_tree_with_nvidia_smi_text_is_judged_as_with_nvml_s_answers(tmp_path: Path) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / NVML_FILE).unlink()
    (tree / SMI_FILE).write_text(smi_text(BUSES))
    report = run_fixture(str(tree))
    assert report.node.nvml == "captured (nvidia-smi -q)" and report.node.cuda_driver == "12.2"
    kept = ("gpu.count", "gpu.ecc", "gpu.clocks", "gpu.persistence", "gpu.pcie_replay")
    fine = {(f.id, f.subject): f.severity for f in report.findings if f.id in kept}
    nvml = {(f.id, f.subject): f.severity for f in run_fixture("healthy-ib-8gpu").findings if f.id in kept}
    assert fine == nvml and set(fine.values()) == {Severity.OK}
    assert only(report.findings, "gpu.nvlink") == []  # NVLink is not in nvidia-smi -q: not judged
    (tree / SMI_FILE).write_text(smi_text(BUSES, SICK))
    findings = run_fixture(str(tree)).findings
    bad = {(f.id, f.subject, f.severity) for f in findings if f.severity >= Severity.WARN and f.id in kept}
    assert bad == {
        ("gpu.ecc", "GPU 0000:2a:00.0", Severity.FAIL),
        ("gpu.clocks", "GPU 0000:3b:00.0", Severity.FAIL),
        ("gpu.persistence", "GPU 0000:3b:00.0", Severity.WARN),
    }


def _fake_smi(folder: Path, text: str, code: int = 0) -> None:
    """An ``nvidia-smi`` on PATH that prints what a node's would (``-q`` only)."""
    folder.mkdir(exist_ok=True)
    (folder / "answer").write_text(text)
    script = folder / "nvidia-smi"
    script.write_text(
        f'#!{sys.executable}\nimport sys\nassert sys.argv[1:] == ["-q"], sys.argv\n'
        f"sys.stdout.write(open({str(folder / 'answer')!r}).read())\nsys.exit({code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_without_nvidia_ml_py_the_live_node_asks_nvidia_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fabricscope.doctor.capture import write_capture

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py is not installed
    _fake_smi(tmp_path / "bin", smi_text(BUSES[:2], SICK))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}")
    gpus: list[Gpu] = []
    assert read_nvml(SysRoot("/"), gpus) == ("nvidia-smi -q", "12.2")
    assert [(g.pci, g.health.ecc_volatile if g.health else None) for g in gpus] == [
        ("0000:19:00.0", 0),
        ("0000:2a:00.0", 2),
    ]
    live = SysRoot("/")
    before = diagnose(live, env={})
    write_capture(live, str(tmp_path / "capture"), {}, before.node.hostname)
    assert (tmp_path / "capture" / SMI_FILE).read_text() == smi_text(BUSES[:2], SICK)  # the text, as printed
    monkeypatch.setenv("PATH", "/nonexistent")  # the replay never runs it
    after = diagnose(SysRoot(tmp_path / "capture"))
    assert after.node.nvml == "captured (nvidia-smi -q)"
    ecc = [(f.severity, f.subject, f.observed) for f in after.findings if f.id == "gpu.ecc"]
    assert ecc == [(f.severity, f.subject, f.observed) for f in before.findings if f.id == "gpu.ecc"]
    assert (Severity.FAIL, "GPU 0000:2a:00.0") in {(s, g) for s, g, _ in ecc}


@pytest.mark.parametrize(
    ("text", "code", "status"),
    [
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            9,
            "failed: nvidia-smi -q exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
            "driver.",
        ),
        ("No devices were found\n", 0, "failed: nvidia-smi -q printed no GPU block"),
    ],
)
def test_an_nvidia_smi_that_cannot_answer_is_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, code: int, status: str
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    _fake_smi(tmp_path / "bin", text, code)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}")
    assert read_nvml(SysRoot("/"), []) == (status, None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert read_nvml(SysRoot("/"), []) == ("absent", None)


def test_garbled_nvidia_smi_text_in_a_tree_is_a_note(tmp_path: Path) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / NVML_FILE).unlink()
    (tree / SMI_FILE).write_text("[/b] not nvidia-smi\n" + json.dumps({"gpus": 3}))
    report = run_fixture(str(tree))
    assert report.node.nvml == "not live"
    notes = {f.subject: f.observed for f in only(report.findings, "probe.read")}
    assert any(SMI_FILE in subject for subject in notes), notes


def test_gpus_not_given_to_a_container_are_not_called_lost(tmp_path: Path) -> None:
    """sysfs shows all 8 GPUs of the machine; the container's driver folder and nvidia-smi only the 4 it got."""
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / NVML_FILE).unlink()
    (tree / SMI_FILE).write_text(smi_text(BUSES[:4]))
    lost = {f.subject for f in only(run_fixture(str(tree)).findings, "gpu.count", Severity.FAIL)}
    assert lost == {"GPU 0000:9b:00.0", "GPU 0000:ac:00.0", "GPU 0000:bd:00.0", "GPU 0000:ce:00.0"}  # bare metal
    for bus in BUSES[:4]:
        (tree / "proc/driver/nvidia/gpus" / bus[4:].lower()).mkdir(parents=True)
    findings = run_fixture(str(tree)).findings
    assert only(findings, "gpu.count", Severity.FAIL) == []
    hidden = {f.subject: f.observed for f in only(findings, "gpu.count", Severity.INFO)}
    assert set(hidden) == lost and all("not given to this container" in v for v in hidden.values())
    (tree / "proc/driver/nvidia/gpus/0000:9b:00.0").mkdir()  # the driver has it, NVML does not: lost after all
    assert {f.subject for f in only(run_fixture(str(tree)).findings, "gpu.count", Severity.FAIL)} == {
        "GPU 0000:9b:00.0"
    }
    # One the driver never bound (no driver link in sysfs, where a container still shows the host's) is lost too.
    device = tree / "sys/bus/pci/devices/0000:ce:00.0"
    (device.resolve() / "driver").unlink()
    failed = {f.subject for f in only(run_fixture(str(tree)).findings, "gpu.count", Severity.FAIL)}
    assert failed == {"GPU 0000:9b:00.0", "GPU 0000:ce:00.0"}
