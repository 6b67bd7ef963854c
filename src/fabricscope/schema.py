"""Validating user-written data into typed configs, with messages that name the file and the key.

One way for every user file (cluster and model descriptions, doctor
expectations, scenario tables): :mod:`fabricscope.userfiles` reads the file
safely, :func:`build` validates the parsed table into a config class.

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
import math
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from fabricscope.errors import ConfigError, InvalidValue, UsageError, closest

__all__ = ["FORBID_EXTRA", "build", "require"]

T = TypeVar("T")

FORBID_EXTRA: dict[str, Any] = {"extra": "forbid"}
"""Assign to a config's ``__pydantic_config__``: unknown keys are errors, not ignored."""


_ADAPTERS: dict[Any, Any] = {}


def _adapter(cls: Any) -> Any:
    """pydantic's validator for ``cls``, built once (building one takes milliseconds)."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def require(key: str, value: Any, allowed: str, ok: Callable[[float], bool]) -> None:
    """Raise InvalidValue ``"<key> must be <allowed>, got <value>"`` unless ``value`` is a finite
    number for which ``ok`` holds (NaN and infinities are never allowed)."""
    if not (math.isfinite(value) and ok(value)):
        raise InvalidValue(f"{key} must be {allowed}, got {value!r}")


def _is_control(char: str) -> bool:
    return (ord(char) < 0x20 and char != "\t") or 0x7F <= ord(char) < 0xA0


_KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}


def _wrong_type(hint: Any, value: Any) -> str | None:
    """Why ``value`` (from TOML) cannot be a ``hint``, or None when it can (or when pydantic decides).

    Stricter than pydantic's lax mode, as the doctor's expectations reader: no ``true`` for a
    number, no ``"2"`` for a number, no ``32.0`` for a whole number, no ``1`` for a boolean.
    """
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        if value is None or len(options) != 1:
            return None
        return _wrong_type(options[0], value)
    if origin is Literal:
        return None if isinstance(value, str) or not all(isinstance(a, str) for a in get_args(hint)) else "a string"
    if origin is list:
        if not isinstance(value, list):
            return "a list"
        (item,) = get_args(hint) or (Any,)
        return next((f"a list of {why}s" for v in value if (why := _wrong_type(item, v)) is not None), None)
    if hint is bool:
        return None if isinstance(value, bool) else _KINDS[bool]
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else _KINDS[int]
    if hint is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else _KINDS[float]
    if hint is str:
        if not isinstance(value, str):
            return _KINDS[str]
        # Escape codes in a name would reach the terminal raw (colours, cursor moves, a title change).
        return "a string without control characters" if any(_is_control(c) for c in value) else None
    return None


def _check_types(cls: Any, data: Mapping[str, Any], prefix: str = "") -> None:
    """Raise InvalidValue for the first value of the wrong TOML type (unknown keys are pydantic's)."""
    hints = get_type_hints(cls)
    for key, value in data.items():
        hint = hints.get(key)
        if hint is None:
            continue
        name = f"{prefix}{key}"
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if isinstance(value, Mapping):
                _check_types(hint, value, f"{name}.")
            continue
        why = _wrong_type(hint, value)
        if why is not None:
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise InvalidValue(f"{name} = {shown}: must be {why}")


def build(cls: type[T], data: Mapping[str, Any], *, source: str) -> T:
    """Validate ``data`` (a TOML table) into ``cls``; errors name ``source`` and the key."""
    from pydantic import ValidationError

    try:
        _check_types(cls, data)
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
