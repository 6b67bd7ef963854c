"""The starvation arithmetic: need = samples/s x bytes per sample; GPUs wait 1 - measured/need."""

from __future__ import annotations

import pytest

from fabricscope.dataload.verdict import Need, judge
from fabricscope.errors import UsageError


def test_half_the_need_starves_and_the_gpus_wait_half_the_time():
    need = Need(samples_per_s=1000, sample_size=1 << 20)
    assert need.bytes_per_s == 1000 * 1048576
    verdict = judge(524_288_000.0, need)
    assert verdict.needed_bytes_per_s == 1_048_576_000
    assert verdict.ratio == 0.5
    assert verdict.starves
    assert verdict.samples_per_s == 500
    assert verdict.gpu_wait_fraction == 0.5
    assert verdict.headroom_fraction == 0


def test_twice_the_need_keeps_up_with_100_percent_headroom():
    verdict = judge(2_000_000.0, Need(samples_per_s=10, sample_size=100_000))
    assert not verdict.starves
    assert verdict.ratio == 2.0 and verdict.headroom_fraction == 1.0
    assert verdict.gpu_wait_fraction == 0 and verdict.samples_per_s == 20


def test_exactly_the_need_keeps_up():
    verdict = judge(4096.0, Need(samples_per_s=1, sample_size=4096))
    assert not verdict.starves and verdict.ratio == 1.0 and verdict.headroom_fraction == 0


def test_a_quarter_of_the_need():
    verdict = judge(250.0, Need(samples_per_s=100, sample_size=10))
    assert verdict.gpu_wait_fraction == 0.75 and verdict.samples_per_s == 25
    assert verdict.to_dict()["starves"] is True


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"samples_per_s": 0, "sample_size": 1}, "samples per second must be 0.001 to 1e"),
        ({"samples_per_s": float("inf"), "sample_size": 1}, "samples per second must be 0.001 to 1e"),
        ({"samples_per_s": 1, "sample_size": 0}, "sample size must be 1 B to 1 TiB, got 0 B"),
    ],
)
def test_impossible_needs_are_refused(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment):
        Need(**kwargs)
