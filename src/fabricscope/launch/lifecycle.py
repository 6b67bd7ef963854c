"""The life of a measuring rank, once for every command that runs ranks (``bench``, ``pairs``).

A command's worker calls, in order:

1. :func:`run_rank`: guard the start-up, check the config against the world
   (a usage error every rank finds alike is said once, by rank 0), run the body.
2. :func:`join`: form the process group over the command's
   :class:`~fabricscope.launch.config.LaunchConfig`; a rank that cannot join
   says why and leaves.
3. :func:`fit_to_memory`: the largest message every rank can hold.
4. :func:`start_heartbeat`: the rank's liveness beside its calls; a store
   that no longer answers ends the rank with rank 0's output recorded.
5. :class:`StopFlag` (:meth:`StopFlag.catch_signals`): Ctrl-C and SIGTERM ask to stop.
6. On a :class:`PeerCallFailed`, :func:`classify` tells a peer's failure from
   a stop that reached the peers first; :func:`conclude` applies the one exit
   policy (:func:`~fabricscope.launch.outcome.decide`) through the command's
   :class:`RankOutput`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Protocol, TypeVar

from fabricscope.errors import FabricscopeError, RunError, UsageError
from fabricscope.launch import rank
from fabricscope.launch.config import LaunchConfig
from fabricscope.launch.heartbeat import Heartbeat, Peer, describe_exception
from fabricscope.launch.outcome import Ending, decide
from fabricscope.launch.world import World

__all__ = [
    "EveryRankFound",
    "Interrupted",
    "PeerCallFailed",
    "RankOutput",
    "StopFlag",
    "agreed",
    "classify",
    "conclude",
    "fit_to_memory",
    "join",
    "run_rank",
    "start_heartbeat",
    "stop_interrupted",
]

T = TypeVar("T")


class EveryRankFound(UsageError):
    """A usage error that every rank finds alike (the config against the world, the memory they share):
    rank 0 says it, the others leave with the same exit code quietly."""


class PeerCallFailed(Exception):
    """A collective or message with peers raised: a peer died, hung past the timeout, or the backend failed."""

    def __init__(self, phase: str, cause: BaseException) -> None:
        super().__init__(f"{phase}: {cause}")
        self.phase = phase
        """What this rank was doing, as said to the user (``all_reduce 1 MiB``, ``the 0->1 bandwidth test``)."""
        self.cause = cause


class Interrupted(Exception):
    """The run was asked to stop: by Ctrl-C or SIGTERM, or because rank 0's stdout was closed."""

    def __init__(self, *, output_closed: bool = False) -> None:
        super().__init__("output closed" if output_closed else "signal")
        self.output_closed = output_closed
        """Every rank stopped because rank 0's reader went away, not because of a signal."""


class StopFlag:
    """A request to stop: read at every agreed point (a row, a round), and, when ``now``, every iteration.

    A signal reaches every rank (the terminal, a launcher and a scheduler all
    signal them all), so each can leave mid-row; a closed stdout is rank 0's
    alone, so it waits for the row to end and the others to agree.
    """

    __slots__ = ("is_set", "now")

    def __init__(self) -> None:
        self.is_set = False
        self.now = False

    def set(self, *, now: bool = False) -> None:
        self.is_set = True
        self.now = self.now or now

    def catch_signals(self) -> None:
        """From now on Ctrl-C and SIGTERM set this flag (stop now) instead of ending the process."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.set(now=True)

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)


class RankOutput(Protocol):
    """What rank 0 of a command holds: the Result being written, and how it ends."""

    @property
    def write_errors(self) -> list[str]:
        """Each file (or history save) that could not be written, in order."""
        ...

    def judged(self, ending: Ending) -> Ending:
        """``ending`` with what rank 0 knows: the records kept and where, the command's own verdicts."""
        ...

    def finish(self, status: str, error: str | None) -> None:
        """Record the final status and write every output for the last time."""
        ...


def run_rank(world: World, check: Callable[[], T], body: Callable[[T], int]) -> int:
    """One rank's part of a command: ``check()`` the config against the world, then ``body(checked)``.

    Usage errors of ``check`` (and :class:`EveryRankFound` from the body) are the
    same on every rank and said by rank 0 only; any other error by the rank that saw it.
    """
    rank.guard_startup(world.rank)
    rank.stop_when_orphaned()
    try:
        checked = agreed(check)
        return body(checked)
    except EveryRankFound as exc:
        if world.rank == 0:
            rank.say(0, f"error: {exc}")
        return exc.exit_code
    except FabricscopeError as exc:
        rank.say(world.rank, f"error: {exc}")
        return exc.exit_code


def agreed(check: Callable[[], T]) -> T:
    """``check()``, whose usage errors every rank finds alike (:class:`EveryRankFound`)."""
    try:
        return check()
    except EveryRankFound:
        raise
    except UsageError as exc:
        raise EveryRankFound(str(exc)) from None


def join(world: World, launch: LaunchConfig, command: str) -> rank.Group:
    """Form the process group; a rank that cannot (no torch, no GPU, no rendezvous) says why and leaves (exit 1).

    Local checks come first (in :func:`~fabricscope.launch.rank.join_group`): a
    rank that cannot run says so before the others wait for it.
    """
    try:
        return rank.join_group(world, backend=launch.backend, timeout_s=launch.timeout_s, command=command)
    except RunError as exc:
        rank.say(world.rank, f"error: {exc}")
        rank.finish_process(1)
        raise  # pragma: no cover - finish_process does not return


