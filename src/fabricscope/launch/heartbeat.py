"""Finding out who failed when a collective fails, and never hanging forever.

Every rank runs a :class:`Heartbeat` thread with its own connection to the
rendezvous store.  Each beat publishes the wall time and the rank's progress
counter (collective phases finished).  When a collective raises (a peer closed
its sockets, or the backend's timeout fired), :meth:`Heartbeat.diagnose`
reads everybody's beats and names the culprit: a rank whose beats stopped is
dead or frozen; a rank that still beats but is behind is stuck; when the store
itself is gone, the rank hosting it (rank 0) is.

The same thread is a watchdog: if the main thread stays inside one phase
longer than its deadline (a backend call that ignores its timeout), it calls
``on_stall`` and ends the process.  (A rank whose launcher dies stops through
:func:`fabricscope.launch.rank.stop_when_orphaned`.)
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["Heartbeat", "Peer", "describe_exception", "host_record"]

_PREFIX = "fabricscope/hb/"


@dataclass(frozen=True, slots=True)
class Peer:
    rank: int
    host: str
    pid: int
    device: str


def host_record(peers: Sequence[Peer]) -> dict[str, Any]:
    """A Result's ``host``: rank 0's host name, and every rank's host, pid and device."""
    return {
        "hostname": peers[0].host if peers else "",
        "ranks": [{"rank": p.rank, "host": p.host, "pid": p.pid, "device": p.device} for p in peers],
    }


