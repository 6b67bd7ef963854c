"""The checks operators' runbooks add: locked memory, /dev/shm, NUMA balancing, the governor, IOMMU,
PCIe AER, Xid errors, the subnet manager, verbs device nodes, RoCE traffic class and ECN.

Each runs on trees in the kernel's own formats (``build_fixtures.py``): the healthy node passes, each
fault planted in ``host-faults-8gpu`` (or ``roce-4gpu``) is named with its device and a remedy, and a
file that is absent, unreadable or garbage is "not applicable" or a ``probe.read`` note, never a crash.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, cli, only, run_fixture

from fabricscope.doctor.checks.gpu import XID_ACTIONS
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.probes.kernel_log import parse_xids
from fabricscope.kernel_text import (
    parse_aer,
    parse_cpu_list,
    parse_limits,
    parse_mountinfo_device,
    parse_mounts,
    parse_size_option,
)

NEW = (
    "host.memlock",
    "host.shm",
    "host.numa_balancing",
    "host.cpu_governor",
    "host.iommu",
    "pcie.aer",
    "gpu.xid",
    "rdma.subnet_manager",
    "rdma.dev_nodes",
    "gpu.ecc",
    "gpu.nvlink",
    "gpu.clocks",
    "gpu.persistence",
    "gpu.pcie_replay",
    "nic.irq_affinity",
    "pcie.acs",
    "pcie.retrain",
    "host.hugepages",
    "rdma.cm",
)


def test_the_healthy_node_passes_every_new_check() -> None:
    findings = run_fixture("healthy-ib-8gpu").findings
    for check in NEW:
        mine = only(findings, check)
        assert mine, check
        assert all(f.severity is Severity.OK for f in mine), [f for f in mine if f.severity is not Severity.OK]


def _one(check: str, subject: str) -> tuple[Severity, str, str]:
    [found] = [f for f in run_fixture("host-faults-8gpu").findings if f.id == check and f.subject == subject]
    return found.severity, found.observed, found.advice


def test_a_link_that_retrained_narrower_warns_with_the_cause() -> None:
    """The degraded node's NIC trained x8 of x16 and the switch port above it has BWMgmt+: the hardware fell
    back, a warning that says so beside pcie.link's failure."""
    findings = run_fixture("degraded-ib-8gpu").findings
    [found] = [f for f in findings if f.id == "pcie.retrain" and f.severity is not Severity.OK]
    assert found.severity is Severity.WARN
    assert found.subject == "switch downstream port 0000:4a:00.0 (above mlx5_3 (0000:4b:00.0))"
    assert found.observed.startswith("LnkSta x8 at 32 GT/s, BWMgmt+") and "reseat" in found.advice
    assert any(f.id == "pcie.link" and f.subject == "mlx5_3 (0000:4b:00.0)" for f in findings)


def test_a_pci_express_capability_listed_after_one_near_the_end_of_the_space_is_found() -> None:
    from fabricscope.doctor.probes.pci import parse_bridge_config

    space = bytearray(_express_space(6, 0x40, 0x7104))
    space[0x40:0x42] = bytes((0x01, 0xF0))  # power management, then a capability at 0xF0, then PCI Express
    space[0xF0:0xF2] = bytes((0x09, 0x68))
    assert parse_bridge_config(bytes(space)).link_status == 0x7104


