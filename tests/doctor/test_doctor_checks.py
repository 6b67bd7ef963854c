"""Single checks on fixture nodes changed in one place: each rule fires on its fault and only there."""

from __future__ import annotations

from doctor_helpers import FIXTURES, only, subjects

from fabricscope.doctor.checks import CHECKS, run_checks
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.inventory import Node
from fabricscope.doctor.probe import probe_node
from fabricscope.doctor.sysroot import SysRoot


def node(name: str) -> Node:
    return probe_node(SysRoot(FIXTURES / name), {})


def test_check_ids_are_unique_and_named_by_area() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    assert all("." in i and c.title and c.reads for i, c in zip(ids, CHECKS, strict=True))


def test_busy_gpu_below_its_link_fails_idle_one_warns() -> None:
    degraded = node("degraded-ib-8gpu")
    gpu = next(g for g in degraded.gpus if g.pci == "0000:4c:00.0")
    gpu.busy = False
    assert "idle" in only(run_checks(degraded), "pcie.link", Severity.WARN)[0].observed
    gpu.busy = True
    assert "GPU 0000:4c:00.0" in subjects(run_checks(degraded), "pcie.link", Severity.FAIL)


def test_slot_narrower_than_the_device_warns() -> None:
    healthy = node("healthy-ib-8gpu")
    link = healthy.pci["0000:18:00.0"].link
    assert link is not None
    link.upstream_max_width = 8
    link.current_width = 8
    findings = run_checks(healthy)
    assert subjects(findings, "pcie.slot", Severity.WARN) == {"mlx5_0 (0000:18:00.0)"}
    assert "mlx5_0 (0000:18:00.0)" not in subjects(findings, "pcie.link", Severity.FAIL)  # it runs at its best
    expect = Expectations(pcie_gen=5, pcie_width=16)
    assert "mlx5_0 (0000:18:00.0)" in subjects(run_checks(healthy, expect), "pcie.link", Severity.FAIL)


def test_tcp_rules() -> None:
    vm = node("vm-virtio")
    vm.tcp.congestion = "reno"
    vm.tcp.window_scaling = 0
    vm.tcp.sack = 0
    vm.tcp.tcp_rmem = (4096, 131072, 1 << 20)
    findings = run_checks(vm)
    assert only(findings, "tcp.congestion", Severity.WARN)[0].advice.endswith("tcp_congestion_control=bbr")
    assert subjects(findings, "tcp.options", Severity.FAIL) == {"net.ipv4.tcp_window_scaling"}
    assert subjects(findings, "tcp.options", Severity.WARN) == {"net.ipv4.tcp_sack"}
    rmem = only(findings, "tcp.buffers", Severity.WARN)
    assert "net.ipv4.tcp_rmem (max)" in {f.subject for f in rmem}
    assert "'4096 131072 16777216'" in next(f.advice for f in rmem if "rmem" in f.subject)


def test_tcp_buffers_are_only_informative_with_rdma() -> None:
    roce = node("roce-4gpu")  # default buffers, but RDMA carries the traffic
    assert {f.severity for f in only(run_checks(roce), "tcp.buffers")} == {Severity.INFO}


def test_nic_speed_twins_half_duplex_and_expectation() -> None:
    vm = node("vm-virtio")
    eth0 = vm.nics[0]
    eth0.speed_mbps = 25000
    eth0.duplex = "half"
    findings = run_checks(vm)
    assert only(findings, "nic.speed", Severity.OK)[0].observed == "25 Gb/s"
    assert only(findings, "nic.speed", Severity.FAIL)[0].observed == "half duplex"
    failed = only(run_checks(vm, Expectations(nic_rate_gbps=100.0)), "nic.speed", Severity.FAIL)
    assert {f.observed for f in failed} == {"25 Gb/s", "half duplex"}


def test_gpu_count_and_a_gpu_nvml_cannot_see() -> None:
    healthy = node("healthy-ib-8gpu")
    assert only(run_checks(healthy, Expectations(gpu_count=4)), "gpu.count", Severity.FAIL)
    healthy.nvml = "used"
    for index, gpu in enumerate(healthy.gpus[1:]):
        gpu.nvml_index = index
    missing = only(run_checks(healthy), "gpu.count", Severity.FAIL)
    assert [f.subject for f in missing] == [f"GPU {healthy.gpus[0].pci}"]


def test_gpudirect_by_dmabuf_or_not_at_all() -> None:
    degraded = node("degraded-ib-8gpu")
    degraded.gpudirect.open_kernel_module = True
    ok = only(run_checks(degraded), "gpudirect.rdma", Severity.OK)
    assert ok[0].observed.startswith("DMA-BUF")
    degraded.gpudirect.kernel = (5, 4)
    assert only(run_checks(degraded), "gpudirect.rdma", Severity.FAIL)


def test_pfc_off_and_pause_storms() -> None:
    roce = node("roce-4gpu")
    nic = roce.nic("ens1f0np0")
    assert nic is not None and nic.ethtool is not None
    nic.ethtool = {k: v for k, v in nic.ethtool.items() if "pause" not in k}
    nic.ethtool["tx_pause_storm_error_events"] = 2
    findings = only(run_checks(roce), "rdma.pfc")
    mine = [f for f in findings if f.subject.startswith("ens1f0np0")]
    assert {f.severity for f in mine} == {Severity.WARN, Severity.FAIL}
    assert any("PFC is off" in f.observed for f in mine)


def test_missing_uverbs_and_expected_link_layer() -> None:
    healthy = node("healthy-ib-8gpu")
    healthy.rdma[0].uverbs = False
    findings = run_checks(healthy, Expectations(link_layer="Ethernet", nic_count=8))
    assert subjects(findings, "rdma.uverbs", Severity.FAIL) == {"mlx5_0"}
    assert only(findings, "nic.count", Severity.FAIL)  # only the two Ethernet ports count as compute
    vm = node("vm-virtio")
    assert only(run_checks(vm, Expectations(link_layer="InfiniBand")), "rdma.link_layer", Severity.FAIL)


def test_gpu_nic_distance_expectation_is_strict() -> None:
    roce = node("roce-4gpu")
    findings = run_checks(roce, Expectations(gpu_nic_distance="PIX"))
    assert subjects(findings, "topology.gpu_nic", Severity.FAIL) == {"GPU 0000:97:00.0", "GPU 0000:98:00.0"}
    assert len(only(findings, "topology.gpu_nic", Severity.OK)) == 2
