"""compare: per op and size verdicts from raw samples (scipy) or, without samples, the tolerance."""

import random

import pytest

from fabricscope.results import CollectiveRecord, Result
from fabricscope.store import compare

BIG = 256 << 20
SMALL = 1024


def record(size, times, *, placement="out", samples=True, op="all_reduce"):
    mean = sum(times) / len(times)
    busbw = size / (mean * 1e-6) / 1e9
    return CollectiveRecord(
        op=op,
        size_bytes=size,
        count=size // 4,
        dtype="float",
        redop="sum",
        root=-1,
        placement=placement,
        time_us=mean,
        algbw_gbps=busbw,
        busbw_gbps=busbw,
        wrong=0,
        samples_us=list(times) if samples else None,
    ).to_dict()


def run(*records, kind="bench"):
    return Result(kind=kind, records=list(records))


def noisy(mean, spread, n=20, seed=1):
    rng = random.Random(seed)
    return [rng.gauss(mean, spread) for _ in range(n)]


def verdicts(comparison):
    return {(r.size_bytes, r.placement): r.verdict for r in comparison.rows}


def test_a_clear_slowdown_with_samples_is_a_regression():
    ref = run(record(BIG, noisy(1000, 5, seed=1)), record(SMALL, noisy(20, 0.2, seed=2)))
    cur = run(record(BIG, noisy(1250, 5, seed=3)), record(SMALL, noisy(20, 0.2, seed=4)))
    result = compare.compare(cur, ref, tolerance=0.05)
    assert verdicts(result) == {(BIG, "out"): "regressed", (SMALL, "out"): "within tolerance"}
    big = next(r for r in result.rows if r.size_bytes == BIG)
    assert big.metric == "busbw_gbps" and big.change == pytest.approx(1000 / 1250 - 1, rel=0.02)
    assert big.p_value < 1e-3
    assert result.exit_code == 1 and result.summary["all_reduce"]["verdict"] == "regressed"


def test_a_large_change_of_the_mean_within_noise_is_not_significant():
    ref = run(record(BIG, [1000, 3000, 1000, 3000, 1000, 3000]))
    cur = run(record(BIG, [1000, 3000, 3000, 1000, 3000, 3000]))  # mean 20% slower, same spread
    result = compare.compare(cur, ref, tolerance=0.05)
    assert result.rows[0].verdict == "not significant" and result.rows[0].p_value > 0.05
    assert result.exit_code == 0


def test_small_sizes_compare_time_and_an_improvement_is_not_a_failure():
    ref = run(record(SMALL, noisy(40, 0.5, seed=5)))
    cur = run(record(SMALL, noisy(30, 0.5, seed=6)))
    result = compare.compare(cur, ref)
    assert result.rows[0].metric == "time_us" and result.rows[0].verdict == "improved"
    assert result.exit_code == 0


def test_without_samples_values_meet_the_tolerance():
    ref = run(record(BIG, [1000], samples=False), kind="nccl-tests")
    slower = run(record(BIG, [1080], samples=False), kind="nccl-tests")
    assert compare.compare(slower, ref, tolerance=0.05).rows[0].verdict == "regressed"
    assert compare.compare(slower, ref, tolerance=0.10).rows[0].verdict == "within tolerance"
    assert compare.compare(slower, ref, tolerance=0.10).rows[0].p_value is None


def test_only_shared_rows_are_compared_and_pooled_cycles_count_once():
    ref = run(record(BIG, [1000, 1001]), record(BIG, [999, 1000]), record(BIG * 2, [2000, 2001]))
    cur = run(record(BIG, [1000, 1002]), record(BIG, [1001, 999], placement="in"))
    result = compare.compare(cur, ref)
    assert len(result.rows) == 1 and result.only_current == 1 and result.only_reference == 1


def test_against_a_prediction():
    predicted = run(record(BIG, [800], samples=False), kind="predict")
    measured = run(record(BIG, noisy(1000, 5)))
    result = compare.compare(measured, predicted, current_name="bench", reference_name="prediction")
    assert result.rows[0].verdict == "regressed" and result.rows[0].p_value is None


