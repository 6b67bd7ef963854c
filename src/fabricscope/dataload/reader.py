"""Read a data set as a training input pipeline would, and time it.

The data set is cut into *extents* (a file, or a slice of a large file) that
``workers`` threads take from one queue; each extent is read with ``pread``
into the worker's own buffer, one ``block_size`` at a time, in order or (with
``random``) in a shuffled order that still reads every block exactly once.  A
single file is cut into one slice per worker, disjoint and contiguous, the way
fio's ``numjobs`` with ``offset_increment`` reads it.  ``os.preadv`` releases
the GIL and reads into the buffer without a copy, so threads scale as processes
would.

``direct`` opens files with ``O_DIRECT`` and reads into page-aligned buffers
(anonymous ``mmap``), so the page cache is bypassed.  A file system that refuses
``O_DIRECT`` (ramfs; tmpfs before Linux 6.6) gets a buffered read instead and
the :class:`Measurement` says so; nothing is reported as direct that was not.

One *pass* reads every file once.  With ``duration_s`` passes repeat until the
time is up (the last one stops mid-way); without it, one pass is made.  Every
byte counted was returned by the kernel: the test suite checks that a pass reads
exactly the files' sizes.
"""

from __future__ import annotations

import contextlib
import errno
import math
import mmap
import os
import queue
import random as random_module
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fabricscope.dataload.dataset import DataFile, DataSet
from fabricscope.errors import UsageError
from fabricscope.units import format_size
from fabricscope.userfiles import describe_mode

__all__ = [
    "DIRECT_ALIGN",
    "MAX_BLOCK_SIZE",
    "MAX_BUFFER_BYTES",
    "MAX_DURATION_S",
    "MAX_WORKERS",
    "MIN_BLOCK_SIZE",
    "MIN_DURATION_S",
    "Measurement",
    "Pass",
    "ReadConfig",
    "read_dataset",
]

DIRECT_ALIGN = 4096
"""O_DIRECT needs offsets, lengths and buffers aligned to the device's logical block; 4096 covers every device."""
MIN_BLOCK_SIZE = 512
MAX_BLOCK_SIZE = 256 << 20
MAX_WORKERS = 256
MAX_BUFFER_BYTES = 4 << 30
"""Read buffers of all workers together (workers x block_size) at most: each worker touches its buffer."""
MIN_DURATION_S = 0.1
MAX_DURATION_S = 7 * 86400.0

ProgressFn = Callable[[int], None]
"""Called from the measuring thread about ten times a second with the bytes read so far."""


@dataclass(kw_only=True, slots=True)
class ReadConfig:
    """How to read the data set."""

    workers: int = 1
    """Threads reading at once, each from its own extent."""
    block_size: int = 1 << 20
    """Bytes per read call."""
    random: bool = False
    """Shuffle the order of files and of blocks within each extent (each block still read once)."""
    direct: bool = False
    """Bypass the page cache with O_DIRECT (block_size must be a multiple of 4096)."""
    duration_s: float | None = None
    """Repeat passes until this many seconds have gone; None makes one pass."""
    drop_cache: bool = False
    """Ask the kernel to drop the files' cached pages before each pass."""
    seed: int | None = None
    """Seed of the shuffles (``random``); None draws one."""

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"workers must be 1 to {MAX_WORKERS}, got {self.workers}")
        if not MIN_BLOCK_SIZE <= self.block_size <= MAX_BLOCK_SIZE:
            raise UsageError(
                f"block size must be {MIN_BLOCK_SIZE} B to {MAX_BLOCK_SIZE >> 20} MiB, got {self.block_size} B"
            )
        if self.workers * self.block_size > MAX_BUFFER_BYTES:
            raise UsageError(
                f"{self.workers} workers x {format_size(self.block_size)} blocks need "
                f"{format_size(self.workers * self.block_size)} of read buffers; at most "
                f"{format_size(MAX_BUFFER_BYTES)} is allowed: use fewer workers or smaller blocks"
            )
        if self.direct and self.block_size % DIRECT_ALIGN:
            raise UsageError(
                f"direct reads need a block size that is a multiple of {DIRECT_ALIGN} (O_DIRECT reads whole "
                f"aligned blocks: e.g. 4K, 64K, 1M), got {self.block_size}"
            )
        if self.duration_s is not None and not MIN_DURATION_S <= self.duration_s <= MAX_DURATION_S:
            raise UsageError(
                f"duration must be {MIN_DURATION_S:g} s to {MAX_DURATION_S:g} s (7 days), got {self.duration_s:g} s"
            )


