"""Outliers by robust score, the slowest link, the endpoints most involved; the printed report."""

import io

import pytest

from fabricscope.pairs.analysis import MAD_FLOOR, analyse, robust_scores
from fabricscope.pairs.report import MAX_MATRIX, print_report


def _record(src, dst, test="bandwidth", gbps=10.0, us=5.0, hosts=None):
    hosts = hosts or {}
    size = 1 << 20 if test == "bandwidth" else 8
    time_us = size / (gbps * 1e9) * 1e6 if test == "bandwidth" else us
    return {
        "test": test,
        "src": src,
        "dst": dst,
        "src_host": hosts.get(src, f"node{src}"),
        "dst_host": hosts.get(dst, f"node{dst}"),
        "size_bytes": size,
        "time_us": time_us,
        "algbw_gbps": size / time_us / 1e3,
    }


def _matrix(n, slow=(), gbps=10.0, noise=0.02):
    records = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            value = gbps * (1 + noise * ((i * 7 + j * 3) % 5 - 2) / 2)
            if {i, j} == set(slow):
                value = gbps / 10
            records.append(_record(i, j, gbps=value))
            records.append(_record(i, j, "latency", us=5.0 + 0.1 * ((i + j) % 3)))
    return records


def test_robust_scores_ignore_the_bad_value():
    scores = robust_scores([10, 10.2, 9.8, 10.1, 9.9, 1.0])
    assert scores[-1] < -20
    assert all(abs(s) < 1.5 for s in scores[:-1])


def test_identical_values_are_not_outliers_of_each_other():
    assert robust_scores([5.0] * 6) == [0.0] * 6
    # MAD is zero here; the floor keeps a 1% difference far below the threshold.
    scores = robust_scores([5.0] * 5 + [5.0 * (1 - MAD_FLOOR)])
    assert scores[-1] == pytest.approx(-0.6745, rel=0.02)


def test_a_factor_counts_the_same_both_ways():
    scores = robust_scores([1.0, 1.1, 0.9, 1.05, 0.95, 4.0, 0.25])
    assert scores[-2] == pytest.approx(-scores[-1], rel=0.01)


def test_a_much_slower_link_stands_out_among_scattered_ones():
    # Healthy links that scatter over a factor of ten, as on a busy machine (captured from a run on 2 cores).
    healthy = [0.355, 0.475, 0.576, 0.636, 0.737, 0.808, 1.09, 1.72, 3.08, 3.91]
    scores = robust_scores([*healthy, 0.0119, 0.012])
    assert all(s < -3.5 for s in scores[-2:]) and all(abs(s) < 3.5 for s in scores[:-2])


def test_an_order_of_magnitude_is_an_outlier_however_wide_the_scatter():
    # Captured from the namespace test on a 2-core machine: 4 ranks, one link held to 30 Mbit/s by tc. The
    # healthy directions scatter twelvefold (CPU time-sharing), so the MAD is wide and the slow link's
    # modified z-score is only about -2.9; at 150x below the median it is an outlier all the same.
    measured = {
        (0, 1): 2.7, (0, 2): 1.85, (0, 3): 2.0, (1, 0): 0.272, (1, 2): 0.00359, (1, 3): 1.56,
        (2, 0): 0.278, (2, 1): 0.00359, (2, 3): 0.222, (3, 0): 2.0, (3, 1): 0.482, (3, 2): 0.577,
    }  # fmt: skip
    records = [_record(src, dst, gbps=gbps) for (src, dst), gbps in measured.items()]
    assert min(robust_scores(list(measured.values()))) > -3.5
    flagged = {(o.src, o.dst) for o in analyse(records).outliers}
    assert flagged == {(1, 2), (2, 1)}


def test_the_slow_link_is_named_both_ways():
    findings = analyse(_matrix(6, slow=(2, 4)))
    flagged = {(o.src, o.dst) for o in findings.outliers if o.test == "bandwidth"}
    assert flagged == {(2, 4), (4, 2)}
    assert {findings.slowest["src"], findings.slowest["dst"]} == {2, 4}
    assert findings.nodes == ["node2", "node4"] and findings.node_count == 2
    assert findings.ranks == [2, 4]
    assert findings.medians["bandwidth"] == pytest.approx(10.0, rel=0.05)


def test_a_slow_node_is_the_one_most_involved():
    records = _matrix(5)
    for record in records:
        if record["test"] == "bandwidth" and 3 in (record["src"], record["dst"]):
            record["algbw_gbps"] /= 8
    findings = analyse(records)
    assert findings.nodes == ["node3"] and findings.node_count == 8
    assert len([o for o in findings.outliers if o.test == "bandwidth"]) == 8


def test_long_latency_is_an_outlier_short_is_not():
    records = _matrix(4)
    latency = [r for r in records if r["test"] == "latency"]
    latency[0]["time_us"] = 500.0
    latency[1]["time_us"] = 0.01
    findings = analyse(records)
    assert [(o.test, o.src, o.dst) for o in findings.outliers] == [("latency", latency[0]["src"], latency[0]["dst"])]


def test_too_few_links_give_no_outliers():
    findings = analyse([_record(0, 1, gbps=10), _record(1, 0, gbps=0.1)])
    assert findings.outliers == [] and findings.slowest["src"] == 1


def test_report_marks_outliers_and_names_the_link():
    records = _matrix(4, slow=(1, 3))
    out = io.StringIO()
    print_report(records, analyse(records), "rank", out)
    text = out.getvalue()
    assert "sender (row) -> receiver (column)" in text
    assert "bandwidth: algbw_gbps (GB/s) of " in text and "latency: time_us (us) of 8 B" in text  # the units
    assert text.count("*") == 2  # both directions of the slow link, bandwidth matrix
    assert "slowest link: rank 1 (node1) -> rank 3 (node3)" in text or "rank 3 (node3) -> rank 1 (node1)" in text
    assert "node most often involved: node1 and node3 (2 of 2 outliers each)" in text


def test_large_worlds_list_the_slowest_links_instead():
    records = _matrix(MAX_MATRIX + 2, slow=(0, 5))
    out = io.StringIO()
    print_report(records, analyse(records), "rank", out)
    text = out.getvalue()
    assert "the 10 slowest of" in text
    first_row = next(line for line in text.splitlines() if "rank 0 (node0)" in line or "rank 5 (node5)" in line)
    assert "*" in first_row
