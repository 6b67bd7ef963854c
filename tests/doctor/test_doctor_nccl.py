"""NCCL settings: read as NCCL reads them (environment over files, first line wins), judged per rule.

The environment is always injected as a mapping; os.environ is never touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, only, run_fixture, subjects

from fabricscope.doctor.checks import run_checks
from fabricscope.doctor.diagnosis import diagnose, open_root
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.probes.node import probe_node
from fabricscope.sysroot import MANIFEST, SysRoot


def healthy(env: dict[str, str]) -> list:  # type: ignore[type-arg]
    return run_fixture("healthy-ib-8gpu", env=env).findings


def test_interface_list_syntax() -> None:
    from fabricscope.doctor.probes.nccl import parse_interface_list

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
    # NCCL drops lo and docker* by itself only without a list: '^...' leaves lo in, which reaches no other node.
    [excluded] = only(healthy({"NCCL_SOCKET_IFNAME": "^eno,ib,ens,docker"}), "nccl.socket_ifname", Severity.WARN)
    assert "uses lo, which cannot carry traffic between nodes" in excluded.observed


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


def test_gid_index_judged_on_roce_compute_ports_only() -> None:
    found = only(healthy({"NCCL_IB_GID_INDEX": "3", "NCCL_IB_HCA": "mlx5"}), "nccl.gid_index", Severity.OK)
    assert {f.subject for f in found} == {"mlx5_8/1 GID 3", "mlx5_9/1 GID 3"}  # not the 8 InfiniBand ports
    # The node's own NCCL_IB_HCA (etc/nccl.conf) leaves the RoCE storage ports to storage.
    [only_ib] = only(healthy({"NCCL_IB_GID_INDEX": "3"}), "nccl.gid_index", Severity.OK)
    assert "no RoCE compute ports" in only_ib.observed
    vm = run_fixture("vm-virtio", env={"NCCL_IB_GID_INDEX": "3"}).findings
    assert "no RoCE compute ports" in only(vm, "nccl.gid_index", Severity.OK)[0].observed


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


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/opt/absent.conf", "No such file or directory"),
        ("/opt", "Is a directory"),
        ("/opt/locked.conf", "Permission denied"),  # replayed from the manifest: root reads any file
    ],
)
def test_unreadable_conf_file_says_why_and_how_to_fix_it(tmp_path: Path, path: str, reason: str) -> None:
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "opt").mkdir()
    (root / "opt/locked.conf").write_text("NCCL_DEBUG=INFO\n")
    manifest = json.loads((root / MANIFEST).read_text())
    manifest["errors"]["opt/locked.conf"] = "EACCES"
    (root / MANIFEST).write_text(json.dumps(manifest))
    findings = diagnose(SysRoot(root), env={"NCCL_CONF_FILE": path}).findings
    [unreadable] = [f for f in only(findings, "nccl.settings", Severity.WARN) if f.subject == "NCCL_CONF_FILE"]
    assert unreadable.observed == f"NCCL_CONF_FILE={path} cannot be read under {root}: {reason}"
    assert unreadable.expected == "a file NCCL can read"
    assert "path in NCCL_CONF_FILE" in unreadable.advice and "permissions" in unreadable.advice
    assert not any("splits each line" in f.advice for f in only(findings, "nccl.settings"))


def test_a_conf_file_too_large_to_check_is_not_called_unreadable_by_nccl(tmp_path: Path) -> None:
    """Over the doctor's 1 MiB NCCL still reads it: the finding said NCCL skips it."""
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "opt").mkdir()
    (root / "opt/big.conf").write_text("NCCL_DEBUG=WARN\n" * 200_000)  # 3.2 MB
    findings = diagnose(SysRoot(root), env={"NCCL_CONF_FILE": "/opt/big.conf"}).findings
    [large] = [f for f in only(findings, "nccl.settings", Severity.WARN) if f.subject == "NCCL_CONF_FILE"]
    assert large.observed == "NCCL_CONF_FILE=/opt/big.conf is larger than 1 MiB: not checked"
    assert "NCCL reads it whole" in large.advice and "skips" not in large.advice
    # Said once, by nccl.settings: not also a file the node failed to give (probe.read advises root, drivers).
    assert not [f for f in findings if f.id == "probe.read" and "big.conf" in f.subject]


