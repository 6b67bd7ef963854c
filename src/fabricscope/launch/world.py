"""Which world are we in, and how to start one when nobody else did.

fabricscope joins the world of the launcher the user already has:

- ``torchrun`` (and anything else that sets ``RANK``/``WORLD_SIZE``),
- ``mpirun`` from Open MPI (``OMPI_COMM_WORLD_*``) or an MPICH/Intel MPI
  hydra launcher (``PMI_RANK``/``PMI_SIZE``),
- Slurm ``srun`` (``SLURM_PROCID``/``SLURM_NTASKS`` inside a job step).

With none of these, :func:`fabricscope.launch.spawn.spawn` starts ``nproc`` local ranks itself.
The rendezvous address comes from ``--master-addr/--master-port``, then
``MASTER_ADDR``/``MASTER_PORT``, then the launcher: rank 0's host is the
first node of a Slurm step; an MPI job on one node uses 127.0.0.1.  The port
is derived from the job id so that every rank picks the same one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import socket
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from fabricscope.errors import UsageError
from fabricscope.shown import quoted
from fabricscope.units import is_digits

__all__ = [
    "MAX_LOCAL_RANKS",
    "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "World",
    "check_master_reachable",
    "detect",
    "expand_hostlist",
    "free_port",
]

DEFAULT_PORT = 29500
_PORT_BASE, _PORT_SPAN = 20000, 20000
_IDLE_POLL_S = 0.5
_STRAGGLER_S = 6.0
"""Seconds other ranks get to exit once rank 0, which keeps the results, has."""


@dataclass(frozen=True, slots=True)
class World:
    """This process's place in a distributed run."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    launcher: str
    """``spawn``, ``torchrun``, ``env``, ``mpirun``, ``pmi`` or ``slurm``."""
    agent_store: bool = False
    """True under torchrun: its agent hosts the rendezvous store, not rank 0."""


_MPI_FLAVORS = (
    # launcher, rank, size, local rank, local size, job-id variables (first set wins)
    (
        "mpirun",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"),
    ),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", ("PMI_JOBID", "PMI_KVSNAME")),
)
"""Open MPI, then MPICH/Intel MPI hydra (PMI)."""


MAX_LOCAL_RANKS = 1024
"""``--nproc`` bound: more local ranks than this on one machine is a typo, not a benchmark."""
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 7 * 86400.0
"""``--timeout`` bounds: under a second no rendezvous completes; the backends' timers overflow far above a week."""
MAX_WORLD = 1 << 24
"""Largest world a launcher may describe (ranks and sizes above it are a broken environment)."""


def _int(env: Mapping[str, str], key: str) -> int | None:
    """A launcher variable as a whole number; set but malformed is a usage error, not "absent"."""
    value = env.get(key)
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not is_digits(text) or len(text) > 9 or int(text) > MAX_WORLD:
        raise UsageError(
            f"the launcher's {key}={quoted(value, 40)} is not a whole number from 0 to {MAX_WORLD}: "
            "fix the environment (or unset it to run without a launcher)"
        )
    return int(text)


def _port_from(job_id: str) -> int:
    return _PORT_BASE + zlib.crc32(job_id.encode()) % _PORT_SPAN


