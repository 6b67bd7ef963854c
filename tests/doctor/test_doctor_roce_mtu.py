"""rdma.roce_mtu: a RoCE port runs packets of the largest InfiniBand MTU under its netdev's MTU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, only, run_fixture

from fabricscope.doctor.checks.rdma import roce_mtu
from fabricscope.doctor.diagnosis import diagnose, open_root
from fabricscope.doctor.findings import Severity


@pytest.mark.parametrize(("netdev", "active"), [(1500, 1024), (2000, 1024), (4200, 4096), (9000, 4096), (1100, 512)])
def test_the_roce_mtu_follows_the_netdev_mtu(netdev: int, active: int) -> None:
    # ibv_devinfo's active_mtu on mlx5: 1500 gives 1024, 4200 and 9000 give 4096.
    assert roce_mtu(netdev) == active


def test_healthy_roce_ports_pass_and_a_1500_mtu_port_is_named(tmp_path: Path) -> None:
    assert {f.severity for f in only(run_fixture("roce-4gpu").findings, "rdma.roce_mtu")} == {Severity.OK}
    tree = tmp_path / "roce"
    shutil.copytree(FIXTURES / "roce-4gpu", tree, symlinks=True)
    mtu = (tree / "sys/class/net/ens2f0np0").resolve() / "mtu"
    mtu.write_text("1500\n")
    found = only(diagnose(open_root(str(tree)), env={}).findings, "rdma.roce_mtu", Severity.WARN)
    assert [f.subject for f in found] == ["ens2f0np0 (mlx5_1/1)"]
    assert "RoCE MTU 1024" in found[0].observed and "mtu 4200" in found[0].advice


def test_infiniband_ports_are_not_judged() -> None:
    findings = run_fixture("healthy-ib-8gpu").findings
    assert all(f.subject.startswith("ens") for f in only(findings, "rdma.roce_mtu"))
