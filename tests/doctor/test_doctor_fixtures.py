"""The committed fixture trees are exactly what build_fixtures.py writes, and look like sysfs."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under root: link targets and file contents, without following links."""
    entries: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                entries[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                entries[rel] = path.read_bytes().hex()
    return entries


def load_builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("build_fixtures", FIXTURES / "build_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_fixtures"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_committed_trees_match_the_builder(tmp_path: Path) -> None:
    builder = load_builder()
    builder.build(tmp_path)
    for name in builder.BUILT:
        assert snapshot(tmp_path / name) == snapshot(FIXTURES / name), f"rebuild {name}: python {builder.__file__}"


@pytest.mark.parametrize("name", ["healthy-ib-8gpu", "degraded-ib-8gpu", "roce-4gpu", "vm-virtio", "broken"])
def test_trees_use_relative_links_like_sysfs(name: str) -> None:
    links = [v for v in snapshot(FIXTURES / name).values() if v.startswith("-> ")]
    assert links and not any(v.startswith("-> /") for v in links)


def test_kernel_formats_are_the_real_ones() -> None:
    port = FIXTURES / "healthy-ib-8gpu/sys/class/infiniband/mlx5_0/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "phys_state").read_text() == "5: LinkUp\n"
    assert (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    gpu = FIXTURES / "healthy-ib-8gpu/sys/bus/pci/devices/0000:19:00.0"
    assert (gpu / "max_link_speed").read_text() == "32.0 GT/s PCIe\n"
    assert (gpu / "class").read_text() == "0x030200\n"
    assert os.path.realpath(gpu).endswith("pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0")
    assert (FIXTURES / "vm-virtio/sys/class/net/eth0/speed").read_text() == "-1\n"
