"""What two ranks do to measure the link between them (over torch.distributed point-to-point).

Both ranks of a pair run the same sequence, for each direction in turn (the
lower rank sends first):

- **bandwidth**: the sender sends ``iters`` messages of ``size`` bytes, back to
  back, and waits for the receiver's 1-byte acknowledgement of the last;
  ``time_us`` is the elapsed time over ``iters`` (the one acknowledgement adds
  one small-message latency to the whole series), ``algbw_gbps`` is
  ``size / time``.
- **latency**: the sender sends 8 bytes and waits for 8 bytes back, ``iters``
  times; ``time_us`` is half the mean round trip.

``warmup`` untimed messages precede each series.  ``stopped`` is asked before
every message: a stop request ends the exchange at once (:class:`~fabricscope.launch.lifecycle.Interrupted`);
the partner, which got the same request or sees this rank leave, stops too.  The sender's clock is the
only one used, so clocks of different nodes never meet.  On GPUs the stream
is synchronized before the clock is read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fabricscope.launch.lifecycle import Interrupted, PeerCallFailed
from fabricscope.pair_matrix import Test
from fabricscope.pairs.config import LATENCY_BYTES

__all__ = ["Buffers", "measure_pair"]


@dataclass(slots=True)
class Buffers:
    """One rank's tensors, allocated once: it only sends or receives at a time."""

    big: Any
    small: Any
    ack: Any

    @classmethod
    def allocate(cls, torch: ModuleType, size_bytes: int, device: Any) -> Buffers:
        return cls(
            big=torch.ones(size_bytes, dtype=torch.uint8, device=device),
            small=torch.ones(LATENCY_BYTES, dtype=torch.uint8, device=device),
            ack=torch.zeros(1, dtype=torch.uint8, device=device),
        )


def measure_pair(
    dist: ModuleType,
    buffers: Buffers,
    *,
    me: int,
    peer: int,
    iters: int,
    warmup: int,
    sync: Callable[[], None],
    stopped: Callable[[], bool] = lambda: False,
) -> list[tuple[int, int, Test, int, float]]:
    """Run both directions of one link; return what this rank timed as the sender.

    Each item is ``(src, dst, test, size_bytes, seconds)``; ``seconds`` is one
    message's time (bandwidth) or half a round trip (latency).
    """
    low, high = min(me, peer), max(me, peer)

    def check() -> None:
        if stopped():
            raise Interrupted

    series = _Series(dist=dist, peer=peer, iters=iters, warmup=warmup, sync=sync, check=check)
    tests: tuple[tuple[Test, Callable[[_Series, Buffers, bool], float], int], ...] = (
        ("bandwidth", _bandwidth, int(buffers.big.numel())),
        ("latency", _latency, LATENCY_BYTES),
    )
    timed: list[tuple[int, int, Test, int, float]] = []
    for src, dst in ((low, high), (high, low)):
        sending = me == src
        for test, run, size in tests:
            try:
                seconds = run(series, buffers, sending)
            except RuntimeError as exc:
                raise PeerCallFailed(f"the {src}->{dst} {test} test", exc) from None
            if sending:
                timed.append((src, dst, test, size, seconds))
    return timed


@dataclass(frozen=True, slots=True)
class _Series:
    """What every series of one link needs: the partner, how many messages, and the hooks."""

    dist: ModuleType
    peer: int
    iters: int
    warmup: int
    sync: Callable[[], None]
    check: Callable[[], None]


def _bandwidth(series: _Series, buffers: Buffers, sending: bool) -> float:
    dist, peer, check = series.dist, series.peer, series.check
    big, ack = buffers.big, buffers.ack
    if not sending:
        for _ in range(series.warmup):
            check()
            dist.recv(big, peer)
        dist.send(ack, peer)
        for _ in range(series.iters):
            check()
            dist.recv(big, peer)
        series.sync()
        dist.send(ack, peer)
        return 0.0

    def acknowledged() -> None:
        dist.recv(ack, peer)
        series.sync()

    return _timed_series(series, lambda: dist.send(big, peer), acknowledged)


def _latency(series: _Series, buffers: Buffers, sending: bool) -> float:
    dist, peer, check = series.dist, series.peer, series.check
    small = buffers.small
    if not sending:
        for _ in range(series.warmup + series.iters):
            check()
            dist.recv(small, peer)
            dist.send(small, peer)
        series.sync()
        return 0.0

    def round_trip() -> None:
        dist.send(small, peer)
        dist.recv(small, peer)

    return _timed_series(series, round_trip, series.sync) / 2


def _timed_series(series: _Series, message: Callable[[], None], settle: Callable[[], None]) -> float:
    """The sender's side of both tests: ``warmup`` untimed messages and ``settle``, then ``iters`` timed
    messages and ``settle`` (the receiver has them all): seconds per message."""
    for _ in range(series.warmup):
        series.check()
        message()
    settle()
    start = time.perf_counter()
    for _ in range(series.iters):
        series.check()
        message()
    settle()
    return (time.perf_counter() - start) / series.iters
