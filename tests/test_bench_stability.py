"""``bench --duration``: every iteration kept in a bounded series, its statistics, and the real run."""

import random

import pytest

from fabricscope.bench.stability import SPIKE_FACTOR, Series
from fabricscope.results import coefficient_of_variation, load, percentile
from helpers import run_cli


def test_series_keeps_everything_below_the_cap():
    series = Series(max_points=1000)
    rows = [[10.0, 11.0, 9.0, 10.0], [10.0, 40.0, 10.0, 10.0]]
    series.add(rows[0], end_s=1.0)
    series.add(rows[1], end_s=2.0)
    stats = series.statistics()
    flat = [*rows[0], *rows[1]]
    assert stats["iterations"] == stats["kept"] == 8 and stats["stride"] == 1
    assert stats["max_us"] == 40.0
    assert stats["p50_us"] == percentile(sorted(flat), 50)
    assert stats["cv"] == pytest.approx(coefficient_of_variation(flat))
    assert stats["spikes"] == 1 and stats["spikes_at"][0]["time_us"] == 40.0
    assert stats["spike_threshold_us"] == SPIKE_FACTOR * stats["p50_us"]
    # Each sample ends where the next starts; the row ends at its end time.
    assert series.t_s[3] == pytest.approx(1.0) and series.t_s[-1] == pytest.approx(2.0)
    assert series.t_s[0] == pytest.approx(1.0 - 30e-6)


def test_series_memory_is_bounded_and_spread_over_the_run():
    rng = random.Random(7)
    series = Series(max_points=64)
    every = []
    for row in range(1000):
        samples = [rng.uniform(5, 15) for _ in range(20)]
        every.extend(samples)
        series.add(samples, end_s=float(row + 1))
    assert series.iterations == 20_000
    assert len(series.time_us) < 64 and len(series.t_s) == len(series.time_us)
    assert series.stride & (series.stride - 1) == 0 and series.stride >= 20_000 // 64
    # Kept points cover the whole run, in order.
    times = list(series.t_s)
    assert times == sorted(times) and times[0] < 20 and times[-1] > 950
    # Count, mean, CV and max cover every iteration, not only the kept points.
    assert series.max_us == max(every)
    assert series.mean_us == pytest.approx(sum(every) / len(every))
    assert series.cv == pytest.approx(coefficient_of_variation(every))


def test_empty_series_has_no_statistics():
    assert Series().statistics()["iterations"] == 0


@pytest.mark.multiprocess
def test_duration_run_keeps_every_iteration(tmp_path):
    out = tmp_path / "d.json"
    done = run_cli(["bench", "-b", "1K", "-e", "2K", "-n", "5", "--duration", "2", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    result = load(out)
    assert result.status == "complete"
    # One record per size and placement, however many times the sweep repeated.
    assert [(r["size_bytes"], r["placement"]) for r in result.records] == [
        (1024, "out"),
        (1024, "in"),
        (2048, "out"),
        (2048, "in"),
    ]
    series = result.summary["stability"]
    assert len(series) == 4
    for record, one in zip(result.records, series, strict=True):
        assert one["iterations"] == one["kept"] == record["iterations"] == len(one["time_us"])
        assert one["iterations"] % 5 == 0 and one["iterations"] > 5  # repeated rows of -n 5
        assert one["t_s"] == sorted(one["t_s"])
        assert record["time_us"] == pytest.approx(one["mean_us"])
        assert record["p99_us"] == one["p99_us"] and record["max_us"] == max(one["time_us"])
        assert one["spikes"] == sum(v > SPIKE_FACTOR * one["p50_us"] for v in one["time_us"])
    # The sweep repeated until the duration passed (the row that passed it is the last one).
    assert max(one["t_s"][-1] for one in series) >= 2.0
    assert done.stdout.count("# stability all_reduce") == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--duration", "0"], "--duration must be a duration from 1 s"),
        (["--duration", "8d"], "--duration must be a duration"),
        (["--duration", "soon"], "--duration"),
        (["-N", "3", "--duration", "5"], "-N/--run_cycles and --duration both say how long"),
    ],
)
def test_duration_usage_errors(args, message):
    done = run_cli(["bench", *args], timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
