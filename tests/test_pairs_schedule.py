"""The round-robin schedule: every pair once, no rank twice in a round, n-1 rounds (n for odd n)."""

import itertools

import pytest

from fabricscope.pairs.schedule import round_robin


def _check(n, rounds):
    seen = [pair for one in rounds for pair in one]
    assert len(seen) == len(set(seen)) == n * (n - 1) // 2
    assert set(seen) == set(itertools.combinations(range(n), 2))
    for one in rounds:
        ranks = [r for pair in one for r in pair]
        assert len(ranks) == len(set(ranks)), one
        assert all(a < b for a, b in one)


def test_1024_ranks_without_running_them():
    rounds = round_robin(1024)
    assert len(rounds) == 1023
    assert all(len(one) == 512 for one in rounds)
    _check(1024, rounds)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 9, 16, 31])
def test_small_worlds(n):
    rounds = round_robin(n)
    _check(n, rounds)
    if n % 2 == 0:
        assert len(rounds) == n - 1 and all(len(one) == n // 2 for one in rounds)
    else:
        # One rank rests each round (the bye), and each rank rests exactly once.
        assert len(rounds) == n and all(len(one) == (n - 1) // 2 for one in rounds)
        resting = [next(r for r in range(n) if all(r not in p for p in one)) for one in rounds]
        assert sorted(resting) == list(range(n))


@pytest.mark.parametrize("n", [-1, 0, 1])
def test_no_pairs_below_two(n):
    assert round_robin(n) == []
