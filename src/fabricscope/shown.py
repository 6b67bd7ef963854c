"""How a value from a user, a file or a flag is shown in a message or a report.

One line, whatever it holds: control characters, bidirectional overrides
and lone surrogates (undecodable names) are shown as their escapes, so a
value cannot move the cursor, recolour the terminal, reorder what follows
it or start a line of its own; a long value is cut, saying how long it was.
Every message and report shows user values through these three.
"""

from __future__ import annotations

import re

__all__ = ["as_written", "cut", "printable", "quoted"]

_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Control characters (tab aside), bidirectional overrides, and lone surrogates."""


def printable(text: str, limit: int | None = None, *, more: str = "") -> str:
    """``text`` on one line, safe for a terminal: tabs as spaces, the rest as escapes (``\\x1b``).

    With ``limit``, what is past it is cut and counted (``more`` adds where
    the whole value is: ``"; --json has them all"``).
    """
    if text.isascii() and text.isprintable():  # nothing to escape: the common case, without the search
        shown = text
    else:
        shown = _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], text.replace("\t", " "))
    if limit is not None and len(shown) > limit:
        shown = f"{shown[:limit]}… ({len(shown) - limit} more characters{more})"
    return shown


def quoted(text: str, limit: int = 60) -> str:
    """A value the user gave, quoted with its escapes visible; cut in the middle, with its length, when long."""
    shown = repr(text)
    return shown if len(shown) <= limit else f"{_middle_cut(shown, limit)} ({len(text)} characters)"


def cut(text: str, limit: int = 200) -> str:
    """``text`` (a path, a name) unquoted, printable, and cut in the middle when it is longer than ``limit``."""
    return _middle_cut(printable(text), limit)


def _middle_cut(shown: str, limit: int) -> str:
    """Both ends of ``shown`` around ``...`` when it is longer than ``limit``: a path keeps its file name."""
    if len(shown) <= limit:
        return shown
    keep = max(8, (limit - 3) // 2)
    return f"{shown[:keep]}...{shown[-keep:]}"


def as_written(value: object) -> str:
    """A TOML value as the file spells it: ``true``, ``'8'``, ``8``; long ones cut (a 400-digit number)."""
    if isinstance(value, bool):
        return str(value).lower()
    return quoted(value) if isinstance(value, str) else cut(repr(value), 60)
