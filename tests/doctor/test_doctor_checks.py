"""Single checks on fixture nodes changed in one place: each rule fires on its fault and only there."""

from __future__ import annotations

import pytest
from doctor_helpers import FIXTURES, only, subjects

from fabricscope.doctor.checks import CHECKS, run_checks
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.inventory import Node
from fabricscope.doctor.probes.node import probe_node
from fabricscope.sysroot import SysRoot


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
    # eth0's speed is unknown: the floor, Linux's own 4 MiB default.
    assert "'4096 131072 4194304'" in next(f.advice for f in rmem if "rmem" in f.subject)


def test_tcp_buffers_are_only_informative_with_rdma() -> None:
    roce = node("roce-4gpu")  # default buffers, but RDMA carries the traffic
    roce.tcp.tcp_wmem = (4096, 16384, 1 << 20)
    found = only(run_checks(roce), "tcp.buffers")
    assert Severity.WARN not in {f.severity for f in found}
    assert next(f for f in found if f.subject == "net.ipv4.tcp_wmem (max)").severity is Severity.INFO


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
    [fewer] = only(run_checks(healthy, Expectations(gpu_count=9)), "gpu.count", Severity.FAIL)
    assert "a GPU fell off the bus" in fewer.advice
    healthy.nvml = "used"
    for index, gpu in enumerate(healthy.gpus):
        gpu.nvml_index = None if index == 0 else index - 1  # NVML lists all but the first
    missing = only(run_checks(healthy), "gpu.count", Severity.FAIL)
    assert [f.subject for f in missing] == [f"GPU {healthy.gpus[0].pci}"]


@pytest.mark.parametrize("expected", [0, 4])
def test_more_gpus_than_expected_says_the_expectation_may_be_wrong(expected: int) -> None:
    findings = run_checks(node("healthy-ib-8gpu"), Expectations(gpu_count=expected, source="fleet.toml"))
    [more] = only(findings, "gpu.count", Severity.FAIL)
    assert more.observed.startswith("8 GPUs") and more.expected == f"{expected} GPUs"
    assert more.advice.startswith(f"8 GPUs found where {expected} are expected: none is missing or off the bus; ")
    assert "the expectation may be wrong (gpu.count in fleet.toml)" in more.advice
    assert "fell off" not in more.advice.replace("none is missing or off the bus", "")


def test_more_nics_than_expected_says_the_expectation_may_be_wrong() -> None:
    findings = run_checks(node("healthy-ib-8gpu"), Expectations(nic_count=4, source="fleet.toml"))
    [more] = only(findings, "nic.count", Severity.FAIL)
    assert more.expected == "4 RDMA ports" and more.observed.startswith("8 RDMA ports")
    assert more.advice.startswith("8 RDMA ports found where 4 are expected: none is missing or off the bus; ")
    assert "(nic.count in fleet.toml)" in more.advice and "name those in nic.devices or NCCL_IB_HCA" in more.advice
    assert "missing or was not detected" not in more.advice
    [fewer] = only(run_checks(node("healthy-ib-8gpu"), Expectations(nic_count=12)), "nic.count", Severity.FAIL)
    assert "a NIC is missing or was not detected" in fewer.advice


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
    # NCCL_IB_HCA (etc/nccl.conf) chooses the 8 InfiniBand ports: compute ports of the wrong link layer.
    assert subjects(findings, "rdma.link_layer", Severity.FAIL) == {f"mlx5_{i}/1" for i in range(8)}
    healthy.nccl.pop("NCCL_IB_HCA")
    findings = run_checks(healthy, Expectations(link_layer="Ethernet", nic_count=8))
    assert only(findings, "nic.count", Severity.FAIL)  # now the link layer chooses: only the two Ethernet ports
    vm = node("vm-virtio")
    assert only(run_checks(vm, Expectations(link_layer="InfiniBand")), "rdma.link_layer", Severity.FAIL)


def test_gpu_nic_distance_expectation_is_strict() -> None:
    roce = node("roce-4gpu")
    findings = run_checks(roce, Expectations(gpu_nic_distance="PIX"))
    assert subjects(findings, "topology.gpu_nic", Severity.FAIL) == {"GPU 0000:97:00.0", "GPU 0000:98:00.0"}
    assert len(only(findings, "topology.gpu_nic", Severity.OK)) == 2


def test_pfc_off_on_mlx5_even_though_its_8023_pause_counters_are_always_there() -> None:
    """mlx5 lists rx/tx_pause_ctrl_phy whether or not pause is on; only per-priority counters tell PFC."""
    roce = node("roce-4gpu")
    nic = roce.nic("ens1f0np0")
    assert nic is not None and nic.ethtool is not None
    assert nic.ethtool["rx_pause_ctrl_phy"] == 0
    nic.ethtool = {k: v for k, v in nic.ethtool.items() if not k.startswith(("rx_prio3_pause", "tx_prio3_pause"))}
    nic.ethtool["tx_pause_storm_error_events"] = 2
    mine = [f for f in only(run_checks(roce), "rdma.pfc") if f.subject.startswith("ens1f0np0")]
    assert {f.severity for f in mine} == {Severity.WARN, Severity.FAIL}
    assert any("PFC is off on every priority" in f.observed for f in mine)


