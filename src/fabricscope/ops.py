"""The collectives, one small record each, as nccl-tests defines them.

Each :class:`Collective` holds everything about one op: its byte counts
(the ``size`` and ``count`` columns and the S of ``algbw = S/t``), its bus
bandwidth factor, how to fill its inputs, what each rank must receive, and the
torch.distributed call that runs it.  Adding an op is adding one entry.

Formulas (nccl-tests ``doc/PERFORMANCE.md`` and ``src/*.cu``; n ranks):

=============== ============================== ==========
op              S for algbw                    busbw factor
=============== ============================== ==========
all_reduce      count * eltsize                2(n-1)/n
all_gather      count * eltsize * n            (n-1)/n
reduce_scatter  count * eltsize * n            (n-1)/n
alltoall        count * eltsize * n            (n-1)/n
gather          count * eltsize * n            (n-1)/n
scatter         count * eltsize * n            (n-1)/n
broadcast       count * eltsize                1
reduce          count * eltsize                1
sendrecv        count * eltsize                1
ps              count * eltsize                1
=============== ============================== ==========

``ps`` (the parameter-server pattern, fabricscope's own: nccl-tests has none)
is defined as sendrecv-like traffic: every rank pushes its gradient of S bytes
(sharded over the servers) and pulls S bytes of result back over its own
link, so busbw = algbw = S/t, the rate each worker sees; a server's link
carries n/servers times that, the incast that makes ps fall behind an
all_reduce of the same bytes (busbw 2(n-1)/n x algbw) as ranks are added.

``count`` is the per-rank element count of the ``count`` column; the ``size``
column is max(send bytes, receive bytes).  all_gather, reduce_scatter and
alltoall round the per-rank count down to a multiple of 16 bytes, as
nccl-tests does.

torch.distributed has no out-of-place form of all_reduce, reduce and
broadcast: for these the out-of-place columns run the same call on a separate
receive buffer that is loaded with a copy of the send buffer before the timed
loop (the copy is not timed), so the send buffer stays intact.  alltoall and
sendrecv run in place as nccl-tests runs them (one buffer as both input and
output: the time is real, the result is not defined), and, as nccl-tests does,
their in-place ``#wrong`` prints N/A: nothing is checked.

Only the ``run`` functions touch torch, and they receive it as an argument:
importing this module costs nothing, and the model reuses the byte counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fabricscope import patterns
from fabricscope.dtypes import DType
from fabricscope.errors import UsageError, closest

__all__ = [
    "COLLECTIVES",
    "Call",
    "Collective",
    "ElementCounts",
    "get",
    "parse_ops",
]


@dataclass(frozen=True, slots=True)
class ElementCounts:
    """Element counts of one collective call on one rank (nccl-tests ``getCollByteCount``)."""

    count: int
    """Per-rank element count passed to the collective (the ``count`` column)."""
    send_count: int
    recv_count: int
    send_inplace_offset: int
    """In place, the input starts at ``rank * send_inplace_offset`` in the shared buffer."""
    recv_inplace_offset: int
    """In place, the output starts at ``rank * recv_inplace_offset`` in the shared buffer."""

    @property
    def buffer_count(self) -> int:
        return max(self.send_count, self.recv_count)


@dataclass(slots=True)
class Call:
    """What one rank needs to run and check one collective call."""

    step: Callable[[], None]
    """Runs the collective once (the timed call)."""
    load: Callable[[int], None]
    """Fills the input (and the output for copy-in ops) from the pattern with a seed."""
    expected: Callable[[int, Any], Any] | None
    """(seed, positions) -> the exact values the output must hold at those positions
    after one ``step``; None when this rank's output is not checked (a reduce's other ranks)."""
    output: Any
    """The tensor compared with ``expected``."""
    period: int = 0
    """A period of ``expected`` along the positions (0: none), so that a large output is checked against
    one period's values."""