@pytest.mark.parametrize(
    ("check", "subject", "severity", "seen", "remedy"),
    [
        ("host.memlock", "max locked memory", Severity.FAIL, "soft 64K, hard 64K", "memlock unlimited"),
        ("host.shm", "/dev/shm", Severity.FAIL, "64M", "--shm-size=1g"),
        ("host.numa_balancing", "kernel.numa_balancing", Severity.WARN, "1", "numa_balancing=0"),
        ("host.cpu_governor", "cpufreq", Severity.WARN, "112 CPUs powersave", "frequency-set -g performance"),
        ("host.iommu", "GPU 0000:19:00.0", Severity.WARN, "DMA-FQ", "iommu_groups"),
        ("pcie.aer", "GPU 0000:4c:00.0", Severity.FAIL, "nonfatal 1 (CmpltTO 1)", "reseat"),
        ("gpu.xid", "GPU 0000:4c:00.0", Severity.FAIL, "Xid 79 (GPU has fallen off the bus) once", "reboot"),
        ("gpu.xid", "GPU 0000:19:00.0", Severity.INFO, "Xid 13 (graphics engine exception) 2 times", ""),
        ("rdma.subnet_manager", "mlx5_6/1", Severity.FAIL, "LID 0x0, SM at LID 0x0", "opensm"),
        ("rdma.dev_nodes", "mlx5_7", Severity.FAIL, "/dev/infiniband/uverbs7 missing", "--device=/dev/infiniband"),
        ("gpu.persistence", "GPU 0000:2a:00.0", Severity.WARN, "persistence mode off", "nvidia-persistenced"),
        ("gpu.ecc", "GPU 0000:3b:00.0", Severity.FAIL, "uncorrected ECC 1 since the driver loaded", "nvidia-smi -r"),
        ("gpu.clocks", "GPU 0000:4c:00.0", Severity.FAIL, "HW slowdown (0x9) at idle", "PERFORMANCE"),
        ("gpu.nvlink", "GPU 0000:9b:00.0", Severity.FAIL, "17 of 18 links up (down: 3)", "nvlink -s"),
        (
            "gpu.pcie_replay",
            "GPU 0000:ac:00.0",
            Severity.WARN,
            "250000 PCIe replays since the driver loaded: at least 174 a minute on average (24 h up)",
            "dcgmi health -s p",
        ),
        ("gpu.pcie_replay", "GPU 0000:bd:00.0", Severity.INFO, "3 PCIe replays since the driver loaded: 0.00208", ""),
        (
            "pcie.acs",
            "bridge 0000:17:01.0 (above GPU 0000:19:00.0)",
            Severity.WARN,
            "ACSCtl SrcValid ReqRedir CmpltRedir UpstreamFwd (0x1d)",
            "ECAP_ACS+0x6.w=0000",
        ),
        (
            "pcie.retrain",
            "switch downstream port 0000:39:00.0 (above mlx5_2 (0000:3a:00.0))",
            Severity.INFO,
            "LnkSta x16 at 32 GT/s, BWMgmt+: retrained since the bit was cleared (a retrain at boot sets it too): "
            "clear it (setpci -s 0000:39:00.0 CAP_EXP+0x12.w=0x4000)",
            "",
        ),
        (
            "nic.irq_affinity",
            "mlx5_5 (0000:ab:00.0)",
            Severity.WARN,
            "8 IRQs, NUMA node 1: 8 may run only on other nodes' CPUs (IRQ 250, 251",
            "set_irq_affinity_bynode.sh 1",
        ),
    ],
)
def test_each_planted_fault_is_named_with_its_device_and_remedy(
    check: str, subject: str, severity: Severity, seen: str, remedy: str
) -> None:
    found, observed, advice = _one(check, subject)
    assert found is severity
    assert seen in observed
    assert remedy in advice


def test_aer_names_the_bridge_above_the_devices() -> None:
    findings = only(run_fixture("host-faults-8gpu").findings, "pcie.aer", Severity.WARN)
    [bridge] = findings
    assert bridge.subject.startswith("bridge 0000:49:00.0 (above GPU 0000:4c:00.0")
    assert bridge.observed == "correctable 322 (BadTLP 310, Timeout 12)"


def test_roce_traffic_class_and_ecn() -> None:
    findings = run_fixture("roce-4gpu").findings
    classes = only(findings, "rdma.traffic_class")
    assert {f.severity for f in classes} == {Severity.WARN}
    assert "NCCL_IB_TC=106" in classes[0].advice and "priority 0; PFC on 3" in classes[0].observed
    [ecn] = only(findings, "rdma.ecn", Severity.WARN)
    assert ecn.subject == "ens2f0np0 (mlx5_1/1)" and "roce_rp on none" in ecn.observed
    assert only(findings, "rdma.ecn", Severity.OK)[0].subject == "ens1f0np0 (mlx5_0/1)"
    tuned = run_fixture("roce-4gpu", env={"NCCL_IB_TC": "106"}).findings
    assert {f.severity for f in only(tuned, "rdma.traffic_class")} == {Severity.OK}
    wrong = run_fixture("roce-4gpu", env={"NCCL_IB_TC": "32"}).findings  # DSCP 8: priority 1
    assert "priority 1" in only(wrong, "rdma.traffic_class")[0].observed


