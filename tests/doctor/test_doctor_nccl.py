"""NCCL settings: read as NCCL reads them (environment over files, first line wins), judged per rule.

The environment is always injected as a mapping; os.environ is never touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, only, run_fixture, subjects

from fabricscope.doctor.checks import run_checks
from fabricscope.doctor.checks.nccl import parse_interface_list
from fabricscope.doctor.diagnosis import diagnose, open_root
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.probe import probe_node
from fabricscope.doctor.sysroot import SysRoot


def healthy(env: dict[str, str]) -> list:  # type: ignore[type-arg]
    return run_fixture("healthy-ib-8gpu", env=env).findings


def test_interface_list_syntax() -> None:
    parsed = parse_interface_list("^=mlx5_0:1,mlx5_1")
    assert (parsed.exclude, parsed.exact) == (True, True)
    assert parsed.entries == (("mlx5_0", 1), ("mlx5_1", None))
    assert parse_interface_list("ib").entries == (("ib", None),)


def test_ib_hca_prefix_matches_extra_devices() -> None:
    node = probe_node(SysRoot(FIXTURES / "healthy-ib-8gpu"), {"NCCL_IB_HCA": "mlx5_1,mlx5_2"})
    for index, device in enumerate(node.rdma):  # make it a 12-HCA node: mlx5_10, mlx5_11 exist
        if index >= 8:
            device.name = f"mlx5_{index + 2}"
            for port in device.ports:
                port.device = device.name
    warn = only(run_checks(node), "nccl.ib_hca", Severity.WARN)
    assert len(warn) == 1
    assert "'mlx5_1' is a prefix and also selects mlx5_10, mlx5_11" in warn[0].observed
    assert "=mlx5_1,mlx5_2" in warn[0].advice


def test_ib_hca_exact_list_is_ok_and_unknown_names_warn() -> None:
    assert only(healthy({"NCCL_IB_HCA": "=mlx5_0,mlx5_1"}), "nccl.ib_hca", Severity.OK)
    findings = healthy({"NCCL_IB_HCA": "=mlx5_0,mlx5_12"})
    assert "'mlx5_12' matches no device" in only(findings, "nccl.ib_hca", Severity.WARN)[0].observed
    findings = healthy({"NCCL_IB_HCA": "mlx5_0:2"})
    assert "has no port 2" in only(findings, "nccl.ib_hca", Severity.WARN)[0].observed


def test_ib_hca_that_selects_nothing_fails() -> None:
    assert only(healthy({"NCCL_IB_HCA": "=mlx4_0"}), "nccl.ib_hca", Severity.FAIL)
    assert only(healthy({"NCCL_IB_HCA": "^mlx5"}), "nccl.ib_hca", Severity.FAIL)


def test_socket_ifname() -> None:
    assert "uses eno1" in only(healthy({"NCCL_SOCKET_IFNAME": "eno"}), "nccl.socket_ifname", Severity.OK)[0].observed
    assert only(healthy({"NCCL_SOCKET_IFNAME": "eth0"}), "nccl.socket_ifname", Severity.FAIL)
    assert only(healthy({"NCCL_SOCKET_IFNAME": "=ib"}), "nccl.socket_ifname", Severity.FAIL)  # exact, no 'ib'
    assert only(healthy({"NCCL_SOCKET_IFNAME": "docker"}), "nccl.socket_ifname", Severity.FAIL)  # down only
    assert only(healthy({"NCCL_SOCKET_IFNAME": "^eno,ib,ens,docker"}), "nccl.socket_ifname", Severity.FAIL)


@pytest.mark.parametrize(
    ("env", "check", "severity"),
    [
        ({"NCCL_IB_DISABLE": "1"}, "nccl.transport", Severity.FAIL),
        ({"NCCL_IB_DISABLE": "0"}, "nccl.transport", Severity.OK),
        ({"NCCL_NET": "Socket"}, "nccl.transport", Severity.FAIL),
        ({"NCCL_NET": "IB"}, "nccl.transport", Severity.OK),
        ({"NCCL_NET_GDR_LEVEL": "LOC"}, "nccl.gdr_level", Severity.WARN),
        ({"NCCL_NET_GDR_LEVEL": "0"}, "nccl.gdr_level", Severity.WARN),
        ({"NCCL_NET_GDR_LEVEL": "2"}, "nccl.gdr_level", Severity.WARN),
        ({"NCCL_NET_GDR_LEVEL": "PHB"}, "nccl.gdr_level", Severity.OK),
        ({"NCCL_P2P_DISABLE": "1"}, "nccl.p2p_shm", Severity.WARN),
        ({"NCCL_SHM_DISABLE": "1"}, "nccl.p2p_shm", Severity.WARN),
        ({"NCCL_P2P_LEVEL": "LOC"}, "nccl.p2p_shm", Severity.WARN),
        ({"NCCL_P2P_LEVEL": "NVL"}, "nccl.p2p_shm", Severity.OK),
        ({"NCCL_DEBUG": "INFO"}, "nccl.debug", Severity.WARN),
        ({"NCCL_DEBUG": "trace"}, "nccl.debug", Severity.WARN),
        ({"NCCL_DEBUG": "WARN"}, "nccl.debug", Severity.OK),
        ({"NCCL_ALGO": "Ring"}, "nccl.algo_proto", Severity.WARN),
        ({"NCCL_ALGO": "allreduce:tree;broadcast:ring"}, "nccl.algo_proto", Severity.WARN),
        ({"NCCL_ALGO": "Rnig"}, "nccl.algo_proto", Severity.FAIL),
        ({"NCCL_PROTO": "^LL128"}, "nccl.algo_proto", Severity.WARN),
        ({"NCCL_TOPO_FILE": "/etc/nccl-topo.xml"}, "nccl.topo_file", Severity.FAIL),
    ],
)
def test_rules(env: dict[str, str], check: str, severity: Severity) -> None:
    found = only(healthy(env), check)
    assert [f.severity for f in found] == [severity], found


def test_transport_rules_need_active_ports() -> None:
    vm = run_fixture("vm-virtio", env={"NCCL_IB_DISABLE": "1", "NCCL_NET": "IB"}).findings
    assert subjects(vm, "nccl.transport", Severity.OK) == {"NCCL_IB_DISABLE"}
    assert subjects(vm, "nccl.transport", Severity.FAIL) == {"NCCL_NET"}


def test_forced_ll128_mentions_corruption() -> None:
    finding = only(healthy({"NCCL_PROTO": "LL128"}), "nccl.algo_proto")[0]
    assert "corrupt" in finding.observed


@pytest.mark.parametrize(
    ("index", "severity", "words"),
    [
        ("3", Severity.OK, "RoCE v2 GID 0000:0000:0000:0000:0000:ffff:0a00:010b"),
        ("1", Severity.WARN, "RoCE v2 link-local GID"),
        ("2", Severity.WARN, "IB/RoCE v1"),
        ("9", Severity.FAIL, "entry 9 is empty"),
    ],
)
def test_gid_index_on_roce(index: str, severity: Severity, words: str) -> None:
    report = diagnose(open_root(str(FIXTURES / "roce-4gpu")), env={"NCCL_IB_GID_INDEX": index})
    found = only(report.findings, "nccl.gid_index", severity)
    assert {f.subject for f in found} == {f"mlx5_0/1 GID {index}", f"mlx5_1/1 GID {index}"}
    assert words in found[0].observed


def test_gid_index_judged_on_roce_ports_only() -> None:
    found = only(healthy({"NCCL_IB_GID_INDEX": "3"}), "nccl.gid_index", Severity.OK)
    assert {f.subject for f in found} == {"mlx5_8/1 GID 3", "mlx5_9/1 GID 3"}  # not the 8 InfiniBand ports
    vm = run_fixture("vm-virtio", env={"NCCL_IB_GID_INDEX": "3"}).findings
    assert "no RoCE ports here" in only(vm, "nccl.gid_index", Severity.OK)[0].observed


def test_environment_beats_conf_file_and_sources_are_named() -> None:
    report = run_fixture("roce-4gpu", env={"NCCL_IB_GID_INDEX": "3"})
    setting = report.node.nccl["NCCL_IB_GID_INDEX"]
    assert (setting.value, setting.source) == ("3", "environment")
    assert report.node.nccl["NCCL_SOCKET_IFNAME"].source == "/etc/nccl.conf:2"


def copy_tree(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_conf_file_order_first_line_wins(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "etc").mkdir(exist_ok=True)  # git keeps no empty directories
    (root / "etc/nccl.conf").write_text("NCCL_DEBUG=WARN\nNCCL_ALGO=Tree\n")
    (root / "opt").mkdir()
    (root / "opt/job.conf").write_text("NCCL_DEBUG=INFO\nNCCL_DEBUG=TRACE\n")
    (root / "home/u").mkdir(parents=True)
    (root / "home/u/.nccl.conf").write_text("NCCL_ALGO=Ring\n")
    node = probe_node(SysRoot(root), {"NCCL_CONF_FILE": "/opt/job.conf", "HOME": "/home/u"})
    # NCCL_CONF_FILE replaces ~/.nccl.conf; it is read before /etc/nccl.conf; the first line wins.
    assert (node.nccl["NCCL_DEBUG"].value, node.nccl["NCCL_DEBUG"].source) == ("INFO", "/opt/job.conf:1")
    assert (node.nccl["NCCL_ALGO"].value, node.nccl["NCCL_ALGO"].source) == ("Tree", "/etc/nccl.conf:2")
    node = probe_node(SysRoot(root), {"HOME": "/home/u"})
    assert node.nccl["NCCL_ALGO"].source == "/home/u/.nccl.conf:1"
    assert node.nccl["NCCL_DEBUG"].value == "WARN"


def test_missing_conf_file_named_by_env_is_reported(tmp_path: Path) -> None:
    findings = run_fixture("vm-virtio", env={"NCCL_CONF_FILE": "/opt/absent.conf"}).findings
    assert any("NCCL_CONF_FILE=/opt/absent.conf cannot be read" in f.observed for f in only(findings, "nccl.settings"))


def test_topo_file_that_exists_is_ok(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/topo.xml").write_text("<system version='1'></system>\n")
    findings = diagnose(SysRoot(root), env={"NCCL_TOPO_FILE": "/etc/topo.xml"}).findings
    assert subjects(findings, "nccl.topo_file", Severity.OK) == {"NCCL_TOPO_FILE"}


def test_no_variables_is_ok() -> None:
    finding = only(run_fixture("vm-virtio").findings, "nccl.settings")[0]
    assert finding.severity is Severity.OK
