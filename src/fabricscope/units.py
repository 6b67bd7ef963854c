"""Sizes, rates and the unit conventions of the field.

Sizes follow nccl-tests: the suffixes K, M, G (and T) are binary multiples
(``-b 1K`` is 1024 bytes).  ``KB``/``KiB`` spellings are accepted and also mean
1024, because that is what a user of ``-b 64KB`` means in this field.

Bandwidth follows nccl-tests too: GB/s means 1e9 bytes per second.  Link rates
of NICs are in bits per second with decimal prefixes (a 200G NIC moves
200e9 bits/s = 25e9 bytes/s).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from fabricscope.errors import UsageError
from fabricscope.shown import quoted

__all__ = [
    "GB",
    "MAX_SIZE",
    "OutOfRange",
    "bytes_per_s_to_gbps",
    "format_size",
    "gbps",
    "is_digits",
    "parse_duration",
    "parse_rate",
    "parse_size",
]

GB = 1e9
"""Bytes in a GB, as nccl-tests reports bandwidth (1e9, not 2**30)."""

_BINARY = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_DECIMAL = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_MAX_DIGITS = 30
"""Digits accepted in a number: a size, rate or duration never needs more; 400 digits is a typo."""

# One grammar for every number with a unit: a decimal number (an exponent only where
# the caller allows it), an optional prefix, an optional unit.
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([KMGTP]?)(i?[Bb])?\s*$", re.IGNORECASE | re.ASCII)
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*([KMGTPkmgtp])(bit/s|bits/s|bit|bps|b/s|b|Bps|B/s|B)?\s*$", re.ASCII)
_DURATION_RE = re.compile(
    r"^\s*((?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE | re.ASCII
)
_SECONDS = {"ms": Fraction(1, 1000), "s": Fraction(1), "m": Fraction(60), "h": Fraction(3600), "d": Fraction(86400)}

MAX_SIZE = 1 << 60
"""Largest size any command accepts (an exbibyte): beyond it a size is a typo."""


def _exact(number: str, what: str, text: object) -> Fraction:
    """The exact value of a decimal number string (no float rounding above 2**53)."""
    if len(number.replace(".", "").lstrip("0")) > _MAX_DIGITS:
        raise UsageError(f"{what} {quoted(str(text))} has too many digits (at most {_MAX_DIGITS})")
    return Fraction(number)


def _given_number(text: object, what: str, kind: str) -> Fraction | None:
    """``text`` as an exact number when the caller passed a number (NaN and infinities refused), else None."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if isinstance(text, float) and not math.isfinite(text):
            raise UsageError(f"{what} must be a positive {kind}, got {text!r}")
        return Fraction(text)
    return None


def _matched(pattern: re.Pattern[str], text: object, what: str, hint: str) -> re.Match[str]:
    """``text`` matched by ``pattern``, or a UsageError saying what to write instead."""
    match = pattern.match(str(text))
    if not match:
        raise UsageError(f"invalid {what} {quoted(str(text))}: {hint}")
    return match


def is_digits(text: str) -> bool:
    """Only ASCII digits, at least one: ``"²"`` passes ``str.isdigit`` and then fails ``int``."""
    return text.isascii() and text.isdigit()


