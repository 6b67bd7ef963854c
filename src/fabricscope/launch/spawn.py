"""Start local ranks when no launcher did, and supervise them.

:func:`spawn` starts ``nproc`` ranks on this machine with the world variables a
launcher would set, passes Ctrl-C and SIGTERM on, ends the others when one
fails, and returns one exit code for the run.  Each rank dies with its launcher
(``PR_SET_PDEATHSIG``), so none outlives a killed one.

Ranks are forked from the launcher after it has imported what every rank
imports first (``warm``: torch), as torch's own DataLoader workers are:
importing torch costs seconds of CPU in every process that does it, and
``nproc`` ranks importing it side by side compete for the cores they are about
to measure with.  The launcher starts no thread of its own and touches no GPU
before forking (CUDA is first used in the ranks, as in a new process).  A
forked rank stays in its launcher's session, as any launcher's ranks do: a
session of their own would put each in its own scheduler autogroup, and
oversubscribed ranks would run measurably slower; Ctrl-C from the terminal
reaches every rank directly, and they stop cleanly.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence

from fabricscope.errors import RunError
from fabricscope.launch.world import free_port

__all__ = ["set_parent_death_signal", "spawn"]

_IDLE_POLL_S = 0.5
_STRAGGLER_S = 6.0
"""Seconds other ranks get to exit once rank 0, which keeps the results, has."""


def set_parent_death_signal(signum: int = signal.SIGTERM) -> None:
    """In a child (a forked rank, a ``preexec_fn``): receive ``signum`` when the parent dies, so nothing
    outlives it.

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


