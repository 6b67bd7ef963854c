"""The sweep: warm up, time each size out-of-place then in-place, check, reduce across ranks.

Timing follows nccl-tests (``common.cu`` ``BenchTime``): one untimed call, a
barrier, then ``-n`` back-to-back calls between two clock readings.  On CPU
the clock is ``time.perf_counter`` read after each (blocking) gloo call; on
GPU CUDA events are recorded between calls and read after one synchronize.
Per-iteration samples come from consecutive readings, so keeping them costs
nothing extra.  The row's time is the mean over iterations; it and the samples
are then combined across ranks as ``-a`` says (rank 0, avg, min or max).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from fabricscope.bench.config import Average, BenchConfig
from fabricscope.bench.streams import GroupDist, StreamTimes, time_streams
from fabricscope.dtypes import DTYPES, DType
from fabricscope.errors import RunError
from fabricscope.launch.heartbeat import Heartbeat, describe_exception
from fabricscope.launch.lifecycle import Interrupted, PeerCallFailed, StopFlag
from fabricscope.ops import CHUNK, Call, Collective, Context, ElementCounts
from fabricscope.results import CollectiveRecord

__all__ = ["Sweep"]


class Sweep:
    """Runs the configured ops over the configured sizes on one rank."""

    def __init__(
        self,
        *,
        torch: ModuleType,
        dist: Any,
        config: BenchConfig,
        rank: int,
        world_size: int,
        backend: str,
        device: Any,
        heartbeat: Heartbeat,
        stop: StopFlag,
    ) -> None:
        self.torch = torch
        self.dist = dist
        self.config = config
        self.rank = rank
        self.nranks = world_size
        self.backend = backend
        self.device = device
        self.heartbeat = heartbeat
        self.stop = stop
        self.cuda = device.type == "cuda"
        self._seed = 0
        self.stream_dists: list[Any] = []
        """``--streams K`` above 1: one ``dist`` per stream, bound to its own process group."""
        self._cuda_streams: list[Any] = []
        if config.streams > 1:
            groups = [dist.new_group(backend=backend) for _ in range(config.streams)]
            self.stream_dists = [GroupDist(dist, group) for group in groups]
            if self.cuda:
                self._cuda_streams = [torch.cuda.Stream(device=device) for _ in groups]

    # --- public --------------------------------------------------------------

    def combos(self, op: Collective) -> list[tuple[DType, str]]:
        """(dtype, redop) pairs this op runs: reductions loop over ``-o``, others use none."""
        redops = self.config.redops if op.reduces else ["none"]
        return [(DTYPES[d], r) for d in self.config.dtypes for r in redops]

    def rows(self, op: Collective) -> Iterator[list[CollectiveRecord]]:
        """Yield the records of each row (out-of-place then in-place) as it completes."""
        for dtype, redop in self.combos(op):
            sizes = list(self.config.sizes())
            layouts = {s: op.layout(s // dtype.size, dtype.size, self.nranks) for s in sizes}
            warm = {s: op.layout(s // dtype.size, dtype.size, self.nranks) for s in self.config.warmup_sizes()}
            send, recv = self._allocate([*layouts.values(), *warm.values()], dtype)
            # Every further stream gets its own buffers, sized for the sweep (not its warmup).
            extra = [self._allocate(list(layouts.values()), dtype) for _ in self.stream_dists[1:]]
            self._stream_buffers = [(send, recv), *extra]
            ctx = self._context(op, dtype, redop)
            self._warmup(op, warm, send, recv, ctx)
            cycles = self.config.run_cycles
            cycle = 0
            duration = self.config.duration_s
            deadline = time.monotonic() + duration if duration is not None else None
            time_up = False
            while not time_up and (cycles == 0 or cycle < cycles):
                cycle += 1
                for size in sizes:
                    yield self._row(op, size, layouts[size], send, recv, ctx)
                    time_up = self._agree_to_go_on(deadline)
                    if time_up:
                        break

    # --- pieces ---------------------------------------------------------------

    def _context(self, op: Collective, dtype: DType, redop: str) -> Context:
        reduce_op = None
        avg_divisor = 0
        if op.reduces:
            table = {
                "sum": self.dist.ReduceOp.SUM,
                "prod": self.dist.ReduceOp.PRODUCT,
                "min": self.dist.ReduceOp.MIN,
                "max": self.dist.ReduceOp.MAX,
                "avg": self.dist.ReduceOp.AVG,
            }
            reduce_op = table[redop]
            if redop == "avg" and self.backend == "gloo" and not dtype.is_float:
                # gloo's AVG only handles floating types; NCCL's integer avg is the
                # sum divided by the rank count, which is what we run instead.
                reduce_op = self.dist.ReduceOp.SUM
                avg_divisor = self.nranks
        return Context(
            rank=self.rank,
            nranks=self.nranks,
            root=self.config.root if op.rooted else -1,
            dtype=dtype,
            redop=redop,
            reduce_op=reduce_op,
            avg_divisor=avg_divisor,
            device=self.device,
            servers=self.config.servers,
        )

    def _allocate(self, layouts: list[ElementCounts], dtype: DType) -> tuple[Any, Any]:
        torch = self.torch
        tdtype = getattr(torch, dtype.torch_name)
        send_n = max((lay.send_count for lay in layouts), default=0)
        # In place, the output and input share the receive buffer: it holds the larger of the two.
        recv_n = max((lay.buffer_count for lay in layouts), default=0)
        try:
            # Not zeroed: each row's load fills what its call reads, so pages are touched as the sweep
            # reaches them (an -e near the memory limit no longer spends minutes zeroing before row 1).
            # -u: the buffers start unalign elements into their allocations (nccl-tests' misalignment).
            skip = self.config.unalign
            send = torch.empty(send_n + skip, dtype=tdtype, device=self.device).narrow(0, skip, send_n)
            recv = torch.empty(recv_n + skip, dtype=tdtype, device=self.device).narrow(0, skip, recv_n)
        except (RuntimeError, MemoryError) as exc:
            size = (send_n + recv_n + 2 * self.config.unalign) * dtype.size
            raise RunError(
                f"rank {self.rank} cannot allocate {size} bytes of {dtype.name} buffers on {self.device}: "
                f"{describe_exception(exc)}; lower -e"
            ) from None
        return send, recv

    def _plan(
        self,
        op: Collective,
        layout: ElementCounts,
        send: Any,
        recv: Any,
        ctx: Context,
        in_place: bool,
        dist: Any = None,
    ) -> Call:
        if in_place:
            offset_in = self.rank * layout.send_inplace_offset
            offset_out = self.rank * layout.recv_inplace_offset
            out = recv.narrow(0, offset_out, layout.recv_count)
            if offset_in == offset_out and layout.send_count == layout.recv_count:
                inp = out
            else:
                inp = recv.narrow(0, offset_in, layout.send_count)
        else:
            inp = send.narrow(0, 0, layout.send_count)
            out = recv.narrow(0, 0, layout.recv_count)
        return op.build(self.torch, dist or self.dist, layout, inp, out, ctx, in_place)

    def _guarded(self, phase: str, calls: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` as one watched phase of ``calls`` collectives."""
        self.heartbeat.enter(phase, self.config.launch.timeout_s * max(calls, 1) + 10.0)
        try:
            result = fn(*args)
        except RuntimeError as exc:  # the backend's way to report a dead peer or a timeout
            raise PeerCallFailed(phase, exc) from exc
        self.heartbeat.leave()
        return result

    def _agree_to_go_on(self, deadline: float | None = None) -> bool:
        """After every row, all ranks learn whether any of them was asked to stop.

        Ctrl-C may reach one rank (or one node) only, and rank 0 stops when its
        stdout is closed: one tiny all-reduce per row (outside the timed loop)
        makes every rank stop at the same row boundary, cleanly.  Returns True
        when rank 0's clock passed ``deadline`` (``--duration``): this op's
        sweep is over, normally.
        """
        torch, dist = self.torch, self.dist
        time_up = deadline is not None and self.rank == 0 and time.monotonic() >= deadline

        def vote() -> int:
            # 0 go on, 1 time is up, 2 stop quietly (rank 0's stdout closed), 3 a signal: the strongest wins.
            mine = 3 if self.stop.now else 2 if self.stop.is_set else 1 if time_up else 0
            flag = torch.tensor([mine], dtype=torch.int64, device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return int(flag.item())

        agreed = int(self._guarded("agreeing to go on", 1, vote))
        if agreed > 1:
            raise Interrupted(output_closed=agreed == 2)
        return agreed == 1

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _warmup(self, op: Collective, layouts: dict[int, ElementCounts], send: Any, recv: Any, ctx: Context) -> None:
        if self.config.warmup_iters <= 0:
            return
        for size, layout in layouts.items():
            plan = self._plan(op, layout, send, recv, ctx, in_place=False)
            self._guarded(f"warmup {op.name} {size} B", self.config.warmup_iters, self._repeat, plan)

    def _repeat(self, plan: Call) -> None:
        plan.load(0)
        stop = self.stop
        for _ in range(self.config.warmup_iters):
            if stop.now:
                raise Interrupted
            plan.step()
        self._sync()

    def _row(
        self, op: Collective, size: int, layout: ElementCounts, send: Any, recv: Any, ctx: Context
    ) -> list[CollectiveRecord]:
        records = []
        for in_place in (False, True):
            if in_place and not op.in_place:
                continue
            placement = "in" if in_place else "out"
            label = f"{op.name} {size} B {ctx.dtype.name} {'in-place' if in_place else 'out-of-place'}"
            per_stream: list[float] = []
            if self.stream_dists:
                plans = [
                    self._plan(op, layout, s, r, ctx, in_place, dist=d)
                    for (s, r), d in zip(self._stream_buffers, self.stream_dists, strict=True)
                ]
                plan = plans[0]
                times = self._guarded(label, self.config.iters + 2, self._time_streams, plans)
                mean_s, samples, per_stream = times.mean_s, times.samples, times.per_stream_s
            else:
                plan = self._plan(op, layout, send, recv, ctx, in_place)
                calls = self.config.iters * self.config.agg_iters + 2
                mean_s, samples = self._guarded(label, calls, self._time, plan)
            mean_s, combined = self._guarded(
                f"{label} (combining times)", 1, self._combine, mean_s, [*samples, *per_stream]
            )
            samples, per_stream = combined[: len(samples)], combined[len(samples) :]
            wrong = None
            if self.config.check and (op.checks_in_place or not in_place):
                tolerant = ctx.redop == "avg" and ctx.dtype.is_float
                wrong = self._guarded(f"{label} (check)", 2 * self.config.check, self._check, plan, tolerant)
            algbw, busbw = op.bandwidths(layout, ctx.dtype.size, self.nranks, mean_s)
            streams = None
            if per_stream:
                # The aggregate moves the bytes of every stream in its time.
                algbw, busbw = algbw * len(per_stream), busbw * len(per_stream)
                streams = []
                for k, seconds in enumerate(per_stream):
                    one_alg, one_bus = op.bandwidths(layout, ctx.dtype.size, self.nranks, seconds)
                    streams.append(
                        {"stream": k, "time_us": seconds * 1e6, "algbw_gbps": one_alg, "busbw_gbps": one_bus}
                    )
            records.append(
                CollectiveRecord(
                    op=op.name,
                    size_bytes=op.size_bytes(layout, ctx.dtype.size),
                    count=layout.count,
                    dtype=ctx.dtype.name,
                    redop=ctx.redop,
                    root=ctx.root,
                    placement=placement,
                    time_us=mean_s * 1e6,
                    algbw_gbps=algbw,
                    busbw_gbps=busbw,
                    wrong=wrong,
                    samples_us=[s * 1e6 for s in samples],
                    streams=streams,
                )
            )
        return records

    def _time_streams(self, plans: list[Call]) -> StreamTimes:
        """Time every stream's plan at once (one untimed call each and a barrier first)."""
        for plan in plans:
            plan.load(0)
        for plan in plans:
            plan.step()
        self._sync()
        self.dist.barrier()
        wrap = None
        sync = self._sync
        if self._cuda_streams:
            torch, cuda_streams = self.torch, self._cuda_streams

            def wrap(k: int) -> Any:
                return torch.cuda.stream(cuda_streams[k])

            def sync() -> None:
                torch.cuda.current_stream().synchronize()

        stop = self.stop
        try:
            return time_streams(
                [p.step for p in plans], self.config.iters, stopped=lambda: stop.now, wrap=wrap, sync=sync
            )
        except InterruptedError:
            raise Interrupted from None

    def _time(self, plan: Call) -> tuple[float, list[float]]:
        iters, agg = self.config.iters, self.config.agg_iters
        calls = range(agg)
        blocking = self.config.blocking
        step = plan.step
        # A signal ends the row at once (a row can take minutes): every rank got
        # it, and a peer's collective failing as one leaves first is read as the
        # clean stop it is (see :func:`~fabricscope.launch.lifecycle.classify`).
        stop = self.stop
        plan.load(0)
        step()
        self._sync()
        self.dist.barrier()
        if self.cuda:
            torch = self.torch
            events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
            self._sync()
            events[0].record()
            for i in range(1, iters + 1):
                if stop.now:
                    raise Interrupted
                for _ in calls:
                    step()
                    if blocking:
                        self._sync()
                events[i].record()
            self._sync()
            samples = [events[i - 1].elapsed_time(events[i]) * 1e-3 for i in range(1, iters + 1)]
            total = events[0].elapsed_time(events[iters]) * 1e-3
        else:
            clock = time.perf_counter
            stamps = [0.0] * (iters + 1)
            stamps[0] = clock()
            for i in range(1, iters + 1):
                if stop.now:
                    raise Interrupted
                for _ in calls:
                    step()
                    if blocking:
                        self._sync()
                stamps[i] = clock()
            samples = [stamps[i] - stamps[i - 1] for i in range(1, iters + 1)]
            total = stamps[iters] - stamps[0]
        # -m: an iteration ran ``agg`` collectives; every time is one collective's (nccl-tests divides alike).
        return total / (iters * agg), [sample / agg for sample in samples]

    def _combine(self, mean_s: float, samples: list[float]) -> tuple[float, list[float]]:
        """Combine this rank's mean and samples with the other ranks' (``-a``).

        The samples always belong with the time: rank 0's (0), the per-iteration
        average over ranks (1), or those of the rank whose mean is the smallest
        (2) or largest (3), so that p50/p99 read against the time column.
        """
        torch, dist = self.torch, self.dist
        values = torch.tensor([mean_s, *samples], dtype=torch.float64, device=self.device)
        mode = self.config.average
        if mode is Average.RANK0:
            dist.broadcast(values, 0)
        elif mode is Average.AVG:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
            values /= self.nranks
        else:
            every = [torch.empty_like(values) for _ in range(self.nranks)]
            dist.all_gather(every, values)
            means = [float(v[0].item()) for v in every]
            pick = min if mode is Average.MIN else max
            values = every[pick(range(self.nranks), key=means.__getitem__)]
        combined = values.tolist()
        return combined[0], combined[1:]

    def _check(self, plan: Call, tolerant: bool) -> int:
        torch, dist = self.torch, self.dist
        wrong = 0
        for _ in range(self.config.check):
            self._seed += 1
            seed = 33 * self._seed
            plan.load(seed)
            plan.step()
            self._sync()
            local = plan_wrong(torch, plan, seed, tolerant, self.device)
            total = torch.tensor([local], dtype=torch.int64, device=self.device)
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            wrong = int(total.item())
            if wrong:
                break
        return wrong


def plan_wrong(torch: ModuleType, plan: Call, seed: int, tolerant: bool, device: Any) -> int:
    """Elements of this rank's output that differ from the plan's expected values."""
    if plan.expected is None:
        return 0
    output = plan.output
    total = output.numel()
    wrong = 0
    period = plan.period
    if period > 0 and 2 * period <= total:
        # Every whole period of the output against one period's values, as rows of a matrix.
        base = plan.expected(seed, torch.arange(0, period, dtype=torch.int64, device=device))
        whole = total // period
        rows = max(1, CHUNK // period)
        for first in range(0, whole, rows):
            last = min(whole, first + rows)
            block = output[first * period : last * period].view(last - first, period)
            wrong += count_wrong(torch, block, base, tolerant)
        tail = output[whole * period :]
        return wrong + count_wrong(torch, tail, base[: tail.numel()], tolerant)
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        idx = torch.arange(start, stop, dtype=torch.int64, device=device)
        wrong += count_wrong(torch, output[start:stop], plan.expected(seed, idx), tolerant)
    return wrong


def count_wrong(torch: ModuleType, output: Any, expected: Any, tolerant: bool) -> int:
    """Elements of ``output`` that differ from ``expected``, which may be one row that every row of ``output``
    is compared with (2 ULP allowed for float avg)."""
    if output.numel() == 0:
        return 0
    if tolerant and output.is_floating_point():
        eps = torch.finfo(output.dtype).eps
        ok = torch.isclose(output.double(), expected.double(), rtol=2 * eps, atol=0.0)
        return int((~ok).sum().item())
    return int((output != expected).sum().item())