@dataclass(kw_only=True, slots=True)
class Pass:
    """One pass over the data set (or the part of it read before time ran out)."""

    index: int
    bytes: int = 0
    seconds: float = 0.0
    files: int = 0
    """Files read to their end in this pass."""
    complete: bool = False
    """Every extent of every file was read."""
    stopped: bool = False
    """Ctrl-C, a signal or ``duration_s`` ended it before every extent was read."""
    failed_reads: int = 0
    """Files whose reads failed in this pass (vanished, became unreadable)."""
    cached_fraction_before: float | None = None
    """Fraction of the data in the page cache just before the pass (None: unknown)."""
    dropped_files: int = 0
    """Files whose cached pages were dropped before the pass."""

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(kw_only=True, slots=True)
class Measurement:
    """What was read, how long it took, and what the numbers mean."""

    dataset: DataSet
    config: ReadConfig
    passes: list[Pass] = field(default_factory=list)
    direct_files: int = 0
    """File opens that used O_DIRECT."""
    fallback_files: int = 0
    """File opens where O_DIRECT was asked but refused, read buffered instead."""
    fallback_reason: str | None = None
    errors: list[str] = field(default_factory=list)
    """Files that failed mid-run (vanished, became unreadable), one line each, first ones only."""
    error_count: int = 0
    interrupted: bool = False

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.passes)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes)

    @property
    def files(self) -> int:
        return sum(p.files for p in self.passes)

    @property
    def bytes_per_s(self) -> float:
        seconds = self.seconds
        return self.bytes / seconds if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class _Extent:
    file: DataFile
    start: int
    end: int