MLNX_QOS = """DCBX mode: OS controlled
Priority trust state: {trust}
dscp2prio mapping:
        prio:0 dscp:07,06,05,04,03,02,01,00,
        prio:1 dscp:15,14,13,12,11,10,09,08,
        prio:2 dscp:23,22,21,20,19,18,17,16,
        prio:3 dscp:31,30,29,28,27,{moved}25,24,
        prio:4 dscp:39,38,37,36,35,34,33,32,
        prio:5 dscp:47,46,45,44,43,42,41,40,{extra}
        prio:6 dscp:55,54,53,52,51,50,49,48,
        prio:7 dscp:63,62,61,60,59,58,57,56,
Cable len: 7
PFC configuration:
        priority    0   1   2   3   4   5   6   7
        enabled     0   0   0   {pfc3}   0   {pfc5}   0   0
tc: 0 ratelimit: unlimited, tsa: vendor
         priority:  1
tc: 1 ratelimit: unlimited, tsa: vendor
         priority:  0
"""
"""``mlnx_qos -i <if>`` as MLNX_OFED prints it: trust state, the DSCP map (mlx5's default unless moved), PFC."""


def _qos(trust: str, *, pfc3: int = 1, pfc5: int = 0, moved: bool = False) -> str:
    return MLNX_QOS.format(
        trust=trust, pfc3=pfc3, pfc5=pfc5, moved="" if moved else "26,", extra="26," if moved else ""
    )


def test_the_trust_state_mlnx_qos_prints_decides_the_priority(tmp_path: Path) -> None:
    from fabricscope.doctor.probes.mlnx_qos import QOS_DIR, parse_mlnx_qos

    qos = parse_mlnx_qos(_qos("dscp"))
    assert qos is not None and (qos.trust, qos.pfc, qos.dscp_priority[26], qos.dscp_priority[63]) == (
        "dscp",
        (3,),
        3,
        7,
    )
    assert parse_mlnx_qos("garbage\n" + "9" * 5000) is None
    tabbed = parse_mlnx_qos(_qos("dscp").replace("27,26,25,24,", "27,26,25,24,\t"))  # trailing white space
    assert tabbed is not None and tabbed.dscp_priority[26] == 3
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "roce-4gpu", tree, symlinks=True)
    (tree / QOS_DIR).mkdir()
    for nic in ("ens1f0np0", "ens2f0np0"):
        (tree / QOS_DIR / nic).write_text(_qos("dscp"))
    # DSCP trust, the default map: NCCL_IB_TC=106 is DSCP 26, priority 3, where PFC is on.
    [fine, _] = only(run_fixture(str(tree), env={"NCCL_IB_TC": "106"}).findings, "rdma.traffic_class")
    assert fine.severity is Severity.OK
    assert fine.observed.endswith("DSCP trust and the port's DSCP map (mlnx_qos) -> priority 3; PFC on 3")
    # The port's map moved DSCP 26 to priority 5: read from mlnx_qos, not assumed.
    (tree / QOS_DIR / "ens1f0np0").write_text(_qos("dscp", moved=True))
    moved = [f for f in only(run_fixture(str(tree), env={"NCCL_IB_TC": "106"}).findings, "rdma.traffic_class")]
    assert [f.severity for f in moved] == [Severity.WARN, Severity.OK]
    assert "-> priority 5; PFC on 3" in moved[0].observed and "NCCL_IB_TC=98 (DSCP 24, priority 3)" in moved[0].advice
    # PCP trust: the service level decides, whatever the traffic class says.
    for nic in ("ens1f0np0", "ens2f0np0"):
        (tree / QOS_DIR / nic).write_text(_qos("pcp"))
    pcp = only(run_fixture(str(tree), env={"NCCL_IB_TC": "106"}).findings, "rdma.traffic_class")
    assert {f.severity for f in pcp} == {Severity.WARN}
    assert pcp[0].observed == "PCP trust (mlnx_qos): NCCL_IB_SL unset, service level 0 -> priority 0; PFC on 3"
    assert "NCCL_IB_SL=3" in pcp[0].advice and "--trust dscp" in pcp[0].advice
    sl = only(run_fixture(str(tree), env={"NCCL_IB_SL": "3"}).findings, "rdma.traffic_class")
    assert {f.severity for f in sl} == {Severity.OK}
    # PFC as mlnx_qos says (on 3 and 5) wins over what ethtool counters show.
    (tree / QOS_DIR / "ens1f0np0").write_text(_qos("pcp", pfc5=1))
    five = only(run_fixture(str(tree), env={"NCCL_IB_SL": "5"}).findings, "rdma.traffic_class")
    assert five[0].severity is Severity.OK and five[0].observed.endswith("PFC on 3,5")
    # A DSCP the printed map leaves out is on priority 0, as mlx5 puts a deleted entry back.
    (tree / QOS_DIR / "ens1f0np0").write_text(_qos("dscp").replace("27,26,25", "27,25"))
    [gone, _] = only(run_fixture(str(tree), env={"NCCL_IB_TC": "106"}).findings, "rdma.traffic_class")
    assert gone.severity is Severity.WARN and "-> priority 0; PFC on 3" in gone.observed
    # No DSCP on the PFC priority at all: the map is what to change, not the class.
    (tree / QOS_DIR / "ens1f0np0").write_text(_qos("dscp").replace("prio:3 dscp:", "prio:0 dscp:"))
    [unmapped, _] = only(run_fixture(str(tree), env={"NCCL_IB_TC": "106"}).findings, "rdma.traffic_class")
    assert "map NCCL's DSCP 26 to priority 3 on the port (mlnx_qos -i ens1f0np0 --dscp2prio set,26,3)" in (
        unmapped.advice
    )
    # Garbage where the capture should be is a note, and the old assumption holds.
    (tree / QOS_DIR / "ens1f0np0").write_text("[/b]\n")
    report = run_fixture(str(tree), env={"NCCL_IB_TC": "106"})
    assert any(f"{QOS_DIR}/ens1f0np0" in f.subject for f in only(report.findings, "probe.read"))
    assert only(report.findings, "rdma.traffic_class")[0].observed.endswith(
        "DSCP trust assumed -> priority 3; PFC on 3"
    )