def describe_exception(exc: BaseException) -> str:
    """The first meaningful line of a backend error, without C++ source paths."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    # gloo appends advice sentences ("This is typically caused by..."): keep the first.
    first, sep, _ = text.partition(". ")
    return (first if sep else text)[:300]


class Heartbeat:
    """Publishes this rank's liveness and watches the main thread."""

    def __init__(
        self,
        *,
        store_factory: Callable[[float], Any],
        rank: int,
        peers: Sequence[Peer],
        interval_s: float = 0.5,
        store_host_rank: int | None = 0,
        store_address: tuple[str, int] | None = None,
        on_stall: Callable[[str], None] | None = None,
    ) -> None:
        self._store_factory = store_factory
        self._rank = rank
        self._peers = list(peers)
        self._interval = interval_s
        self._store_host_rank = store_host_rank
        self._store_address = store_address
        self._on_stall = on_stall
        self._progress = 0
        self._phase = "starting"
        self._deadline: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fabricscope-heartbeat", daemon=True)
        self._store: Any = None
        self._lock = threading.Lock()
        self._left = False
        self.left_on_purpose: list[int] = []
        """After :meth:`diagnose`: the ranks that said they were leaving because they were asked to."""

    # --- main-thread API -----------------------------------------------------

    def start(self) -> None:
        self._knock(2.0)
        self._store = self._store_factory(max(2.0, 4 * self._interval))
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._interval + 1)

    def enter(self, phase: str, deadline_s: float) -> None:
        """The main thread starts a phase that must finish within ``deadline_s``."""
        self._phase = phase
        self._deadline = time.monotonic() + deadline_s

    def leave(self) -> None:
        """The main thread finished the current phase."""
        self._progress += 1
        self._deadline = None

    @property
    def phase(self) -> str:
        return self._phase

    def mark_stopped(self) -> None:
        """Tell the others this rank leaves because it was asked to (Ctrl-C, SIGTERM)."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self._beat(-1)

    # --- thread ------------------------------------------------------------------

    def _beat(self, progress: int | None = None) -> None:
        with self._lock:
            if self._left:
                return
            if progress is not None and progress < 0:
                self._left = True
            value = self._progress if progress is None else progress
            self._store.set(f"{_PREFIX}{self._rank}", f"{time.time():.3f} {value}")

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline and self._on_stall is not None:
                self._on_stall(f"rank {self._rank} stayed in {self._phase} past its deadline")
                os._exit(1)
            try:
                self._beat()
            except Exception:
                # The store is gone (its host died): stop beating; diagnose() will say so.
                return

    # --- after a failure --------------------------------------------------------

    def diagnose(self, *, settle_s: float | None = None) -> str:
        """Name the rank(s) most likely at fault, in one sentence ("" when none stands out).

        Watches everybody's heartbeat for ``settle_s`` (default three beats):
        a rank whose beat does not change in that time is dead or frozen.  Only
        this host's clock is used, so clock skew between nodes cannot mislead.
        A rank that still beats but finished fewer phases than this one is stuck.
        """
        settle = 3 * self._interval + 0.5 if settle_s is None else settle_s
        first = self._read_beats_bounded()
        if first is None:
            return self._store_lost()
        others = {p.rank for p in self._peers if p.rank != self._rank}
        changed: set[int] = set()
        latest = first
        started = time.monotonic()
        while time.monotonic() - started < settle and not others <= changed:
            time.sleep(self._interval / 2)
            beats = self._read_beats_bounded()
            if beats is None:
                return self._store_lost()
            changed |= {rank for rank, beat in beats.items() if beat != first.get(rank)}
            latest = beats
        watched = time.monotonic() - started
        # A progress of -1 means the rank left on purpose (it was interrupted).
        self.left_on_purpose = sorted(r for r in others if _progress(latest.get(r)) == -1)
        stale = [
            p for p in self._peers if p.rank in others and p.rank not in changed and _progress(latest.get(p.rank)) != -1
        ]
        if stale:
            return "; ".join(
                f"rank {p.rank} (pid {p.pid} on {p.host}) stopped responding "
                + (f"(no heartbeat for {watched:.1f} s)" if p.rank in latest else "(it never sent a heartbeat)")
                for p in stale
            )
        mine = self._progress
        behind = [p for p in self._peers if p.rank in others and 0 <= _progress(latest.get(p.rank)) < mine]
        if behind:
            return "; ".join(
                f"rank {p.rank} (pid {p.pid} on {p.host}) is alive but stuck behind the others "
                f"(phase {_progress(latest.get(p.rank))} of {mine})"
                for p in behind
            )
        return ""

    def _store_lost(self) -> str:
        host_rank = self._store_host_rank
        if host_rank is None or host_rank == self._rank:
            return "the rendezvous store stopped answering"
        peer = next((p for p in self._peers if p.rank == host_rank), None)
        where = f" (pid {peer.pid} on {peer.host})" if peer else ""
        return f"rank {host_rank}{where}, which hosts the rendezvous store, died or became unreachable"

    def _read_beats_bounded(self, limit_s: float = 2.5) -> dict[int, str] | None:
        """Everybody's last beat, or None when the store does not answer within ``limit_s``.

        A frozen store host still accepts connections (the kernel does) but
        never answers, and a store client does not always honour its timeout:
        the read runs in a thread that is abandoned if it takes too long.
        """
        box: list[dict[int, str] | None] = []
        reader = threading.Thread(target=lambda: box.append(self._read_beats()), daemon=True)
        reader.start()
        reader.join(limit_s)
        return box[0] if box else None

    def _knock(self, timeout_s: float) -> None:
        """Raise OSError unless the store's port takes a plain connection: a dead host refuses at once,
        where a store client retries (with a random backoff, and logs) until its timeout."""
        if self._store_address is not None:
            socket.create_connection(self._store_address, timeout=timeout_s).close()

    def _read_beats(self) -> dict[int, str] | None:
        beats: dict[int, str] = {}
        try:
            self._knock(1.0)
        except OSError:
            return None
        try:
            client = self._store_factory(1.0)
            for peer in self._peers:
                key = f"{_PREFIX}{peer.rank}"
                if client.check([key]):
                    beats[peer.rank] = client.get(key).decode()
        except Exception:
            return None
        return beats


def _progress(beat: str | None) -> int:
    """The progress counter of a beat ``"<time> <progress>"`` (-2 when there is none)."""
    if not beat:
        return -2
    return int(beat.split()[1])


def make_store_factory(master_addr: str, master_port: int) -> Callable[[float], Any]:
    """A function that opens a new client connection to the rendezvous store."""

    def factory(timeout_s: float) -> Any:
        import torch.distributed as dist

        return dist.TCPStore(  # type: ignore[attr-defined]
            master_addr,
            master_port,
            is_master=False,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )

    return factory