def test_outputs_json_markdown_text():
    result = compare.compare(run(record(BIG, noisy(1250, 5))), run(record(BIG, noisy(1000, 5))))
    document = result.to_result().to_dict()
    assert document["kind"] == "compare" and document["summary"]["verdict"] == "regressed"
    assert document["records"][0]["verdict"] == "regressed"
    markdown = "\n".join(compare.markdown_lines(result))
    assert "| all_reduce | 256M | float | out | busbw GB/s |" in markdown and "**regressed**" in markdown
    text = compare.text_lines(result)
    assert text[0].startswith("# ") and "regressed" in text[2] and text[-1].startswith("# 1 of 1 rows regressed")


def test_since_parsing():
    from datetime import UTC, datetime, timedelta

    from fabricscope.errors import UsageError
    from fabricscope.store.cli import parse_since

    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("36h", now=now) == now - timedelta(hours=36)
    assert parse_since("7d", now=now) == now - timedelta(days=7)
    assert parse_since("2026-11-30") == datetime(2026, 11, 30, tzinfo=UTC)
    assert parse_since("2026-11-30T12:00+02:00").utcoffset() == timedelta(hours=2)
    for bad in ["last tuesday", "7 days", "", "1" * 400, "1e-50d"]:  # a tiny age is no "before year 1"
        with pytest.raises(UsageError, match="is neither a date"):
            parse_since(bad)
    for far in ["99999999999999999d", "1e400d", "400000000d"]:
        with pytest.raises(UsageError, match="reaches back before year 1"):  # an age, and too long
            parse_since(far)


def test_a_change_of_exactly_the_tolerance_is_within_it():
    """95 / 100 - 1 is -0.050000000000000044 in floating point: still a 5% change, within 5%."""

    def fixed(size, time_us, busbw):
        row = record(size, [time_us], samples=False)
        row.update(time_us=time_us, busbw_gbps=busbw)
        return row

    ref = run(fixed(BIG, 1000.0, 100.0), fixed(SMALL, 100.0, 0.01))
    cur = run(fixed(BIG, 1000.0, 95.0), fixed(SMALL, 105.0, 0.01))
    result = compare.compare(cur, ref, tolerance=0.05)
    assert verdicts(result) == {(BIG, "out"): "within tolerance", (SMALL, "out"): "within tolerance"}
    assert result.exit_code == 0
    beyond = compare.compare(run(fixed(BIG, 1000.0, 94.99)), run(fixed(BIG, 1000.0, 100.0)), tolerance=0.05)
    assert verdicts(beyond) == {(BIG, "out"): "regressed"} and beyond.exit_code == 1


def test_the_summary_line_says_how_many_large_rows_regressed_when_the_median_did_not():
    ref = run(record(BIG, [1000.0], samples=False), record(2 * BIG, [1000.0], samples=False))
    cur = run(record(BIG, [1120.0], samples=False), record(2 * BIG, [980.0], samples=False))  # -10.7% and +2.0%
    result = compare.compare(cur, ref, tolerance=0.05)
    assert result.summary["all_reduce"]["verdict"] == "regressed"
    [line] = [line for line in compare._summary_lines(result) if line.startswith("all_reduce at")]
    assert line.endswith("busbw -4.3% (median), regressed (1 of 2 rows)"), line


def test_the_header_says_what_the_p_column_holds():
    with_samples = compare.compare(run(record(BIG, noisy(1250, 5, seed=3))), run(record(BIG, noisy(1000, 5))))
    assert "p: two-sided Mann-Whitney U on raw samples" in compare.text_lines(with_samples)[0]
    without = compare.compare(run(record(BIG, [1250.0], samples=False)), run(record(BIG, [1000.0], samples=False)))
    assert "p: - (no row has raw samples on both sides" in compare.text_lines(without)[0]


def test_one_improved_large_row_is_counted_beside_the_median_too():
    ref = run(*(record(BIG * k, [1000.0], samples=False) for k in (1, 2, 3)))
    cur = run(record(BIG, [800.0], samples=False), *(record(BIG * k, [1010.0], samples=False) for k in (2, 3)))
    result = compare.compare(cur, ref, tolerance=0.05)
    [line] = [line for line in compare._summary_lines(result) if line.startswith("all_reduce at")]
    assert line.endswith("(median), improved (1 of 3 rows)"), line
    assert "p: - (no row has raw samples on both sides" in "\n".join(compare.markdown_lines(result))
