"""--expect files: valid ones parse to typed values; every mistake names the file, the key and what is allowed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, cli

from fabricscope.doctor.expect import Expectations, load_expectations, parse_expectations
from fabricscope.errors import ConfigError


def test_fixture_file_parses() -> None:
    expect = load_expectations(str(FIXTURES / "expect-h100-ib.toml"))
    assert expect.nic_count == 8
    assert expect.nic_rate_gbps == 400.0
    assert expect.nic_mtu == 4092
    assert expect.link_layer == "InfiniBand"
    assert (expect.pcie_gen, expect.pcie_width) == (5, 16)
    assert (expect.gpu_count, expect.gpu_nic_distance) == (8, "PIX")
    assert expect.tcp_buffer_bytes == 16 << 20


def test_defaults_and_case_insensitive_choices() -> None:
    assert Expectations().tcp_buffer_bytes is None  # the bandwidth-delay product of the node's fastest NIC
    expect = parse_expectations({"nic": {"link_layer": "ethernet"}, "gpu": {"nic_distance": "pxb"}}, "f.toml")
    assert (expect.link_layer, expect.gpu_nic_distance) == ("Ethernet", "PXB")
    assert parse_expectations({"nic": {"rate": "200Gbps"}}, "f.toml").nic_rate_gbps == 200.0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"nics": {"count": 8}}, "f.toml: unknown key 'nics' (did you mean 'nic'?): allowed keys are nic, pcie"),
        ({"nic": {"speed": "400G"}}, "f.toml: unknown key 'nic.speed'"),
        ({"nic": {"count": "eight"}}, "f.toml: nic.count = 'eight': must be a whole number"),
        ({"nic": {"count": True}}, "f.toml: nic.count = true: must be a whole number"),
        ({"nic": {"rate": 400}}, "f.toml: nic.rate must be a rate with its decimal prefix in quotes"),
        ({"nic": {"rate": "fast"}}, "f.toml: nic.rate must be a rate with its decimal prefix in quotes"),
        ({"nic": {"rate": "400"}}, "400Gb/s), bytes with a capital B (50GB/s = 400 Gb/s), got '400'"),
        ({"nic": {"rate": "400"}}, "(a bare number would be bits per second)"),
        ({"nic": {"rate": "400M"}}, "f.toml: nic.rate must be from 1 to 3200 Gb/s per NIC, got 0.4 Gb/s"),
        ({"nic": {"rate": "400T"}}, "f.toml: nic.rate must be from 1 to 3200 Gb/s per NIC"),
        ({"nic": {"devices": "mlx5_0"}}, "f.toml: nic.devices = 'mlx5_0': must be a list"),
        ({"nic": {"devices": ["mlx5_0", "mlx5_1 "]}}, "f.toml: nic.devices holds 'mlx5_1 '"),
        ({"nic": {"devices": ["=mlx5_0"]}}, "f.toml: nic.devices holds '=mlx5_0'"),
        ({"nic": {"mtu": 10}}, "f.toml: nic.mtu must be a whole number from 68 to 65536, got 10"),
        ({"nic": {"link_layer": "RoCE"}}, "f.toml: nic.link_layer must be one of InfiniBand, Ethernet, got 'RoCE'"),
        ({"pcie": {"width": 3}}, "f.toml: pcie.width must be one of 1, 2, 4, 8, 12, 16, 32, got 3"),
        ({"pcie": {"gen": 9}}, "f.toml: pcie.gen must be a whole number from 1 to 7, got 9"),
        (
            {"gpu": {"nic_distance": "PIXX"}},
            "must be one of PIX, PXB, PHB, NODE, SYS, got 'PIXX' (did you mean 'PIX'?)",
        ),
        ({"gpu": 8}, "f.toml: gpu = 8: input should be a dictionary"),
        ({"tcp": {"buffer_max": "lots"}}, "f.toml: tcp.buffer_max must be bytes as a whole number"),
        ({"tcp": {"buffer_max": "16"}}, "f.toml: tcp.buffer_max needs a binary suffix K, M, G or T in quotes"),
        ({"tcp": {"buffer_max": 16}}, "f.toml: tcp.buffer_max must be at least 64K (65536 bytes), got 16 bytes"),
        ({"tcp": {"buffer_max": "16B"}}, "f.toml: tcp.buffer_max must be at least 64K"),
        ({"tcp": {"buffer_max": 1.5}}, "f.toml: tcp.buffer_max must be bytes as a whole number"),
    ],
)
def test_mistakes_name_file_key_and_allowed_values(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_expectations(data, "f.toml")
    assert message in str(info.value)


def test_unknown_key_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match=r"allowed keys are count, rate, mtu, link_layer, devices"):
        parse_expectations({"nic": {"speed": "400G"}}, "f.toml")


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[nic\ncount = 8\n")
    # The library names its parameter; the command line names its flag (test_doctor_cli checks --expect).
    with pytest.raises(ConfigError, match=rf"^expect {bad}: malformed TOML: .*line 1"):
        load_expectations(str(bad))
    with pytest.raises(ConfigError, match=f"^expect {tmp_path}/absent.toml: no such file"):
        load_expectations(str(tmp_path / "absent.toml"))


@pytest.mark.parametrize(
    ("text", "gbps"),
    [("400G", 400.0), ("400Gbps", 400.0), ("400Gb/s", 400.0), ("50GB/s", 400.0), ("25GBps", 200.0), ("1.6T", 1600.0)],
)
def test_rate_is_bits_unless_a_capital_b_says_bytes(text: str, gbps: float) -> None:
    assert parse_expectations({"nic": {"rate": text}}, "f.toml").nic_rate_gbps == gbps


def test_buffer_max_takes_bytes_or_a_suffixed_size() -> None:
    for value, size in ((16777216, 16 << 20), ("16M", 16 << 20), ("512K", 512 << 10), ("64KiB", 64 << 10)):
        assert parse_expectations({"tcp": {"buffer_max": value}}, "f.toml").tcp_buffer_bytes == size
    with pytest.raises(ConfigError, match=r"Expectations: tcp\.buffer_max must be at least 64K"):
        Expectations(tcp_buffer_bytes=16)


def test_python_construction_is_validated_in_the_same_place() -> None:
    with pytest.raises(ConfigError, match=r"Expectations: nic\.link_layer must be one of InfiniBand, Ethernet"):
        Expectations(link_layer="RoCE")
    with pytest.raises(ConfigError, match=r"Expectations: nic\.rate must be from 1 to 3200 Gb/s"):
        Expectations(nic_rate_gbps=4e-7)
    with pytest.raises(ConfigError, match=r"Expectations: gpu\.nic_distance must be one of PIX"):
        Expectations(gpu_nic_distance="near")
    names = ("mlx5_0", "mlx5_1:1", "eth2")
    assert Expectations(compute_devices=names).compute_devices == names


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pcie": {"width": True}}, "f.toml: pcie.width = true: must be a whole number"),
        ({"nic": {"count": 8.0}}, "f.toml: nic.count = 8.0: must be a whole number"),
        ({"nic": {"count": "8"}}, "f.toml: nic.count = '8': must be a whole number"),
        ({"nic": {"mtu": 10**30}}, "f.toml: nic.mtu must be a whole number from 68 to 65536, got 1000000000000"),
        ({"nic": {"devices": []}}, 'f.toml: nic.devices must be a list of names like ["mlx5_0", "mlx5_1:1", "eth2"]'),
        ({"nic": {"devices": [3]}}, "f.toml: nic.devices = [3]: must be a list of"),
        ({"nic": {"devices": ["a b"]}}, "f.toml: nic.devices holds 'a b': give an RDMA device (mlx5_0), a port"),
        ({"gpu": {"count": -1}}, "f.toml: gpu.count must be a whole number from 0 to 1024, got -1"),
        ({"tcp": {"buffer_max": True}}, "f.toml: tcp.buffer_max must be bytes as a whole number"),
        ({"nic": {"link_layer": 4}}, "f.toml: nic.link_layer = 4: must be a string"),
        ({"pcie": {"width": 3}}, "f.toml: pcie.width must be one of 1, 2, 4, 8, 12, 16, 32, got 3"),
        # A well-formed size or rate out of range says so, not that its spelling is wrong (review 2, #10).
        ({"tcp": {"buffer_max": 2**62}}, "f.toml: tcp.buffer_max '4611686018427387904' is too large (at most"),
        ({"tcp": {"buffer_max": -5}}, "f.toml: tcp.buffer_max must not be negative, got -5"),
        ({"tcp": {"buffer_max": "9000P"}}, "f.toml: tcp.buffer_max '9000P' is too large"),
        ({"nic": {"rate": "0G"}}, "f.toml: nic.rate must be a positive rate"),
    ],
)
def test_strict_types_and_bounds(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_expectations(data, "f.toml")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_the_file_sections_are_the_one_validation() -> None:
    from fabricscope.doctor.expect import ExpectFile, GpuSection, NicSection
    from fabricscope.schema import build

    checked = build(ExpectFile, {"nic": {"count": 8, "link_layer": "ethernet"}}, source="f.toml")
    assert checked.nic == NicSection(count=8, link_layer="Ethernet") and checked.gpu == GpuSection()
    assert Expectations(link_layer="ethernet", gpu_nic_distance="pxb").link_layer == "Ethernet"  # as from a file
    with pytest.raises(ConfigError, match=r"^Expectations: pcie\.width must be one of 1, 2, 4, 8, 12, 16, 32, got 3"):
        Expectations(pcie_width=3)
    with pytest.raises(ConfigError, match=r"^Expectations: nic\.count = '8': must be a whole number$"):
        Expectations(nic_count="8")  # type: ignore[arg-type]


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    """--expect files as a careless or hostile user gives them."""
    files: dict[str, Path] = {}
    files["huge-int"] = tmp_path / "huge-int.toml"
    files["huge-int"].write_text("[nic]\ncount = " + "9" * 400 + "\n")
    files["deep"] = tmp_path / "deep.toml"
    files["deep"].write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    files["deep-tables"] = tmp_path / "deep-tables.toml"
    files["deep-tables"].write_text("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n")
    files["fifo"] = tmp_path / "fifo.toml"
    os.mkfifo(files["fifo"])
    files["zero"] = tmp_path / "zero.toml"
    files["zero"].symlink_to("/dev/zero")
    files["folder"] = tmp_path / "folder.toml"
    files["folder"].mkdir()
    files["long"] = tmp_path / ("x" * 5000 + ".toml")
    return files


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("huge-int", "huge-int.toml"),
        ("deep", "deep.toml"),
        ("deep-tables", "deep-tables.toml"),
        ("fifo", "a FIFO"),
        ("zero", "a character device"),
        ("folder", "a directory"),
        ("long", "file name too long"),
    ],
)
def test_a_hostile_expect_file_is_one_error_line(hostile: dict[str, Path], name: str, fragment: str) -> None:
    result = cli("--root", str(FIXTURES / "healthy-ib-8gpu"), "--expect", str(hostile[name]), timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: --expect ") and fragment in line, line
    assert "Traceback" not in result.stderr


def test_a_value_is_shown_as_the_file_spells_it() -> None:
    with pytest.raises(ConfigError) as info:
        parse_expectations({"tcp": {"buffer_max": True}}, "f.toml")
    assert str(info.value).endswith("got true")
