"""Each parser against the text the kernel (or ethtool, or NCCL's users) really writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_helpers import DATA, FIXTURES

from fabricscope.doctor.probes.nccl import parse_nccl_conf
from fabricscope.kernel_text import (
    gid_is_link_local,
    gid_is_zero,
    parse_ethtool_stats,
    parse_hex,
    parse_ib_rate,
    parse_ib_state,
    parse_int,
    parse_kernel_release,
    parse_net_speed,
    parse_nvidia_driver,
    parse_pcie_speed,
    parse_pcie_width,
    parse_sysctl_ints,
    pcie_generation,
)

HEALTHY_PORT = FIXTURES / "healthy-ib-8gpu/sys/class/infiniband/mlx5_0/ports/1"
DEGRADED_PORT = FIXTURES / "degraded-ib-8gpu/sys/class/infiniband/mlx5_5/ports/1"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_ib_state_and_phys_state_from_captured_files() -> None:
    assert parse_ib_state(read(HEALTHY_PORT / "state")) == (4, "ACTIVE")
    assert parse_ib_state(read(HEALTHY_PORT / "phys_state")) == (5, "LinkUp")
    assert parse_ib_state(read(DEGRADED_PORT / "state")) == (1, "DOWN")
    assert parse_ib_state(read(DEGRADED_PORT / "phys_state")) == (2, "Polling")
    assert parse_ib_state("7: PortConfigurationTraining") == (7, "PortConfigurationTraining")
    for bad in ("ACTIVE", "", "4 ACTIVE", "x: ACTIVE", None):
        assert parse_ib_state(bad) is None


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("400 Gb/sec (4X NDR)\n", 400.0),
        ("200 Gb/sec (4X HDR)", 200.0),
        ("100 Gb/sec (4X EDR)", 100.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("56 Gb/sec (4X FDR)", 56.0),
        ("25 Gb/sec (1X EDR)", 25.0),
        ("fast", None),
        ("400 Gbps", None),
        ("", None),
    ],
)
def test_ib_rate(text: str, gbps: float | None) -> None:
    assert parse_ib_rate(text) == gbps


def test_ib_rate_from_captured_file() -> None:
    assert parse_ib_rate(read(HEALTHY_PORT / "rate")) == 400.0


@pytest.mark.parametrize(
    ("text", "gts", "generation"),
    [
        ("32.0 GT/s PCIe", 32.0, 5),
        ("16.0 GT/s PCIe\n", 16.0, 4),
        ("8.0 GT/s PCIe", 8.0, 3),
        ("2.5 GT/s PCIe", 2.5, 1),
        ("64.0 GT/s PCIe", 64.0, 6),
        ("8 GT/s", 8.0, 3),  # kernel 5.6 and earlier
        ("16 GT/s", 16.0, 4),
        ("5 GT/s", 5.0, 2),
        ("Unknown", None, None),
        ("Unknown speed", None, None),  # kernels before 5.7
        ("", None, None),
        ("banana", None, None),
    ],
)
def test_pcie_speed_both_kernel_formats(text: str, gts: float | None, generation: int | None) -> None:
    assert parse_pcie_speed(text) == gts
    assert pcie_generation(parse_pcie_speed(text)) == generation


def test_pcie_speed_old_format_from_captured_roce_tree() -> None:
    gpu = FIXTURES / "roce-4gpu/sys/bus/pci/devices/0000:97:00.0"
    assert read(gpu / "max_link_speed").strip() == "16 GT/s"
    assert pcie_generation(parse_pcie_speed(read(gpu / "max_link_speed"))) == 4


def test_pcie_width() -> None:
    assert parse_pcie_width("16\n") == 16
    assert parse_pcie_width("8") == 8
    assert parse_pcie_width("x16") is None
    assert parse_pcie_width("0") is None
    assert parse_pcie_width("") is None


def test_net_speed_minus_one_and_zero_mean_unknown() -> None:
    assert parse_net_speed("400000") == 400000
    assert parse_net_speed("-1") is None
    assert parse_net_speed("0") is None
    assert parse_net_speed("4294967295") is None
    assert parse_net_speed(read(FIXTURES / "vm-virtio/sys/class/net/eth0/speed")) is None


def test_int_and_hex() -> None:
    assert parse_int(" 4092\n") == 4092
    assert parse_int("-1") == -1
    assert parse_int("abc") is None
    assert parse_int("4 092") is None
    assert parse_hex("0x10de") == 0x10DE
    assert parse_hex("0x030200\n") == 0x030200
    assert parse_hex("10de") is None
    assert parse_hex("garbage") is None


def test_sysctl_triples() -> None:
    assert parse_sysctl_ints("4096\t131072\t33554432") == (4096, 131072, 33554432)
    assert parse_sysctl_ints("4096 87380") == (4096, 87380)
    assert parse_sysctl_ints("lots") is None
    assert parse_sysctl_ints("") is None


def test_ethtool_stats_from_captured_output() -> None:
    stats = parse_ethtool_stats(read(DATA / "ethtool-S-mlx5.txt"))
    assert stats is not None
    assert stats["rx_prio3_pause_transition"] == 2205
    assert stats["rx_discards_phy"] == 1843
    assert "rx_prio1_pause" not in stats
    assert "ch0_arm" not in stats  # a line whose value is not an integer is skipped
    assert parse_ethtool_stats("no statistics here") is None


def test_gids() -> None:
    gids = FIXTURES / "roce-4gpu/sys/class/infiniband/mlx5_0/ports/1/gids"
    assert gid_is_link_local(read(gids / "0"))
    assert not gid_is_link_local(read(gids / "3"))  # ::ffff:10.0.1.11
    assert gid_is_zero(read(gids / "4"))
    assert not gid_is_zero(read(gids / "3"))
    assert gid_is_zero("garbage")
    assert not gid_is_link_local("garbage")


def test_nvidia_driver_versions_from_captured_files() -> None:
    assert parse_nvidia_driver(read(DATA / "nvidia-version-open.txt")) == ("550.54.15", True)
    assert parse_nvidia_driver(read(DATA / "nvidia-version-proprietary.txt")) == ("535.161.08", False)
    assert parse_nvidia_driver(read(DATA / "nvidia-version-aarch64.txt")) == ("550.90.07", False)
    assert parse_nvidia_driver("garbage") is None
    assert parse_nvidia_driver("") is None


def test_kernel_release() -> None:
    assert parse_kernel_release("5.15.0-105-generic") == (5, 15)
    assert parse_kernel_release(read(FIXTURES / "vm-virtio/proc/sys/kernel/osrelease")) is not None
    assert parse_kernel_release("not-a-version") is None


def test_nccl_conf_as_nccl_reads_it() -> None:
    settings, problems = parse_nccl_conf(read(DATA / "nccl.conf"), "/etc/nccl.conf")
    by_line = [(s.name, s.value, s.source) for s in settings]
    assert ("NCCL_DEBUG", "WARN", "/etc/nccl.conf:2") in by_line
    assert ("NCCL_DEBUG", "INFO", "/etc/nccl.conf:4") in by_line  # kept; the caller keeps the first
    assert ("NCCL_IB_HCA", "=mlx5_0,mlx5_1", "/etc/nccl.conf:3") in by_line
    assert ("CUDA_DEVICE_MAX_CONNECTIONS", "1", "/etc/nccl.conf:9") in by_line
    assert not any(s.name.startswith("NCCL_SOCKET_IFNAME") for s in settings)  # 'NCCL_SOCKET_IFNAME ' is a name
    assert any("/etc/nccl.conf:6" in p and "'NCCL_SOCKET_IFNAME '" in p for p in problems)
    assert any("/etc/nccl.conf:7" in p and "' 22'" in p for p in problems)
    assert any("/etc/nccl.conf:8" in p and "no '='" in p for p in problems)
    assert not any(":5" in p for p in problems)  # an indented comment is not a problem


def test_link_modes_of_ethtool_output() -> None:
    """``ethtool <if>`` of a 200 GbE NIC linked at 100G (a hand-written sample in ethtool's layout)."""
    from fabricscope.kernel_text import parse_link_modes

    assert parse_link_modes(read(DATA / "ethtool-mlx5-200g-at-100g.txt")) == 200000  # not the advertised 100G
    assert parse_link_modes("Settings for eth0:\n\tSupported link modes:   Not reported\n\tSpeed: Unknown!") is None
    assert parse_link_modes("10000baseT/Half 40000baseCR4/Full") is None  # outside the section
    assert parse_link_modes(None) is None


def test_round_trip_of_the_link_modes_a_capture_writes() -> None:
    from fabricscope.doctor.probes.ethtool import LINK_MODES, format_link_modes
    from fabricscope.kernel_text import parse_link_modes

    bits = [b for b, name in LINK_MODES.items() if name in ("25000baseCR/Full", "400000baseCR4/Full", "10baseT/Half")]
    assert parse_link_modes(format_link_modes("eth9", bits)) == 400000
    assert parse_link_modes(format_link_modes("eth9", [])) is None


OTHER_SCRIPTS = ["٤٠٩٢", "４０９２", "४०९२"]
"""4092 in Arabic-Indic, full-width and Devanagari digits: ``\\d`` and ``int()`` take them; the kernel never
writes them."""


@pytest.mark.parametrize("text", ["9" * 5000, "-" + "1" * 4400, "1" * 21, "0x" + "f" * 5000, *OTHER_SCRIPTS])
def test_numbers_too_long_or_in_other_scripts_are_garbage_not_a_crash(text: str) -> None:
    assert parse_int(text) is None
    assert parse_hex(text) is None
    assert parse_sysctl_ints(f"{text} 1 2") is None
    assert parse_ethtool_stats(f"rx_prio3_pause: {text}") is None
    assert parse_kernel_release(f"{text}.1") is None
    assert parse_ib_state(f"{text}: ACTIVE") is None
    assert parse_ib_rate(f"{text} Gb/sec (4X NDR)") is None


@pytest.mark.parametrize("digits", OTHER_SCRIPTS)
def test_short_numbers_in_other_scripts_are_garbage_too(digits: str) -> None:
    """A sysfs MTU of '٤٠٩٢' read 4092; an NCCL port ':١' read 1; /proc/net/snmp's counters the same."""
    from fabricscope.doctor.probes.nccl import parse_interface_list
    from fabricscope.kernel_text import parse_proc_table

    assert parse_ib_state(f"{digits[:1]}: ACTIVE") is None
    assert parse_pcie_speed(f"{digits[:2]} GT/s PCIe") is None
    assert parse_kernel_release(f"{digits[:1]}.{digits[1:2]}.0") is None
    tables, bad = parse_proc_table(f"Tcp: ActiveOpens OutSegs\nTcp: 1 {digits}\n")
    assert "Tcp" not in tables and bad
    # NCCL's atoi stops at the first byte that is not an ASCII digit: port 0, which no device has.
    assert parse_interface_list(f"mlx5_0:{digits[:1]}").entries == (("mlx5_0", 0),)
