"""Helpers for the monitor tests: fixture sequences, real loopback traffic, free ports.

Imported as ``from monitor_helpers import ...`` (pytest puts ``tests/monitor`` on the path).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from fabricscope.monitor.deltas import Interval, Tracker
from fabricscope.monitor.samplers import default_samplers, take_snapshot
from fabricscope.monitor.samples import Notes
from fabricscope.monitor.summary import Summary, interval_records
from fabricscope.sysroot import SysRoot

FIXTURES = Path(__file__).parent / "fixtures"
SEQUENCE = FIXTURES / "roce-sequence"

LOOPBACK_SCRIPT = """
import socket, sys, threading, time
total = int(sys.argv[1]) << 20
seconds = float(sys.argv[2])
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def drain():
    conn, _ = server.accept()
    while conn.recv(1 << 20):
        pass
reader = threading.Thread(target=drain); reader.start()
client = socket.create_connection(server.getsockname())
chunk = b"x" * (1 << 20)
steps = max(1, int(seconds / 0.05))
per_step = max(1, (total >> 20) // steps)
sent = 0
while sent < total:
    for _ in range(per_step):
        client.sendall(chunk); sent += len(chunk)
    time.sleep(0.05)
client.close(); reader.join()
print(f"sent {sent >> 20} MiB over loopback")
"""
"""``python -c LOOPBACK_SCRIPT MIB SECONDS``: send MIB MiB over a TCP connection on 127.0.0.1, spread over SECONDS."""


class Sequence:
    """Sample the fixture trees t0, t1, t2... one (fake) second apart through the real samplers."""

    def __init__(self, path: Path = SEQUENCE) -> None:
        self.path = path
        self.notes = Notes()
        self.tracker = Tracker(self.notes)
        self.summary = Summary()
        self.intervals: list[Interval] = []

    def run(self, steps: int = 3) -> list[dict[str, object]]:
        records: list[dict[str, object]] = []
        for t in range(steps):
            snap = take_snapshot(default_samplers(SysRoot(self.path / f"t{t}")), self.notes)
            snap.time_s = float(t)
            interval = self.tracker.update(snap)
            if interval is not None:
                self.intervals.append(interval)
                rows = interval_records(interval, 0.0)
                self.summary.add(rows)
                records.extend(rows)
        return records


class LoopbackTraffic:
    """Real TCP traffic on 127.0.0.1 from a background thread, for as long as it runs."""

    def __init__(self, chunk: int = 1 << 20) -> None:
        self._stop = threading.Event()
        self.sent = 0
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(1)
        self._chunk = b"y" * chunk
        self._threads = [threading.Thread(target=self._drain), threading.Thread(target=self._send)]

    def __enter__(self) -> LoopbackTraffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        self._server.close()

    def _drain(self) -> None:
        conn, _ = self._server.accept()
        with conn:
            while conn.recv(1 << 20):
                pass

    def _send(self) -> None:
        with socket.create_connection(self._server.getsockname()) as client:
            while not self._stop.is_set():
                client.sendall(self._chunk)
                self.sent += len(self._chunk)
                self._stop.wait(0.005)
