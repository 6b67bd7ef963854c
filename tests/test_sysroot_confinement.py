"""``--root`` confines every read as a chroot would: links resolve inside the root, never on the host.

A real tree with hostile links (absolute, relative ``..`` escapes, loops, chains
longer than the kernel allows) is read directly and through ``doctor --root``
with ``--capture``; nothing from outside the root may reach the report, the
JSON or the capture.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from fabricscope.sysroot import MAX_LINKS, SysRoot
from helpers import REPO, resolution, run_cli  # noqa: F401 (resolution: every test under both resolutions)

VM = REPO / "tests/doctor/fixtures/vm-virtio"
SECRET = "LEAKED-FROM-THE-HOST-5d1e"


def hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of a captured VM tree plus links that point out of it; and the secret file outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.conf"
    secret.write_text(f"NCCL_ALGO={SECRET}\nNCCL_DEBUG={SECRET}\n")
    tree = tmp_path / "tree"
    shutil.copytree(VM, tree, symlinks=True)
    etc = tree / "etc"
    etc.mkdir()
    # Absolute links: on the host they would read /etc/passwd and the secret.
    os.symlink("/etc/passwd", etc / "hostile.conf")
    os.symlink(str(secret), etc / "nccl.conf")
    # A relative link climbing out with `..`: stops at the root, as in a chroot.
    os.symlink("../" * 30 + str(secret).lstrip("/"), etc / "climb.conf")
    # An absolute link whose target exists inside the root: read from the root.
    (etc / "real").mkdir()
    (etc / "real/site.conf").write_text("NCCL_IB_HCA==mlx5_0\n")
    os.symlink("/etc/real/site.conf", etc / "inside.conf")
    # A loop and a chain too long, in place of files the doctor reads.
    net = tree / "sys/devices/pci0000:00/0000:00:03.0/virtio2/net/eth0"
    (net / "operstate").unlink()
    os.symlink("operstate2", net / "operstate")
    os.symlink("operstate", net / "operstate2")
    (net / "mtu").unlink()
    for i in range(MAX_LINKS + 5):
        os.symlink(f"mtu{i + 1}", net / ("mtu" if i == 0 else f"mtu{i}"))
    (net / f"mtu{MAX_LINKS + 5}").write_text("9000\n")
    return tree, secret


def host_passwd_lines() -> list[str]:
    try:
        return [line for line in Path("/etc/passwd").read_text().splitlines() if line.strip()]
    except OSError:
        return []


def test_absolute_links_resolve_inside_the_root(tmp_path: Path) -> None:
    tree, secret = hostile_tree(tmp_path)
    root = SysRoot(tree)
    assert root.text("etc/hostile.conf") is None  # /etc/passwd of the root: there is none
    assert root.read_errors()["etc/hostile.conf"] == "ENOENT"
    assert root.text("etc/nccl.conf") is None
    assert root.text("etc/climb.conf") is None
    assert root.text("etc/inside.conf") == "NCCL_IB_HCA==mlx5_0"
    assert root.realpath("etc/inside.conf") == "etc/real/site.conf"
    assert root.realpath("etc/climb.conf") == str(secret).lstrip("/")  # re-rooted, not the host's file
    assert root.resolve("sys/class/net/eth0/../../../../../../etc/real") == "sys/etc/real"  # physical `..`
    assert root.resolve("sys/class/net/eth0" + "/.." * 12 + "/etc/real") == "etc/real"
    with pytest.raises(FileNotFoundError):
        root.read_now("etc/nccl.conf")


def test_a_loop_or_a_too_long_chain_is_an_unreadable_file(tmp_path: Path) -> None:
    tree, _ = hostile_tree(tmp_path)
    root = SysRoot(tree)
    assert root.text("sys/class/net/eth0/operstate") is None
    assert root.text("sys/class/net/eth0/mtu") is None
    problems = {a.path: a.problem for a in root.anomalies}
    assert problems["sys/class/net/eth0/operstate"].startswith("a link loop")
    assert problems["sys/class/net/eth0/mtu"].startswith("a link loop or a chain of more than 40 links")
    assert not root.is_dir("sys/class/net/eth0/operstate")
    assert root.realpath("sys/class/net/eth0/operstate") is None
    with pytest.raises(OSError, match="Too many levels"):
        root.read_now("sys/class/net/eth0/mtu")
    # MAX_LINKS links in all (eth0 itself is one) still resolve, as in the kernel; one more does not.
    assert root.text("sys/class/net/eth0/mtu6") == "9000"
    assert root.text("sys/class/net/eth0/mtu5") is None


def test_live_root_is_the_hosts_own_resolution() -> None:
    root = SysRoot("/")
    assert root.resolve("proc/../proc/self/../net") == "proc/net"
    assert Path("/proc/net/dev").is_file(), "a Linux host has /proc/net/dev: the read below must be exercised"
    assert "Inter-|" in root.read_now("proc/net/dev")


def test_doctor_report_json_and_capture_hold_nothing_from_outside(tmp_path: Path) -> None:
    tree, secret = hostile_tree(tmp_path)
    out = tmp_path / "node.json"
    capture = tmp_path / "capture"
    result = run_cli(
        ["doctor", "--root", str(tree), "--live-env", "--verbose", "--json", str(out), "--capture", str(capture)],
        env={"NCCL_CONF_FILE": "/etc/hostile.conf", "COLUMNS": "200"},
    )
    assert result.returncode in (0, 1, 2), result.stderr
    assert "Traceback" not in result.stderr
    texts = {"stdout": result.stdout, "stderr": result.stderr, "json": out.read_text()}
    for path in capture.rglob("*"):
        if path.is_file() and not path.is_symlink():
            texts[str(path.relative_to(capture))] = path.read_text(errors="replace")
    passwd = host_passwd_lines()
    for name, text in texts.items():
        assert SECRET not in text, name
        for line in passwd:
            assert line not in text, (name, line)
    # The unreadable files are notes in the report, and the loop's error is kept for the capture's replay.
    assert "sys/class/net/eth0/operstate" in result.stdout
    manifest = json.loads((capture / "fabricscope-capture/manifest.json").read_text())
    assert manifest["errors"]["sys/class/net/eth0/operstate"] == "ELOOP"
    # And the secret really was reachable on the host: the test would catch a leak.
    assert SECRET in secret.read_text()


def test_doctor_reads_an_in_root_absolute_link(tmp_path: Path) -> None:
    tree, _ = hostile_tree(tmp_path)
    result = run_cli(
        ["doctor", "--root", str(tree), "--live-env", "--verbose"],
        env={"NCCL_CONF_FILE": "/etc/inside.conf", "COLUMNS": "200"},
    )
    assert "Traceback" not in result.stderr
    assert "NCCL_IB_HCA==mlx5_0" in result.stdout, result.stdout


def test_the_kernel_resolves_inside_the_root_where_it_can(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """On Linux 5.6+ reads of a captured tree go through openat2 (one call, no lstat per component); the walk
    is only the fallback.  Both give the same text and the same refusals (the tests above run under each)."""
    from fabricscope import in_root

    way = request.node.callspec.params["resolution"]
    tree, _ = hostile_tree(tmp_path)
    root = SysRoot(tree)
    assert root.text("etc/inside.conf") == "NCCL_IB_HCA==mlx5_0"
    assert root.text("etc/nccl.conf") is None and root.text("etc/hostile.conf") is None
    release = tuple(int(part) for part in re.findall(r"\d+", os.uname().release)[:2])
    if way == "openat2" and release >= (5, 6):
        assert in_root._call not in (None, False), "openat2 was not used on a kernel that has it"
    if way == "walk":
        assert in_root._call is False


def test_the_kernels_resolution_of_a_path_is_the_walks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``resolve`` asks the kernel (openat2 with O_PATH, read back from /proc/self/fd) and walks only where it
    cannot say; for links in and out of the root, ``..``, loops and missing parts both give the same path."""
    from fabricscope import in_root, sysroot

    tree, _ = hostile_tree(tmp_path)
    os.symlink("real", tree / "etc/realdir")  # a link to a folder: a trailing slash makes the kernel follow it
    paths = [
        ("etc/realdir/", False),
        ("etc/realdir/.", False),
        ("etc/realdir/", True),
        ("etc/inside.conf", True),
        ("etc/inside.conf", False),  # the link itself
        ("etc/climb.conf", True),  # re-rooted target, missing in the root: the walk keeps it
        ("etc/hostile.conf", False),
        ("sys/class/net/eth0/../../../../../../etc/real", True),
        ("sys/class/net/eth0" + "/.." * 12 + "/etc/real", True),
        ("sys/class/net/eth0/mtu6", True),
        ("sys/class/net/eth0/device/driver", False),
        ("sys/class/net/eth0/no/such/file", True),
        ("sys/\ud800x", True),  # a lone surrogate (a name read as text from a file): no such file
        ("sys/\ud800x", False),
        ("", True),
    ]
    kernel = SysRoot(tree)
    said = [kernel.resolve(rel, last=last) for rel, last in paths]
    if in_root._call not in (None, False):  # openat2 works here: the kernel answered for what exists
        assert in_root.resolve_in_root(kernel._root_fd, kernel._real_base, "etc/inside.conf") == "etc/real/site.conf"
        assert in_root.resolve_in_root(kernel._root_fd, kernel._real_base, "etc/climb.conf") is None
    monkeypatch.setattr(sysroot, "resolve_in_root", lambda *args, **kwargs: None)
    walked = SysRoot(tree)
    assert said == [walked.resolve(rel, last=last) for rel, last in paths]
    for rel in ("sys/class/net/eth0/operstate", "sys/class/net/eth0/mtu"):
        with pytest.raises(OSError, match="Too many levels"):
            walked.resolve(rel)
        with pytest.raises(OSError, match="Too many levels"):
            kernel.resolve(rel)