def detect(
    env: Mapping[str, str] | None = None,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
) -> World | None:
    """The world a launcher put us in, or None when no launcher did."""
    env = os.environ if env is None else env
    rank, size = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    if rank is not None and size is not None:
        launcher = env.get("FABRICSCOPE_LAUNCHER") or ("torchrun" if "TORCHELASTIC_RUN_ID" in env else "env")
        local_rank = _int(env, "LOCAL_RANK")
        local_size = _int(env, "LOCAL_WORLD_SIZE")
        return _world(
            rank,
            size,
            local_rank if local_rank is not None else rank,
            local_size or size,
            launcher=launcher,
            env=env,
            master_addr=master_addr,
            master_port=master_port,
            default_addr="127.0.0.1" if (local_size or size) >= size else None,
            default_port=DEFAULT_PORT,
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
        )
    for launcher, rank_var, size_var, local_rank_var, local_size_var, job_vars in _MPI_FLAVORS:
        rank, size = _int(env, rank_var), _int(env, size_var)
        if rank is None or size is None:
            continue
        local_rank = _int(env, local_rank_var) or 0
        local_size = _int(env, local_size_var) or 1
        job = next((env[v] for v in job_vars if env.get(v)), launcher)
        return _world(
            rank,
            size,
            local_rank,
            local_size,
            launcher=launcher,
            env=env,
            master_addr=master_addr,
            master_port=master_port,
            # All ranks on this node: the rendezvous can stay on loopback.
            default_addr="127.0.0.1" if local_size == size else None,
            default_port=_port_from(job),
        )
    rank = _int(env, "SLURM_PROCID")
    size = _int(env, "SLURM_NTASKS") or _int(env, "SLURM_NPROCS")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    # Only inside an srun job step: a batch script also has SLURM_PROCID=0.
    if rank is not None and size is not None and step is not None:
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
        hosts = expand_hostlist(nodes) if nodes else []
        local_rank = _int(env, "SLURM_LOCALID") or 0
        local_size = _slurm_local_size(env, size, len(hosts))
        job = f"{env.get('SLURM_JOB_ID', 'slurm')}.{step}"
        return _world(
            rank,
            size,
            local_rank,
            local_size,
            launcher="slurm",
            env=env,
            master_addr=master_addr,
            master_port=master_port,
            default_addr=hosts[0] if hosts else None,
            default_port=_port_from(job),
        )
    return None


