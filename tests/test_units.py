import pytest

from fabricscope.errors import UsageError
from fabricscope.units import format_size, gbps, parse_duration, parse_rate, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("0", 0),
        ("1K", 1024),
        ("64k", 65536),
        ("1M", 1 << 20),
        ("32M", 32 << 20),
        ("8G", 8 << 30),
        ("1.5K", 1536),
        ("64KB", 65536),
        ("4MiB", 4 << 20),
        (" 2 M ", 2 << 20),
        (17, 17),
    ],
)
def test_parse_size_binary_suffixes_as_nccl_tests(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["12Q", "", "M", "-1", "1.3", "1e3", "1,5K", "K1"])
def test_parse_size_rejects_with_what_is_allowed(text):
    with pytest.raises(UsageError) as info:
        parse_size(text, what="-b (minbytes)")
    message = str(info.value)
    assert "-b (minbytes)" in message
    assert "\n" not in message


def test_parse_size_names_the_bad_value_and_the_allowed_suffixes():
    with pytest.raises(UsageError, match=r"'12Q'.*K, M, G"):
        parse_size("12Q")


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("200G", 200e9),
        ("100Gbps", 100e9),
        ("25g", 25e9),
        ("1.5T", 1.5e12),
        ("800G", 800e9),
        ("400Gb/s", 400e9),
        ("10Gbit", 10e9),
        ("50GB/s", 400e9),
        ("25GBps", 200e9),
        (10e9, 10e9),
    ],
)
def test_parse_rate_is_decimal_bits(text, bits):
    assert parse_rate(text) == pytest.approx(bits)


@pytest.mark.parametrize("text", ["fast", "0", "-5G", "400", "0G", "100Gbs/"])
def test_parse_rate_rejects(text):
    with pytest.raises(UsageError):
        parse_rate(text)


def test_parse_duration():
    assert parse_duration("30") == 30
    assert parse_duration("500ms") == pytest.approx(0.5)
    assert parse_duration("2m") == 120
    for bad in ("0", "soon", "-3"):
        with pytest.raises(UsageError):
            parse_duration(bad)


def test_format_size_round_trips_through_parse_size():
    for n in (8, 1024, 1536, 1 << 20, 3 << 30, 1000):
        assert parse_size(format_size(n)) == n


def test_gbps_uses_1e9():
    assert gbps(1e9, 1.0) == 1.0
    assert gbps(2**30, 1.0) == pytest.approx(1.073741824)
    assert gbps(100, 0) == 0.0


@pytest.mark.parametrize("digits", ["١٠", "²", "१०", "１０"])  # Arabic-Indic, superscript, Devanagari, full-width
def test_numbers_with_units_take_ascii_digits_only(digits):
    """int() and regex \\d accept every script's digits; a size, rate or duration on the command line does not."""
    for parse, text in ((parse_size, f"{digits}K"), (parse_rate, f"{digits}G"), (parse_duration, f"{digits}s")):
        with pytest.raises(UsageError):
            parse(text)
