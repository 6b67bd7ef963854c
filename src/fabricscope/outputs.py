"""Where a command's outputs go: output-path checks, standard output held for data, FIFOs, atomic writes.

Every command checks its output files with :func:`check_output_path` before any work (a
folder, a database, one of its own inputs, a FIFO without a reader), claims standard
output for ``-`` (:func:`claim_stdout`: tables and notes then go to stderr), and writes
files whole with :func:`atomic_write_text`: a reader sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import select
import stat
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

from fabricscope.errors import InvalidValue, RunError, UsageError
from fabricscope.shown import cut

__all__ = [
    "OUTPUT_FIELDS",
    "STDOUT",
    "OutputConfig",
    "SaveRequest",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output_folder",
    "check_output_path",
    "check_outputs",
    "claim_stdout",
    "data_stdout",
    "print_kept",
    "release_stdout",
    "say_written",
    "silence_stdout",
    "silence_stream",
    "stdout_holds_data",
    "stream_failure",
    "stream_write_failed",
    "written_through",
]


STDOUT = "-"
"""An output path of ``-`` means standard output, as most tools read it."""

_STREAM_TIMEOUT_S = 30.0
"""Longest wait for a stream's reader (a FIFO, a pipe) to take what we write."""

_held: dict[str, int] = {}
"""FIFOs opened by :func:`check_output_path`, kept open so that their reader stays."""

_STDOUT_NAMES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
"""Other names of standard output, which :func:`check_output_path` treats as ``-`` for the report."""

_data_out: TextIO | None = None
"""The real standard output, while an output flag holds it for its data (:func:`claim_stdout`)."""
_claimed_by: str | None = None
"""The output flag that holds standard output."""


def claim_stdout(flag: str, path: str | os.PathLike[str] | None) -> bool:
    """When ``path`` is ``-`` (or ``/dev/stdout``), give standard output to the data of ``flag``: the human
    report goes to standard error.  Returns whether ``path`` names standard output.

    Every command prints its report (tables, summaries, notes, warnings) on ``sys.stdout``.
    From this call on, ``sys.stdout`` is standard error, and the data is written to the
    real standard output (:func:`data_stdout`), so that ``--json - | jq`` or ``-o - >
    cluster.toml`` gets the JSON, CSV or TOML alone, and it parses.  :func:`check_output_path`
    calls this, so every output flag does it before any work; a process that writes data
    it did not check (a rank a launcher started) calls it itself.  Only one output can be
    standard output: a second flag is refused (:class:`UsageError`).  Child processes keep
    the real standard output: a command that starts one whose output is not data gives it
    standard error when :func:`stdout_holds_data`.
    """
    global _data_out, _claimed_by
    if path is None or not (os.fspath(path) == STDOUT or os.path.abspath(path) in _STDOUT_NAMES):
        return False
    if _claimed_by is not None:
        if _claimed_by != flag:
            raise UsageError(
                f"{_claimed_by} and {flag} both write to standard output, where only one can: give one a file name"
            )
        return True
    sys.stdout.flush()
    _data_out, _claimed_by = sys.stdout, flag
    sys.stdout = sys.stderr
    return True


def stdout_holds_data() -> bool:
    """Whether an output flag holds standard output for its data (:func:`claim_stdout`)."""
    return _claimed_by is not None


def release_stdout() -> None:
    """Undo :func:`claim_stdout`: ``sys.stdout`` is standard output again (the CLI calls it as a command ends)."""
    global _data_out, _claimed_by
    if _data_out is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        sys.stdout = _data_out
    _data_out = _claimed_by = None


def data_stdout() -> TextIO:
    """Where the data of an output given ``-`` goes: the real standard output, claimed or not."""
    return _data_out if _data_out is not None else sys.stdout


def say_written(path: str, detail: str = "") -> None:
    """The ``wrote PATH[: detail]`` line, on stderr; for ``-`` only the detail (the data on stdout is the rest)."""
    if path != STDOUT:
        sys.stderr.write(f"wrote {path}{': ' + detail if detail else ''}\n")
    elif detail:
        sys.stderr.write(f"wrote standard output: {detail}\n")


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """``--save``/``--label``: keep a final Result in the history (see :mod:`fabricscope.store.save`)."""

    label: str | None = None
    kept_in: str | None = None
    """The file that also holds the Result, named when the history cannot take it."""


