"""Every fixture node end to end: the findings a person would expect from it, and nothing worse."""

from __future__ import annotations

from doctor_helpers import FIXTURES, only, run_fixture, subjects

from fabricscope.doctor.expect import load_expectations
from fabricscope.doctor.findings import Severity, exit_code

EXPECT = load_expectations(str(FIXTURES / "expect-h100-ib.toml"))


def test_healthy_node_is_clean_with_and_without_expectations() -> None:
    for expect in (None, EXPECT):
        report = run_fixture("healthy-ib-8gpu", expect=expect)
        bad = [f for f in report.findings if f.severity >= Severity.WARN]
        assert bad == []
        assert report.exit_code == 0
    node = report.node
    assert len(node.gpus) == 8  # the four NVSwitches (class 0x0680) are not GPUs
    assert len(node.ports) == 10
    assert {f.observed for f in only(report.findings, "topology.gpu_nic")} == {
        f"nearest NIC mlx5_{i} at PIX" for i in range(8)
    }
    # With the expectation, the RoCE storage ports are not compute ports.
    assert subjects(report.findings, "rdma.link_layer", Severity.INFO) == {"mlx5_8/1", "mlx5_9/1"}
    hca = "NCCL_IB_HCA==" + ",".join(f"mlx5_{i}" for i in range(8))
    assert only(report.findings, "nic.count", Severity.OK)[0].observed.startswith(
        f"8 RDMA ports (chosen by {hca} (/etc/nccl.conf:3))"
    )


def test_degraded_node_names_each_fault() -> None:
    report = run_fixture("degraded-ib-8gpu")
    f = report.findings
    assert report.exit_code == 2
    assert subjects(f, "rdma.port_state", Severity.FAIL) == {"mlx5_5/1"}
    assert only(f, "rdma.port_state", Severity.FAIL)[0].observed == "DOWN, Polling"
    assert subjects(f, "nic.link", Severity.FAIL) == {"ib5 (mlx5_5/1)"}
    assert subjects(f, "nic.flaps", Severity.WARN) == {"ib5 (mlx5_5/1)"}
    assert subjects(f, "pcie.link", Severity.FAIL) == {"mlx5_3 (0000:4b:00.0)"}
    assert only(f, "pcie.link", Severity.FAIL)[0].observed == "Gen5 x8"
    # An idle GPU that trained down is a warning, not a failure.
    assert subjects(f, "pcie.link", Severity.WARN) == {"GPU 0000:4c:00.0"}
    assert subjects(f, "rdma.rate", Severity.WARN) == {"mlx5_9/1"}  # the 200G NIC at 100G
    assert subjects(f, "nic.mtu", Severity.WARN) == {"ib2 (mlx5_2/1)"}
    assert subjects(f, "gpudirect.rdma", Severity.FAIL) == {"gpu-node-07"}
    assert subjects(f, "rdma.firmware", Severity.WARN) == {"mlx5_6"}
    assert subjects(f, "rdma.errors", Severity.WARN) == {"mlx5_1/1"}
    assert subjects(f, "nccl.debug", Severity.WARN) == {"NCCL_DEBUG"}
    assert subjects(f, "nccl.settings", Severity.WARN) == {"/etc/nccl.conf:4"}  # 'NCCL_ALGO = Ring'
    assert only(f, "nccl.algo_proto") == []  # ... which NCCL never sees as NCCL_ALGO


def test_degraded_node_against_expectations_fails_more() -> None:
    report = run_fixture("degraded-ib-8gpu", expect=EXPECT)
    f = report.findings
    assert subjects(f, "nic.mtu", Severity.FAIL) == {"ib2 (mlx5_2/1)"}
    assert subjects(f, "pcie.link", Severity.FAIL) >= {"mlx5_3 (0000:4b:00.0)"}
    assert not only(f, "rdma.rate", Severity.FAIL)  # mlx5_9 is a storage port, not held to 400G
    assert only(f, "nic.count", Severity.OK)


