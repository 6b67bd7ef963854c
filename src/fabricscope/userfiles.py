"""Reading user-written files safely: the one reader behind every file argument.

Cluster and model descriptions, doctor expectations, validation CSVs, result
files and nccl-tests logs all come in through :func:`read_text` (or
:func:`read_toml` / :func:`read_json` on top of it), so that every command treats
a hostile or careless file the same way:

- only regular files are read: a FIFO, a device (a link to ``/dev/zero``), a
  socket or a directory is refused at once (opened non-blocking, so a FIFO with
  no writer never blocks);
- at most ``max_bytes`` are read (a cluster file is kilobytes; a file that
  grows while it is read is cut off there and refused);
- a name too long for the system, a link loop, a missing or unreadable file,
  text that is not UTF-8: one line naming the file and what is wrong;
- a UTF-8 byte-order mark (a spreadsheet's export) is dropped;
- TOML and JSON nested deeper than :data:`MAX_DEPTH` levels, and TOML integers
  outside the 64 bits the TOML standard allows, are refused instead of
  overflowing the parser's stack or a later float conversion.

Every problem is one :class:`~fabricscope.errors.ConfigError` (or the error class
the caller names, for result files) and so one ``error:`` line and exit 2.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fabricscope.errors import ConfigError, UsageError
from fabricscope.shown import cut

__all__ = [
    "MAX_DEPTH",
    "MAX_TEXT_BYTES",
    "check_depth",
    "describe_mode",
    "file_key",
    "is_path",
    "parse_json",
    "read_json",
    "read_text",
    "read_toml",
]

MAX_TEXT_BYTES = 4 << 20
"""Default cap on a user-written file (cluster, model, expectations, CSV): 4 MiB."""

MAX_DEPTH = 64
"""Deepest nesting of tables and arrays accepted in a user file."""

_INT64 = 1 << 63

_KINDS = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISREG, "regular file"),
)


def describe_mode(mode: int) -> str:
    """A file type in words, for messages: ``FIFO``, ``character device``, ``directory``..."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _open_error(path: str, exc: OSError, what: str) -> str:
    shown = cut(path)
    if exc.errno == errno.ENOENT:
        return f"{shown}: no such {what}"
    if exc.errno == errno.ENAMETOOLONG:
        return (
            f"{shown}: file name too long ({len(path)} characters; this system allows 255 per name and 4096 per path)"
        )
    if exc.errno == errno.ELOOP:
        return f"{shown}: too many levels of symbolic links"
    if exc.errno == errno.ENOTDIR:
        return f"{shown}: a part of the path is not a directory"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{shown}: permission denied (cannot read the {what})"
    return f"{shown}: cannot read the {what} ({exc.strerror or exc})"