@dataclass(kw_only=True, slots=True)
class OutputConfig:
    """Where a measuring command's rank 0 keeps what it measured, carried to the rank that writes it."""

    json_path: str | None = None
    """``--json``: the Result, rewritten as the run goes."""
    csv_path: str | None = None
    """``--csv``: one line per record."""
    nccl_json_path: str | None = None
    """``-J``: the run in nccl-tests' own JSON layout, written at the end."""
    save: bool = False
    """``--save``/``--label``: add the final Result to the history."""
    label: str | None = None
    argv: list[str] = field(default_factory=list)
    """The command line, kept in the Result."""

    def __post_init__(self) -> None:
        for key, path in self._named():
            if path is not None and not path.strip():
                raise InvalidValue("needs a file name, got an empty one", key=key)
        if self.json_path and self.csv_path and _same_file(self.json_path, self.csv_path):
            raise InvalidValue(
                f"names the same file as the JSON output ({self.json_path}): give each its own", key="csv"
            )

    def _named(self) -> tuple[tuple[str, str | None], ...]:
        return (("json", self.json_path), ("csv", self.csv_path), ("nccl_json", self.nccl_json_path))

    def flagged(self) -> list[tuple[str, str | None]]:
        """Each output file with the flag that names it, as :func:`check_outputs` takes them."""
        return [("--json", self.json_path), ("--csv", self.csv_path), ("-J", self.nccl_json_path)]

    def save_request(self) -> SaveRequest | None:
        """What ``--save``/``--label`` asked for, or None."""
        if not (self.save or self.label is not None):
            return None
        return SaveRequest(label=self.label, kept_in=self.json_path)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


