"""One rank of a ``bench`` run: join the world, sweep, report, exit cleanly.

Run as ``python -m fabricscope.bench.worker`` by the local spawner (config in
``FABRICSCOPE_BENCH_CONFIG``), or called in-process by ``fabricscope bench``
when torchrun, mpirun or srun started this process.

Exit codes: 0 success; 1 wrong elements, a failed or hung peer, or a file
that could not be written; 2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from fabricscope import launch
from fabricscope import ops as ops_registry
from fabricscope.bench.config import BenchConfig
from fabricscope.bench.runner import CollectiveFailed, Interrupted, StopFlag, Sweep
from fabricscope.errors import FabricscopeError, MissingDependencyError, RunError, UsageError
from fabricscope.launch.heartbeat import Heartbeat, Peer, describe_exception, make_store_factory
from fabricscope.metadata import collect_env

__all__ = ["CONFIG_VARIABLE", "main", "run_rank"]

CONFIG_VARIABLE = "FABRICSCOPE_BENCH_CONFIG"


def _import_torch() -> tuple[Any, Any]:
    # c10d logs failed store and socket calls with C++ stack traces; every
    # failure is reported once, by us, in one line.  A user's own setting wins.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise MissingDependencyError("fabricscope bench needs torch: pip install 'fabricscope[torch]'") from None
    if not dist.is_available():
        raise MissingDependencyError("this torch build has no torch.distributed support")
    return torch, dist


def _backend(requested: str, torch: Any) -> str:
    has_cuda = bool(torch.cuda.is_available())
    if requested == "auto":
        return "nccl" if has_cuda else "gloo"
    if requested == "nccl" and not has_cuda:
        raise UsageError("--backend nccl needs CUDA GPUs and none is visible here; use --backend gloo or auto")
    return requested


def _device(backend: str, world: launch.World, torch: Any) -> Any:
    if backend != "nccl":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if world.local_rank >= count:
        raise UsageError(
            f"local rank {world.local_rank} has no GPU of its own: this node has {count}; "
            "start at most one rank per GPU"
        )
    torch.cuda.set_device(world.local_rank)
    return torch.device("cuda", world.local_rank)


def _device_label(device: Any, torch: Any, local_rank: int) -> str:
    """``device  0 [0000:18:00] NVIDIA H100 ...`` as nccl-tests prints it, or the CPU."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        pci = [getattr(props, f"pci_{part}_id", 0) for part in ("domain", "bus", "device")]
        return f"{device.index:2d} [{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}] {props.name}"
    return f"{local_rank:2d} [cpu] CPU (gloo)"


def _say(rank: int, message: str) -> None:
    prefix = "" if rank == 0 else f"[rank {rank}] "
    sys.stderr.write(f"{prefix}{message}\n")
    sys.stderr.flush()


_startup_rank: int | None = None
"""This process's rank once known: rank 0 says it was interrupted while starting up."""


def _leave_before_measuring(signum: int, frame: Any) -> None:
    """Ctrl-C or SIGTERM while starting up: nothing is measured yet, so say so and go."""
    for other in (signal.SIGINT, signal.SIGTERM):  # the launcher forwards the same Ctrl-C: say it once
        signal.signal(other, signal.SIG_IGN)
    if _startup_rank == 0:
        with contextlib.suppress(Exception):
            sys.stderr.write("interrupted while starting up: nothing was measured\n")
    _finish_process(130)


def _finish_process(code: int) -> None:
    """Leave without running backend destructors, which can block on a dead peer."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def run_rank(config: BenchConfig, world: launch.World) -> int:
    """Run this rank's part of the benchmark; return its exit code.

    Usage errors that every rank finds identically (the config against the
    world size) are printed by rank 0 only; the others by the rank that saw them.
    """
    global _startup_rank
    _startup_rank = world.rank
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _leave_before_measuring)
    _stop_when_orphaned()
    try:
        notes = config.fit_to_world(world.world_size)
    except UsageError as exc:
        if world.rank == 0:
            _say(0, f"error: {exc}")
        return exc.exit_code
    try:
        return _run(config, world, notes)
    except FabricscopeError as exc:
        _say(world.rank, f"error: {exc}")
        return exc.exit_code


_parent_pid: int | None = None
"""The launcher this rank was started by (see :func:`_stop_when_orphaned`)."""


def _orphaned() -> bool:
    """Whether this rank's launcher has died since it started."""
    return _parent_pid is not None and os.getppid() != _parent_pid


