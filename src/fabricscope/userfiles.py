"""Reading user-written files (cluster and model descriptions, doctor expectations).

One reader for every TOML file a user hands fabricscope, so that every
command words a missing, unreadable or malformed file the same way: one
:class:`~fabricscope.errors.ConfigError` line that names the file.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from fabricscope.errors import ConfigError

__all__ = ["read_toml"]


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; any problem is one ConfigError naming the file (and line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a TOML file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
