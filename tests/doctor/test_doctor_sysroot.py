"""SysRoot: quiet about what sysfs legitimately lacks, loud about what is broken, never raising."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES

from fabricscope.sysroot import MANIFEST, SysRoot
from helpers import resolution  # noqa: F401 (every test under both resolutions)


def make_tree(tmp_path: Path) -> Path:
    (tmp_path / "sys/class/net/eth0").mkdir(parents=True)
    (tmp_path / "sys/class/net/eth0/mtu").write_text("9000\n")
    (tmp_path / "sys/class/net/eth0/binary").write_bytes(b"\xff\xfe\n")
    (tmp_path / "sys/class/net/eth0/adir").mkdir()
    os.symlink("nowhere", tmp_path / "sys/class/net/dangling")
    os.symlink("../../../../../etc", tmp_path / "sys/class/net/eth0/outside")
    return tmp_path


def test_reads_strip_and_cache(tmp_path: Path) -> None:
    root = SysRoot(make_tree(tmp_path))
    assert root.text("sys/class/net/eth0/mtu") == "9000"
    (tmp_path / "sys/class/net/eth0/mtu").write_text("1500\n")
    assert root.text("/sys/class/net/eth0/mtu") == "9000"  # one read per path: a consistent snapshot
    assert root.anomalies == []


def test_missing_is_quiet_unless_required(tmp_path: Path) -> None:
    root = SysRoot(make_tree(tmp_path))
    assert root.text("sys/class/net/eth0/speed") is None
    assert root.anomalies == []
    assert root.text("sys/class/net/eth0/operstate", required=True) is None
    assert [(a.path, a.problem) for a in root.anomalies] == [("sys/class/net/eth0/operstate", "missing")]


def test_real_os_errors_become_anomalies(tmp_path: Path) -> None:
    root = SysRoot(make_tree(tmp_path))
    assert root.text("sys/class/net/eth0/adir") is None  # EISDIR from the real kernel
    assert root.text("sys/class/net/eth0/binary") is None
    problems = {a.path: a.problem for a in root.anomalies}
    assert problems["sys/class/net/eth0/adir"] == "EISDIR"
    assert problems["sys/class/net/eth0/binary"].startswith("not text")


def test_dangling_link_and_escape(tmp_path: Path) -> None:
    root = SysRoot(make_tree(tmp_path))
    assert not root.is_dir("sys/class/net/dangling")
    assert root.realpath("sys/class/net/eth0/outside") == "etc"  # `..` stops at the root, as in a chroot
    problems = {a.path: a.problem for a in root.anomalies}
    assert "dangling" in problems["sys/class/net/dangling"]
    assert "sys/class/net/eth0/outside" not in problems
    assert root.listdir("sys/class/net") == ["dangling", "eth0"]
    assert root.listdir("sys/class/infiniband") == []  # absent class: quiet


def test_manifest_errors_replay_like_the_kernel(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree / MANIFEST).parent.mkdir(parents=True)
    (tree / MANIFEST).write_text(
        json.dumps({"errors": {"sys/class/net/eth0/speed": "EINVAL", "sys/class/net/eth0/mtu": "EACCES"}})
    )
    root = SysRoot(tree)
    assert root.text("sys/class/net/eth0/speed") is None  # EINVAL: sysfs's "unknown", quiet
    assert root.text("sys/class/net/eth0/mtu") is None  # even though the file exists
    assert [(a.path, a.problem) for a in root.anomalies] == [("sys/class/net/eth0/mtu", "EACCES")]


def test_broken_manifest_is_an_anomaly(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree / MANIFEST).parent.mkdir(parents=True)
    (tree / MANIFEST).write_text("{not json")
    root = SysRoot(tree)
    assert root.anomalies and root.anomalies[0].path == MANIFEST


@pytest.mark.skipif(not Path("/sys/class/net/lo/speed").exists(), reason="needs a Linux /sys")
def test_live_loopback_speed_is_einval_and_quiet() -> None:
    root = SysRoot("/")
    assert root.is_live
    assert root.text("sys/class/net/lo/speed") is None
    assert root.read_errors().get("sys/class/net/lo/speed") == "EINVAL"
    assert root.anomalies == []


def test_fixture_root_is_not_live() -> None:
    assert not SysRoot(FIXTURES / "healthy-ib-8gpu").is_live


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '"a string"',
        "null",
        '{"env": ["NCCL_DEBUG=INFO"]}',
        '{"env": {"NCCL_DEBUG": 5}}',
        '{"errors": "EACCES"}',
        '{"errors": {"sys/class/net/eth0/mtu": ["EACCES"]}}',
        '{"home": 7}',
    ],
)
def test_a_manifest_of_the_wrong_shape_is_treated_like_malformed_json(tmp_path: Path, text: str) -> None:
    from fabricscope.doctor.probes.node import node_env

    tree = make_tree(tmp_path)
    (tree / MANIFEST).parent.mkdir(parents=True)
    (tree / MANIFEST).write_text(text)
    root = SysRoot(tree)
    [problem] = [a.problem for a in root.anomalies if a.path == MANIFEST]
    assert problem.startswith("unreadable capture manifest (")
    assert root.manifest == {}
    assert root.text("sys/class/net/eth0/mtu") == "9000"  # no error replayed from it
    assert node_env(root, process={}).source == "this process's environment"  # its env is not used
