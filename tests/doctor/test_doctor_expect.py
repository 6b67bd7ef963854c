"""--expect files: valid ones parse to typed values; every mistake names the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from doctor_helpers import FIXTURES

from fabricscope.doctor.expect import DEFAULT_TCP_BUFFER, Expectations, load_expectations, parse_expectations
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
    assert Expectations().tcp_buffer_bytes == DEFAULT_TCP_BUFFER
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
        ({"nic": {"rate": 400}}, 'f.toml: nic.rate must be a rate with its unit in quotes, like "400G"'),
        ({"nic": {"rate": "fast"}}, "invalid f.toml: nic.rate 'fast'"),
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
    ],
)
def test_mistakes_name_file_key_and_allowed_values(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_expectations(data, "f.toml")
    assert message in str(info.value)


def test_unknown_key_lists_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match=r"allowed in \[nic\]: count, rate, mtu, link_layer"):
        parse_expectations({"nic": {"speed": "400G"}}, "f.toml")


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[nic\ncount = 8\n")
    with pytest.raises(ConfigError, match=rf"{bad}: not valid TOML \(.*line 1"):
        load_expectations(str(bad))
    with pytest.raises(ConfigError, match="no such file"):
        load_expectations(str(tmp_path / "absent.toml"))
