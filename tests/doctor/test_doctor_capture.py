"""--capture writes a tree that --root reads back into the same findings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES

from fabricscope.doctor.capture import check_capture_target, write_capture
from fabricscope.doctor.diagnosis import diagnose
from fabricscope.doctor.findings import Finding
from fabricscope.errors import UsageError
from fabricscope.sysroot import MANIFEST, SysRoot

ENV = {"NCCL_IB_HCA": "=mlx5_0", "NCCL_DEBUG": "INFO", "HOME": "/root", "PATH": "/usr/bin"}


def comparable(findings: list[Finding]) -> list[tuple[str, str, str, str, str]]:
    return [(f.id, f.severity.label, f.subject, f.observed, f.expected) for f in findings if f.id != "probe.read"]


@pytest.mark.parametrize(
    "name", ["healthy-ib-8gpu", "degraded-ib-8gpu", "host-faults-8gpu", "roce-4gpu", "broken", "vm-virtio"]
)
def test_round_trip_gives_the_same_findings(name: str, tmp_path: Path) -> None:
    source = SysRoot(FIXTURES / name)
    before = diagnose(source, env=ENV)
    target = tmp_path / "capture"
    write_capture(source, str(target), ENV, before.node.hostname)
    after = diagnose(SysRoot(target))  # env from the capture's manifest
    assert comparable(after.findings) == comparable(before.findings)
    assert after.node.nccl["NCCL_DEBUG"].value == "INFO"
    manifest = json.loads((target / MANIFEST).read_text())
    assert manifest["env"] == {"HOME": "/root", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=mlx5_0"}  # no PATH


def test_capture_keeps_sysfs_links_and_read_errors(tmp_path: Path) -> None:
    source = SysRoot(FIXTURES / "healthy-ib-8gpu")
    report = diagnose(source, env={})
    target = tmp_path / "capture"
    count = write_capture(source, str(target), {}, report.node.hostname)
    assert count > 500
    link = target / "sys/class/net/ib0"
    assert link.is_symlink() and os.readlink(link) == os.readlink(FIXTURES / "healthy-ib-8gpu/sys/class/net/ib0")
    assert (target / "fabricscope-capture/ethtool-S/ens10f0np0").is_file()
    errors = json.loads((target / MANIFEST).read_text())["errors"]
    assert errors["sys/class/net/lo/speed"] == "EINVAL"
    assert not any(v == "ENOENT" for v in errors.values())  # absent files stay absent, not listed


@pytest.mark.skipif(not Path("/sys/class/net").is_dir(), reason="needs a Linux /sys")
def test_live_capture_round_trip(tmp_path: Path) -> None:
    source = SysRoot("/")
    env = {"NCCL_SOCKET_IFNAME": "lo"}
    before = diagnose(source, env=env)
    write_capture(source, str(tmp_path / "live"), env, before.node.hostname)
    after = diagnose(SysRoot(tmp_path / "live"))
    assert comparable(after.findings) == comparable(before.findings)


def test_capture_target_must_be_new_or_empty(tmp_path: Path) -> None:
    check_capture_target(str(tmp_path / "new"))
    check_capture_target(str(tmp_path))  # empty
    (tmp_path / "x").write_text("1")
    with pytest.raises(UsageError, match="exists and is not an empty directory"):
        check_capture_target(str(tmp_path))


def test_a_link_through_a_file_and_back_replays_as_it_read(tmp_path: Path) -> None:
    """An absolute link whose target goes through a file and back up (``/sys/class/net/eth0/type/../mtu``)
    fails in the source (ENOTDIR); the capture keeps that link as it is, re-rooted, so the replay fails
    alike (the re-rooting normalized it to ``eth0/mtu``, which the replay read)."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "vm-virtio", tree, symlinks=True)
    net = tree / "sys/class/net"
    eth0 = os.readlink(net / "eth0")
    os.symlink("/sys/class/net/eth0/type/../mtu", tree / "sys/class/net/eth0-mtu")
    os.symlink(f"/sys/class/net/{eth0.rsplit('/', 1)[-1]}/../../../../../../", tree / "sys/class/net/up")
    source = SysRoot(tree)
    said = source.text("sys/class/net/eth0-mtu"), source.read_errors().get("sys/class/net/eth0-mtu")
    before = diagnose(source, env=ENV)
    source.text("sys/class/net/eth0-mtu")
    target = tmp_path / "capture"
    write_capture(source, str(target), ENV, before.node.hostname)
    replay = SysRoot(target)
    assert said == (None, "ENOTDIR")
    assert (replay.text("sys/class/net/eth0-mtu"), replay.read_errors().get("sys/class/net/eth0-mtu")) == said
    assert comparable(diagnose(SysRoot(target)).findings) == comparable(before.findings)


def test_no_link_in_a_capture_leads_out_of_it(tmp_path: Path) -> None:
    """Links that climb above the source's root (absolute ``/../..``, relative ``../../..`` past it, and
    through another link that climbs less than its name says) are read inside the root; the capture must
    never hold one that a kernel, or any tool, would follow out of it (they led to the host's /sys)."""
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES / "vm-virtio", tree, symlinks=True)
    net = tree / "sys/class/net"
    os.symlink("/..", net / "up1")
    os.symlink("/../../../sys/class/net/eth0", net / "up2")
    os.symlink("../../../../../../sys/class/net/eth0", net / "up3")
    os.symlink(".", net / "here")
    os.symlink("here/../../../..", net / "up4")  # lexically 3 levels up from sys/class/net, by the kernel 4
    source = SysRoot(tree)
    before = diagnose(source, env=ENV)
    target = tmp_path / "capture"
    write_capture(source, str(target), ENV, before.node.hostname)
    base = os.path.realpath(target)
    links = [Path(d, n) for d, dirs, files in os.walk(target) for n in dirs + files if Path(d, n).is_symlink()]
    assert len(links) > 5
    for link in links:
        real = os.path.realpath(link)
        assert real == base or real.startswith(base + "/"), (link, os.readlink(link), real)
    assert comparable(diagnose(SysRoot(target)).findings) == comparable(before.findings)
