"""Which ranks test their link in which round: the circle method of round-robin tournaments.

Testing every pair one after another takes n(n-1)/2 tests; pairs that share no
rank can run at the same time.  The circle method (Kirkman 1847; the scheduling
of round-robin tournaments, e.g. https://en.wikipedia.org/wiki/Round-robin_tournament#Circle_method)
splits the n(n-1)/2 pairs into n-1 rounds of n/2 disjoint pairs: fix one
player, seat the others on a circle, pair seats facing each other, rotate
by one seat per round.  With an odd n a "bye" joins as player n; whoever
meets it sits the round out, so there are n rounds of (n-1)/2 pairs.
"""

from __future__ import annotations

__all__ = ["Round", "round_robin"]

Round = list[tuple[int, int]]
"""The pairs ``(low, high)`` that run at the same time; no rank appears twice."""


def round_robin(n: int) -> list[Round]:
    """The rounds that test every pair of ``n`` players exactly once.

    ``n - 1`` rounds when ``n`` is even, ``n`` when it is odd (one player rests
    each round); no rounds below two players.  Each pair is ``(low, high)``.
    """
    if n < 2:
        return []
    players = n if n % 2 == 0 else n + 1
    bye = n if players > n else None
    fixed = players - 1
    circle = list(range(players - 1))
    rounds: list[Round] = []
    for shift in range(players - 1):
        seats = [fixed, *circle[shift:], *circle[:shift]]
        pairs = [(seats[i], seats[players - 1 - i]) for i in range(players // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if bye not in (a, b)])
    return rounds
