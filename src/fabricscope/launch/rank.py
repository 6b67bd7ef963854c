"""One rank's life, shared by every multi-process command (bench, pairs, doctor's fleet).

- :func:`guard_startup` / :func:`finish_process`: a Ctrl-C before anything is
  measured leaves quietly (exit 130); a rank always leaves without running
  backend destructors, which can block on a dead peer.
- :func:`stop_when_orphaned` / :func:`orphaned`: a rank whose launcher died
  (a killed torchrun agent) stops instead of running on forever.
- :func:`join_group`: import torch, pick the backend and device, form the
  process group over our own rendezvous store, and exchange every rank's
  host, pid and device, so that failures can name them.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import FrameType, ModuleType
from typing import Any

from fabricscope.errors import FabricscopeError, MissingDependencyError, RunError, UsageError
from fabricscope.launch.heartbeat import Heartbeat, Peer, describe_exception, make_store_factory
from fabricscope.launch.world import World, check_master_reachable
from fabricscope.units import is_digits

__all__ = [
    "Group",
    "cpu_threads",
    "finish_process",
    "guard_startup",
    "import_torch",
    "join_group",
    "join_limit",
    "leave_now",
    "orphaned",
    "say",
    "spawned_rank_main",
    "start_heartbeat",
    "stop_when_orphaned",
    "stops_end_blocking_call",
    "tightest_free_bytes",
]


def spawned_rank_main(
    command: str, variable: str, load: Callable[[Any], Any], run: Callable[[Any, World], int]
) -> None:
    """The entry point of a rank that ``fabricscope COMMAND`` spawned: its config comes as JSON in
    ``variable``, its world from the launcher variables; ``run(config, world)`` gives the exit code."""
    from fabricscope.launch.world import detect

    guard_startup()
    try:
        config = load(json.loads(os.environ[variable]))
        world = detect()
    except (KeyError, ValueError, TypeError, FabricscopeError) as exc:
        sys.stderr.write(f"error: this process was not started by fabricscope {command} ({exc})\n")
        raise SystemExit(2) from None
    if world is None:
        sys.stderr.write("error: no RANK/WORLD_SIZE in the environment of a spawned rank\n")
        raise SystemExit(2)
    finish_process(run(config, world))


def say(rank: int, message: str) -> None:
    """One line on stderr, prefixed with the rank unless it is rank 0."""
    prefix = "" if rank == 0 else f"[rank {rank}] "
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{prefix}{message}\n")
        sys.stderr.flush()


def finish_process(code: int) -> None:
    """Leave without running backend destructors, which can block on a dead peer."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


_startup_rank: int | None = None
"""This process's rank once known: rank 0 says it was interrupted while starting up."""


_LEAVING = threading.Lock()
"""Held by the one thread that ends the process while it starts up: a Ctrl-C seen by the rendezvous's
watcher and by the main thread's handler at once is said once (the other waits for the exit)."""