def test_mlnx_qos_is_run_on_the_live_node_where_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat
    import sys

    from fabricscope.doctor.probes.mlnx_qos import QOS_DIR, read_qos
    from fabricscope.sysroot import SysRoot

    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "mlnx_qos"
    (folder / "answer").write_text(_qos("pcp"))
    script.write_text(
        f"#!{sys.executable}\nimport sys\nassert sys.argv[1:] == ['-i', 'eth9'], sys.argv\n"
        f"sys.stdout.write(open({str(folder / 'answer')!r}).read())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(folder))
    live = SysRoot("/")
    qos = read_qos(live, "eth9")
    assert qos is not None and (qos.trust, qos.pfc) == ("pcp", (3,))
    assert live.extras()[f"{QOS_DIR}/eth9"] == _qos("pcp")  # what a capture keeps
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert read_qos(SysRoot("/"), "eth9") is None  # not installed: the DSCP assumption stays


@pytest.mark.parametrize("tree", ["vm-virtio", "broken", "roce-4gpu"])
def test_no_false_failure_where_the_files_are_not_there(tree: str) -> None:
    findings = run_fixture(tree).findings
    new = [f for f in findings if f.id in NEW and f.severity >= Severity.WARN]
    assert new == []


def test_unreadable_and_garbage_files_are_notes_not_crashes(tmp_path: Path) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / "proc/self/limits").write_text("Limit Soft Hard\nMax locked memory  lots  lots\n")
    (tree / "proc/sys/kernel/numa_balancing").write_text("on\n")
    (tree / "sys/bus/pci/devices/0000:19:00.0/aer_dev_correctable").write_text("\x00garbage\n")
    (tree / "fabricscope-capture/dmesg").unlink()
    (tree / "fabricscope-capture/dmesg").mkdir()
    manifest = tree / "fabricscope-capture/manifest.json"
    data = json.loads(manifest.read_text())
    data["errors"]["proc/self/mounts"] = "EACCES"
    manifest.write_text(json.dumps(data))
    findings = run_fixture(str(tree)).findings
    assert only(findings, "host.memlock")[0].severity is Severity.INFO
    assert only(findings, "host.shm")[0].severity is Severity.INFO
    assert only(findings, "host.numa_balancing") == []
    [xid] = only(findings, "gpu.xid")
    assert xid.severity is Severity.INFO and "not read" in xid.observed
    unread = {f.subject for f in only(findings, "probe.read", Severity.WARN)}
    assert {"proc/self/limits", "proc/sys/kernel/numa_balancing", "proc/self/mounts"} <= unread
    assert any("aer_dev_correctable" in s for s in unread)


