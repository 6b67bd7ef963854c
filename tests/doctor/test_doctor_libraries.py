"""The library versions a job loads (NCCL, rdma-core's libibverbs, the NCCL wheel), for fleet skew."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricscope.doctor.diagnosis import open_root
from fabricscope.doctor.probes import host
from fabricscope.doctor.probes.host import NCCL_WHEEL_FILE, probe_libraries


def tree(path: Path) -> Path:
    """A root the doctor accepts: the top of a captured tree holds sys/ and proc/."""
    for top in ("sys", "proc"):
        (path / top).mkdir(parents=True, exist_ok=True)
    return path


def test_versions_come_from_the_links_ldconfig_makes(tmp_path: Path) -> None:
    folder = tmp_path / "usr/lib64"
    folder.mkdir(parents=True)
    (folder / "libnccl.so.2.23.4").write_text("")
    (folder / "libnccl.so.2").symlink_to("libnccl.so.2.23.4")
    (folder / "libibverbs.so.1").symlink_to("elsewhere.so")  # not a versioned name: not reported
    assert probe_libraries(open_root(str(tree(tmp_path)))) == {"NCCL": "2.23.4 (usr/lib64)"}


def test_a_capture_keeps_the_nccl_wheel_of_the_python_that_took_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(host, "_nccl_wheel", lambda: "nvidia-nccl-cu12 2.21.5")
    live = open_root("/")
    assert probe_libraries(live)["NCCL (Python wheel)"] == "nvidia-nccl-cu12 2.21.5"
    assert live.extras()[NCCL_WHEEL_FILE] == "nvidia-nccl-cu12 2.21.5"
    replay = tmp_path / "capture"
    (replay / "fabricscope-capture").mkdir(parents=True)
    (replay / NCCL_WHEEL_FILE).write_text("nvidia-nccl-cu12 2.21.5\n")
    assert probe_libraries(open_root(str(tree(replay)))) == {"NCCL (Python wheel)": "nvidia-nccl-cu12 2.21.5"}


@pytest.mark.parametrize("absent", ["nothing", "dangling"])
def test_no_library_is_no_fact_and_no_error(tmp_path: Path, absent: str) -> None:
    if absent == "dangling":
        (tmp_path / "usr/lib").mkdir(parents=True)
        (tmp_path / "usr/lib/libnccl.so.2").symlink_to("libnccl.so.2.9.9")  # its target is gone
        assert probe_libraries(open_root(str(tree(tmp_path)))) == {"NCCL": "2.9.9 (usr/lib)"}
    else:
        assert probe_libraries(open_root(str(tree(tmp_path)))) == {}


def test_a_hostile_captured_wheel_file_is_one_printable_line(tmp_path: Path) -> None:
    replay = tree(tmp_path / "capture")
    (replay / "fabricscope-capture").mkdir()
    (replay / NCCL_WHEEL_FILE).write_text("\x1b[2Jnvidia-nccl-cu12 " + "9" * 5000 + "\nsecond line\n")
    shown = probe_libraries(open_root(str(replay)))["NCCL (Python wheel)"]
    assert len(shown) <= 80 and "\x1b" not in shown and "second" not in shown