def _extents(dataset: DataSet, config: ReadConfig, rng: random_module.Random) -> list[_Extent]:
    """Cut each file into at most ``workers`` block-aligned slices, in file order (or shuffled)."""
    out: list[_Extent] = []
    bs = config.block_size
    files = list(dataset.files)
    if config.random:
        rng.shuffle(files)
    for item in files:
        blocks = max(1, -(-item.size // bs))
        per = -(-blocks // config.workers) * bs
        start = 0
        while True:
            end = min(item.size, start + per)
            out.append(_Extent(item, start, end))
            if end >= item.size:
                break
            start = end
    return out


class _Counter:
    """Bytes read by one worker, readable by the measuring thread without a lock (an int store is atomic)."""

    __slots__ = ("bytes", "files")

    def __init__(self) -> None:
        self.bytes = 0
        self.files = 0


class _Run:
    """State shared by the workers of one pass."""

    def __init__(self, config: ReadConfig, measurement: Measurement, deadline: float | None) -> None:
        self.config = config
        self.measurement = measurement
        self.deadline = deadline
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.incomplete = False
        self.failed = 0
        self.parts_left: dict[str, int] = {}
        """Extents of each file not yet read; a file is read when its count reaches 0."""

    def extent_done(self, extent: _Extent, counter: _Counter) -> None:
        with self.lock:
            self.parts_left[extent.file.path] -= 1
            if self.parts_left[extent.file.path] == 0:
                counter.files += 1

    def note_error(self, path: str, exc: Exception) -> None:
        reason = (exc.strerror if isinstance(exc, OSError) else None) or f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.measurement.error_count += 1
            self.failed += 1
            self.incomplete = True
            line = f"{path}: {reason}"
            if len(self.measurement.errors) < 5 and line not in self.measurement.errors:  # each pass meets it again
                self.measurement.errors.append(line)

    def open(self, path: str) -> tuple[int, bool]:
        """Open for reading; O_DIRECT when asked and allowed.  Returns (fd, direct)."""
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
        if self.config.direct:
            try:
                return os.open(path, flags | os.O_DIRECT), True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.fallback(exc)
        return os.open(path, flags), False

    def fallback(self, exc: OSError, *, opened_direct: bool = False) -> None:
        with self.lock:
            self.measurement.fallback_files += 1
            if opened_direct:
                self.measurement.direct_files -= 1
            if self.measurement.fallback_reason is None:
                self.measurement.fallback_reason = exc.strerror or str(exc)


SHUFFLE_IN_MEMORY = 1 << 20
"""Blocks of one extent shuffled as a list; a larger extent walks a random affine permutation instead."""


def _shuffled(start: int, end: int, bs: int, rng: random_module.Random) -> Iterable[int]:
    """The block offsets of [start, end) in a random order, each exactly once."""
    n = -(-(end - start) // bs)
    if n <= SHUFFLE_IN_MEMORY:
        order = list(range(n))
        rng.shuffle(order)
        return (start + i * bs for i in order)
    # i -> (a*i + c) mod n is a permutation when gcd(a, n) == 1; a large random a scatters
    # neighbours far apart, which is all a storage benchmark needs (no list of n offsets in memory).
    while True:
        a = rng.randrange(n // 3, n)
        if math.gcd(a, n) == 1:
            break
    c = rng.randrange(n)
    return (start + ((a * i + c) % n) * bs for i in range(n))


def _read_extent(run: _Run, extent: _Extent, buf: mmap.mmap, counter: _Counter, rng: random_module.Random) -> bool:
    """Read one extent; True when it was read to its end."""
    config = run.config
    fd, direct = run.open(extent.file.path)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, f"became a {describe_mode(mode)}; only regular files are read")
        if direct:
            with run.lock:
                run.measurement.direct_files += 1
        elif hasattr(os, "posix_fadvise"):  # the hint fio gives too (fadvise_hint=1)
            advice = os.POSIX_FADV_RANDOM if config.random else os.POSIX_FADV_SEQUENTIAL
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, extent.start, extent.end - extent.start, advice)
        bs = config.block_size
        offsets: Iterable[int] = range(extent.start, extent.end, bs)
        if config.random:
            offsets = _shuffled(extent.start, extent.end, bs, rng)
        view = memoryview(buf)
        deadline = run.deadline
        for offset in offsets:
            if run.stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
                run.stop.set()
                return False
            want = min(bs, extent.end - offset)
            got = 0
            while got < want:
                if direct:
                    try:
                        # A full aligned block: at the end of the file the kernel returns what is left.
                        n = os.preadv(fd, [view], offset + got)
                    except OSError as exc:
                        if exc.errno != errno.EINVAL or got:
                            raise
                        # The file system took the open but refuses the read: read it buffered.
                        run.fallback(exc, opened_direct=True)
                        os.close(fd)
                        fd = os.open(extent.file.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                        direct = False
                        continue
                else:
                    n = os.preadv(fd, [view[: want - got]], offset + got)
                if n <= 0:
                    break  # the file shrank since the scan
                got += min(n, want - got)
                if direct:
                    break  # an aligned read past want would misalign the next one; count what was asked
            counter.bytes += got
            if got < want:
                raise OSError(errno.EIO, f"file ended at {offset + got} bytes, {extent.file.size} were expected")
        return True
    finally:
        os.close(fd)


def _worker(
    run: _Run,
    work: queue.SimpleQueue[_Extent | None],
    counter: _Counter,
    ready: threading.Barrier,
    start: threading.Event,
    rng: random_module.Random,
) -> None:
    buf = mmap.mmap(-1, run.config.block_size)  # page-aligned, as O_DIRECT requires
    zeros = bytes(min(run.config.block_size, 1 << 20))
    for at in range(0, run.config.block_size, len(zeros)):  # fault its pages in now, not inside the timed reads
        buf[at : at + len(zeros)] = zeros[: run.config.block_size - at]
    try:
        try:
            ready.wait()
        except threading.BrokenBarrierError:  # interrupted before the start
            return
        start.wait()
        while not run.stop.is_set():
            extent = work.get()
            if extent is None:
                return
            try:
                done = _read_extent(run, extent, buf, counter, rng)
            except Exception as exc:  # an OSError, or a bug: either way this extent was not read
                run.note_error(extent.file.path, exc)
                continue
            if not done:
                return
            run.extent_done(extent, counter)
    finally:
        buf.close()


def _one_pass(
    dataset: DataSet,
    run: _Run,
    index: int,
    rng: random_module.Random,
    progress: ProgressFn | None,
    done_before: int,
    stop: threading.Event | None = None,
) -> Pass:
    from fabricscope.dataload import pagecache

    config = run.config
    result = Pass(index=index)
    if config.drop_cache:
        result.dropped_files = pagecache.drop(dataset.files)
    result.cached_fraction_before = pagecache.cached_fraction(dataset.files)
    work: queue.SimpleQueue[_Extent | None] = queue.SimpleQueue()
    for extent in _extents(dataset, config, rng):
        work.put(extent)
        run.parts_left[extent.file.path] = run.parts_left.get(extent.file.path, 0) + 1
    for _ in range(config.workers):
        work.put(None)
    counters = [_Counter() for _ in range(config.workers)]
    ready = threading.Barrier(config.workers + 1)
    start = threading.Event()
    threads = [
        threading.Thread(
            target=_worker,
            args=(run, work, c, ready, start, random_module.Random(rng.random())),
            name=f"dataload-{i}",
            daemon=True,
        )
        for i, c in enumerate(counters)
    ]
    for thread in threads:
        thread.start()
    t0 = time.perf_counter()
    try:
        ready.wait()  # every worker has its buffer: the clock starts with the reads
        t0 = time.perf_counter()
        start.set()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)
                if stop is not None and stop.is_set():
                    raise KeyboardInterrupt  # from here, where it is caught: never lost in a callback
                if progress is not None:
                    progress(done_before + sum(c.bytes for c in counters))
    except KeyboardInterrupt:
        run.stop.set()
        run.measurement.interrupted = True
        ready.abort()
        start.set()
        for thread in threads:
            thread.join()
    result.seconds = time.perf_counter() - t0
    result.bytes = sum(c.bytes for c in counters)
    result.files = sum(c.files for c in counters)
    # Complete when every extent was read: a stop (the deadline, Ctrl-C) that comes after the last read
    # leaves the pass complete, and a read that failed is said as such, not as a stop.
    read_all = all(left == 0 for left in run.parts_left.values())
    result.complete = read_all and not run.incomplete
    result.stopped = not read_all and run.stop.is_set()
    result.failed_reads = run.failed
    if progress is not None:
        try:
            progress(done_before + result.bytes)
        except KeyboardInterrupt:
            run.measurement.interrupted = True
    return result


def read_dataset(
    dataset: DataSet,
    config: ReadConfig,
    *,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> Measurement:
    """Read ``dataset`` as ``config`` says and measure it.

    Ctrl-C (KeyboardInterrupt), or ``stop`` set (by a signal handler), stops
    the workers at their next block; the Measurement keeps what was read,
    with ``interrupted`` set.  A handler that sets ``stop`` is never lost, where
    a KeyboardInterrupt raised inside a garbage collector's callback is.
    """
    measurement = Measurement(dataset=dataset, config=config)
    rng = random_module.Random(config.seed)
    deadline = time.monotonic() + config.duration_s if config.duration_s is not None else None
    done = 0
    try:
        while True:
            run = _Run(config, measurement, deadline)
            one = _one_pass(dataset, run, len(measurement.passes) + 1, rng, progress, done, stop)
            if one.bytes or one.complete or not measurement.passes:
                measurement.passes.append(one)
            done += one.bytes
            if stop is not None and stop.is_set():
                measurement.interrupted = True
            if measurement.interrupted or deadline is None or time.monotonic() >= deadline:
                break
            if not one.complete and one.bytes == 0:
                break  # nothing could be read: repeating would spin
    except KeyboardInterrupt:  # between passes (dropping or checking the cache): keep what was read
        measurement.interrupted = True
    return measurement
