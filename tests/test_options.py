"""The shared flag converters: one grammar and one message shape for every command."""

from __future__ import annotations

import argparse

import pytest

from fabricscope import options
from helpers import run_cli


def _bad(convert, text):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        convert(text)
    return str(info.value)


def test_whole_numbers_and_their_bounds():
    convert = options.whole(minimum=1, maximum=10)
    assert convert("7") == 7 and convert(" 10 ") == 10
    for text in ("0", "11", "-1", "ten", "0x2", "1.0", "", "+-1"):
        assert _bad(convert, text) == f"must be a whole number from 1 to 10, got {text!r}"


def test_a_400_digit_number_is_refused_by_its_length_not_converted():
    huge = "9" * 400
    message = _bad(options.whole(minimum=1, maximum=10), huge)
    assert message.startswith("must be a whole number from 1 to 10, got '9999")
    assert "..." in message and len(message) < 200
    for convert in (options.size(), options.seconds(minimum=1, maximum=60), options.rate()):
        assert "\n" not in _bad(convert, huge)
    assert "must be a number" in _bad(options.number(minimum=0, maximum=1), huge)


def test_one_message_for_one_rule_of_durations():
    convert = options.seconds(minimum=1, maximum=7 * 86400)
    expected = "must be a duration from 1 s to 7 days (seconds, or with ms, s, m, h, d), got"
    for text in ("0", "1e9", "1ms", "8d", "1e400", "-3"):
        assert _bad(convert, text).startswith(expected), text
    assert convert("2m") == 120 and convert("1e3") == 1000
    assert "invalid duration 'soon'" in _bad(convert, "soon")


def test_sizes_are_bytes_and_bits_are_refused():
    convert = options.size(maximum=1 << 40)
    assert convert("64K") == 65536 and convert("1GB") == 1 << 30 and convert("2GiB") == 2 << 30
    assert "a lowercase b means bits" in _bad(convert, "1Gb")
    assert "must be a size from 0 to 1T" in _bad(convert, "2T")
    exact = options.size()
    assert exact(str(2**53 + 1)) == 2**53 + 1  # no float rounding


def test_fractions_take_percent_or_a_share():
    convert = options.fraction(minimum=0.001)
    assert convert("80%") == pytest.approx(0.8) and convert("0.8") == pytest.approx(0.8)
    assert "must be a share from 0.1% to 100%" in _bad(convert, "80")
    assert "must be a share" in _bad(convert, "nan")


def test_modes_list_their_meanings():
    convert = options.choice({0: "rank0", 1: "avg"})
    assert convert("1") == 1
    assert _bad(convert, "2") == "must be one of 0 (rank0), 1 (avg), got '2'"


def test_sweep_steps_follow_nccl_tests():
    parser = argparse.ArgumentParser()
    options.add_sweep_options(parser)
    steps = options.sweep_steps(parser.parse_args(["-b", "1K", "-e", "1M", "-i", "4K"]))
    assert (steps.min_bytes, steps.max_bytes, steps.step_bytes, steps.step_factor) == (1024, 1 << 20, 4096, 1)
    steps = options.sweep_steps(parser.parse_args([]))
    assert (steps.min_bytes, steps.max_bytes, steps.step_factor) == (8, 32 << 20, 2)


@pytest.mark.parametrize(
    ("args", "help_of"),
    [
        (["bench", "--nope"], "fabricscope bench --help"),
        (["predict", "--cluster", "dgx-h100-ndr", "--nope"], "fabricscope predict --help"),
        (["doctor", "--nope"], "fabricscope doctor --help"),
        (["--nope"], "fabricscope --help"),
    ],
)
def test_an_unknown_option_points_to_its_commands_help(args, help_of):
    done = run_cli(args, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "unrecognized arguments: --nope" in line and f"(see '{help_of}')" in line


def test_shares_take_one_percent_sign_and_a_bare_number_above_one_is_refused():
    convert = options.fraction(maximum=10.0)
    assert convert("500%") == pytest.approx(5.0) and convert("1") == 1.0
    assert "must be a share" in _bad(convert, "0.5%%")
    assert _bad(convert, "5") == "a bare number is a share (0.05 = 5%): write 5% for 5 percent"