OUTPUT_FIELDS = tuple(f.name for f in fields(OutputConfig))
"""The keys an :class:`OutputConfig` adds to a command's flat config dict."""


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: Sequence[tuple[str, str | None]], *, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output that :func:`check_output_path` refuses, or two outputs that
    name one file: by name, through a link (``c.md`` a link to ``c.json``) or as the same file."""
    given = [(flag, path) for flag, path in outputs if path is not None]
    for index, (flag, path) in enumerate(given):
        for other_flag, other in given[:index]:
            if path not in (STDOUT, *_STDOUT_NAMES) and (
                os.path.abspath(path) == os.path.abspath(other) or _same_file(path, other)
            ):
                raise UsageError(f"{other_flag} and {flag} name the same file {cut(path)}: give each its own")
        check_output_path(flag, path, inputs=[i for i in inputs if os.path.lexists(i)])


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def check_output_path(flag: str, path: str, *, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Refuse, before any work, an output file that cannot or must not be written.

    Raises :class:`UsageError` (one line, exit 2) when ``path`` is empty, too long,
    a folder, in a folder that does not exist, a read-only file, one of the
    command's ``inputs`` (or inside an input folder, such as doctor's ``--root``),
    a FIFO nobody reads, or a file that cannot be created (checked by creating and
    removing a probe file, since ``os.access`` says yes to root everywhere).  ``-``
    and streams or devices (``/dev/stdout``, ``/dev/null``) are written through.
    """
    if path == "":
        raise UsageError(f"{flag} needs a file name, got an empty one (use - for standard output)")
    if claim_stdout(flag, path) and path == STDOUT:
        return
    shown = cut(path)
    try:
        info: os.stat_result | None = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(
                f"{flag} {shown}: file name too long ({len(path)} characters; this system allows 255 per name)"
            ) from None
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        example = os.path.join(path, "result.csv" if flag == "--csv" else "result.json")
        raise UsageError(f"{flag} {shown} is a folder: give a file name, e.g. {example}")
    for source in inputs:
        name = os.fspath(source)
        if os.path.isdir(name) and _inside(path, name):
            raise UsageError(f"{flag} {shown} is inside {cut(name)}, an input of this command: write it elsewhere")
        if _same_file(path, name):
            raise UsageError(f"{flag} {shown} is also an input of this command: writing it would destroy it")
    if info is not None and stat.S_ISFIFO(info.st_mode):
        _hold_fifo(flag, path)
        return
    if written_through(path):
        return
    if _is_database(path):
        raise UsageError(
            f"{flag} {shown} is a SQLite database (fabricscope's history, perhaps): "
            "writing a result over it would destroy it; give another name"
        )
    if info is not None and stat.S_ISREG(info.st_mode) and not info.st_mode & 0o222:
        raise UsageError(f"{flag} {shown} is read-only: fabricscope does not replace it (make it writable first)")
    folder = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {shown}: the folder {cut(folder)} does not exist")
    if len(os.path.basename(path)) > 255 - 40:  # room for the temporary name written beside it
        raise UsageError(f"{flag} {shown}: file name too long ({len(os.path.basename(path))} characters)")
    probe = os.path.join(folder, f".fabricscope-probe.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise UsageError(f"{flag} {shown}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    with contextlib.suppress(OSError):
        os.unlink(probe)


def check_output_folder(
    flag: str,
    folder: str,
    *,
    files: Iterable[str],
    make: bool,
    what: str,
    inputs: Iterable[str | os.PathLike[str]] = (),
    outputs: Sequence[tuple[str, str | None]] = (),
) -> None:
    """Refuse, before anything is written, an output folder that cannot take the ``files`` a command writes there.

    ``folder`` must be a folder (with ``make``, one that can be made).  Each of ``files`` in it must pass
    :func:`check_output_path` against the command's ``inputs`` (so a FIFO, a read-only file, or a link to
    an input of that name is refused, and the folder must be writable), must not be a folder, and must not
    be the file one of the command's other ``outputs`` (flag, path) names.  ``what`` says in an error what
    the folder is for.
    """
    if not folder.strip():
        raise UsageError(f"{flag} needs a folder name, got an empty one")
    shown = cut(folder)
    try:
        info: os.stat_result | None = os.stat(folder)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise UsageError(f"{flag} {shown}: name too long ({len(folder)} characters)") from None
        info = None
    if (info is None and os.path.lexists(folder)) or (info is not None and not stat.S_ISDIR(info.st_mode)):
        raise UsageError(f"{flag} {shown} exists and is not a folder: give a folder for {what}")
    if info is None:
        if not make:
            raise UsageError(f"{flag} {shown} is not a folder: give an existing folder for {what}")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{flag} {shown}: cannot make the folder ({exc.strerror or exc})") from None
    present = [i for i in inputs if os.path.lexists(i)]
    for name in files:
        path = os.path.join(folder, name)
        if os.path.isdir(path):
            raise UsageError(f"{flag} {cut(path)} is a folder, where {what} needs a file of that name: move it")
        for other_flag, other in outputs:
            if other and (os.path.abspath(other) == os.path.abspath(path) or _same_file(other, path)):
                raise UsageError(f"{other_flag} and {flag} name the same file {cut(path)}: give each its own")
        check_output_path(flag, path, inputs=present)


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _is_database(path: str) -> bool:
    """Whether ``path`` (or the database it is the journal of) is a SQLite database."""
    real = os.path.realpath(path)
    candidates = [real] + [real[: -len(s)] for s in ("-wal", "-shm", "-journal") if real.endswith(s)]
    for name in candidates:
        try:
            with open(name, "rb") as handle:
                if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) and handle.read(16) == _SQLITE_MAGIC:
                    return True
        except OSError:
            continue
    return False


def _hold_fifo(flag: str, path: str) -> None:
    """Open a FIFO for writing now, without blocking: refuse one that nobody reads."""
    key = os.path.realpath(path)
    if key in _held:
        return
    try:
        _held[key] = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UsageError(
                f"{flag} {cut(path)} is a FIFO that no process is reading: start its reader first"
            ) from None
        raise UsageError(f"{flag} {cut(path)}: cannot open the FIFO ({exc.strerror or exc})") from None


_STREAMS = re.compile(r"/dev/std(out|err)$|/dev/fd/|/proc/[^/]+/fd/")
"""Paths that name one of this process's open files, whatever it is."""


