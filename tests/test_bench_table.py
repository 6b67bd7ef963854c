"""The text table matches nccl-tests' format so existing parsers keep working."""

import pytest

from fabricscope import table


@pytest.mark.parametrize(
    ("value", "width", "text"),
    [
        (162.0, 7, " 162.00"),
        (63896.3, 7, "63896.3"),
        (1234567.0, 7, "1234567"),
        (12345678.0, 7, "1.2e+07"),
        (0.43, 6, "  0.43"),
        (235.26, 6, "235.26"),
        (1234.5, 6, "1234.5"),
        (123456.0, 6, "123456"),
        (0.0, 6, "  0.00"),
    ],
)
def test_float_str_like_getFloatStr(value, width, text):
    assert table.float_str(value, width) == text


def test_header_lines_are_nccl_tests_lines():
    lines = table.header_lines()
    assert lines[0] == "#"
    assert lines[2] == (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw"
        "   busbw  #wrong "
    )
    assert lines[3] == (
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)"
        "  (GB/s)         "
    )


def _rec(size, placement, busbw, wrong=0, time_us=10.0):
    return {
        "op": "all_reduce",
        "size_bytes": size,
        "count": size // 4,
        "dtype": "float",
        "redop": "sum",
        "root": -1,
        "placement": placement,
        "time_us": time_us,
        "algbw_gbps": busbw / 2,
        "busbw_gbps": busbw,
        "wrong": wrong,
    }


def test_row_format_and_parse_like_superbench():
    records = [_rec(8388608, "out", 90.63, time_us=162.0), _rec(8388608, "in", 91.77, time_us=160.0)]
    (row,) = table.pair_rows(records)
    line = table.format_row(row, check=True)
    assert line.startswith("     8388608       2097152     float     sum      -1   162.00")
    fields = line.split()
    assert len(fields) == 13
    assert float(fields[7]) == 90.63 and float(fields[11]) == 91.77
    assert fields[8] == "0"


def test_check_off_prints_na_and_missing_in_place_prints_na():
    (row,) = table.pair_rows([_rec(1024, "out", 1.0)])
    line = table.format_row(row, check=False)
    assert line.split()[8] == "N/A"
    assert line.split()[-4:] == ["N/A"] * 4


def test_every_cycle_of_a_size_is_a_row_of_its_own_as_nccl_tests_prints_them():
    """-N 2: the sweep twice; every row of both cycles is shown, none overwrites another (history show
    printed the last cycle only while its average covered both)."""
    cycles = [(1024, 1.0, 2.0), (2048, 3.0, 4.0), (1024, 5.0, 6.0), (2048, 7.0, 8.0)]
    records = [r for size, out, inp in cycles for r in (_rec(size, "out", out), _rec(size, "in", inp))]
    rows = table.pair_rows(records)
    assert [(r.size_bytes, r.out["busbw_gbps"], r.inp["busbw_gbps"]) for r in rows] == cycles
    assert table.footer_lines(records, check=False)[1] == "# Avg bus bandwidth    : 4.5 "
    assert table.footer_lines(records, check=False, average=4.4865)[1] == "# Avg bus bandwidth    : 4.4865 "


def test_footer_average_is_over_every_row_and_placement():
    records = [_rec(8, "out", 0.0), _rec(8, "in", 0.0), _rec(1 << 20, "out", 10.0), _rec(1 << 20, "in", 30.0)]
    footer = table.footer_lines(records, check=True)
    assert footer[0] == "# Out of bounds values : 0 OK"
    assert footer[1] == "# Avg bus bandwidth    : 10 "


def test_footer_counts_failed_checks_and_min_bw_verdict():
    records = [_rec(8, "out", 1.0, wrong=3), _rec(8, "in", 1.0, wrong=1), _rec(16, "out", 1.0)]
    footer = table.footer_lines(records, check=True, min_busbw=2.0)
    assert footer[0] == "# Out of bounds values : 2 FAILED"  # one row, wrong in both placements
    assert footer[1].endswith("FAILED")


def test_summary_names_peak_and_half_peak_size():
    records = [
        _rec(1024, "out", 1.0),
        _rec(4096, "out", 6.0),
        _rec(16384, "in", 11.0),
        _rec(65536, "out", 12.0),
    ]
    lines = table.summary_lines(records)
    assert lines[0] == "# Peak bus bandwidth   : 12 GB/s at 65536 B (out of place)"
    assert lines[1] == "# Half of peak from    : 4096 B"


def test_small_peaks_keep_their_digits():
    assert table.summary_lines([_rec(1024, "out", 0.0041)])[0].startswith("# Peak bus bandwidth   : 0.0041 GB/s")


def test_op_summary_numbers():
    records = [_rec(8, "out", 0.0, wrong=0), _rec(8, "in", 0.0, wrong=2), _rec(1024, "in", 5.0, wrong=0)]
    summary = table.op_summary(records)
    assert summary["peak_busbw_gbps"] == 5.0 and summary["peak_placement"] == "in"
    assert summary["half_peak_size_bytes"] == 1024
    assert summary["wrong"] == 2 and summary["rows"] == 2
    assert summary["avg_busbw_gbps"] == pytest.approx(5 / 3)
