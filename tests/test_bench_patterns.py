"""The check's inputs reduce to exactly the closed-form expected values, for every type and rank count."""

import pytest
import torch

from fabricscope import patterns
from fabricscope.bench.runner import count_wrong
from fabricscope.dtypes import DTYPES, REDOPS


def _reduce_in_dtype(values, redop, n):
    acc = values[0].clone()
    for v in values[1:]:
        if redop in ("sum", "avg"):
            acc = acc + v
        elif redop == "prod":
            acc = acc * v
        elif redop == "min":
            acc = torch.minimum(acc, v)
        else:
            acc = torch.maximum(acc, v)
        assert acc.dtype == v.dtype
    if redop == "avg":
        acc = acc / n if acc.is_floating_point() else torch.div(acc, n, rounding_mode="trunc")
    return acc.to(values[0].dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("redop", REDOPS)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 33, 300])
def test_reduction_of_inputs_equals_closed_form(dtype, redop, n):
    dt = DTYPES[dtype]
    idx = torch.arange(3000, dtype=torch.int64)
    for seed in (0, 33, 99 * 7):
        inputs = [patterns.reduce_input(torch, idx, r, n, redop, dt, seed) for r in range(n)]
        got = _reduce_in_dtype(inputs, redop, n)
        want = patterns.reduce_expected(torch, idx, n, redop, dt, seed)
        assert count_wrong(torch, got, want, tolerant=False) == 0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_inputs_differ_between_ranks_and_seeds(dtype):
    dt = DTYPES[dtype]
    idx = torch.arange(1000, dtype=torch.int64)
    a = patterns.reduce_input(torch, idx, 0, 4, "sum", dt, 0)
    assert not torch.equal(a, patterns.reduce_input(torch, idx, 1, 4, "sum", dt, 0))
    assert not torch.equal(a, patterns.reduce_input(torch, idx, 0, 4, "sum", dt, 33))
    p0 = patterns.plain_value(torch, idx, 0, dt, 5)
    assert not torch.equal(p0, patterns.plain_value(torch, idx, 1, dt, 5))
    assert bool((p0 != patterns.plain_value(torch, idx, 0, dt, 6)).all())


def test_count_wrong_finds_one_bad_element():
    good = torch.arange(100, dtype=torch.float32)
    bad = good.clone()
    bad[17] += 1
    assert count_wrong(torch, bad, good, tolerant=False) == 1
    assert count_wrong(torch, good, good, tolerant=False) == 0
    assert count_wrong(torch, good[:0], good[:0], tolerant=False) == 0


def test_tolerant_compare_allows_two_ulp_for_float_avg_only():
    want = torch.full((4,), 3.0, dtype=torch.float32)
    got = want.clone()
    got[0] = torch.nextafter(got[0], torch.tensor(4.0))
    assert count_wrong(torch, got, want, tolerant=True) == 0
    assert count_wrong(torch, got, want, tolerant=False) == 1
    got[1] = 3.01
    assert count_wrong(torch, got, want, tolerant=True) == 1


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("redop", REDOPS)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_no_rank_already_holds_the_answer(dtype, redop, n):
    # A reduce that did nothing leaves the root's input in place: that must never pass the check,
    # however small the buffer (8 B of float is 2 elements).
    dt = DTYPES[dtype]
    idx = torch.arange(2, dtype=torch.int64)
    want = patterns.reduce_expected(torch, idx, n, redop, dt, 0)
    for rank in range(n):
        own = patterns.reduce_input(torch, idx, rank, n, redop, dt, 0)
        if redop == "avg" and not dt.is_float and not torch.any(want):
            continue  # more ranks than the type can average exactly: all zeros by design
        assert count_wrong(torch, own, want, tolerant=False) > 0, (rank, own, want)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_prod_differs_from_max_and_sum(dtype):
    dt = DTYPES[dtype]
    idx = torch.arange(6, dtype=torch.int64)
    inputs = [patterns.reduce_input(torch, idx, r, 4, "prod", dt, 0) for r in range(4)]
    prod = patterns.reduce_expected(torch, idx, 4, "prod", dt, 0)
    assert count_wrong(torch, _reduce_in_dtype(inputs, "max", 4), prod, tolerant=False) > 0
    assert count_wrong(torch, _reduce_in_dtype(inputs, "sum", 4), prod, tolerant=False) > 0


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("redop", REDOPS)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 33, 300])
def test_patterns_repeat_after_their_period(dtype, redop, n):
    dt = DTYPES[dtype]
    period = patterns.reduce_period(dt, redop, n)
    idx = torch.arange(2 * period + 5, dtype=torch.int64)
    for seed in (0, 33):
        for rank in {0, n // 2, n - 1}:
            values = patterns.reduce_input(torch, idx, rank, n, redop, dt, seed)
            assert torch.equal(values[period:], values[:-period])
        want = patterns.reduce_expected(torch, idx, n, redop, dt, seed)
        assert torch.equal(want[period:], want[:-period])
        plain = patterns.plain_value(torch, idx, n - 1, dt, seed)
        step = patterns.plain_period(dt)
        assert torch.equal(plain[step:], plain[:-step])


@pytest.mark.parametrize("total", [7, 24, 25, 1000, 1003])
def test_a_periodic_fill_and_check_see_every_element(total):
    from fabricscope.bench.runner import plan_wrong
    from fabricscope.ops import Call, fill

    period = 12
    values = lambda idx: (idx * 7 + 3) % period  # noqa: E731
    direct, copied = torch.zeros(total, dtype=torch.int32), torch.zeros(total, dtype=torch.int32)
    fill(torch, direct, values, "cpu")
    fill(torch, copied, values, "cpu", period)
    assert torch.equal(direct, copied)
    for bad in {0, total // 2, total - 1}:  # a whole period's row, and the tail past the last whole period
        output = direct.clone()
        output[bad] += 1
        calls = [Call(lambda: None, lambda seed: None, lambda seed, idx: values(idx), output, p) for p in (0, period)]
        assert [plan_wrong(torch, call, 0, False, "cpu") for call in calls] == [1, 1]