@dataclass(frozen=True, slots=True)
class Collective:
    name: str
    """Name on the command line and in results (``all_reduce``)."""
    title: str
    """nccl-tests' name of the op (``AllReduce``)."""
    reduces: bool
    rooted: bool
    in_place: bool
    """Whether torch.distributed can run it in place."""
    min_ranks: int
    layout: Callable[[int, int, int], ElementCounts]
    """(count, eltsize, nranks) -> ElementCounts, where count = size // eltsize."""
    algbw_elements: Callable[[ElementCounts, int], int]
    """(layout, nranks) -> elements of S in ``algbw = S * eltsize / t``."""
    busbw_factor: Callable[[int], float]
    build: Callable[..., Call]
    """(torch, dist, layout, send, recv, context, in_place) -> Call.

    In place, ``send`` and ``recv`` are views of one buffer at the layout's
    in-place offsets (the same tensor object when both offsets are 0)."""
    modelled: bool = True
    """Whether the model (``predict``) has a cost model for it; ``ps`` has none."""
    checks_in_place: bool = True
    """Whether its in-place result is defined and checked (nccl-tests: not for alltoall and sendrecv,
    whose in-place ``#wrong`` column prints N/A)."""
    power_of_two: bool = False
    """Whether it runs only on a power-of-two number of ranks (hypercube: each step pairs rank r with
    r XOR 2^k)."""

    @property
    def program(self) -> str:
        """The nccl-tests binary this op mirrors (``all_reduce_perf``)."""
        return f"{self.name}_perf"

    def bandwidths(self, layout: ElementCounts, eltsize: int, nranks: int, seconds: float) -> tuple[float, float]:
        """(algbw, busbw) in GB/s (1e9 bytes/s) for one call that took ``seconds``."""
        if seconds <= 0:
            return 0.0, 0.0
        algbw = self.algbw_elements(layout, nranks) * eltsize / 1.0e9 / seconds
        return algbw, algbw * self.busbw_factor(nranks)

    def size_bytes(self, layout: ElementCounts, eltsize: int) -> int:
        """The ``size`` column: max(send bytes, receive bytes)."""
        return layout.buffer_count * eltsize

    def algbw_bytes(self, size: int, eltsize: int, nranks: int) -> int:
        """S of ``algbw = S/t`` for a row of ``size`` bytes (a requested size or the ``size`` column).

        The one conversion from a row's size to the bytes its bandwidth counts: ``predict`` prices
        these bytes and ``calibrate`` fits them.  A row's ``count`` column is per rank (all_gather,
        reduce_scatter, alltoall, gather, scatter), so it is never the way back to S; the ``size``
        column is, in every nccl-tests version and in fabricscope's records.
        """
        return self.algbw_elements(self.layout(size // eltsize, eltsize, nranks), nranks) * eltsize


# --- byte counts -------------------------------------------------------------


def _aligned_base(count: int, eltsize: int, nranks: int) -> int:
    align = max(1, 16 // eltsize)
    return (count // nranks) // align * align


def _same(count: int, eltsize: int, nranks: int) -> ElementCounts:
    return ElementCounts(count=count, send_count=count, recv_count=count, send_inplace_offset=0, recv_inplace_offset=0)


def _gather_like(base: int, nranks: int) -> ElementCounts:
    return ElementCounts(
        count=base, send_count=base, recv_count=base * nranks, send_inplace_offset=base, recv_inplace_offset=0
    )


def _scatter_like(base: int, nranks: int) -> ElementCounts:
    return ElementCounts(
        count=base, send_count=base * nranks, recv_count=base, send_inplace_offset=0, recv_inplace_offset=base
    )


def _all_gather_layout(count: int, eltsize: int, nranks: int) -> ElementCounts:
    return _gather_like(_aligned_base(count, eltsize, nranks), nranks)


def _reduce_scatter_layout(count: int, eltsize: int, nranks: int) -> ElementCounts:
    return _scatter_like(_aligned_base(count, eltsize, nranks), nranks)


def _alltoall_layout(count: int, eltsize: int, nranks: int) -> ElementCounts:
    base = _aligned_base(count, eltsize, nranks)
    return ElementCounts(
        count=base,
        send_count=base * nranks,
        recv_count=base * nranks,
        send_inplace_offset=0,
        recv_inplace_offset=0,
    )


def _gather_layout(count: int, eltsize: int, nranks: int) -> ElementCounts:
    return _gather_like(count // nranks, nranks)


def _scatter_layout(count: int, eltsize: int, nranks: int) -> ElementCounts:
    return _scatter_like(count // nranks, nranks)


def _per_rank(layout: ElementCounts, nranks: int) -> int:
    return layout.count


def _times_ranks(layout: ElementCounts, nranks: int) -> int:
    return layout.count * nranks


def _times_others(layout: ElementCounts, nranks: int) -> int:
    return layout.count * (nranks - 1)


def _ring_factor(nranks: int) -> float:
    return (nranks - 1) / nranks


def _all_reduce_factor(nranks: int) -> float:
    return 2 * (nranks - 1) / nranks


def _one(nranks: int) -> float:
    return 1.0


# --- running and checking --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Context:
    """What a plan needs to know about the run and this rank."""

    rank: int
    nranks: int
    root: int
    dtype: DType
    redop: str
    reduce_op: Any
    """The torch ReduceOp to pass (SUM when ``avg_divisor`` emulates avg)."""
    avg_divisor: int
    """When > 0, avg is emulated as sum then integer division by this (gloo ints)."""
    device: Any
    servers: int = 1
    """``ps``: ranks 0 to servers-1 each own one shard of the gradient."""


CHUNK = 1 << 22
"""Elements generated at a time: pattern temporaries stay small whatever the size."""


def fill(torch: ModuleType, target: Any, values: Callable[[Any], Any], device: Any, period: int = 0) -> None:
    """``target[i] = values(i)`` for every position, a chunk of int64 positions at a time; with a ``period``
    of ``values`` (0: none), one period is computed and copied along, each copy doubling what is filled."""
    total = target.numel()
    if period > 0 and 2 * period <= total:
        target[:period].copy_(values(torch.arange(0, period, dtype=torch.int64, device=device)))
        done = period
        while done < total:
            step = min(done, total - done)
            target[done : done + step].copy_(target[:step])
            done += step
        return
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        target[start:stop].copy_(values(torch.arange(start, stop, dtype=torch.int64, device=device)))


def _finish_avg(out: Any, ctx: Context) -> None:
    out.div_(ctx.avg_divisor, rounding_mode="trunc")


def _copy_in_loader(
    torch: ModuleType, send: Any, recv: Any, ctx: Context, in_place: bool, values: Any, period: int
) -> Any:
    """Loader for ops torch runs in place only: out-of-place, the output starts as a copy."""

    def load(seed: int) -> None:
        fill(torch, send, lambda idx: values(idx, seed), ctx.device, period)
        if not in_place:
            recv.copy_(send)

    return load


def _reduction(torch: ModuleType, ctx: Context) -> tuple[Any, Any]:
    """(inputs, expected) pattern functions of (positions, seed) for this rank's reduction."""

    def inputs(idx: Any, seed: int) -> Any:
        return patterns.reduce_input(torch, idx, ctx.rank, ctx.nranks, ctx.redop, ctx.dtype, seed)

    def expected(idx: Any, seed: int) -> Any:
        return patterns.reduce_expected(torch, idx, ctx.nranks, ctx.redop, ctx.dtype, seed)

    return inputs, expected


def _reduce_period(ctx: Context) -> int:
    return patterns.reduce_period(ctx.dtype, ctx.redop, ctx.nranks)


def _plain(torch: ModuleType, ctx: Context, rank: Any, shift: int = 0) -> Any:
    return lambda idx, seed: patterns.plain_value(torch, idx, rank, ctx.dtype, seed + shift)


def _build_all_reduce(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    inputs, expected = _reduction(torch, ctx)

    def step() -> None:
        dist.all_reduce(recv, op=ctx.reduce_op)
        if ctx.avg_divisor:
            _finish_avg(recv, ctx)

    period = _reduce_period(ctx)
    return Call(
        step=step,
        load=_copy_in_loader(torch, send, recv, ctx, in_place, inputs, period),
        expected=lambda seed, idx: expected(idx, seed),
        output=recv,
        period=period,
    )


def _build_reduce(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    inputs, expected = _reduction(torch, ctx)
    is_root = ctx.rank == ctx.root

    def step() -> None:
        dist.reduce(recv, ctx.root, op=ctx.reduce_op)
        if ctx.avg_divisor and is_root:
            _finish_avg(recv, ctx)

    period = _reduce_period(ctx)
    return Call(
        step=step,
        load=_copy_in_loader(torch, send, recv, ctx, in_place, inputs, period),
        expected=(lambda seed, idx: expected(idx, seed)) if is_root else None,
        output=recv,
        period=period,
    )


def _build_broadcast(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    # Non-root ranks start from values that differ from the root's in every
    # element (seed + 1), so a buffer the broadcast did not overwrite is caught.
    start = _plain(torch, ctx, ctx.root, 0 if ctx.rank == ctx.root else 1)
    root_values = _plain(torch, ctx, ctx.root)

    def step() -> None:
        dist.broadcast(recv, ctx.root)

    period = patterns.plain_period(ctx.dtype)
    return Call(
        step=step,
        load=_copy_in_loader(torch, send, recv, ctx, in_place, start, period),
        expected=lambda seed, idx: root_values(idx, seed),
        output=recv,
        period=period,
    )


def _collective_fn(dist: Any, *names: str) -> Any:
    for name in names:
        fn = getattr(dist, name, None)
        if fn is not None:
            return fn
    raise AssertionError(f"torch.distributed has none of {names}")


def _into_recv(
    torch: ModuleType,
    send: Any,
    recv: Any,
    ctx: Context,
    step: Callable[[], None],
    values: Any,
    expected: Callable[[int, Any], Any] | None,
    *,
    zero: bool = True,
    input_period: int | None = None,
    expected_period: int = 0,
) -> Call:
    """The call of an op with a separate result: ``recv`` starts at zero (unless ``zero`` is False: the
    in-place output already holds the input), ``send`` is filled with ``values``, and ``recv`` is checked.
    The periods of ``values`` (None: a plain pattern's) and of ``expected`` (0: none) along the positions."""
    period = patterns.plain_period(ctx.dtype) if input_period is None else input_period

    def load(seed: int) -> None:
        if zero:
            recv.zero_()
        fill(torch, send, lambda idx: values(idx, seed), ctx.device, period)

    return Call(step=step, load=load, expected=expected, output=recv, period=expected_period)


def _gathered(torch: ModuleType, ctx: Context, base: int) -> Any:
    """Expected values of a gathered output: block j holds rank j's input."""
    width = max(base, 1)
    return lambda seed, idx: patterns.plain_value(torch, idx % width, idx // width, ctx.dtype, seed)


def _build_all_gather(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    gather_into = _collective_fn(dist, "all_gather_single", "all_gather_into_tensor")

    def step() -> None:
        gather_into(recv, send)

    return _into_recv(torch, send, recv, ctx, step, _plain(torch, ctx, ctx.rank), _gathered(torch, ctx, layout.count))


def _build_reduce_scatter(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    inputs, expected = _reduction(torch, ctx)
    scatter_into = _collective_fn(dist, "reduce_scatter_single", "reduce_scatter_tensor")
    offset = ctx.rank * layout.count

    def step() -> None:
        scatter_into(recv, send, op=ctx.reduce_op)
        if ctx.avg_divisor:
            _finish_avg(recv, ctx)

    period = _reduce_period(ctx)
    mine = lambda seed, idx: expected(offset + idx, seed)  # noqa: E731
    return _into_recv(
        torch, send, recv, ctx, step, inputs, mine, zero=not in_place, input_period=period, expected_period=period
    )


def _exchange(dist: Any, *, receives: list[tuple[Any, int]], sends: list[tuple[Any, int]]) -> Callable[[], None]:
    """One grouped round of point-to-point transfers, ``(tensor, peer)`` each, every receive posted before
    every send; the call returns once all have completed.

    The order matters on gloo: a pair of ranks shares one TCP connection, a send waits until the peer's
    notice that its receive is posted has arrived, and that notice travels on the same connection behind
    whatever the peer has already written there.  A rank that posts its send first puts its notice
    behind its own payload, so the two directions of a pair take turns (measured: a 2-rank alltoall at
    half a 50 Mbit/s link from 512 KiB up).  NCCL's grouped calls make the order irrelevant; MPI's advice
    is the same (post receives first); nccl-tests groups one send and one receive per peer."""
    ops = [dist.P2POp(dist.irecv, tensor, peer) for tensor, peer in receives]
    ops += [dist.P2POp(dist.isend, tensor, peer) for tensor, peer in sends]

    def run() -> None:
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    return run


def _build_alltoall(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    base = max(layout.count, 1)
    if send.device.type == "cpu" and layout.count > 0:
        # gloo: nccl-tests' form (one send and one receive per peer, grouped), receives first (see
        # _exchange); gloo's own all_to_all_single posts each send before its receive.
        own = (recv.narrow(0, ctx.rank * base, base), send.narrow(0, ctx.rank * base, base))
        peers = [(ctx.rank + i) % ctx.nranks for i in range(1, ctx.nranks)]
        exchange = _exchange(
            dist,
            receives=[(recv.narrow(0, peer * base, base), peer) for peer in peers],
            sends=[(send.narrow(0, peer * base, base), peer) for peer in peers],
        )

        def step() -> None:
            own[0].copy_(own[1])
            exchange()

    else:

        def step() -> None:
            dist.all_to_all_single(recv, send)

    def expected(seed: int, idx: Any) -> Any:
        # recv[j*base + i] on rank r came from rank j's send[r*base + i].
        return patterns.plain_value(torch, ctx.rank * base + idx % base, idx // base, ctx.dtype, seed)

    return _into_recv(torch, send, recv, ctx, step, _plain(torch, ctx, ctx.rank), expected)


def _build_gather(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    base = layout.count
    is_root = ctx.rank == ctx.root
    chunks = list(recv.split(base)) if is_root and base > 0 else [recv[:0]] * ctx.nranks

    def step() -> None:
        dist.gather(send, chunks if is_root else None, dst=ctx.root)

    expected = _gathered(torch, ctx, base) if is_root else None
    return _into_recv(torch, send, recv, ctx, step, _plain(torch, ctx, ctx.rank), expected)


def _build_scatter(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    base = layout.count
    is_root = ctx.rank == ctx.root
    chunks = list(send.split(base)) if is_root and base > 0 else [send[:0]] * ctx.nranks
    # As for broadcast: non-root send buffers (the in-place output region) hold
    # values that differ from the root's in every element.
    start = _plain(torch, ctx, ctx.root, 0 if is_root else 1)
    root_values = _plain(torch, ctx, ctx.root)
    offset = ctx.rank * base

    def step() -> None:
        dist.scatter(recv, chunks if is_root else None, src=ctx.root)

    mine = lambda seed, idx: root_values(offset + idx, seed)  # noqa: E731
    plain = patterns.plain_period(ctx.dtype)
    return _into_recv(torch, send, recv, ctx, step, start, mine, zero=not in_place, expected_period=plain)


def _build_sendrecv(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    peer_next = (ctx.rank + 1) % ctx.nranks
    peer_prev = (ctx.rank - 1) % ctx.nranks
    step = _exchange(dist, receives=[(recv, peer_prev)], sends=[(send, peer_next)])
    previous = _plain(torch, ctx, peer_prev)

    plain = patterns.plain_period(ctx.dtype)
    own = _plain(torch, ctx, ctx.rank)
    return _into_recv(torch, send, recv, ctx, step, own, lambda seed, idx: previous(idx, seed), expected_period=plain)


def _build_hypercube(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    """nccl-tests' hypercube: an all-gather by recursive doubling, each step a send and a receive of
    the ``mask`` blocks a rank holds with rank XOR mask (src/hypercube.cu)."""
    base = layout.count
    own = recv.narrow(0, ctx.rank * base, base)
    steps = []
    mask = 1
    while mask < ctx.nranks and base > 0:
        start = ctx.rank & ~(mask - 1)
        peer = ctx.rank ^ mask
        steps.append(
            _exchange(
                dist,
                receives=[(recv.narrow(0, (start ^ mask) * base, mask * base), peer)],
                sends=[(recv.narrow(0, start * base, mask * base), peer)],
            )
        )
        mask <<= 1

    def step() -> None:
        if not in_place:
            own.copy_(send)
        for pair in steps:
            pair()

    own_values = _plain(torch, ctx, ctx.rank)
    return _into_recv(torch, send, recv, ctx, step, own_values, _gathered(torch, ctx, base), zero=not in_place)


def _ps_reducer(torch: ModuleType, ctx: Context) -> Callable[[Any, Any], None]:
    """``acc <- acc (op) other`` in the buffer's own type (wrapping as NCCL's integer sums do)."""
    redop = ctx.redop
    if redop in ("sum", "avg"):
        return lambda acc, other: acc.add_(other)
    if redop == "prod":
        return lambda acc, other: acc.mul_(other)
    pick = torch.minimum if redop == "min" else torch.maximum
    return lambda acc, other: pick(acc, other, out=acc)


def _build_ps(
    torch: ModuleType, dist: Any, layout: ElementCounts, send: Any, recv: Any, ctx: Context, in_place: bool
) -> Call:
    """The parameter-server pattern, colocated: every rank is a worker; ranks below ``servers`` also serve.

    The gradient (``count`` elements, in ``recv`` after loading, as all_reduce)
    is cut into ``servers`` shards.  Push: every rank sends shard k to server k,
    which receives one shard from every rank (the incast), and reduces them in
    rank order.  Pull: server k sends the reduced shard back to every rank.
    Every rank ends with the same result as an all_reduce of the same bytes.
    """
    inputs, expected = _reduction(torch, ctx)
    n, rank = ctx.nranks, ctx.rank
    servers = min(ctx.servers, n)
    count = recv.numel()
    bounds = [(count * k // servers, count * (k + 1) // servers) for k in range(servers)]
    shards = [(k, recv[lo:hi]) for k, (lo, hi) in enumerate(bounds) if hi > lo]
    lo, hi = bounds[rank] if rank < servers else (0, 0)
    mine = recv[lo:hi]  # this rank's shard when it serves one (empty otherwise)
    serving = hi > lo
    staging = torch.empty((n, hi - lo), dtype=recv.dtype, device=recv.device)
    others = [r for r in range(n) if r != rank]
    theirs = [(shard, k) for k, shard in shards if k != rank]
    push = _exchange(dist, receives=[(staging[r], r) for r in others] if serving else [], sends=theirs)
    pull = _exchange(dist, receives=theirs, sends=[(mine, r) for r in others] if serving else [])
    reduce = _ps_reducer(torch, ctx)

    def step() -> None:
        if serving:
            staging[rank].copy_(mine)
        push()
        if serving:
            mine.copy_(staging[0])
            for r in range(1, n):
                reduce(mine, staging[r])
            if ctx.redop == "avg":
                if mine.is_floating_point():
                    mine.div_(n)
                else:
                    mine.div_(n, rounding_mode="trunc")
        pull()

    period = _reduce_period(ctx)
    return Call(
        step=step,
        load=_copy_in_loader(torch, send, recv, ctx, in_place, inputs, period),
        expected=lambda seed, idx: expected(idx, seed),
        output=recv,
        period=period,
    )


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective(
            name="all_reduce",
            title="AllReduce",
            reduces=True,
            rooted=False,
            in_place=True,
            min_ranks=1,
            layout=_same,
            algbw_elements=_per_rank,
            busbw_factor=_all_reduce_factor,
            build=_build_all_reduce,
        ),
        Collective(
            name="all_gather",
            title="AllGather",
            reduces=False,
            rooted=False,
            in_place=True,
            min_ranks=1,
            layout=_all_gather_layout,
            algbw_elements=_times_ranks,
            busbw_factor=_ring_factor,
            build=_build_all_gather,
        ),
        Collective(
            name="reduce_scatter",
            title="ReduceScatter",
            reduces=True,
            rooted=False,
            in_place=True,
            min_ranks=1,
            layout=_reduce_scatter_layout,
            algbw_elements=_times_ranks,
            busbw_factor=_ring_factor,
            build=_build_reduce_scatter,
        ),
        Collective(
            name="broadcast",
            title="Broadcast",
            reduces=False,
            rooted=True,
            in_place=True,
            min_ranks=1,
            layout=_same,
            algbw_elements=_per_rank,
            busbw_factor=_one,
            build=_build_broadcast,
        ),
        Collective(
            name="reduce",
            title="Reduce",
            reduces=True,
            rooted=True,
            in_place=True,
            min_ranks=1,
            layout=_same,
            algbw_elements=_per_rank,
            busbw_factor=_one,
            build=_build_reduce,
        ),
        Collective(
            name="alltoall",
            title="AlltoAll",
            reduces=False,
            rooted=False,
            in_place=True,
            checks_in_place=False,
            min_ranks=1,
            layout=_alltoall_layout,
            algbw_elements=_times_ranks,
            busbw_factor=_ring_factor,
            build=_build_alltoall,
        ),
        Collective(
            name="sendrecv",
            title="SendRecv",
            reduces=False,
            rooted=False,
            in_place=True,
            checks_in_place=False,
            min_ranks=2,
            layout=_same,
            algbw_elements=_per_rank,
            busbw_factor=_one,
            build=_build_sendrecv,
        ),
        Collective(
            name="gather",
            title="Gather",
            reduces=False,
            rooted=True,
            in_place=True,
            min_ranks=1,
            layout=_gather_layout,
            algbw_elements=_times_ranks,
            busbw_factor=_ring_factor,
            build=_build_gather,
        ),
        Collective(
            name="scatter",
            title="Scatter",
            reduces=False,
            rooted=True,
            in_place=True,
            min_ranks=1,
            layout=_scatter_layout,
            algbw_elements=_times_ranks,
            busbw_factor=_ring_factor,
            build=_build_scatter,
        ),
        Collective(
            name="ps",
            title="ParameterServer",
            reduces=True,
            rooted=False,
            in_place=True,
            min_ranks=2,
            layout=_same,
            algbw_elements=_per_rank,
            busbw_factor=_one,
            build=_build_ps,
            modelled=False,
        ),
        Collective(
            name="hypercube",
            title="HyperCube",
            reduces=False,
            rooted=False,
            in_place=True,
            min_ranks=2,
            layout=_all_gather_layout,
            algbw_elements=_times_others,
            busbw_factor=_one,
            build=_build_hypercube,
            modelled=False,
            power_of_two=True,
        ),
    )
}
"""Every collective, in the order ``all`` runs them."""

_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "all2all": "alltoall",
    "send_recv": "sendrecv",
    "bcast": "broadcast",
    "parameter_server": "ps",
}


def get(name: str) -> Collective:
    """The collective called ``name`` (aliases such as ``allreduce`` accepted)."""
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key.endswith("_perf"):
        key = key[: -len("_perf")]
    if key not in COLLECTIVES:
        raise UsageError(f"unknown op {name!r}{closest(key, COLLECTIVES)}: allowed are {', '.join(COLLECTIVES)} or all")
    return COLLECTIVES[key]


def parse_ops(names: list[str]) -> list[Collective]:
    """The ops named on the command line, in order, each once.

    Names may be comma-separated and use aliases (``allreduce``, ``all_reduce_perf``);
    ``all`` adds every op not already named.  An empty list gives an empty list:
    the caller picks its default (``bench`` and ``predict`` run all_reduce).
    """
    chosen: list[Collective] = []
    for name in names:
        for part in name.split(","):
            if not part.strip():
                continue
            if part.strip().lower() == "all":
                chosen.extend(c for c in COLLECTIVES.values() if c not in chosen)
                continue
            coll = get(part)
            if coll not in chosen:
                chosen.append(coll)
    return chosen