def _leave_before_measuring(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM while starting up: nothing is measured yet, so say so and go."""
    for other in (signal.SIGINT, signal.SIGTERM):  # the launcher forwards the same Ctrl-C: say it once
        signal.signal(other, signal.SIG_IGN)
    _LEAVING.acquire()
    if _startup_rank == 0:
        with contextlib.suppress(Exception):
            sys.stderr.write("interrupted while starting up: nothing was measured\n")
    finish_process(130)


def guard_startup(rank: int | None = None) -> None:
    """Until the command installs its own handlers, Ctrl-C and SIGTERM leave quietly (exit 130)."""
    global _startup_rank
    if rank is not None:
        _startup_rank = rank
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _leave_before_measuring)


_parent_pid: int | None = None
"""The launcher this rank was started by (see :func:`stop_when_orphaned`)."""


def orphaned() -> bool:
    """Whether this rank's launcher has died since it started."""
    return _parent_pid is not None and os.getppid() != _parent_pid


def stop_when_orphaned(interval_s: float = 1.0, grace_s: float = 15.0) -> None:
    """Stop this rank (SIGTERM to itself: a clean stop) when its launcher dies.

    Ranks that fabricscope spawns die with it by the kernel's parent-death
    signal; ranks of torchrun, mpirun or srun would otherwise run on forever
    when their agent is killed (SIGKILL leaves it no time to stop them).  The
    thread sleeps a second between looks, which adds no measurable noise.  A rank
    that has not stopped ``grace_s`` later (stuck in a call) ends itself.
    """
    global _parent_pid
    parent = _parent_pid = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        finish_process(130)

    threading.Thread(target=watch, name="fabricscope-parent-watch", daemon=True).start()


def import_torch(command: str = "bench") -> tuple[ModuleType, ModuleType]:
    """torch and torch.distributed, or a one-line MissingDependencyError naming the command."""
    # c10d logs failed store and socket calls with C++ stack traces; every
    # failure is reported once, by us, in one line.  A user's own setting wins.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise MissingDependencyError(f"fabricscope {command} needs torch: pip install 'fabricscope[torch]'") from None
    if not dist.is_available():
        raise MissingDependencyError("this torch build has no torch.distributed support")
    return torch, dist


def cpu_threads(env: Mapping[str, str] | None = None) -> int:
    """Threads a rank gives torch's own CPU kernels (copies, pattern fills, checks): ``OMP_NUM_THREADS``
    where it holds a whole number from 1 to 4096 in ASCII digits, else 1 (torchrun sets 1 where the variable
    is unset).

    Set in the rank itself, since a rank ``bench`` forks inherits the launcher's OpenMP runtime, which
    read the variable before the rank existed.  torch's default, a thread per core in every rank, leaves
    OpenMP threads spinning after a copy inside a timed gloo call on the cores gloo's network threads
    need (gloo's alltoall, whose own part is a local copy: 1 MiB on 2 ranks 5-10x slower)."""
    text = (os.environ if env is None else env).get("OMP_NUM_THREADS", "").strip()
    if is_digits(text) and len(text) <= 4 and 1 <= int(text) <= 4096:
        return int(text)
    return 1


def _backend(requested: str, torch: ModuleType) -> str:
    has_cuda = bool(torch.cuda.is_available())
    if requested == "auto":
        return "nccl" if has_cuda else "gloo"
    if requested == "nccl" and not has_cuda:
        raise UsageError("--backend nccl needs CUDA GPUs and none is visible here; use --backend gloo or auto")
    return requested


def _device(backend: str, world: World, torch: ModuleType) -> Any:
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


def _device_label(device: Any, torch: ModuleType, local_rank: int) -> str:
    """``device  0 [0000:18:00] NVIDIA H100 ...`` as nccl-tests prints it, or the CPU."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        pci = [getattr(props, f"pci_{part}_id", 0) for part in ("domain", "bus", "device")]
        return f"{device.index:2d} [{pci[0]:04x}:{pci[1]:02x}:{pci[2]:02x}] {props.name}"
    return f"{local_rank:2d} [cpu] CPU (gloo)"


@dataclass(frozen=True, slots=True)
class Group:
    """A formed torch.distributed world, as a command's ranks use it."""

    torch: ModuleType
    dist: ModuleType
    backend: str
    """``gloo`` or ``nccl``."""
    device: Any
    world: World
    peers: tuple[Peer, ...]
    """Every rank's host, pid and device label, indexed by rank."""


def join_group(world: World, *, backend: str, timeout_s: float, command: str = "bench") -> Group:
    """Form the process group of ``world`` and exchange every rank's details.

    Local problems (no torch, no GPU for this rank, an unreachable rendezvous)
    are raised before the other ranks wait for this one.
    """
    torch, dist = import_torch(command)
    torch.set_num_threads(cpu_threads())
    chosen = _backend(backend, torch)
    device = _device(chosen, world, torch)
    check_master_reachable(world, min(timeout_s, 60.0))
    with _bounded_join(world, timeout_s):
        return _join(world, torch, dist, chosen, device, timeout_s)


def _join(world: World, torch: ModuleType, dist: ModuleType, chosen: str, device: Any, timeout_s: float) -> Group:
    timeout = timedelta(seconds=timeout_s)
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
            chosen,
            store=dist.PrefixStore("fabricscope/pg", store),
            rank=world.rank,
            world_size=world.world_size,
            timeout=timeout,
            # NCCL: bind the communicator to this rank's GPU now, not lazily.
            **({"device_id": device} if chosen == "nccl" else {}),
        )
    except (RuntimeError, ValueError) as exc:
        raise UsageError(
            f"could not form the {world.world_size}-rank world at {world.master_addr}:{world.master_port}: "
            f"{describe_exception(exc)}"
        ) from None
    me = [world.rank, socket.gethostname(), os.getpid(), _device_label(device, torch, world.local_rank)]
    gathered: list[Any] = [None] * world.world_size
    try:
        dist.all_gather_object(gathered, me)
    except RuntimeError as exc:
        raise RunError(f"ranks could not exchange their details: {describe_exception(exc)}") from None
    peers = tuple(Peer(rank=r, host=h, pid=p, device=d) for r, h, p, d in gathered)
    return Group(torch=torch, dist=dist, backend=chosen, device=device, world=world, peers=peers)


