"""``bench --streams K``: K collectives at once, each on its own process group.

Each stream is a process group of all ranks (its own communicator: its own
gloo connections or NCCL channels), its own buffers and its own thread; on
GPUs each thread also issues on its own CUDA stream.  The op registry's
``build`` functions call ``dist.<collective>(...)``; :class:`GroupDist` hands
them a ``dist`` whose collectives run on one group, so every op runs as a
stream unchanged.

Timing (:func:`time_streams`): the K threads start together (a barrier),
each runs ``-n`` calls and reads the clock after each.  A stream's time is
its own mean per call; the row's (aggregate) time is the wall time from the
first stream's start to the last stream's end over ``-n``, and its
per-iteration samples are the steps of the slowest stream's clock
(``max_k stamp_k[i] - max_k stamp_k[i-1]``).  The aggregate algbw and busbw
count the bytes of all K streams (K x S / t).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["GROUP_CALLS", "MAX_STREAMS", "GroupDist", "StreamTimes", "time_streams"]

MAX_STREAMS = 64
"""``--streams`` bound: each stream holds its own buffers and communicator."""

GROUP_CALLS = frozenset(
    {
        "all_reduce",
        "reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "all_to_all_single",
        "all_to_all",
        "gather",
        "scatter",
        "send",
        "recv",
        "barrier",
        "P2POp",
    }
)
"""torch.distributed calls that take ``group=``: the proxy binds it (``isend``/``irecv``
stay the real functions, which ``P2POp`` needs to recognise)."""


class GroupDist:
    """``torch.distributed`` with every collective bound to one process group."""

    def __init__(self, dist: Any, group: Any) -> None:
        self._dist = dist
        self.group = group

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._dist, name)
        if name in GROUP_CALLS:
            return functools.partial(value, group=self.group)
        return value


class StreamTimes:
    """What :func:`time_streams` measured, in seconds."""

    def __init__(self, mean_s: float, samples: list[float], per_stream_s: list[float]) -> None:
        self.mean_s = mean_s
        """Aggregate: wall time from the first start to the last end, over the iterations."""
        self.samples = samples
        self.per_stream_s = per_stream_s
        """Each stream's own mean time per call."""


def time_streams(
    steps: Sequence[Callable[[], None]],
    iters: int,
    *,
    stopped: Callable[[], bool],
    wrap: Callable[[int], Any] | None = None,
    sync: Callable[[], None] = lambda: None,
) -> StreamTimes:
    """Run ``iters`` calls of every step at once, one thread each; see the module for what is timed.

    ``wrap(k)`` returns a context manager entered by thread ``k`` (a CUDA stream).
    ``stopped()`` is asked before each call; when it says so the threads stop
    and :class:`InterruptedError` is raised.  A step that raises ends every
    thread; the first error is raised again here.
    """
    count = len(steps)
    stamps: list[list[float]] = [[0.0] * (iters + 1) for _ in range(count)]
    errors: list[BaseException] = []
    gate = threading.Barrier(count)
    clock = time.perf_counter

    def run(k: int) -> None:
        step = steps[k]
        mine = stamps[k]
        try:
            gate.wait()
            if wrap is None:
                _loop(step, mine, iters, stopped, clock, sync)
            else:
                with wrap(k):
                    _loop(step, mine, iters, stopped, clock, sync)
        except BaseException as exc:  # handed to the caller, which decides
            errors.append(exc)
            gate.abort()

    threads = [threading.Thread(target=run, args=(k,), name=f"fabricscope-stream-{k}") for k in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    start = min(s[0] for s in stamps)
    end = max(s[iters] for s in stamps)
    slowest = [max(s[i] for s in stamps) for i in range(iters + 1)]
    return StreamTimes(
        mean_s=(end - start) / iters,
        samples=[slowest[i] - slowest[i - 1] for i in range(1, iters + 1)],
        per_stream_s=[(s[iters] - s[0]) / iters for s in stamps],
    )


def _loop(
    step: Callable[[], None],
    stamps: list[float],
    iters: int,
    stopped: Callable[[], bool],
    clock: Callable[[], float],
    sync: Callable[[], None],
) -> None:
    stamps[0] = clock()
    for i in range(1, iters + 1):
        if stopped():
            raise InterruptedError
        step()
        sync()
        stamps[i] = clock()