def _stop_when_orphaned(interval_s: float = 1.0) -> None:
    """Stop this rank (SIGTERM to itself: a clean stop) when its launcher dies.

    Ranks that bench spawns die with it by the kernel's parent-death signal;
    ranks of torchrun, mpirun or srun would otherwise sweep on forever when
    their agent is killed (SIGKILL leaves it no time to stop them).  A thread
    that wakes once a second adds no measurable noise.
    """
    global _parent_pid
    parent = _parent_pid = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="fabricscope-parent-watch", daemon=True).start()


def _run(config: BenchConfig, world: launch.World, notes: list[str]) -> int:
    # Local checks first: a rank that cannot run says so before the others wait for it.
    torch, dist = _import_torch()
    backend = _backend(config.backend, torch)
    device = _device(backend, world, torch)
    launch.check_master_reachable(world, min(config.timeout_s, 60.0))

    timeout = timedelta(seconds=config.timeout_s)
    hosts_store = world.rank == 0 and not world.agent_store
    try:
        store = dist.TCPStore(
            world.master_addr,
            world.master_port,
            world.world_size,
            is_master=hosts_store,
            timeout=timeout,
            wait_for_workers=False,
        )
        dist.init_process_group(
            backend,
            store=dist.PrefixStore("fabricscope/pg", store),
            rank=world.rank,
            world_size=world.world_size,
            timeout=timeout,
            # NCCL: bind the communicator to this rank's GPU now, not lazily.
            **({"device_id": device} if backend == "nccl" else {}),
        )
    except (RuntimeError, ValueError) as exc:
        raise UsageError(
            f"could not form the {world.world_size}-rank world at {world.master_addr}:{world.master_port}: "
            f"{describe_exception(exc)}"
        ) from None

    me = Peer(
        rank=world.rank,
        host=socket.gethostname(),
        pid=os.getpid(),
        device=_device_label(device, torch, world.local_rank),
    )
    gathered: list[Any] = [None] * world.world_size
    try:
        dist.all_gather_object(gathered, [me.rank, me.host, me.pid, me.device])
    except RuntimeError as exc:
        _say(world.rank, f"error: ranks could not exchange their details: {describe_exception(exc)}")
        _finish_process(1)
    peers = [Peer(rank=r, host=h, pid=p, device=d) for r, h, p, d in gathered]
    try:
        note = _fit_to_memory(config, world, torch, dist, device)
    except UsageError:
        if world.rank == 0:
            raise
        return 2  # every rank found the same; rank 0 says it

    stop = StopFlag()
    output = None
    if world.rank == 0:
        from fabricscope.bench.output import Output

        env = collect_env(backend=backend, world_size=world.world_size, launcher=world.launcher)
        if backend == "nccl":
            with contextlib.suppress(Exception):
                env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        output = Output(
            notes=[note] if note else [],
            first_notes=notes,
            config=config,
            peers=peers,
            backend=backend,
            launcher=world.launcher,
            env=env,
            progress_total=_row_count(config) if config.run_cycles else 0,
            on_stdout_closed=stop.set,
        )

    def on_stall(message: str) -> None:
        _say(world.rank, f"error: {message}; stopping")
        if output is not None:
            output.finish("failed", message)

    heartbeat = Heartbeat(
        store_factory=make_store_factory(world.master_addr, world.master_port),
        rank=world.rank,
        peers=peers,
        store_host_rank=None if world.agent_store else 0,
        store_address=(world.master_addr, world.master_port),
        on_stall=on_stall,
    )
    heartbeat.start()

    # From here on a stop request ends the current row, keeps every row finished,
    # and exits cleanly on every rank; before, there is nothing to keep (see main()).
    def on_signal(signum: int, frame: Any) -> None:
        stop.set(now=True)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sweep = Sweep(
        torch=torch,
        dist=dist,
        config=config,
        rank=world.rank,
        world_size=world.world_size,
        backend=backend,
        device=device,
        heartbeat=heartbeat,
        stop=stop,
    )
    wrong_total = 0
    try:
        for name in config.ops:
            op = ops_registry.get(name)
            if output is not None:
                output.start_op(op)
            for records in sweep.rows(op):
                wrong_total += sum(r.wrong or 0 for r in records)
                if output is not None:
                    output.row(records)
            if output is not None:
                output.end_op(op)
    except Interrupted:
        return _stop_interrupted(world, output, heartbeat)
    except RunError as exc:
        if output is not None:
            output.finish("failed", str(exc))
        _say(world.rank, f"error: {exc}")
        _finish_process(exc.exit_code)
    except CollectiveFailed as failure:
        if stop.is_set or _orphaned():
            # We were asked to stop too (or our launcher died, and with it maybe the
            # store): a peer that stopped first left this collective failing.  Clean.
            stop.set()
            return _stop_interrupted(world, output, heartbeat)
        culprit = heartbeat.diagnose()
        if not culprit and heartbeat.left_on_purpose:
            # A peer was asked to stop (the signal reached it only): a clean interruption.
            return _stop_interrupted(world, output, heartbeat)
        reason = culprit or describe_exception(failure.cause)
        message = f"{reason}, during {failure.phase}"
        if culprit:
            message += f" [{describe_exception(failure.cause)}]"
        if output is not None:
            output.finish("failed", message)
            message += f"; the {len(output.result.records)} records measured before are kept"
            if config.json_path:
                message += f" in {config.json_path}"
        _say(world.rank, f"error: {message}")
        _finish_process(1)
    heartbeat.stop()
    code = 0
    if output is not None:
        output.finish("complete")
        if output.below_minimum:
            _say(
                0,
                f"error: average bus bandwidth of {', '.join(output.below_minimum)} is below 0.9 x "
                f"NCCL_TESTS_MIN_BW ({config.min_busbw_gbps:g} GB/s)",
            )
            code = 1
        if output.write_errors:
            _say(0, f"error: {output.write_errors[0]}; the table above holds every row measured")
            code = 1
    if wrong_total:
        if world.rank == 0:
            _say(0, f"error: the correctness check found {wrong_total} wrong element(s); see #wrong above")
        code = 1
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return code


