"""Validating user-written data into typed configs, with messages that name the file and the key.

One way for every user file (cluster and model descriptions, doctor
expectations, scenario tables): :mod:`fabricscope.userfiles` reads the file
safely, :func:`build` validates the parsed table into a config class.

Every config is a ``@dataclass(kw_only=True, slots=True)`` that validates its own
values in ``__post_init__`` by raising :class:`InvalidValue`, and sets
``__pydantic_config__ = FORBID_EXTRA``: pydantic's strict mode (no ``"2"`` or
``true`` or ``2.0`` for a whole number, no ``1`` for a boolean, no number for a
string) with unknown keys refused.  ``build`` hands the parsed table to pydantic,
which checks types and knows where in the file a value sits; the first problem
becomes one :class:`~fabricscope.errors.ConfigError` line such as::

    cluster.toml: network.transport = 'rdma-gdrr' is not allowed (did you mean
    'rdma-gdr'?): use 'tcp-socket', 'rdma' or 'rdma-gdr'

The table goes to pydantic as JSON text (``validate_json``): in strict mode
pydantic takes a table for a dataclass only from JSON (from Python it wants an
instance of the class; ``TypeAdapter(cls, config=...)`` is refused for a class
with its own config).  Two things strict mode does not do stay here: refusing
control characters in strings (escape codes would reach the terminal raw), and
TOML's dates and times, which JSON has no form for.

The same dataclasses are built directly from command-line flags; there an
:class:`InvalidValue` is simply a usage error (exit 2).  pydantic is imported
only when a file is read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from fabricscope.errors import ConfigError, InvalidValue, UsageError, closest
from fabricscope.shown import as_written

__all__ = ["FORBID_EXTRA", "build", "require"]

T = TypeVar("T")

FORBID_EXTRA: dict[str, Any] = {"extra": "forbid", "strict": True}
"""Assign to a config's ``__pydantic_config__``: unknown keys are errors, and values are not coerced."""


_ADAPTERS: dict[Any, Any] = {}


def _adapter(cls: Any) -> Any:
    """pydantic's validator for ``cls``, built once (building one takes milliseconds)."""
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def require(key: str, value: float, allowed: str, ok: Callable[[float], bool]) -> None:
    """Raise InvalidValue ``"<key> must be <allowed>, got <value>"`` unless ``value`` is a finite
    number for which ``ok`` holds (NaN and infinities are never allowed)."""
    if not (math.isfinite(value) and ok(value)):
        raise InvalidValue(f"{key} must be {allowed}, got {value!r}")


def _is_control(char: str) -> bool:
    return (ord(char) < 0x20 and char != "\t") or 0x7F <= ord(char) < 0xA0


def _check_plain(value: object, key: str) -> None:
    """Raise InvalidValue for a string with control characters, or a value JSON has no form for."""
    if isinstance(value, str):
        if any(_is_control(c) for c in value):
            raise InvalidValue(f"{key} = {value!r}: must be a string without control characters")
    elif isinstance(value, Mapping):
        for name, item in value.items():
            path = f"{key}.{name}" if key else str(name)
            if any(_is_control(c) for c in str(name)):
                raise InvalidValue(f"the key {path!r} holds control characters: keys are plain names")
            _check_plain(item, path)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, key)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise InvalidValue(f"{key} = {value}: a {type(value).__name__} is not a value fabricscope reads here")


def build(cls: type[T], data: Mapping[str, Any], *, source: str) -> T:
    """Validate ``data`` (a TOML table) into ``cls``; errors name ``source`` and the key."""
    from pydantic import ValidationError

    try:
        _check_plain(data, "")
        result: T = _adapter(cls).validate_json(json.dumps(data))
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(cls, data, exc.errors()[0])}") from None
    except UsageError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return result


def _field_names(cls: type[Any], path: tuple[Any, ...]) -> list[str]:
    """Keys allowed at ``path`` inside ``cls`` (following nested dataclass fields)."""
    current: Any = cls
    keyed = False  # the part is a key of a table of dataclasses (calibration.<op>)
    for part in path:
        if keyed:
            keyed = False
            continue
        if not (isinstance(current, type) and dataclasses.is_dataclass(current)):
            return []
        hints = get_type_hints(current)
        current = hints.get(str(part))
        if get_origin(current) in (dict, Mapping):
            current, keyed = get_args(current)[-1], True
        elif get_origin(current) is not None:
            current = next((a for a in get_args(current) if dataclasses.is_dataclass(a)), None)
    if isinstance(current, type) and dataclasses.is_dataclass(current):
        return [f.name for f in dataclasses.fields(current) if f.init]
    return []


_KINDS = {
    "int_type": ("a whole number", "whole numbers"),
    "float_type": ("a number", "numbers"),
    "bool_type": ("true or false", "booleans (true or false)"),
    "string_type": ("a string", "strings"),
    "list_type": ("a list", "lists"),
    "tuple_type": ("a list", "lists"),
}
"""What strict mode's type errors mean, said as a user writes TOML: one value, and the items of a list."""


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in the table as written, or None where the path leads nowhere."""
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _describe(cls: type[Any], data: Mapping[str, Any], error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc") or ())
    kind = error.get("type", "")
    value = error.get("input")
    ctx = error.get("ctx") or {}
    key = ".".join(str(part) for part in loc)
    listed = _at(data, loc[:-1]) if loc and isinstance(loc[-1], int) and kind in _KINDS else None
    if isinstance(listed, list):  # an item of a list: name the list and show it whole
        return f"{'.'.join(map(str, loc[:-1]))} = {as_written(listed)}: must be a list of {_KINDS[kind][1]}"
    if kind in _KINDS:
        return f"{key} = {as_written(value)}: must be {_KINDS[kind][0]}"
    if kind == "missing":
        return f"missing key '{key}'"
    if kind == "unexpected_keyword_argument":
        allowed = _field_names(cls, loc[:-1])
        hint = closest(str(loc[-1]), allowed)
        return f"unknown key '{key}'{hint}: allowed keys are {', '.join(allowed)}"
    if kind == "literal_error":
        if not isinstance(value, str) and str(ctx.get("expected", "")).startswith("'"):
            return f"{key} = {as_written(value)}: must be a string"
        options = [part.strip(" '") for part in str(ctx.get("expected", "")).replace(" or ", ",").split(",")]
        hint = closest(str(value), options)
        return f"{key} = {value!r} is not allowed{hint}: use {ctx.get('expected')}"
    if kind in ("dataclass_type", "dict_type"):
        return f"{key} = {as_written(value)}: input should be a dictionary (a [table] in TOML)"
    if kind == "value_error":
        reason = ctx.get("error") or error.get("msg")
        return f"{key}: {reason}" if key else str(reason)
    message = str(error.get("msg", "invalid value"))
    return f"{key} = {value!r}: {message[0].lower()}{message[1:]}" if key else message