MEMINFO = """MemTotal:       2113645672 kB
MemFree:        1211934120 kB
AnonHugePages:         0 kB
ShmemHugePages:        0 kB
FileHugePages:      4096 kB
HugePages_Total:   {total}
HugePages_Free:    {free}
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:    {size} kB
Hugetlb:        {tlb} kB
"""


@pytest.mark.parametrize(
    ("total", "free", "size_kib", "severity", "observed"),
    [
        (0, 0, 2048, Severity.OK, "no persistent huge pages reserved"),
        # 800 GiB of 2 MiB pages reserved, none used: 40% of RAM nothing can have.
        (
            409600,
            409600,
            2048,
            Severity.WARN,
            "409600 pages of 2M: 800G reserved (40% of RAM), 800G of it unused",
        ),
        # The same pool in use by a job (DPDK, a database): what is left unused is under a tenth of RAM.
        (409600, 40960, 2048, Severity.OK, "409600 pages of 2M: 800G reserved (40% of RAM), 80G of it unused"),
        (256, 256, 1048576, Severity.WARN, "256 pages of 1G: 256G reserved (13% of RAM), 256G of it unused"),
    ],
)
def test_an_unused_pool_of_huge_pages_warns(tmp_path: Path, total, free, size_kib, severity, observed) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    meminfo = MEMINFO.format(total=total, free=free, size=size_kib, tlb=total * size_kib)
    (tree / "proc/meminfo").write_text(meminfo)
    [found] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert (found.severity, found.subject, found.observed) == (severity, "vm.nr_hugepages", observed)
    if severity is Severity.WARN:
        assert "vm.nr_hugepages=0" in found.advice and "DPDK" in found.advice
    # A meminfo without the pool's lines (an old or trimmed file) is not judged.
    (tree / "proc/meminfo").write_text("MemTotal:       2113645672 kB\nHugePages_Total:   12\n")
    assert only(run_fixture(str(tree)).findings, "host.hugepages") == []


def test_huge_page_pools_of_every_size_count_and_reserved_pages_are_used(tmp_path: Path) -> None:
    """meminfo's HugePages_* lines count the default size only: a 1 GiB pool beside 2 MiB default pages is in
    sysfs; pages reserved for mappings already made (resv_hugepages, HugePages_Rsvd) are not unused."""
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / "proc/meminfo").write_text(MEMINFO.format(total=0, free=0, size=2048, tlb=1 << 30))
    pools = tree / "sys/kernel/mm/hugepages"
    for size, pages in (("2048kB", 0), ("1048576kB", 1024)):
        (pools / f"hugepages-{size}").mkdir(parents=True)
        for name, value in (("nr_hugepages", pages), ("free_hugepages", pages), ("resv_hugepages", 0)):
            (pools / f"hugepages-{size}" / name).write_text(f"{value}\n")
    [found] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert (found.severity, found.observed) == (
        Severity.WARN,
        "1024 pages of 1G: 1T reserved (51% of RAM), 1T of it unused",
    )
    (pools / "hugepages-1048576kB/resv_hugepages").write_text("1000\n")  # a database mapped most of it
    [used] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert (used.severity, used.observed) == (
        Severity.OK,
        "1024 pages of 1G: 1T reserved (51% of RAM), 24G of it unused",
    )
    # A count that cannot be read is not a zero: the pool is said, not called empty or unused.
    (pools / "hugepages-1048576kB/free_hugepages").unlink()
    (pools / "hugepages-1048576kB/free_hugepages").mkdir()
    [unread] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert (unread.severity, unread.observed) == (
        Severity.INFO,
        "1024 pages of 1G: 1T reserved (51% of RAM), 0 of it unused; could not read the 1G pool (probe.read says why)",
    )
    (pools / "hugepages-2048kB/nr_hugepages").write_text("204800\n")  # 400 GiB of 2 MiB pages, read and unused
    (pools / "hugepages-2048kB/free_hugepages").write_text("204800\n")
    [still] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert still.severity is Severity.WARN and "400G of it unused; could not read the 1G pool" in still.observed
    shutil.rmtree(pools)  # no sysfs: meminfo's default pool, with its reserved pages
    (tree / "proc/meminfo").write_text(
        MEMINFO.format(total=512, free=512, size=1048576, tlb=512 << 20).replace(
            "HugePages_Rsvd:        0", "HugePages_Rsvd:      512"
        )
    )
    [meminfo] = only(run_fixture(str(tree)).findings, "host.hugepages")
    assert (meminfo.severity, meminfo.observed) == (
        Severity.OK,
        "512 pages of 1G: 512G reserved (25% of RAM), 0 of it unused",
    )


