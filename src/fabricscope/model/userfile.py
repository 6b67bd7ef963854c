"""Reading TOML files into typed configs, with messages that name the file and the key.

Every config is a ``@dataclass(kw_only=True, slots=True)`` that validates its own
values in ``__post_init__`` by raising :class:`InvalidValue`.  ``build`` hands a
parsed TOML table to pydantic, which checks types, refuses unknown keys and
knows where in the file a value sits; the first problem becomes one
:class:`~fabricscope.errors.ConfigError` line such as::

    cluster.toml: network.transport = 'rdma-gdrr' is not allowed (did you mean
    'rdma-gdr'?): use 'tcp-socket', 'rdma' or 'rdma-gdr'

The same dataclasses are built directly from command-line flags; there an
:class:`InvalidValue` is simply a usage error (exit 2).  pydantic is imported
only when a file is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from fabricscope.errors import ConfigError, UsageError, closest
from fabricscope.userfiles import read_toml

__all__ = ["FORBID_EXTRA", "InvalidValue", "build", "read_toml"]

T = TypeVar("T")

FORBID_EXTRA: dict[str, Any] = {"extra": "forbid"}
"""Assign to a config's ``__pydantic_config__``: unknown keys are errors, not ignored."""


class InvalidValue(ConfigError, ValueError):
    """A value a config refuses.

    A usage error for the CLI (exit 2); a ``ValueError`` for pydantic, which then
    reports the key it was validating.
    """


_ADAPTERS: dict[Any, Any] = {}


def _adapter(cls: Any) -> Any:
    """pydantic's validator for ``cls``, built once (building one takes milliseconds)."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def build(cls: type[T], data: Mapping[str, Any], *, source: str) -> T:
    """Validate ``data`` (a TOML table) into ``cls``; errors name ``source`` and the key."""
    from pydantic import ValidationError

    try:
        result: T = _adapter(cls).validate_python(dict(data))
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(cls, exc.errors()[0])}") from None
    except UsageError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return result


def _field_names(cls: type[Any], path: tuple[Any, ...]) -> list[str]:
    """Keys allowed at ``path`` inside ``cls`` (following nested dataclass fields)."""
    current: Any = cls
    for part in path:
        if not (isinstance(current, type) and dataclasses.is_dataclass(current)):
            return []
        hints = get_type_hints(current)
        current = hints.get(str(part))
        if get_origin(current) is not None:
            current = next((a for a in get_args(current) if dataclasses.is_dataclass(a)), None)
    if isinstance(current, type) and dataclasses.is_dataclass(current):
        return [f.name for f in dataclasses.fields(current) if f.init]
    return []


def _describe(cls: type[Any], error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc") or ())
    key = ".".join(str(part) for part in loc)
    kind = error.get("type", "")
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return f"missing key '{key}'"
    if kind == "unexpected_keyword_argument":
        allowed = _field_names(cls, loc[:-1])
        hint = closest(str(loc[-1]), allowed)
        return f"unknown key '{key}'{hint}: allowed keys are {', '.join(allowed)}"
    if kind == "literal_error":
        options = [part.strip(" '") for part in str(ctx.get("expected", "")).replace(" or ", ",").split(",")]
        hint = closest(str(value), options)
        return f"{key} = {value!r} is not allowed{hint}: use {ctx.get('expected')}"
    if kind == "value_error":
        reason = ctx.get("error") or error.get("msg")
        return f"{key}: {reason}" if key else str(reason)
    message = str(error.get("msg", "invalid value"))
    return f"{key} = {value!r}: {message[0].lower()}{message[1:]}" if key else message