def start_heartbeat(
    world: World, peers: list[Peer], output: RankOutput | None, on_stall: Callable[[str], None]
) -> Heartbeat:
    """:func:`rank.start_heartbeat`; where the store no longer answers or is gone, the rank ends (exit 1)
    with rank 0's output recorded as failed, as a stall's is (interrupted on Ctrl-C meanwhile)."""

    def record(status: str, why: str) -> None:
        if output is not None:
            output.finish(status, why)

    try:
        return rank.start_heartbeat(world, peers, on_stall, on_leave=record)
    except RunError as exc:
        if output is None:  # its line names the rank already, as the bound's does
            rank.leave_now(1, f"error: {exc}")
        conclude(world, output, Ending(kind="run_error", reason=str(exc)))
        raise  # pragma: no cover - conclude does not return


def _buffers(count: int) -> str:
    return {1: "a buffer", 2: "two buffers"}.get(count, f"{count} buffers")


def fit_to_memory(
    world: World, group: rank.Group, *, buffers: int, reserve_bytes: int, smallest: int, largest: int, what: str
) -> int:
    """The largest message size, up to ``largest``, of which every rank holds ``buffers`` buffers and
    keeps ``reserve_bytes`` free (the tightest rank decides, so every rank runs the same sweep).

    Raises :class:`EveryRankFound` when not even ``smallest`` fits; ``what`` names it
    (``-b 1024``, ``a 1024-byte message``).
    """
    try:
        free = rank.tightest_free_bytes(world, group.torch, group.dist, group.device)
    except RuntimeError as exc:  # the backend's way to report a dead peer or a timeout
        rank.say(
            world.rank,
            f"error: the ranks' first exchange (the memory each has free) failed: {describe_exception(exc)}; "
            "a rank died, froze or cannot reach this one before anything was measured",
        )
        # Leave from here, the failed call still held: freeing it can make gloo abort the process.
        rank.finish_process(1)
        raise  # pragma: no cover - finish_process does not return
    limit = max(0, (free - reserve_bytes) // buffers)
    if largest <= limit:
        return largest
    if smallest > limit:
        raise EveryRankFound(
            f"{what} needs {_buffers(buffers)} of that size on every rank, but the tightest rank has "
            f"{free} bytes free: the largest size that fits is {limit} bytes"
        )
    return limit


def classify(failure: PeerCallFailed, *, stop: StopFlag, heartbeat: Heartbeat) -> Ending:
    """How a failed call with peers ended the run: a stop that reached a peer first, or that peer's failure.

    A rank that names a culprit says it leaves because of it, so that ranks
    diagnosing later name the culprit, not this rank.
    """
    if stop.is_set or rank.orphaned():
        # We were asked to stop too (or our launcher died, and with it maybe the
        # store): a peer that stopped first left this call failing.  Clean.
        stop.set()
        return Ending(kind="signal")
    culprit = heartbeat.diagnose()
    if not culprit and heartbeat.left_on_purpose:
        return Ending(kind="signal")  # a peer was asked to stop (the signal reached it only)
    reason = f"{culprit or describe_exception(failure.cause)}, during {failure.phase}"
    if culprit:
        reason += f" [{describe_exception(failure.cause)}]"
        heartbeat.mark_stopped()
    return Ending(kind="peer_failed", reason=reason)


def stop_interrupted(world: World, output: RankOutput | None, heartbeat: Heartbeat, ending: Ending) -> int:
    """End a run that was asked to stop (``ending`` is a ``signal`` or ``stdout_closed``): rank 0 keeps
    what was measured, and every rank leaves at once (130 for a signal; a closed stdout keeps the verdict's code)."""
    heartbeat.mark_stopped()
    if ending.kind == "signal" and not ending.reason and rank.orphaned():
        ending = replace(ending, reason="its launcher died")
    return conclude(world, output, ending)


def conclude(world: World, output: RankOutput | None, ending: Ending, *, exit_now: bool = True) -> int:
    """Record and say how the run ended; return (or, with ``exit_now``, exit with) its code.

    Rank 0 holds the output; another rank only says what it saw.  With
    ``exit_now`` the process leaves at once (a peer may be dead: no clean-up).
    """
    if output is None:
        verdict = decide(ending)
        if ending.kind in ("peer_failed", "run_error"):
            rank.say(world.rank, f"error: {ending.reason}")
    else:
        full = output.judged(ending)
        if ending.kind in ("complete", "stdout_closed"):
            first = decide(full)
            output.finish(first.status, first.error)
            # The files' own last writes (and the table's) may have failed just now: judge with them.
            full = replace(output.judged(full), write_errors=tuple(output.write_errors))
        verdict = decide(full)
        if ending.kind not in ("complete", "stdout_closed"):
            output.finish(verdict.status, verdict.error)
        for line in verdict.messages:
            rank.say(0, line)
    if exit_now:
        rank.finish_process(verdict.exit_code)
    return verdict.exit_code