def test_without_rdma_ucm_the_connection_manager_is_a_note(tmp_path: Path) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "roce-4gpu", tree, symlinks=True)
    (tree / "sys/class/misc/rdma_cm").unlink()
    [note] = only(run_fixture(str(tree)).findings, "rdma.cm")
    assert (note.severity, note.subject) == (Severity.INFO, "roce-node-03")
    assert "NCCL does not need it" in note.observed and "modprobe rdma_ucm" in note.observed
    assert only(run_fixture("vm-virtio").findings, "rdma.cm") == []  # no RDMA devices: not asked


def test_a_driver_too_old_for_the_cuda_of_the_nccl_wheel_warns(tmp_path: Path) -> None:
    from fabricscope.doctor.checks.gpu import driver_cuda_major

    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    assert only(run_fixture(str(tree)).findings, "gpu.driver_cuda") == []  # no wheel captured: not asked
    (tree / "fabricscope-capture/nccl-wheel").write_text("nvidia-nccl-cu12 2.21.5\n")
    [fine] = only(run_fixture(str(tree)).findings, "gpu.driver_cuda")
    assert (fine.severity, fine.observed) == (
        Severity.OK,
        "driver 535.161.08 runs CUDA 12; nvidia-nccl-cu12 2.21.5 needs CUDA 12",
    )
    # A node left on the R470 branch (CUDA 11.4): NVML says 11.4, the driver's own file 470.223.02.
    version = tree / "proc/driver/nvidia/version"
    version.write_text(version.read_text().replace("535.161.08", "470.223.02"))
    nvml = tree / "fabricscope-capture/nvml.json"
    nvml.write_text(nvml.read_text().replace('"cuda": "12.2"', '"cuda": "11.4"'))
    [old] = only(run_fixture(str(tree)).findings, "gpu.driver_cuda")
    assert (old.severity, old.expected) == (Severity.WARN, "a driver from 525.60.13 on")
    assert old.observed == "driver 470.223.02 runs CUDA 11; nvidia-nccl-cu12 2.21.5 needs CUDA 12"
    assert "CUDA driver version is insufficient" in old.advice and "cu11 builds" in old.advice
    # The table where NVML cannot say (the CUDA Compatibility guide's minimum drivers).
    assert driver_cuda_major("525.60.13", None) == 12 and driver_cuda_major("525.60.12", None) == 11
    assert driver_cuda_major("450.80.02", None) == 11 and driver_cuda_major("418.87.01", None) == 10
    assert driver_cuda_major("470.223.02", "12.2") == 12  # NVML's answer first
    for garbage in ("garbage", "9" * 400, "", "1.2.3.4", None):
        assert driver_cuda_major(garbage, None) is None


def test_list_names_every_new_check() -> None:
    done = cli("--list")
    assert done.returncode == 0, done.stderr
    for check in (*NEW, "rdma.traffic_class", "rdma.ecn"):
        assert check in done.stdout


def test_xid_lines_in_every_format_the_log_comes_in() -> None:
    text = "\n".join(
        [
            "6,1234,5678901,-;NVRM: Xid (PCI:0000:17:00): 48, pid=91, name=python, An uncorrectable double bit error",
            "[Tue Dec  1 12:00:00 2026] NVRM: Xid (PCI:0000:17:00): 48, pid=92, name=python, DBE again",
            "[  12.5] NVRM: Xid (0000:03:00): 74, Channel 0x3, NVLink: fatal error detected on link 4",
            "[  13.0] NVRM: Xid (PCI:0000:b3:00): 999999, an absurd code",
            "NVRM: GPU at PCI:0000:17:00: GPU-1d1f1a1e",
        ]
    )
    xids = parse_xids(text)
    assert [(x.device, x.code, x.count) for x in xids] == [("0000:17:00", 48, 2), ("0000:03:00", 74, 1)]
    assert xids[0].message == "DBE again"
    assert all(code in XID_ACTIONS for code in (48, 74, 79, 95))