def test_pfc_global_pause_and_priorities_seen_by_their_frames() -> None:
    from fabricscope.doctor.checks.rdma import pfc_priorities

    base = {"rx_pause_ctrl_phy": 0, "tx_pause_ctrl_phy": 0, "rx_discards_phy": 0}
    assert pfc_priorities(base) == ([], False)
    assert pfc_priorities({**base, "rx_global_pause": 0, "rx_global_pause_duration": 0}) == ([], True)
    assert pfc_priorities({**base, "rx_pause_ctrl_phy": 12}) == ([], True)  # pause frames did flow
    assert pfc_priorities({**base, "rx_prio3_pause": 0, "rx_prio3_pause_transition": 0}) == ([3], False)
    every = {f"rx_prio{p}_pause": 0 for p in range(8)}  # a driver that lists every priority tells nothing
    assert pfc_priorities({**base, **every}) == ([], False)
    assert pfc_priorities({**base, **every, "tx_prio5_pause": 7}) == ([5], False)
    roce = node("roce-4gpu")
    nic = roce.nic("ens1f0np0")
    assert nic is not None and nic.ethtool is not None
    nic.ethtool = {**base, "rx_global_pause": 0}
    [global_pause] = [f for f in only(run_checks(roce), "rdma.pfc") if f.subject.startswith("ens1f0np0")]
    assert (global_pause.severity, global_pause.observed) == (Severity.INFO, "global pause (802.3x), no PFC priority")


def test_roce_configuration_of_ports_that_carry_no_training_is_info() -> None:
    healthy = node("healthy-ib-8gpu")  # etc/nccl.conf: NCCL_IB_HCA==mlx5_0..mlx5_7, the InfiniBand ports
    storage = next(p for p in healthy.ports if p.label == "mlx5_8/1")
    storage.gids = [g for g in storage.gids if g.type != "RoCE v2"]
    [gid] = [f for f in only(run_checks(healthy), "rdma.gid") if f.subject == "mlx5_8/1"]
    assert gid.severity is Severity.INFO and gid.observed.endswith("(not a compute port)")
    healthy.nccl.pop("NCCL_IB_HCA")  # now every port is a compute port
    [gid] = [f for f in only(run_checks(healthy), "rdma.gid") if f.subject == "mlx5_8/1"]
    assert gid.severity is Severity.WARN


def test_nccl_ib_hca_chooses_the_compute_ports() -> None:
    from doctor_helpers import run_fixture

    two = run_fixture("healthy-ib-8gpu", env={"NCCL_IB_HCA": "=mlx5_0,mlx5_1:1"}, expect=Expectations(nic_count=2))
    [count] = only(two.findings, "nic.count")
    assert count.severity is Severity.OK and "chosen by NCCL_IB_HCA==mlx5_0,mlx5_1:1 (environment)" in count.observed
    assert {f.subject for f in only(two.findings, "nic.mtu")} == {"ib0 (mlx5_0/1)", "ib1 (mlx5_1/1)"}
    assert {f.subject for f in only(two.findings, "topology.gpu_nic", Severity.WARN)} >= {"GPU 0000:ce:00.0"}
    excluded = run_fixture("healthy-ib-8gpu", env={"NCCL_IB_HCA": "^=mlx5_8,mlx5_9"}, expect=Expectations(nic_count=8))
    assert only(excluded.findings, "nic.count", Severity.OK)


def test_expected_compute_devices_by_name() -> None:
    from doctor_helpers import run_fixture

    expect = Expectations(compute_devices=("mlx5_0", "mlx5_1:1", "ib2", "mlx5_42"), nic_count=3)
    report = run_fixture("healthy-ib-8gpu", expect=expect)
    assert only(report.findings, "nic.count", Severity.OK)[0].observed.startswith(
        "3 RDMA ports (chosen by --expect nic.devices): mlx5_0/1, mlx5_1/1, mlx5_2/1"
    )
    assert subjects(report.findings, "nic.present", Severity.FAIL) == {"mlx5_42"}


def test_flap_limit_is_five_or_more() -> None:
    vm = node("vm-virtio")
    vm.nics[0].carrier_down_count = 5
    assert only(run_checks(vm), "nic.flaps")[0].severity is Severity.WARN
    vm.nics[0].carrier_down_count = 4
    assert only(run_checks(vm), "nic.flaps")[0].severity is Severity.OK