_RESERVE_BYTES = 1 << 30
"""Memory left to everything else on each rank (nccl-tests keeps 1 GiB too)."""


def _fit_to_memory(config: BenchConfig, world: launch.World, torch: Any, dist: Any, device: Any) -> str:
    """Lower -e to what every rank can hold, as nccl-tests does; return the note to print.

    A rank holds a send and a receive buffer of up to -e bytes each (the
    check's expected values are made in small chunks).  CPU ranks on one host
    share its memory.  The smallest budget over all ranks decides, so every
    rank runs the same sweep.
    """
    if device.type == "cuda":
        free = int(torch.cuda.mem_get_info(device)[0])
    else:
        import psutil

        free = int(psutil.virtual_memory().available) // max(world.local_world_size, 1)
    budget = torch.tensor([free], dtype=torch.int64, device=device)
    dist.all_reduce(budget, op=dist.ReduceOp.MIN)
    limit = max(0, (int(budget.item()) - _RESERVE_BYTES) // 2)
    if config.max_bytes <= limit:
        return ""
    if config.min_bytes > limit:
        raise UsageError(
            f"-b {config.min_bytes} needs two buffers of that size on every rank, but the tightest rank has "
            f"{int(budget.item())} bytes free: the largest size that fits is {limit} bytes"
        )
    config.max_bytes = limit
    return f"#  Reducing maxBytes to {limit} due to memory limitation"


def _stop_interrupted(world: launch.World, output: Any, heartbeat: Heartbeat) -> int:
    heartbeat.mark_stopped()
    if output is not None:
        why = "its output was closed" if output.stdout_closed else "interrupted by a signal"
        output.finish("interrupted", why)
        where = f" in {output.config.json_path}" if output.config.json_path else ""
        _say(0, f"interrupted ({why}): the {len(output.result.records)} records measured so far are kept{where}")
    _finish_process(130)
    return 130  # pragma: no cover - _finish_process does not return


def _row_count(config: BenchConfig) -> int:
    per_op = len(list(config.sizes())) * max(config.run_cycles, 1) * len(config.dtypes)
    total = 0
    for name in config.ops:
        op = ops_registry.get(name)
        total += per_op * (len(config.redops) if op.reduces else 1)
    return total


def main() -> None:
    """Entry point of a spawned rank."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _leave_before_measuring)
    try:
        config = BenchConfig.from_dict(json.loads(os.environ[CONFIG_VARIABLE]))
        world = launch.detect()
    except (KeyError, ValueError, FabricscopeError) as exc:
        sys.stderr.write(f"error: this process was not started by fabricscope bench ({exc})\n")
        raise SystemExit(2) from None
    if world is None:
        sys.stderr.write("error: no RANK/WORLD_SIZE in the environment of a spawned rank\n")
        raise SystemExit(2)
    _finish_process(run_rank(config, world))


if __name__ == "__main__":
    main()