def written_through(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a stream or device: written in place (appended), never replaced.

    That is ``-`` and ``/dev/stdout`` and the like (``> out.txt`` must keep the
    table already there), and anything that is not a regular file: a pipe, a
    device, a socket.  ``os.stat`` follows ``/dev/stdout`` -> ``/proc/self/fd/1``
    to a pipe, which ``realpath`` cannot name.
    """
    if os.fspath(path) == STDOUT or _STREAMS.match(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


STREAM_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""Errors of a write to a standard stream that the user's redirection caused (``> /dev/full``, a full disk)."""


def stream_write_failed(exc: OSError) -> bool:
    """Whether ``exc`` is a write to standard output or error that failed for lack of room, not a bug: named
    files are written through :func:`atomic_write_bytes`, which says which file failed."""
    return exc.filename is None and exc.errno in STREAM_FULL


def stream_failure(exc: OSError, what: str, json_path: str | None, items: str) -> str:
    """The one line saying that standard output could not take ``what`` (a full output), and whether the
    ``--json`` file keeps the measured ``items``: ``cannot write the table to standard output (No space
    left on device); --json run.json keeps every row``."""
    kept = f"--json {json_path} keeps every {items}" if json_path else f"no --json file keeps the {items}s"
    return f"cannot write the {what} to standard output ({exc.strerror or exc}); {kept}"


def print_kept(stream: TextIO, emit: Callable[[], object], what: str, json_path: str | None, items: str) -> str | None:
    """Run ``emit`` (which writes to ``stream``) and flush it.  A reader that went away (``| head``) leaves the
    verdict as it is: None.  A full output (``> /dev/full``) comes back as its one line (:func:`stream_failure`)
    for the caller to end with once what was measured is kept.  Either way later writes go nowhere."""
    try:
        emit()
        stream.flush()
    except BrokenPipeError:
        silence_stream(stream)
    except OSError as exc:
        if not stream_write_failed(exc):
            raise
        silence_stream(stream)
        return stream_failure(exc, what, json_path, items)
    return None


def silence_stdout() -> None:
    """Point stdout at /dev/null: later writes, and Python's flush at exit, go nowhere."""
    silence_stream(data_stdout())


def silence_stream(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null (its reader went away, or it is full)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def _write_stream(path: str, data: bytes) -> None:
    """Append to a stream without ever waiting forever for its reader."""
    key = os.path.realpath(path) if path != STDOUT else ""
    if path == STDOUT:
        out = data_stdout()
        try:
            out.flush()
        except BrokenPipeError:
            silence_stdout()
            return
        fd, own = out.fileno(), False
    elif key in _held:
        fd, own = _held[key], False
    else:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            why = "no process is reading it" if exc.errno == errno.ENXIO else exc.strerror or str(exc)
            raise RunError(f"cannot write {cut(path)}: {why}") from None
        own = True
    try:
        deadline = time.monotonic() + _STREAM_TIMEOUT_S
        while data:
            _, ready, _ = select.select([], [fd], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise RunError(f"cannot write {cut(path)}: its reader took nothing for {_STREAM_TIMEOUT_S:g} s")
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                if path == STDOUT or _STREAMS.match(os.path.abspath(path)):
                    silence_stdout()  # our own reader went away (| head): not a failure of the run
                    return
                raise RunError(f"cannot write {cut(path)}: no process reads it any more") from None
            except OSError as exc:
                raise RunError(f"cannot write {cut(path)}: {exc.strerror or exc}") from None
    finally:
        if own:
            os.close(fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A link is followed: the file it points at is replaced, the link kept.  A
    stream or device (``/dev/stdout``, a pipe) is appended to, never replaced.  On
    failure (disk full, permission) the previous content of ``path`` is left
    untouched and a :class:`RunError` says why.
    """
    if written_through(path):
        _write_stream(os.fspath(path), data)
        return
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
    directory = target.parent
    tmp_name = None
    try:
        # Not mkstemp: its file is private (0600); a result should get the umask's mode.
        tmp_name = str(directory / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:  # a replaced file keeps its mode
            os.chmod(tmp_name, mode)
        os.replace(tmp_name, target)
        tmp_name = None
    except OSError as exc:
        raise RunError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