def test_kernel_text_parsers_on_the_kernels_formats() -> None:
    limits = parse_limits((FIXTURES / "healthy-ib-8gpu/proc/self/limits").read_text())
    assert limits is not None and limits["Max locked memory"] == (None, None)
    assert limits["Max stack size"] == (8388608, None)
    assert parse_limits("garbage") is None
    mounts = parse_mounts("tmpfs /dev/shm tmpfs rw,size=65536k 0 0\n/dev/sdb /mnt/my\\040disk ext4 rw 0 0\n")
    assert mounts == [("tmpfs", "/dev/shm", "tmpfs", "rw,size=65536k"), ("/dev/sdb", "/mnt/my disk", "ext4", "rw")]
    assert parse_size_option("rw,size=65536k") == 64 << 20 and parse_size_option("rw,size=1g") == 1 << 30
    # /proc/self/mountinfo as this machine's kernel writes it: /dev/shm mounted twice (the last is in effect).
    info = (
        "24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334824k,mode=755\n"
        "25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683784k\n"
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
        "30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683784k\n"
        "31 24 0:28 / /dev/shm2 rw,relatime - tmpfs tmpfs rw\n"
        "32 27 0:29 / /mnt/my\\040disk rw - ext4 /dev/sdb rw\n"
    )
    assert parse_mountinfo_device(info, "/dev/shm") == "0:27"
    assert parse_mountinfo_device(info, "/dev/shm/nccl-x") == "0:27"  # a file in it
    assert parse_mountinfo_device(info, "/dev/null") == "0:6" and parse_mountinfo_device(info, "/tmp") == "254:0"
    assert parse_mountinfo_device(info, "/mnt/my disk/f") == "0:29"
    # /dev mounted again over the first: the /dev/shm mounted on the first is out of reach.
    assert parse_mountinfo_device(info + "40 24 0:99 / /dev rw - tmpfs tmpfs rw\n", "/dev/shm") == "0:99"
    assert parse_mountinfo_device("tmpfs /dev/shm tmpfs rw,size=65536k 0 0\n", "/dev/shm") is None  # /proc/mounts
    assert parse_mountinfo_device("1 1 0:" + "9" * 400 + " / / rw - x x rw\n", "/dev/shm") is None
    assert parse_mountinfo_device(None, "/dev/shm") is None
    assert parse_size_option("rw,size=" + "9" * 400) is None
    assert parse_cpu_list("0-3,8") == {0, 1, 2, 3, 8} and parse_cpu_list("0-999999999") is None
    aer = parse_aer((FIXTURES / "host-faults-8gpu/sys/bus/pci/devices/0000:49:00.0/aer_dev_correctable").read_text())
    assert aer is not None and aer["TOTAL"] == 322 and aer["BadTLP"] == 310
    assert parse_aer("RxErr 0\n") is None  # no TOTAL line: not the kernel's file
    # A text parsed again gives the same counts, in a dict of its own (a caller's change stays its own).
    zero = "RxErr 0\nBadTLP 0\nTOTAL_ERR_COR 0\n"
    first = parse_aer(zero)
    assert first == {"RxErr": 0, "BadTLP": 0, "TOTAL": 0}
    first["TOTAL"] = 99
    assert parse_aer(zero) == {"RxErr": 0, "BadTLP": 0, "TOTAL": 0}