def file_key(path: str | os.PathLike[str]) -> object:
    """What tells one input file from another whatever the spelling of its path (``x.json``, ``./x.json``, a
    link): its device and inode; the path itself where it cannot be stat-ed (its reader then says why)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return os.fspath(path)
    return (info.st_dev, info.st_ino)


def is_path(text: str, *, suffix: str = ".toml") -> bool:
    """Whether a "preset or file" argument names a file: it ends in ``suffix``, holds a
    ``/``, or something exists under that name (a FIFO or device included, so that
    the reader, not a preset lookup, says what is wrong with it)."""
    if text.endswith(suffix) or os.sep in text:
        return True
    try:
        return os.path.lexists(text)
    except (OSError, ValueError):
        return False


def read_text(
    path: str | os.PathLike[str],
    *,
    what: str = "file",
    max_bytes: int = MAX_TEXT_BYTES,
    error: type[UsageError] = ConfigError,
) -> str:
    """Read a user's text file: regular files only, at most ``max_bytes``, UTF-8 (BOM dropped).

    ``what`` names the file in messages ("cluster file", "result file"); any
    problem raises ``error`` (a :class:`UsageError`, exit 2) with one line.
    """
    name = os.fspath(path)
    if name == "":
        raise error(f"an empty name is not a {what}: give a path")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(_open_error(name, exc, what)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{cut(name)}: is a {describe_mode(info.st_mode)}, not a regular {what}")
        if info.st_size > max_bytes:
            raise error(f"{cut(name)}: {info.st_size} bytes is too large for a {what} (at most {max_bytes})")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            try:
                chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            except OSError as exc:
                raise error(_open_error(name, exc, what)) from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise error(f"{cut(name)}: more than {max_bytes} bytes, too large for a {what}")
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            f"{cut(name)}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); a {what} is a text file"
        ) from None


_PLAIN = frozenset({str, float, bool, type(None)})
"""Scalars of parsed JSON and TOML that need no check beyond their depth (integers are checked for 64 bits)."""


def check_depth(value: object, *, source: str, error: type[UsageError] = ConfigError) -> None:
    """Refuse data nested deeper than :data:`MAX_DEPTH` or holding integers outside 64 bits.

    Walks iteratively, so it cannot itself overflow the stack.
    """
    # Containers go on the stack with their parent's entry and their key, so a path is spelt out only
    # for an error; scalars are checked where they are met (most of a large result is scalars).
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        entry = stack.pop()
        item, depth, _ = entry
        if depth > MAX_DEPTH:
            raise error(f"{source}: nested more than {MAX_DEPTH} levels deep (at {_path(entry) or 'the top'})")
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        allowed = depth + 1 <= MAX_DEPTH
        for key, child in pairs:
            kind = type(child)
            if allowed and (kind in _PLAIN or (kind is int and -_INT64 <= child < _INT64)):
                continue  # a parsed file's text, number, true/false or null, at a depth allowed
            if isinstance(child, dict | list):
                stack.append((child, depth + 1, (entry, key)))
            elif depth + 1 > MAX_DEPTH:  # a scalar counts as a level, as a container does
                where = _path((child, depth + 1, (entry, key)))
                raise error(f"{source}: nested more than {MAX_DEPTH} levels deep (at {where})")
            elif isinstance(child, int) and not isinstance(child, bool) and not -_INT64 <= child < _INT64:
                where = _path((child, depth + 1, (entry, key)))
                raise error(f"{source}: {where} has {len(str(abs(child)))} digits; whole numbers must fit in 64 bits")
        if isinstance(item, int) and not isinstance(item, bool) and not -_INT64 <= item < _INT64:
            raise error(f"{source}: a value has {len(str(abs(item)))} digits; whole numbers must fit in 64 bits")


def _path(entry: tuple[Any, int, Any]) -> str:
    """``a.b[3].c`` of a :func:`check_depth` stack entry, from its chain of parents."""
    parts: list[str] = []
    while entry[2] is not None:
        entry, key = entry[2]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


def read_toml(
    path: str | Path,
    *,
    what: str = "file",
    max_bytes: int = MAX_TEXT_BYTES,
    presets: Iterable[str] = (),
) -> dict[str, Any]:
    """Parse a user's TOML file; any problem is one ConfigError naming the file (and line).

    A missing ``NAME.toml`` whose NAME is one of ``presets`` says to drop the
    ``.toml`` (``--cluster dgx-h100-ndr.toml`` meant the preset ``dgx-h100-ndr``).
    """
    try:
        text = read_text(path, what=what, max_bytes=max_bytes)
    except ConfigError:
        stem = Path(path).name.removesuffix(".toml").lower()
        if stem in presets and not os.path.lexists(path):
            raise ConfigError(
                f"{path}: no such file (did you mean the {what.removesuffix(' file')} preset '{stem}'?)"
            ) from None
        raise
    source = cut(os.fspath(path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None
    check_depth(data, source=source)
    return data


def read_json(
    path: str | os.PathLike[str],
    *,
    what: str = "JSON file",
    max_bytes: int = MAX_TEXT_BYTES,
    error: type[UsageError] = ConfigError,
) -> Any:
    """Parse a JSON file through :func:`read_text`; malformed or too deep data is one ``error`` line."""
    text = read_text(path, what=what, max_bytes=max_bytes, error=error)
    return parse_json(text, source=cut(os.fspath(path)), what=what, error=error)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, *, source: str, what: str = "JSON file", error: type[UsageError] = ConfigError) -> Any:
    """Parse JSON read from a user file: ``NaN``/``Infinity``, malformed or too deep data is one ``error`` line."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: corrupt {what} (invalid JSON at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise error(f"{source}: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer of thousands of digits, NaN, Infinity
        raise error(f"{source}: corrupt {what} ({exc})") from None
    check_depth(data, source=source, error=error)
    return data
