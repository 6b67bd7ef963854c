"""One error policy for the whole package.

Hierarchy::

    FabricscopeError            anything fabricscope raises on purpose (exit 1)
    ├── UsageError              a user mistake: a bad flag, size, op or value (exit 2)
    │   ├── ConfigError         a user-written file (cluster, model, expectations) is invalid
    │   │   └── InvalidValue    a value a typed config refuses (also a ValueError, so that
    │   │                       pydantic reports the key it was validating)
    │   └── ResultFormatError   a result file is corrupt, foreign or of an unknown version
    ├── MissingDependencyError  an optional dependency (torch, nvidia-ml-py) is not installed (exit 2)
    └── RunError                a failure while running: a rank died or hung, a disk filled up (exit 1)
        └── DoctorIncomplete    (fabricscope.doctor.findings) the doctor reached no verdict (exit 3)

Messages quote the offending value and say what is allowed.  The CLI prints
``error: <message>`` on stderr and exits with ``exit_code``; it never shows a
traceback for these.  ``assert`` is kept for internal invariants only.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ConfigError",
    "FabricscopeError",
    "InvalidValue",
    "MissingDependencyError",
    "ResultFormatError",
    "RunError",
    "UsageError",
    "closest",
]


class FabricscopeError(Exception):
    """Base class of every error fabricscope raises on purpose."""

    exit_code: int = 1


class UsageError(FabricscopeError):
    """The user asked for something invalid; nothing was run."""

    exit_code = 2


class ConfigError(UsageError):
    """A user-written file is malformed or holds an invalid value."""


class InvalidValue(ConfigError, ValueError):
    """A value a typed config or a library function refuses.

    A usage error for the CLI (exit 2); a ``ValueError`` for pydantic, which then
    reports the key it was validating.  With ``key`` (the parameter's name, e.g.
    ``gpus``) the message reads "gpus must be ..." in the library, and the CLI
    names its own flag instead ("--gpus must be ..."): the library never names
    command-line flags.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(f"{key} {message}" if key else message)
        self.key = key
        """The parameter the value was given for, or None."""
        self.reason = message
        """The message without the parameter's name."""

    def as_flag(self) -> str:
        """The message naming the flag of the same name (``root`` -> ``--root ...``), for a rank's report."""
        return f"--{self.key.replace('_', '-')} {self.reason}" if self.key else str(self)


class ResultFormatError(UsageError):
    """A result file cannot be read as a fabricscope Result."""


class MissingDependencyError(FabricscopeError):
    """An optional dependency needed by this command is not installed."""

    exit_code = 2


class RunError(FabricscopeError):
    """A run failed part-way (a rank died or hung, a write failed)."""

    exit_code = 1


def closest(name: str, allowed: Iterable[str]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest allowed name, or ``""``."""
    matches = difflib.get_close_matches(name[:100], list(allowed), n=1, cutoff=0.6)
    return f" (did you mean '{matches[0]}'?)" if matches else ""