def test_acs_control_is_read_from_the_extended_capabilities() -> None:
    from fabricscope.doctor.probes.pci import parse_acs_control

    space = bytearray(4096)
    space[0x100:0x104] = (0x0001 | 1 << 16 | 0x180 << 20).to_bytes(4, "little")  # AER first, then ACS at 0x180
    space[0x180:0x184] = (0x000D | 1 << 16).to_bytes(4, "little")
    space[0x186:0x188] = (0x000C).to_bytes(2, "little")
    assert parse_acs_control(bytes(space)) == 0x0C
    assert parse_acs_control(bytes(space[:256])) is None  # what a reader who is not root gets
    loop = bytearray(space)
    loop[0x180:0x184] = (0x0002 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")  # a pointer back: no ACS, no hang
    assert parse_acs_control(bytes(loop)) is None


def _express_space(port_type: int, control: int, status: int, size: int = 4096) -> bytes:
    """A configuration space whose capability list holds power management at 0x40, then PCI Express at 0x68."""
    space = bytearray(size)
    space[0x06], space[0x34] = 0x10, 0x40
    space[0x40:0x42] = bytes((0x01, 0x68))
    space[0x68:0x6A] = bytes((0x10, 0x00))
    space[0x6A:0x6C] = (0x2 | port_type << 4).to_bytes(2, "little")
    space[0x78:0x7A] = control.to_bytes(2, "little")
    space[0x7A:0x7C] = status.to_bytes(2, "little")
    return bytes(space)


def test_the_link_registers_are_read_from_the_pci_express_capability() -> None:
    from fabricscope.doctor.probes.pci import parse_bridge_config

    config = parse_bridge_config(_express_space(6, 0x0040, 0x7104))
    assert (config.port_type, config.link_control, config.link_status, config.acs_control) == (6, 0x40, 0x7104, None)
    assert parse_bridge_config(_express_space(6, 0x40, 0x7104)[:64]).link_status is None  # not root: 64 bytes
    loop = bytearray(_express_space(4, 0, 0))
    loop[0x40:0x42] = bytes((0x01, 0x40))  # a capability that points at itself: no PCI Express, no hang
    assert parse_bridge_config(bytes(loop)).port_type is None
    no_list = bytearray(_express_space(4, 0, 0))
    no_list[0x06] = 0  # the Status register says there is no capability list
    assert parse_bridge_config(bytes(no_list)).port_type is None


@pytest.mark.parametrize(
    ("port_type", "control", "status", "severity"),
    [
        (6, 0x0040, 0x7104, Severity.INFO),  # BWMgmt+ on a switch downstream port, the GPU below at its best
        (4, 0x0040, 0x3104, Severity.OK),  # BWMgmt- on a root port
        (4, 0x0440, 0x7104, Severity.INFO),  # an interrupt handler owns the bit (BWInt+)
        (5, 0x0040, 0x7104, None),  # an upstream port: the bit is Reserved there, not judged
    ],
)
def test_a_retrained_link_is_judged_by_port_type_and_owner(port_type, control, status, severity) -> None:
    from dataclasses import replace

    from fabricscope.doctor.checks.pcie import PcieRetrain
    from fabricscope.doctor.expect import Expectations
    from fabricscope.doctor.probes.pci import parse_bridge_config

    node = run_fixture("healthy-ib-8gpu").node
    planted = parse_bridge_config(_express_space(port_type, control, status))
    found = PcieRetrain().run(replace(node, bridge_config={"0000:17:01.0": planted}), Expectations())
    assert [f.severity for f in found] == ([] if severity is None else [severity])
    if severity is not None:
        assert found[0].subject.endswith("0000:17:01.0 (above GPU 0000:19:00.0)")
        assert "x16 at 16 GT/s" in found[0].observed


@pytest.mark.parametrize(
    ("uptime", "expected"),
    [("86400.51 19202112.84\n", 86400.51), ("0.00 0.00", None), ("1e400 1", None), ("up 3 days", None), ("", None)],
)
def test_uptime_is_the_first_of_two_numbers_and_odd_text_is_an_anomaly(tmp_path, uptime, expected) -> None:
    from fabricscope.doctor.diagnosis import open_root
    from fabricscope.doctor.probes.host import probe_uptime

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "uptime").write_text(uptime)
    root = open_root(str(tmp_path))
    assert probe_uptime(root) == expected
    if expected is None and uptime:
        assert [a.path for a in root.anomalies] == ["proc/uptime"]


def test_replays_without_an_uptime_are_counted_without_a_rate() -> None:
    from dataclasses import replace

    from fabricscope.doctor.checks.gpu import GpuPcieReplays
    from fabricscope.doctor.expect import Expectations

    node = run_fixture("host-faults-8gpu").node
    found = GpuPcieReplays().run(replace(node, uptime_s=None), Expectations())
    busy = [f for f in found if f.subject == "GPU 0000:ac:00.0"]
    assert [(f.severity, f.observed) for f in busy] == [(Severity.INFO, "250000 PCIe replays since the driver loaded")]
