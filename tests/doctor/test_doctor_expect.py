"""--expect files: valid ones parse to typed values; every mistake names the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_helpers import FIXTURES

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
        ({"nics": {"count": 8}}, "f.toml: unknown section [nics] (did you mean 'nic'?); allowed sections: [nic]"),
        ({"nic": {"speed": "400G"}}, "f.toml: unknown key nic.speed"),
        ({"nic": {"count": "eight"}}, "f.toml: nic.count must be a whole number from 0 to 1024, got 'eight'"),
        ({"nic": {"count": True}}, "f.toml: nic.count must be a whole number"),
        ({"nic": {"rate": 400}}, "f.toml: nic.rate must be a rate with its decimal prefix in quotes"),
        ({"nic": {"rate": "fast"}}, "invalid f.toml: nic.rate 'fast'"),
        ({"nic": {"rate": "400"}}, "invalid f.toml: nic.rate '400': give a rate with its decimal prefix"),
        ({"nic": {"rate": "400"}}, "(a bare number would be bits per second)"),
        ({"nic": {"rate": "400M"}}, "f.toml: nic.rate must be from 1 to 3200 Gb/s per NIC, got 0.4 Gb/s"),
        ({"nic": {"rate": "400T"}}, "f.toml: nic.rate must be from 1 to 3200 Gb/s per NIC"),
        ({"nic": {"devices": "mlx5_0"}}, 'f.toml: nic.devices must be a list of names like ["mlx5_0"'),
        ({"nic": {"devices": ["mlx5_0", "mlx5_1 "]}}, "f.toml: nic.devices holds 'mlx5_1 '"),
        ({"nic": {"devices": ["=mlx5_0"]}}, "f.toml: nic.devices holds '=mlx5_0'"),
        ({"nic": {"mtu": 10}}, "f.toml: nic.mtu must be from 68 to 65536, got 10"),
        ({"nic": {"link_layer": "RoCE"}}, "f.toml: nic.link_layer must be one of InfiniBand, Ethernet, got 'RoCE'"),
        ({"pcie": {"width": 3}}, "f.toml: pcie.width must be one of 1, 2, 4, 8, 12, 16, 32, got 3"),
        ({"pcie": {"gen": 9}}, "f.toml: pcie.gen must be from 1 to 7, got 9"),
        (
            {"gpu": {"nic_distance": "PIXX"}},
            "must be one of PIX, PXB, PHB, NODE, SYS, got 'PIXX' (did you mean 'PIX'?)",
        ),
        ({"gpu": 8}, "f.toml: gpu must be a table"),
        ({"tcp": {"buffer_max": "lots"}}, "invalid f.toml: tcp.buffer_max 'lots'"),
        ({"tcp": {"buffer_max": "16"}}, 'f.toml: tcp.buffer_max "16" needs a binary suffix K, M, G or T'),
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
    with pytest.raises(ConfigError, match=r"allowed in \[nic\]: count, rate, mtu, link_layer, devices"):
        parse_expectations({"nic": {"speed": "400G"}}, "f.toml")


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[nic\ncount = 8\n")
    with pytest.raises(ConfigError, match=rf"--expect {bad}: malformed TOML: .*line 1"):
        load_expectations(str(bad))
    with pytest.raises(ConfigError, match=f"--expect {tmp_path}/absent.toml: no such file"):
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
