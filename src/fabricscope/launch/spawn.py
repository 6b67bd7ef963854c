"""Start local ranks when no launcher did, and supervise them.

:func:`spawn` runs ``nproc`` copies of ``python -m MODULE`` on this machine with
the world variables a launcher would set, passes Ctrl-C and SIGTERM on, ends
the others when one fails, and returns one exit code for the run.  Each rank
dies with its launcher (``PR_SET_PDEATHSIG``), so none outlives a killed one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from fabricscope.errors import RunError
from fabricscope.launch.world import free_port

__all__ = ["set_parent_death_signal", "spawn"]

_IDLE_POLL_S = 0.5
_STRAGGLER_S = 6.0
"""Seconds other ranks get to exit once rank 0, which keeps the results, has."""


def set_parent_death_signal(signum: int = signal.SIGTERM) -> None:
    """In a child (``preexec_fn``): receive ``signum`` when the parent dies, so nothing outlives it.

    SIGTERM, not SIGKILL: a spawned rank stops as on Ctrl-C and rank 0 marks its result
    interrupted (its launcher died), keeping every row; a rank that cannot act on it ends
    itself a few seconds later (:func:`fabricscope.launch.rank.stop_when_orphaned`).  A
    command that ``monitor`` runs gets the same, so a killed monitor leaves no stray job.
    """
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signum)


_RANK_BOOTSTRAP = """\
import os, signal, sys
def _leave(signum, frame):
    os._exit(130)
signal.signal(signal.SIGINT, _leave)
signal.signal(signal.SIGTERM, _leave)
import runpy
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""
"""``python -m MODULE`` for a spawned rank, but a Ctrl-C while Python is still
importing leaves quietly (exit 130) instead of printing a KeyboardInterrupt
traceback; the module installs its own handlers once it runs."""


def spawn(
    nproc: int,
    module_args: Sequence[str],
    extra_env: Mapping[str, str],
    *,
    grace_s: float,
    master_addr: str | None = None,
    master_port: int | None = None,
    on_rank_killed: Callable[[str], None] | None = None,
) -> int:
    """Start ``nproc`` local ranks running ``python -m <module_args>`` (quiet on an early Ctrl-C) and supervise them.

    Returns the exit code for the whole run.  A rank that dies by a signal is
    named on stderr; the others get ``grace_s`` to notice and stop on their
    own, then are killed.  Ctrl-C is forwarded to every rank, which stops
    cleanly; after a grace period stragglers are killed.  No rank outlives
    this function.  ``on_rank_killed`` hears (once) the message naming a rank
    killed by a signal, so the command can record it where rank 0 no longer can.
    """
    addr = master_addr or "127.0.0.1"
    port = master_port or free_port()
    host = socket.gethostname()
    children: list[subprocess.Popen[bytes]] = []
    base_env = dict(os.environ)
    base_env.update(extra_env)
    for rank in range(nproc):
        env = dict(base_env)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR=addr,
            MASTER_PORT=str(port),
            FABRICSCOPE_LAUNCHER="spawn",
        )
        env.pop("TORCHELASTIC_RUN_ID", None)
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK_BOOTSTRAP, *module_args],
                env=env,
                # Same session as the launcher, as any launcher does: a session of
                # their own would put each rank in its own scheduler autogroup, and
                # oversubscribed ranks would then run measurably slower.  Ctrl-C from
                # the terminal reaches every rank directly; they stop cleanly.
                preexec_fn=set_parent_death_signal,
            )
        )
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        # Also when started in the background (SIGINT ignored) or stopped by a
        # scheduler (SIGTERM): forward the stop to the ranks and keep results.
        signal.signal(sig, _raise_interrupt)
    try:
        return _supervise(children, host, grace_s, on_rank_killed)
    except KeyboardInterrupt:
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT)
        _reap(children, 10.0)
        return 130
    finally:
        _reap(children, 0.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _supervise(
    children: list[subprocess.Popen[bytes]],
    host: str,
    grace_s: float,
    on_rank_killed: Callable[[str], None] | None = None,
) -> int:
    """Wait for every rank; after a failure, give the others time to notice, then kill them.

    Rank 0 keeps the results, so while it runs the others get ``grace_s``
    (the collective timeout plus a margin) to detect the failure and save;
    once rank 0 has exited, stragglers get a few seconds only.  A rank that
    is stopped (SIGSTOP, a debugger) cannot notice anything and is killed at
    once.  When rank 0 reported a usage error (exit 2), the others cannot
    start without it and are stopped without further words.
    """
    failure_code = 0
    deadline: float | None = None
    while True:
        running = [c for c in children if c.poll() is None]
        for rank, child in enumerate(children):
            code = child.returncode
            if code is None or code == 0 or failure_code:
                continue
            failure_code = code if code > 0 else 1
            if code < 0:
                name = signal.Signals(-code).name
                message = f"rank {rank} (pid {child.pid} on {host}) was killed by {name}"
                sys.stderr.write(f"error: {message}\n")
                if on_rank_killed is not None:
                    with contextlib.suppress(Exception):
                        on_rank_killed(message)
            deadline = time.monotonic() + grace_s
        if not running:
            break
        if deadline is not None:
            for child in running:
                if _is_stopped(child.pid):
                    child.kill()
            if children[0].returncode == 2:
                _reap(children, 0.0)
                break
            if children[0].returncode is not None:
                deadline = min(deadline, time.monotonic() + _STRAGGLER_S)
            if time.monotonic() > deadline:
                names = ", ".join(f"rank {children.index(c)} (pid {c.pid})" for c in running)
                verb = "was" if len(running) == 1 else "were"
                sys.stderr.write(f"error: {names} did not stop after the failure and {verb} killed\n")
                _reap(children, 0.0)
                break
        # Nothing to do while all is well: wake rarely, so that the launcher adds no
        # scheduling noise to latency-bound runs; after a failure, watch closely.
        time.sleep(0.05 if deadline is not None else _IDLE_POLL_S)
    if failure_code:
        return failure_code
    codes = [c.returncode for c in children]
    return max((c for c in codes if c is not None), default=0)


def _is_stopped(pid: int) -> bool:
    """Whether a process is stopped (state T), from /proc; False where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][:1] in ("T", "t")
    except (OSError, IndexError):
        return False


def _reap(children: list[subprocess.Popen[bytes]], wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    for child in children:
        remaining = deadline - time.monotonic()
        if child.poll() is None and remaining > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=remaining)
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            child.wait()
    if any(c.returncode is None for c in children):  # pragma: no cover - wait() above guarantees it
        raise RunError("a rank could not be stopped")
