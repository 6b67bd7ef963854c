"""Probes on trees changed in one place: which netdev carries which RDMA port."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from doctor_helpers import FIXTURES

from fabricscope.doctor.probes.node import probe_node
from fabricscope.sysroot import SysRoot

MLX5_0 = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"


def two_port_hca(tmp_path: Path) -> Path:
    """healthy-ib-8gpu with a second port on mlx5_0 and still one netdev (ib0, dev_port 0)."""
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    port2 = tree / MLX5_0 / "infiniband/mlx5_0/ports/2"
    shutil.copytree(tree / MLX5_0 / "infiniband/mlx5_0/ports/1", port2)
    (port2 / "state").write_text("1: DOWN\n")
    return tree


def test_one_netdev_is_not_given_to_every_port(tmp_path: Path) -> None:
    node = probe_node(SysRoot(two_port_hca(tmp_path)), {})
    ports = {p.label: p.netdev for p in node.ports if p.device == "mlx5_0"}
    assert ports == {"mlx5_0/1": "ib0", "mlx5_0/2": None}
    ib0 = node.nic("ib0")
    assert ib0 is not None and ib0.rdma == "mlx5_0/1"


def test_netdevs_name_their_port_by_dev_port_or_dev_id(tmp_path: Path) -> None:
    tree = two_port_hca(tmp_path)
    second = tree / MLX5_0 / "net/ib0b"
    shutil.copytree(tree / MLX5_0 / "net/ib0", second, symlinks=True)
    (second / "dev_port").unlink()  # kernels before dev_port: IPoIB set dev_id to the port index
    (second / "dev_id").write_text("0x1\n")
    os.symlink(os.path.relpath(second, tree / "sys/class/net"), tree / "sys/class/net/ib0b")
    node = probe_node(SysRoot(tree), {})
    assert {p.label: p.netdev for p in node.ports if p.device == "mlx5_0"} == {"mlx5_0/1": "ib0", "mlx5_0/2": "ib0b"}


def test_a_lone_netdev_that_says_nothing_belongs_to_a_one_port_device(tmp_path: Path) -> None:
    tree = tmp_path / "node"
    shutil.copytree(FIXTURES / "healthy-ib-8gpu", tree, symlinks=True)
    (tree / MLX5_0 / "net/ib0/dev_port").unlink()
    node = probe_node(SysRoot(tree), {})
    assert next(p for p in node.ports if p.label == "mlx5_0/1").netdev == "ib0"