def test_the_kernels_answers_about_a_path_are_the_walks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """``exists``, ``is_dir``, ``link_name`` and ``listdir`` ask the kernel directly (openat2 of the name,
    the directory or the link itself); for links in and out of the root, loops, chains too long, a FIFO, a
    file taken for a folder and names no file system holds they answer as the walk does, anomalies included."""
    from fabricscope import in_root

    tree, _ = hostile_tree(tmp_path)
    os.symlink("real", tree / "etc/realdir")
    os.symlink("/etc/real", tree / "etc/rootdir")  # absolute, re-rooted to a folder inside
    os.symlink("/no/such/place", tree / "etc/dangling")
    os.mkfifo(tree / "etc/fifo")
    (tree / "etc/real/sub").mkdir()
    # Through a file or a FIFO, then `..`: the kernel stops at the file (ENOTDIR), as the walk must.
    os.symlink("real/site.conf/../sub", tree / "etc/filedotdot")
    os.symlink("fifo/../real", tree / "etc/fifodotdot")
    os.symlink("inside.conf/../real", tree / "etc/linkedfiledotdot")
    paths = [
        "etc/filedotdot",
        "etc/filedotdot/x",
        "etc/fifodotdot",
        "etc/linkedfiledotdot",
        "etc",
        "etc/real",
        "etc/realdir",
        "etc/realdir/",
        "etc/rootdir",
        "etc/rootdir/site.conf",
        "etc/inside.conf",
        "etc/nccl.conf",
        "etc/hostile.conf",
        "etc/climb.conf",
        "etc/dangling",
        "etc/fifo",
        "etc/real/site.conf/under",
        "sys/class/net/eth0",
        "sys/class/net/eth0/device/driver",
        "sys/class/net/eth0/operstate",
        "sys/class/net/eth0/mtu",
        "sys/class/net/eth0/operstate/under",
        "sys/class/net/eth0/no/such/file",
        "sys/class/net/eth0" + "/.." * 12 + "/etc/real",
        "sys/\ud800x",
        "nul\0byte",
        "x" * 300,
        "",
        ".",
        "etc/real/site.conf/..",
    ]

    def answers(root: SysRoot) -> list[object]:
        said: list[object] = []
        for rel in paths:
            said += [root.exists(rel), root.is_dir(rel), root.link_name(rel), root.listdir(rel), root.text(rel)]
            try:
                said.append(root.listdir_now(rel))
            except OSError as exc:
                said.append(exc.errno)
        return [*said, [(a.path, a.problem) for a in root.anomalies], root.touched(), root.read_errors()]

    kernel = answers(SysRoot(tree))
    release = tuple(int(part) for part in re.findall(r"\d+", os.uname().release)[:2])
    if request.node.callspec.params["resolution"] == "openat2" and release >= (5, 6):
        assert in_root._call not in (None, False), "openat2 was not used on a kernel that has it"
    monkeypatch.setattr(in_root, "_call", False)
    walked = SysRoot(tree)
    assert walked._root_fd is None
    assert kernel == answers(walked)


def test_a_file_whose_name_is_not_utf8_is_read_as_listed(tmp_path: Path) -> None:
    """A name of undecodable bytes comes out of a listing as surrogate escapes (os.fsdecode); reading it by
    that name opens the same bytes, with the kernel and with the walk; a lone surrogate no listing makes
    is refused as a bad path, never read as another name."""
    from fabricscope import in_root

    tree = tmp_path / "tree"
    (tree / "sys/class/net").mkdir(parents=True)
    (tree / b"sys/class/net/eth\xff".decode("utf-8", "surrogateescape")).mkdir()
    with open(os.path.join(os.fsencode(tree), b"sys/class/net/eth\xff/mtu"), "wb") as handle:
        handle.write(b"9000\n")
    for openat2 in (True, False):
        if not openat2:
            in_root._call = False
        try:
            root = SysRoot(tree)
            names = root.listdir("sys/class/net")
            assert names == ["eth\udcff"]
            assert root.text(f"sys/class/net/{names[0]}/mtu") == "9000"
            assert root.text("sys/class/net/eth\ud800/mtu") is None
            assert root.read_errors()["sys/class/net/eth\ud800/mtu"] == "BADPATH"
        finally:
            in_root._call = None