def spawn(
    nproc: int,
    module_args: Sequence[str],
    extra_env: Mapping[str, str],
    *,
    grace_s: float,
    master_addr: str | None = None,
    master_port: int | None = None,
    on_rank_killed: Callable[[str], None] | None = None,
    warm: Callable[[], object] | None = None,
    killed_code: int = 1,
) -> int:
    """Start ``nproc`` local ranks, each running ``MODULE.main()`` as ``python -m <module_args>`` would, and
    supervise them.

    ``warm`` is called once first (import torch), and the ranks are forked
    from this process with ``sys.argv`` set to ``module_args``; a rank's exit
    code is what ``main()`` returns or exits with (a Ctrl-C before the module
    has handlers of its own: 130, quietly).  Returns the exit code for the
    whole run.  A rank that dies by a signal is
    named on stderr; the others get ``grace_s`` to notice and stop on their
    own, then are killed.  Ctrl-C is forwarded to every rank, which stops
    cleanly; after a grace period stragglers are killed.  No rank outlives
    this function.  ``on_rank_killed`` hears (once) the message naming a rank
    killed by a signal, so the command can record it where rank 0 no longer can.  ``killed_code`` is the
    run's code when a rank was killed or stopped and rank 0 has no verdict of its own (doctor: 3, it
    could not complete; bench and pairs: 1, the run failed).
    """
    addr = master_addr or "127.0.0.1"
    port = master_port or free_port()
    host = socket.gethostname()
    children: list[_ForkedRank] = []
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    if warm is not None:
        # A stop while torch is imported ends the launcher at once: raised inside that import, a
        # KeyboardInterrupt is swallowed by an import of numpy (the run went on) or turned into an
        # ImportError.  First: what it sets in the environment (TORCH_CPP_LOG_LEVEL) the ranks see.
        for sig in stops:
            signal.signal(sig, _leave_before_any_rank)
        try:
            warm()
        except BaseException:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            raise
    base_env = dict(os.environ)
    base_env.update(extra_env)
    # Ranks are reaped here: a launcher started with SIGCHLD ignored would have them reaped by the
    # kernel, and their exit codes lost.
    previous_child = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in stops:
        # Also when started in the background (SIGINT ignored) or stopped by a
        # scheduler (SIGTERM): forward the stop to the ranks and keep results.
        # Before the first rank starts: a stop while they start reaches those started.
        signal.signal(sig, _raise_interrupt)
    try:
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
            _fork_rank(module_args, env, children)
        return _supervise(children, host, grace_s, on_rank_killed, killed_code)
    except KeyboardInterrupt:
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(signal.SIGINT)
                    # A stopped rank (SIGSTOP) takes the stop when continued: rank 0 keeps its rows.
                    child.send_signal(signal.SIGCONT)
        _reap(children, 10.0)
        return 130
    finally:
        _reap(children, 0.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.signal(signal.SIGCHLD, previous_child)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _leave_before_any_rank(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while the launcher imports what its ranks need: no rank exists, nothing to keep."""
    from fabricscope.launch.rank import leave_now

    leave_now(130, "interrupted while starting up: no rank had started")


class _ForkedRank:
    """A rank forked from this process, with the part of :class:`subprocess.Popen` that supervising it needs
    (a death by a signal reads as minus its number)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost, not zero
                self.returncode = 1
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _fork_rank(module_args: Sequence[str], env: Mapping[str, str], children: list[_ForkedRank]) -> None:
    """Fork a rank that runs ``module_args[0]``'s ``main()`` in ``env``, added to ``children`` before a stop
    can interrupt this process again; the rank never returns into the caller."""
    for stream in (sys.stdout, sys.stderr):  # what is buffered would be written twice
        with contextlib.suppress(Exception):
            stream.flush()
    from fabricscope.launch.rank import finish_process, guard_startup  # not on every command's import path

    launcher = os.getpid()
    # A stop that comes while forking waits until the fork is done: delivered inside it, it would be
    # raised in an at-fork handler, which swallows it (the run would go on), or in the new rank
    # before it has handlers of its own.
    stops = {signal.SIGINT, signal.SIGTERM}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    pid = os.fork()
    if pid:
        children.append(_ForkedRank(pid))
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    code = 1
    try:
        guard_startup()  # quiet until the module installs its own handlers
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        set_parent_death_signal()
        if os.getppid() != launcher:  # the launcher died before the line above
            raise SystemExit(130)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(module_args)
        returned = importlib.import_module(module_args[0]).main()
        code = returned if isinstance(returned, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        finish_process(code)


def _supervise(
    children: list[_ForkedRank],
    host: str,
    grace_s: float,
    on_rank_killed: Callable[[str], None] | None = None,
    killed_code: int = 1,
) -> int:
    """Wait for every rank; after a failure, give the others time to notice, then kill them.

    Rank 0 keeps the results, so while it runs the others get ``grace_s``
    (the collective timeout plus a margin) to detect the failure and save;
    once rank 0 has exited, stragglers get a few seconds only.  A rank that
    is stopped (SIGSTOP, a debugger) cannot notice anything and is named and
    killed at once.  When rank 0 reported a usage error (exit 2), the others
    cannot start without it and are stopped without further words.  Once rank
    0 has finished well, a rank stopped or still there ``grace_s`` later is
    named (a warning) and killed, one killed by a signal is named (a
    warning), and the run keeps rank 0's code.  Every rank killed by a signal
    is named, also when another failed in the same moment.  The run's code is
    rank 0's whenever rank 0 ended on its own (its verdict counts the others),
    or, where rank 0 succeeded, the first code another rank failed with; a
    rank 0 stopped after every other rank finished is named and killed.
    """
    failure_code = 0
    deadline: float | None = None
    finished_at: float | None = None
    others_done_at: float | None = None
    stopped: set[int] = set()
    said: set[int] = set()  # ranks whose ending was dealt with (or that were killed once the run was over)
    while True:
        running = [c for c in children if c.poll() is None]
        for rank, child in enumerate(children):
            code = child.returncode
            if code is None or code == 0 or child.pid in said:
                continue
            said.add(child.pid)
            if code < 0 and not failure_code and children[0].returncode == 0 and rank:
                # Rank 0 had finished and kept the results: said, and the run keeps its code.
                sys.stderr.write(
                    f"warning: rank {rank} (pid {child.pid} on {host}) was killed by {_signal_name(-code)} "
                    "after rank 0 finished\n"
                )
                continue
            if code < 0 and child.pid not in stopped:  # every death by a signal is named, not only the first failure
                message = f"rank {rank} (pid {child.pid} on {host}) was killed by {_signal_name(-code)}"
                sys.stderr.write(f"error: {message}\n")
                if not failure_code and on_rank_killed is not None:
                    with contextlib.suppress(Exception):
                        on_rank_killed(message)
            if not failure_code:
                failure_code = code if code > 0 else killed_code
                deadline = time.monotonic() + grace_s
        if not running:
            break
        if deadline is not None:
            for child in running:
                if child.pid not in stopped and _is_stopped(child.pid):
                    stopped.add(child.pid)
                    # It cannot notice the failure, and may be why the others failed: name it.
                    message = (
                        f"rank {children.index(child)} (pid {child.pid} on {host}) was stopped (SIGSTOP or a debugger)"
                    )
                    sys.stderr.write(f"error: {message} and was killed\n")
                    if child is children[0] and on_rank_killed is not None:
                        with contextlib.suppress(Exception):
                            on_rank_killed(f"{message}; the other ranks failed")
                    child.kill()
            if children[0].returncode == 2:
                _reap(children, 0.0)
                break
            if children[0].returncode is not None:
                deadline = min(deadline, time.monotonic() + _STRAGGLER_S)
            if time.monotonic() > deadline:
                names = ", ".join(f"rank {children.index(c)} (pid {c.pid} on {host})" for c in running)
                verb = "was" if len(running) == 1 else "were"
                sys.stderr.write(f"error: {names} did not stop after the failure and {verb} killed\n")
                _reap(children, 0.0)
                break
        elif children[0].returncode == 0:
            # Rank 0 finished and kept the results: the others only have to leave. One that is stopped
            # never will, and one still there a timeout later is hung: named, killed, the run's code kept.
            finished_at = finished_at if finished_at is not None else time.monotonic()
            for child in running:
                if child.pid not in stopped and _is_stopped(child.pid):
                    stopped.add(child.pid)
                    said.add(child.pid)
                    sys.stderr.write(
                        f"warning: rank {children.index(child)} (pid {child.pid} on {host}) was stopped (SIGSTOP or "
                        "a debugger) after rank 0 finished, and was killed\n"
                    )
                    child.kill()
            if time.monotonic() > finished_at + grace_s:
                names = ", ".join(f"rank {children.index(c)} (pid {c.pid} on {host})" for c in running)
                verb = "was" if len(running) == 1 else "were"
                sys.stderr.write(f"warning: {names} did not exit after rank 0 finished and {verb} killed\n")
                said.update(c.pid for c in running)
                _reap(children, 0.0)
                break
        elif running == children[:1] and all(c.returncode == 0 for c in children[1:]):
            # Every other rank finished well; rank 0 writes its results and leaves, unless it is stopped.
            others_done_at = others_done_at if others_done_at is not None else time.monotonic()
            rank0 = children[0]
            if time.monotonic() > others_done_at + _STRAGGLER_S and _is_stopped(rank0.pid):
                message = (
                    f"rank 0 (pid {rank0.pid} on {host}) was stopped (SIGSTOP or a debugger) after the other "
                    "ranks finished"
                )
                sys.stderr.write(f"error: {message}, and was killed\n")
                if on_rank_killed is not None:
                    with contextlib.suppress(Exception):
                        on_rank_killed(message)  # a file rank 0 left unfinished says why
                stopped.add(rank0.pid)
                said.add(rank0.pid)
                failure_code = killed_code
                rank0.kill()
        # Nothing to do while all is well: wake rarely, so that the launcher adds no
        # scheduling noise to latency-bound runs; after a failure, watch closely.
        time.sleep(0.05 if deadline is not None or finished_at is not None else _IDLE_POLL_S)
    own = children[0].returncode
    if own is not None and own >= 0 and children[0].pid not in stopped:
        # Rank 0 ended on its own: its code is the run's verdict (it saw the others fail, or doctor's
        # fleet report counted a rank that died; a rank killed meanwhile was named above), unless it
        # succeeded and another rank said it failed (a positive code of its own).
        errors = [c.returncode for c in children[1:] if c.returncode is not None and c.returncode > 0]
        return own if own or not errors else errors[0]
    if failure_code:
        return failure_code
    codes = [c.returncode for c in children]
    return max((c for c in codes if c is not None), default=0)


def _signal_name(number: int) -> str:
    """``SIGKILL``; ``signal 40`` for one Python has no name for (a real-time signal)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _is_stopped(pid: int) -> bool:
    """Whether a process is stopped (state T), from /proc; False where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][:1] in ("T", "t")
    except (OSError, IndexError):
        return False


def _reap(children: list[_ForkedRank], wait_s: float) -> None:
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