def test_topo_file_that_exists_is_ok(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/topo.xml").write_text("<system version='1'></system>\n")
    findings = diagnose(SysRoot(root), env={"NCCL_TOPO_FILE": "/etc/topo.xml"}).findings
    assert subjects(findings, "nccl.topo_file", Severity.OK) == {"NCCL_TOPO_FILE"}


def test_no_variables_is_ok() -> None:
    finding = only(run_fixture("vm-virtio").findings, "nccl.settings")[0]
    assert finding.severity is Severity.OK


def test_ib_hca_port_that_does_not_exist_leaves_nccl_nothing() -> None:
    findings = healthy({"NCCL_IB_HCA": "=mlx5_1:2"})
    ib_hca = only(findings, "nccl.ib_hca")
    assert "leaves no RDMA device for NCCL" in only(findings, "nccl.ib_hca", Severity.FAIL)[0].observed
    assert any("has no port 2" in f.observed for f in ib_hca)


def test_ib_hca_on_a_port_that_is_down_is_not_ok() -> None:
    degraded = run_fixture("degraded-ib-8gpu", env={"NCCL_IB_HCA": "=mlx5_5"}).findings
    [down] = only(degraded, "nccl.ib_hca")
    assert down.severity is Severity.FAIL
    assert "selects only ports that are not ACTIVE: mlx5_5/1 (DOWN)" in down.observed


def test_ib_hca_reports_every_problem_of_an_entry() -> None:
    node = probe_node(SysRoot(FIXTURES / "healthy-ib-8gpu"), {"NCCL_IB_HCA": "mlx5_1:2,mlx5_2"})
    for index, device in enumerate(node.rdma):  # a 12-HCA node: mlx5_10, mlx5_11 exist
        if index >= 8:
            device.name = f"mlx5_{index + 2}"
            for port in device.ports:
                port.device = device.name
    observed = [f.observed for f in only(run_checks(node), "nccl.ib_hca", Severity.WARN)]
    assert any("'mlx5_1' is a prefix and also selects mlx5_10, mlx5_11" in o for o in observed)
    assert any("'mlx5_1' has no port 2" in o for o in observed)


def test_ib_hca_spaces_are_kept_as_nccl_keeps_them() -> None:
    from fabricscope.doctor.probes.nccl import parse_interface_list

    parsed = parse_interface_list("=mlx5_1, mlx5_2")
    assert parsed.entries == (("mlx5_1", None), (" mlx5_2", None))
    assert parse_interface_list("mlx5_0:x").entries == (("mlx5_0", 0),)  # atoi: no port 0 exists
    [spaces] = only(healthy({"NCCL_IB_HCA": "=mlx5_1, mlx5_2"}), "nccl.ib_hca", Severity.WARN)
    assert "entry ' mlx5_2' has spaces, which NCCL keeps: it matches no device" in spaces.observed
    assert spaces.advice.endswith("=mlx5_1,mlx5_2")


@pytest.mark.parametrize(
    ("value", "severity", "words"),
    [
        ("lo", Severity.WARN, "uses lo, which cannot carry traffic between nodes"),
        ("=lo", Severity.WARN, "uses lo, which cannot carry traffic between nodes"),
        ("eno", Severity.OK, "uses eno1"),
    ],
)
def test_socket_ifname_on_interfaces_that_reach_no_other_node(value: str, severity: Severity, words: str) -> None:
    [found] = only(healthy({"NCCL_SOCKET_IFNAME": value}), "nccl.socket_ifname")
    assert found.severity is severity and words in found.observed


def test_socket_ifname_on_a_container_bridge() -> None:
    node = probe_node(SysRoot(FIXTURES / "healthy-ib-8gpu"), {"NCCL_SOCKET_IFNAME": "docker,virbr"})
    docker = node.nic("docker0")
    assert docker is not None
    docker.operstate = "up"
    [found] = only(run_checks(node), "nccl.socket_ifname", Severity.WARN)
    assert "uses docker0, which cannot carry traffic between nodes" in found.observed


@pytest.mark.parametrize(
    ("value", "read_as", "warns"),
    [("3", 3, False), ("0x3", 3, False), ("3x", 3, True), ("03", 3, False), ("abc", 0, True), ("", None, False)],
)
def test_gid_index_is_read_with_strtoll(value: str, read_as: int | None, warns: bool) -> None:
    report = diagnose(open_root(str(FIXTURES / "roce-4gpu")), env={"NCCL_IB_GID_INDEX": value})
    found = only(report.findings, "nccl.gid_index")
    assert not only(found, "nccl.gid_index", Severity.FAIL)
    assert bool(only(found, "nccl.gid_index", Severity.WARN)) is warns
    if read_as == 3:
        assert {f.subject for f in found if f.severity is Severity.OK} == {"mlx5_0/1 GID 3", "mlx5_1/1 GID 3"}


@pytest.mark.parametrize(
    ("value", "number", "rest"),
    [("3", 3, ""), ("0x3", 3, ""), ("3x", 3, "x"), ("010", 8, ""), (" -1", -1, ""), ("abc", 0, "abc"), ("", None, "")],
)
def test_strtoll(value: str, number: int | None, rest: str) -> None:
    from fabricscope.doctor.probes.nccl import nccl_int

    assert nccl_int(value) == (number, rest)
    assert nccl_int("9" * 30) == (None, "9" * 30)  # out of range: NCCL keeps its default


def test_gdr_level_zero_and_names_as_nccl_reads_them() -> None:
    [zero] = only(healthy({"NCCL_NET_GDR_LEVEL": "0"}), "nccl.gdr_level")
    assert zero.severity is Severity.WARN and "GPUDirect RDMA never used (NCCL reads 0 as LOC)" in zero.observed
    [two] = only(healthy({"NCCL_NET_GDR_LEVEL": "2"}), "nccl.gdr_level")
    assert "a numeric level (NCCL reads 2 as PXB)" in two.observed
    [lower] = only(healthy({"NCCL_NET_GDR_LEVEL": "pxb"}), "nccl.gdr_level")
    assert "names are case-sensitive" in lower.observed


def test_p2p_disable_only_at_one_as_nccl_tests_it() -> None:
    assert only(healthy({"NCCL_P2P_DISABLE": "1"}), "nccl.p2p_shm", Severity.WARN)
    assert only(healthy({"NCCL_P2P_DISABLE": "2"}), "nccl.p2p_shm", Severity.OK)  # NCCL compares with == 1


def test_user_conf_file_is_found_through_the_passwd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / home.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (root / home.lstrip("/") / ".nccl.conf").write_text("NCCL_ALGO=Tree\n")
    (root / "fabricscope-capture/manifest.json").unlink()  # no recorded environment: this process's
    monkeypatch.setenv("HOME", "/somewhere/else")
    node = probe_node(SysRoot(root))
    assert node.nccl["NCCL_ALGO"].source == f"{home.rstrip('/')}/.nccl.conf:1"


def test_conf_line_with_a_dos_line_end(tmp_path: Path) -> None:
    root = copy_tree(FIXTURES / "vm-virtio", tmp_path / "node")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nccl.conf").write_bytes(b"NCCL_DEBUG=INFO\r\n")
    report = diagnose(SysRoot(root), env={})
    assert report.node.nccl["NCCL_DEBUG"].value == "INFO\r"  # what NCCL sets, and then does not recognise
    assert "carriage return" in only(report.findings, "nccl.settings", Severity.WARN)[0].observed
    assert only(report.findings, "nccl.debug", Severity.OK)