JOIN_MARGIN_S = 5.0
"""Past ``-T``, the longest a rank waits in the rendezvous: torch bounds its steps by ``-T`` each, not the whole."""


def join_limit(timeout_s: float) -> float:
    """The longest a rank may block in the rendezvous (store connect included) for a timeout of ``timeout_s``."""
    return timeout_s + max(JOIN_MARGIN_S, timeout_s / 2)


@contextlib.contextmanager
def _bounded_join(world: World, timeout_s: float) -> Iterator[None]:
    """Bound the rendezvous by ``-T`` (plus :data:`JOIN_MARGIN_S`) and let Ctrl-C and SIGTERM end it at once.

    The rendezvous blocks in torch's C++ code, where neither a timeout of the
    whole nor a Python signal handler runs (a 16,777,216-rank world sits there
    for minutes): see :func:`stops_end_blocking_call`.
    """
    limit = join_limit(timeout_s)
    where = f"{world.master_addr}:{world.master_port}"
    late = (
        f"error: rank {world.rank}: the {world.world_size}-rank world at {where} did not form within "
        f"{timeout_s:g} s (-T): check that every rank was started and can reach it"
    )
    with stops_end_blocking_call(world.rank, limit_s=limit, late=late):
        yield


@contextlib.contextmanager
def stops_end_blocking_call(
    rank: int,
    *,
    limit_s: float | None = None,
    late: str = "",
    late_code: int = 2,
    on_leave: Callable[[int], None] | None = None,
    said: str = "interrupted while starting up: nothing was measured",
) -> Iterator[None]:
    """Let Ctrl-C and SIGTERM end this process at once (exit 130, rank 0 saying ``said``) while the main
    thread blocks in C++ code (torch's rendezvous, a store's connect), where no Python signal handler runs;
    with ``limit_s``, passing it ends the process with ``late_code`` and the line ``late``.  Either way
    ``on_leave`` (if any) hears the exit code first, to record why.

    A watcher thread sees the kernel's delivery through :func:`signal.set_wakeup_fd`, which works while
    the main thread is blocked.  Nothing is measured yet, so nothing is lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    done = threading.Event()

    def leave(code: int, line: str) -> None:
        if done.is_set():  # the call returned meanwhile: the caller goes on
            return
        if on_leave is not None:
            with contextlib.suppress(Exception):
                on_leave(code)
        leave_now(code, line)

    def watch() -> None:
        deadline = None if limit_s is None else time.monotonic() + limit_s
        while not done.is_set():
            remaining = 0.2 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                leave(late_code, late)
                return
            ready, _, _ = select.select([read_fd], [], [], min(remaining, 0.2))
            if ready and not done.is_set():
                received = os.read(read_fd, 64)
                if signal.SIGINT in received or signal.SIGTERM in received:
                    leave(130, said if rank == 0 else "")

    watcher = threading.Thread(target=watch, name="fabricscope-join-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        watcher.join(1.0)
        os.close(read_fd)
        os.close(write_fd)


def leave_now(code: int, message: str) -> None:
    """End this process at once with ``code``, saying ``message`` (if any) on stderr; of threads that would
    leave at the same moment, one says why and the others wait for the exit."""
    _LEAVING.acquire()
    with contextlib.suppress(Exception):
        if message:
            sys.stderr.write(message + "\n")
        sys.stderr.flush()
    os._exit(code)


def start_heartbeat(
    world: World,
    peers: Sequence[Peer],
    on_stall: Callable[[str], None],
    on_leave: Callable[[str, str], None] | None = None,
) -> Heartbeat:
    """Start this rank's heartbeat through the world's rendezvous store (see :mod:`~fabricscope.launch.heartbeat`).

    ``on_stall`` hears why the main thread overran its phase's deadline, just
    before the process ends.  Its first connect and beat are bounded: a store
    host stopped since the world formed takes a request and never answers;
    past the bound, or on Ctrl-C meanwhile, ``on_leave`` hears the run's
    status and why (rank 0 records them) and the process ends with one line
    (exit 1, or 130).  A store that is gone or takes no connection raises
    :class:`RunError`.
    """
    heartbeat = Heartbeat(
        store_factory=make_store_factory(world.master_addr, world.master_port),
        rank=world.rank,
        peers=peers,
        store_host_rank=None if world.agent_store else 0,
        store_address=(world.master_addr, world.master_port),
        on_stall=on_stall,
    )
    limit = join_limit(2.0)
    where = f"{world.master_addr}:{world.master_port}"
    stopped = "(its host, rank 0 or the launcher, is stopped or hung)"
    why = (
        f"rank {world.rank}: the rendezvous store at {where} did not answer within {limit:g} s while starting "
        f"the heartbeat {stopped}"
    )
    said = "interrupted while starting up: nothing was measured"

    def leaving(code: int) -> None:
        if on_leave is not None:
            on_leave(*(("failed", why) if code == 1 else ("interrupted", said)))

    try:
        with stops_end_blocking_call(
            world.rank, limit_s=limit, late=f"error: {why}", late_code=1, on_leave=leaving, said=said
        ):
            heartbeat.start()
    except TimeoutError:  # the connect was not taken: a full accept queue of a stopped host, dropped packets
        raise RunError(
            f"rank {world.rank}: the rendezvous store at {where} did not take the heartbeat's connection {stopped}"
        ) from None
    except (RuntimeError, OSError) as exc:  # torch's DistNetworkError is a RuntimeError
        raise RunError(
            f"rank {world.rank}: lost the rendezvous store at {where} while starting the heartbeat "
            f"({describe_exception(exc)}): rank 0 or the launcher has ended"
        ) from None
    return heartbeat


def tightest_free_bytes(world: World, torch: ModuleType, dist: ModuleType, device: Any) -> int:
    """The least memory free on any rank: the GPU's free memory, or on CPU ranks their share of the
    host's available memory (less in a container: its cgroup limit), since CPU ranks on one host share it."""
    if device.type == "cuda":
        free = int(torch.cuda.mem_get_info(device)[0])
    else:
        from fabricscope.memory import available_bytes

        free = available_bytes() // max(world.local_world_size, 1)
    budget = torch.tensor([free], dtype=torch.int64, device=device)
    dist.all_reduce(budget, op=dist.ReduceOp.MIN)
    return int(budget.item())