def test_an_active_port_without_linkup_fails() -> None:
    healthy = node("healthy-ib-8gpu")
    healthy.ports[0].phys_state = (6, "LinkErrorRecovery")
    [bad] = only(run_checks(healthy), "rdma.port_state", Severity.FAIL)
    assert (bad.subject, bad.observed) == ("mlx5_0/1", "ACTIVE, LinkErrorRecovery")
    assert "retraining" in bad.advice
    # What can be read decides: a port Polling fails even where its state file could not be read ...
    healthy.ports[0].state, healthy.ports[0].phys_state = None, (2, "Polling")
    assert only(run_checks(healthy), "rdma.port_state", Severity.FAIL)[0].observed == "unreadable, Polling"
    # ... and one whose readable half is fine is not known, a warning.
    healthy.ports[0].phys_state = (5, "LinkUp")
    [unknown] = only(run_checks(healthy), "rdma.port_state", Severity.WARN)
    assert unknown.observed == "could not read or understand state (unreadable, LinkUp)"


def test_idle_gpu_narrower_link_fails_slower_link_warns() -> None:
    degraded = node("degraded-ib-8gpu")
    gpu_link = degraded.pci["0000:4c:00.0"].link  # idle GPU at Gen1 x16: power saving
    assert gpu_link is not None
    gpu = next(g for g in degraded.gpus if g.pci == "0000:4c:00.0")
    gpu.busy = False
    assert "GPU 0000:4c:00.0" in subjects(run_checks(degraded), "pcie.link", Severity.WARN)
    gpu_link.current_width = 8  # lanes never power down: physical
    [narrow] = [f for f in only(run_checks(degraded), "pcie.link", Severity.FAIL) if f.subject == "GPU 0000:4c:00.0"]
    assert "fewer lanes" in narrow.advice


def test_a_switch_uplink_below_its_best_fails() -> None:
    healthy = node("healthy-ib-8gpu")
    assert healthy.pci["0000:19:00.0"].switches == healthy.pci["0000:18:00.0"].switches == ("0000:16:00.0",)
    findings = run_checks(healthy)
    assert len(only(findings, "pcie.uplink", Severity.OK)) == 8  # one switch per GPU/NIC pair
    uplink = healthy.pci["0000:16:00.0"].link
    assert uplink is not None
    uplink.current_width = 8
    [bad] = only(run_checks(healthy), "pcie.uplink", Severity.FAIL)
    assert bad.subject == "switch uplink 0000:16:00.0 (above GPU 0000:19:00.0, mlx5_0)"
    assert bad.observed == "Gen5 x8"


def test_nic_below_its_fastest_link_mode_without_an_expectation() -> None:
    roce = node("roce-4gpu")
    nic = roce.nic("ens1f0np0")
    assert nic is not None and nic.supported_mbps == 100000  # from fabricscope-capture/ethtool/ens1f0np0
    nic.supported_mbps = 200000  # a 200G NIC linked at 100G
    [slow] = only(run_checks(roce), "rdma.rate", Severity.WARN)
    assert (slow.subject, slow.expected) == ("mlx5_0/1", "200 Gb/s (the NIC's fastest mode)")
    assert only(run_checks(roce, Expectations(nic_rate_gbps=100.0)), "rdma.rate", Severity.WARN) == []
    vm = node("vm-virtio")
    vm.nics[0].speed_mbps, vm.nics[0].supported_mbps = 100000, 200000
    assert only(run_checks(vm), "nic.speed", Severity.WARN)[0].expected == "200 Gb/s (the NIC's fastest mode)"


def test_tcp_buffers_scale_with_the_fastest_compute_nic() -> None:
    vm = node("vm-virtio")  # tcp_wmem max 4M, speed unknown: Linux's default is enough
    assert only(run_checks(vm), "tcp.buffers", Severity.WARN) == []
    vm.nics[0].speed_mbps = 100000  # 100 Gb/s x 0.5 ms = 6.25 MB: 6 MiB
    [low] = only(run_checks(vm), "tcp.buffers", Severity.WARN)
    assert (low.subject, low.expected) == ("net.ipv4.tcp_wmem (max)", ">= 6M (100 Gb/s (eth0) x 0.5 ms)")
    assert "'4096 16384 6291456'" in low.advice
    vm.nics[0].speed_mbps = 10000
    assert only(run_checks(vm), "tcp.buffers", Severity.WARN) == []
    expected = only(run_checks(vm, Expectations(tcp_buffer_bytes=64 << 20)), "tcp.buffers", Severity.WARN)
    assert {f.expected for f in expected} == {">= 64M (--expect tcp.buffer_max)"}


def test_the_compute_choice_is_made_once_per_run_and_anew_after_it() -> None:
    from fabricscope.doctor.checks.base import compute, one_run

    healthy, expect = node("healthy-ib-8gpu"), Expectations()
    with one_run():
        first = compute(healthy, expect)
        assert compute(healthy, expect) is first  # every check of the run shares one choice
        assert compute(healthy, Expectations(link_layer="Ethernet")) is not first  # other expectations, other choice
    assert compute(healthy, expect) is not first  # outside a run each call decides anew
    healthy.nccl.pop("NCCL_IB_HCA", None)
    healthy.rdma = healthy.rdma[:2]
    with one_run():
        assert len(compute(healthy, expect).ports) < len(first.ports)  # a later run sees the changed node