def parse_size(text: str | int, *, what: str = "size") -> int:
    """Parse ``"8"``, ``"64K"``, ``"1M"``, ``"1.5G"`` into bytes (binary suffixes), exactly.

    ``B``, ``KB``, ``KiB`` mean bytes; a lowercase ``b`` means bits and is refused
    (``1Gb`` is not 1 GiB).  Raises :class:`UsageError` naming ``what`` for anything
    else, including negative numbers, sizes that are not a whole number of bytes
    and sizes above :data:`MAX_SIZE`.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = Fraction(text)
        if value < 0:
            raise UsageError(f"{what} must not be negative, got {text}")
    else:
        hint = "use a number of bytes with an optional binary suffix K, M, G or T (for example 8, 64K, 1M, 8G)"
        number, suffix, unit = _matched(_SIZE_RE, text, what, hint).groups()
        if unit and unit.endswith("b"):
            raise UsageError(
                f"invalid {what} {quoted(str(text))}: a lowercase b means bits, and sizes are bytes: "
                f"write {number}{suffix.upper()} or {number}{suffix.upper()}B"
            )
        value = _exact(number, what, text) * _BINARY[suffix.upper()]
    if value.denominator != 1:
        raise UsageError(f"invalid {what} {quoted(str(text))}: it is not a whole number of bytes")
    if value > MAX_SIZE:
        raise UsageError(f"{what} {quoted(str(text))} is too large (at most {MAX_SIZE} bytes, 1024P)")
    return int(value)


def parse_rate(text: str | float, *, what: str = "rate") -> float:
    """Parse a link rate such as ``"200G"``, ``"100Gbps"`` or ``"50GB/s"`` into bits per second.

    Rates use decimal prefixes, as NIC speeds do (200G = 200e9 bit/s).  A
    text needs its prefix (a bare ``"400"`` would be 400 bit/s, never what was
    meant); ``b``, ``bit``, ``bps`` and ``b/s`` are bits, a capital ``B``
    (``GB/s``, ``GBps``) is bytes.  A number is taken as bits per second.
    """
    value = _given_number(text, what, "number")
    if value is None:
        hint = "give a rate with its decimal prefix, in bits (10G, 200Gbps, 400Gb/s) or bytes (50GB/s)"
        number, prefix, unit = _matched(_RATE_RE, text, what, hint).groups()
        value = _exact(number, what, text) * _DECIMAL[prefix.upper()] * (8 if unit and unit.startswith("B") else 1)
    if value <= 0 or value > 10**21:
        raise UsageError(f"{what} must be a positive rate up to 1000 Pbit/s, got {quoted(str(text))}")
    return float(value)


_MAX_SECONDS = 10**12
_DURATION_RANGE = f"at most {_MAX_SECONDS:.0e} seconds (about 31,700 years)"


class OutOfRange(UsageError):
    """A duration written right and too long for any clock."""


def parse_duration(text: str | float, *, what: str = "duration") -> float:
    """Parse ``"30"``, ``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"``, ``"1e3"`` into seconds (must be > 0)."""
    seconds = _given_number(text, what, "number of seconds")
    if seconds is None:
        hint = "use seconds, optionally with a unit ms, s, m, h or d (for example 30, 500ms, 2m)"
        match = _matched(_DURATION_RE, text, what, hint)
        number, unit = match.group(1), match.group(2) or "s"
        mantissa = number.lower().split("e")[0]
        _exact(mantissa, what, text)
        exponent = int(number.lower().split("e")[1]) if "e" in number.lower() else 0
        if exponent > _MAX_DIGITS:
            raise OutOfRange(f"{what} {quoted(str(text))} is out of range: {_DURATION_RANGE}")
        if exponent < -_MAX_DIGITS:  # too short for any clock: not "too long"
            raise UsageError(f"{what} {quoted(str(text))} is shorter than any clock counts: give 1e-9 s or more")
        seconds = Fraction(number) * _SECONDS[unit.lower()]
    if seconds <= 0:
        raise UsageError(f"{what} must be a positive number of seconds, got {quoted(str(text))}")
    if seconds > _MAX_SECONDS:
        raise OutOfRange(f"{what} {quoted(str(text))} is out of range: {_DURATION_RANGE}")
    return float(seconds)


def format_size(n_bytes: int) -> str:
    """Format bytes with the largest binary suffix that divides them exactly.

    ``format_size(1048576) == "1M"``, ``format_size(1536) == "1.5K"``.
    """
    for suffix in ("T", "G", "M", "K"):
        scale = _BINARY[suffix]
        if n_bytes >= scale:
            value = n_bytes / scale
            text = f"{value:.2f}".rstrip("0").rstrip(".")
            return f"{text}{suffix}"
    return f"{n_bytes}"


def gbps(n_bytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second) for ``n_bytes`` moved in ``seconds``."""
    if seconds <= 0:
        return 0.0
    return n_bytes / GB / seconds


def bytes_per_s_to_gbps(rate: float) -> float:
    """Convert bytes per second to GB/s (1e9)."""
    return rate / GB
