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

from fabricscope.errors import UsageError

__all__ = [
    "GB",
    "bytes_per_s_to_gbps",
    "format_size",
    "gbps",
    "parse_duration",
    "parse_rate",
    "parse_size",
]

GB = 1e9
"""Bytes in a GB, as nccl-tests reports bandwidth (1e9, not 2**30)."""

_BINARY = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DECIMAL = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMGTkmgt])(bit/s|bits/s|bit|bps|b/s|b|Bps|B/s|B)?\s*$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)


def parse_size(text: str | int, *, what: str = "size") -> int:
    """Parse ``"8"``, ``"64K"``, ``"1M"``, ``"1.5G"`` into bytes (binary suffixes).

    Raises :class:`UsageError` naming ``what`` for anything else, including
    negative numbers and sizes that are not a whole number of bytes.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise UsageError(f"{what} must not be negative, got {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(
            f"invalid {what} {str(text)!r}: use a number of bytes with an optional "
            "binary suffix K, M, G or T (for example 8, 64K, 1M, 8G)"
        )
    number, suffix, _ = match.groups()
    value = float(number) * _BINARY[suffix.upper()]
    if not value.is_integer():
        raise UsageError(f"invalid {what} {text!r}: it is not a whole number of bytes")
    return int(value)


def parse_rate(text: str | float, *, what: str = "rate") -> float:
    """Parse a link rate such as ``"200G"``, ``"100Gbps"`` or ``"50GB/s"`` into bits per second.

    Rates use decimal prefixes, as NIC speeds do (200G = 200e9 bit/s).  A
    text needs its prefix (a bare ``"400"`` would be 400 bit/s, never what was
    meant); ``b``, ``bit``, ``bps`` and ``b/s`` are bits, a capital ``B``
    (``GB/s``, ``GBps``) is bytes.  A number is taken as bits per second.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        match = _RATE_RE.match(str(text))
        if not match:
            raise UsageError(
                f"invalid {what} {str(text)!r}: give a rate with its decimal prefix, in bits "
                "(10G, 200Gbps, 400Gb/s) or bytes (50GB/s)"
            )
        number, prefix, unit = match.groups()
        value = float(number) * _DECIMAL[prefix.upper()] * (8 if unit and unit.startswith("B") else 1)
    if value <= 0 or not math.isfinite(value):
        raise UsageError(f"{what} must be a positive number, got {text!r}")
    return value


def parse_duration(text: str | float, *, what: str = "duration") -> float:
    """Parse ``"30"``, ``"30s"``, ``"500ms"``, ``"2m"`` into seconds (must be > 0)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _DURATION_RE.match(str(text))
        if not match:
            raise UsageError(
                f"invalid {what} {str(text)!r}: use seconds, optionally with a unit "
                "ms, s, m or h (for example 30, 500ms, 2m)"
            )
        number, unit = match.groups()
        scale = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[(unit or "s").lower()]
        seconds = float(number) * scale
    if seconds <= 0 or not math.isfinite(seconds):
        raise UsageError(f"{what} must be a positive number of seconds, got {text!r}")
    return seconds


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