def test_roce_node() -> None:
    report = run_fixture("roce-4gpu")
    f = report.findings
    node = report.node
    assert [p.link_layer for p in node.ports] == ["Ethernet", "Ethernet"]
    assert [g.index for g in node.ports[0].gids] == [0, 1, 2, 3]
    assert node.ports[0].gids[3].type == "RoCE v2"
    assert subjects(f, "rdma.gid", Severity.OK) == {"mlx5_0/1", "mlx5_1/1"}
    pfc = only(f, "rdma.pfc", Severity.OK)
    assert {p.observed.split(",")[0] for p in pfc} == {"PFC on priority 3"}
    assert only(f, "rdma.pfc", Severity.WARN)[0].observed == "rx_discards_phy=1843"
    # Kernel 5.4 writes '16 GT/s': still Gen4.
    assert {x.observed for x in only(f, "pcie.link", Severity.OK)} == {"Gen4 x16"}
    # GPUs on the other socket from both NICs.
    assert subjects(f, "topology.gpu_nic", Severity.WARN) == {"GPU 0000:97:00.0", "GPU 0000:98:00.0"}
    assert "SYS" in only(f, "topology.gpu_nic", Severity.WARN)[0].observed
    assert subjects(f, "nccl.socket_ifname", Severity.FAIL) == {"NCCL_SOCKET_IFNAME"}
    assert subjects(f, "nccl.gid_index", Severity.WARN) == {"mlx5_0/1 GID 0", "mlx5_1/1 GID 0"}
    assert only(f, "nccl.ib_hca", Severity.INFO)  # 'mlx5' is a deliberate prefix of both devices
    assert only(f, "gpudirect.rdma", Severity.OK)[0].observed.startswith("peer-memory module")
    assert report.exit_code == 2


def test_vm_with_only_virtio() -> None:
    report = run_fixture("vm-virtio")
    f = report.findings
    node = report.node
    assert [n.name for n in node.nics if not n.virtual] == ["eth0"]
    assert node.nics[0].driver == "virtio_net"
    assert only(f, "nic.speed", Severity.INFO)[0].observed.startswith("speed unknown")
    assert only(f, "rdma.present", Severity.INFO)
    assert only(f, "pcie.link", Severity.INFO)[0].observed == "no PCIe link files (virtual device)"
    assert only(f, "gpu.count", Severity.INFO)[0].observed == "no NVIDIA GPUs"
    assert not only(f, "gpudirect.rdma") and not only(f, "topology.gpu_nic")
    assert not [x for x in f if x.severity is Severity.FAIL]


def test_broken_tree_yields_findings_never_a_crash() -> None:
    report = run_fixture("broken")
    f = report.findings
    unreadable = {x.subject: x.observed for x in only(f, "probe.read", Severity.WARN)}
    assert unreadable["sys/class/net/eth0/mtu"] == "unparsable 'abc' (expected a whole number from 0 to 65536)"
    assert unreadable["sys/class/infiniband/mlx5_2/ports/1/state"] == "EACCES"
    assert unreadable["sys/class/infiniband/mlx5_2/ports/1/phys_state"] == "EIO"
    assert unreadable["sys/class/infiniband/mlx5_0/ports"] == "missing directory"
    assert unreadable["sys/class/infiniband/mlx5_1/ports/1/link_layer"].startswith("not text")
    assert unreadable["sys/class/infiniband/mlx5_1/ports/1/counters/link_downed"] == "EISDIR"
    assert unreadable["proc/sys/net/core/rmem_max"] == "EISDIR"
    assert "dangling or looping" in unreadable["sys/class/net/loop0"]
    assert "dangling or looping" in unreadable["sys/class/net/eth1"]
    assert "sys/class/net/eth0/speed" not in unreadable  # EINVAL is sysfs's "unknown"
    # Garbage, EACCES and EIO in state files: not known, so a warning, never a FAIL that drains the node.
    assert subjects(f, "rdma.port_state", Severity.FAIL) == set()
    unknown = {x.subject: x.observed for x in only(f, "rdma.port_state", Severity.WARN)}
    assert unknown == {
        "mlx5_1/1": "could not read or understand state and phys_state (unreadable, unreadable)",
        "mlx5_2/1": "could not read or understand state and phys_state (unreadable, unreadable)",
    }
    assert only(f, "nccl.gid_index", Severity.WARN)[0].observed.endswith("not a number: NCCL reads it as 0")
    assert subjects(f, "nccl.algo_proto", Severity.FAIL) == {"NCCL_PROTO"}
    assert exit_code(f) == 2