def _slurm_local_size(env: Mapping[str, str], size: int, nnodes: int) -> int:
    tasks = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
    match = re.match(r"(\d+)", tasks, re.ASCII)
    if match:
        return int(match.group(1))
    return max(1, size // max(nnodes, 1))


def _world(
    rank: int,
    size: int,
    local_rank: int,
    local_size: int,
    *,
    launcher: str,
    env: Mapping[str, str],
    master_addr: str | None,
    master_port: int | None,
    default_addr: str | None,
    default_port: int,
    agent_store: bool = False,
) -> World:
    if size < 1 or not 0 <= rank < size:
        raise UsageError(f"{launcher} gave rank {rank} of a world of size {size}: the rank must be below the size")
    addr = master_addr or env.get("MASTER_ADDR") or default_addr
    if not addr:
        raise UsageError(
            f"{launcher} started ranks on several nodes but nothing names rank 0's host: set MASTER_ADDR "
            "(for mpirun: -x MASTER_ADDR=<rank 0 host>) or pass --master-addr"
        )
    port_text = env.get("MASTER_PORT", "").strip()
    if port_text and not is_digits(port_text) and master_port is None:
        raise UsageError(f"MASTER_PORT must be a port number, got {port_text!r}")
    port = master_port or _int(env, "MASTER_PORT") or default_port
    if not 0 < port < 65536:
        raise UsageError(f"MASTER_PORT must be between 1 and 65535, got {port}")
    return World(
        rank=rank,
        world_size=size,
        local_rank=local_rank,
        local_world_size=local_size,
        master_addr=addr,
        master_port=port,
        launcher=launcher,
        agent_store=agent_store,
    )


MAX_HOSTS = 1 << 20
"""Most hosts a hostlist may expand to."""


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm hostlist as ``scontrol show hostnames`` does.

    ``tux[1-3,7],gpu5`` -> tux1 tux2 tux3 tux7 gpu5; leading zeros set the width
    (``n[08-10]`` -> n08 n09 n10); several bracket groups in one name expand as a
    product, leftmost slowest (``rack[1-2]-n[01-02]`` -> rack1-n01 rack1-n02
    rack2-n01 rack2-n02).  Commas inside brackets do not separate hosts.
    """
    hosts: list[str] = []
    for expression in _top_level_parts(text):
        hosts.extend(_expand_one(expression, hosts_so_far=len(hosts)))
    return hosts


def _top_level_parts(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        if depth < 0 or depth > 1:
            raise UsageError(f"malformed Slurm hostlist {quoted(text, 80)}: brackets do not nest")
    if depth:
        raise UsageError(f"malformed Slurm hostlist {quoted(text, 80)}: a '[' is not closed")
    parts.append("".join(current))
    return [part for part in parts if part]


def _expand_one(expression: str, *, hosts_so_far: int) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", expression)
    if match is None:
        return [expression]
    head, tail = expression[: match.start()], expression[match.end() :]
    values: list[str] = []
    for item in match.group(1).split(","):
        low, dash, high = item.partition("-")
        if not is_digits(low) or (dash and not is_digits(high)):
            raise UsageError(f"malformed Slurm hostlist range {item!r} in {quoted(expression, 80)}")
        first, last = int(low), int(high) if dash else int(low)
        if last - first + hosts_so_far + len(values) > MAX_HOSTS:
            raise UsageError(f"the Slurm hostlist {quoted(expression, 80)} names more than {MAX_HOSTS} hosts")
        values.extend(f"{n:0{len(low)}d}" for n in range(first, last + 1))
    return [host for value in values for host in _expand_one(head + value + tail, hosts_so_far=hosts_so_far)]


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
"""The ports the kernel hands out on its own: to ``bind(0)`` and as the source port of every outgoing connection."""
LOWEST_PORT = 10000
"""Lowest port :func:`free_port` picks (below it: well-known and registered services)."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago, for a rendezvous the launcher's ranks bind later.

    Picked below the kernel's ephemeral range where there is room: a port from ``bind(0)`` can be taken,
    before rank 0 binds it, as the source port of any connection another process opens (a busy host runs
    many), and rank 0 then fails with "The server socket has failed to listen".  Below the range only an
    explicit bind can take it.  Falls back to ``bind(0)`` when the range leaves no room.
    """
    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64 if low - 1 > LOWEST_PORT else 0):
        port = rng.randint(LOWEST_PORT, low - 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        with open(EPHEMERAL_RANGE, encoding="ascii") as handle:
            first = handle.read(64).split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        return 32768
    return int(first) if is_digits(first) and int(first) < 65536 else 32768


def _is_local_address(addr: str) -> bool:
    try:
        infos = socket.getaddrinfo(addr, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    for family, _, _, _, sockaddr in infos:
        ip = sockaddr[0]
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(ip).is_loopback:
                return True
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((ip, 0))
            return True
        except OSError:
            continue
    return False


def check_master_reachable(world: World, timeout_s: float) -> None:
    """Fail fast, with one line, when the rendezvous address cannot work.

    The name must resolve; the rank that hosts the store must own the address;
    other ranks must be able to open a TCP connection to it within
    ``timeout_s`` (they retry, since rank 0 may start later).
    """
    addr, port = world.master_addr, world.master_port
    try:
        socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(
            f"MASTER_ADDR {addr!r} does not resolve ({exc.strerror}): give rank 0's host name or IP"
        ) from None
    hosts_store = world.rank == 0 and not world.agent_store
    if hosts_store:
        if not _is_local_address(addr):
            raise UsageError(
                f"rank 0 must host the rendezvous at MASTER_ADDR {addr!r}, but that address is not on this host"
            )
        return
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UsageError(
                f"cannot reach MASTER_ADDR {addr}:{port} within {timeout_s:g} s ({last_error}): "
                "check the address, the port and that rank 0 is running"
            )
        try:
            with socket.create_connection((addr, port), timeout=min(remaining, 2.0)):
                return
        except OSError as exc:
            last_error = exc.strerror or type(exc).__name__
            time.sleep(min(0.2, max(remaining, 0)))
