"""Validating user-written TOML files: pydantic models in strict mode, one precise line per mistake.

A file's shape is a :class:`StrictModel` (sections are nested models) whose
fields carry their bounds (``Field(ge=..., le=...)``, ``Literal`` choices) and,
in ``description``, what is allowed, as a phrase.  :func:`validate` checks
parsed TOML (from :func:`fabricscope.userfiles.read_toml`, the one safe reader)
and turns the first problem into one :class:`~fabricscope.errors.ConfigError`
that names the file, the key, what is allowed and what was found::

    fleet.toml: nic.mtu must be a whole number from 68 to 65536, got 10
    fleet.toml: unknown key nic.speed (did you mean 'rate'?); allowed in [nic]: count, rate, mtu
    fleet.toml: gpu.nic_distance must be one of PIX, PXB, got 'PIXX' (did you mean 'PIX'?)

Strict mode takes no ``"8"`` or ``true`` for a number, no ``8.0`` for a whole
number.  A ``Field``'s ``json_schema_extra`` may add a ``unit`` (shown after
the value found) and a ``hint`` (shown after the message).  A validator that
raises ``ValueError("must be ...")`` has its message put after the key.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, cast, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from fabricscope.errors import ConfigError, closest

__all__ = ["StrictModel", "any_case", "no_bool", "validate"]

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base of a user file's models: strict types, unknown keys refused, values frozen once read."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def any_case(allowed: tuple[str, ...]) -> Any:
    """A before-validator: a choice written in any case (``ethernet``) is the allowed spelling (``Ethernet``)."""

    def canonical(value: Any) -> Any:
        if isinstance(value, str):
            return next((a for a in allowed if a.lower() == value.lower()), value)
        return value

    return canonical


def no_bool(value: Any) -> Any:
    """A before-validator for numeric choices: ``true`` is not 1 (pydantic's ``Literal[1]`` takes it)."""
    if isinstance(value, bool):
        raise PydanticCustomError("bool_type", "a boolean is not a number")
    return value


def validate(model: type[M], data: Mapping[str, Any], *, source: str, context: Any = None) -> M:
    """``data`` as a ``model``; the first problem is a ConfigError ``"<source>: <key> ..."``."""
    try:
        return model.model_validate(dict(data), context=context)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(model, exc.errors()[0])}") from None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()  # as TOML writes it
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:28]}...{text[-28:]}"


def _unwrap(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[type[BaseModel], Any, list[str]]:
    """The model holding the last named key of ``loc``, that key's field (None if unknown), and the names used."""
    current: type[BaseModel] = model
    names: list[str] = []
    info = None
    for index, part in enumerate(loc):
        if not isinstance(part, str):
            break  # a list index: the error is in an item of the field
        info = current.model_fields.get(part)
        names.append(part)
        inner = _unwrap(info.annotation) if info is not None else None
        if info is None or not _is_model(inner) or index == len(loc) - 1:
            break
        current = cast("type[BaseModel]", inner)
    return current, info, names


def _describe(model: type[BaseModel], error: Mapping[str, Any]) -> str:
    loc = tuple(error.get("loc") or ())
    kind = str(error.get("type", ""))
    value = error.get("input")
    holder, info, names = _walk(model, loc)
    key = ".".join(names)
    if kind == "extra_forbidden":
        return _unknown(holder, names, is_top=holder is model)
    annotation = _unwrap(info.annotation) if info is not None else None
    if _is_model(annotation):
        return f"{key} must be a table ([{key}] with keys), got {_shown(value)}"
    if kind == "value_error":
        reason = str((error.get("ctx") or {}).get("error") or error.get("msg"))
        if isinstance(loc[-1], int):
            return f"{key} holds {_shown(value)}, which {reason}"
        return f"{key} {reason}" if reason.startswith(("must", "is ", "needs")) else f"{key}: {reason}"
    if info is None or not info.description:
        return f"{key}: {error.get('msg', 'invalid value')}"
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    unit = f" {extra['unit']}" if "unit" in extra else ""
    hint = f": {extra['hint']}" if "hint" in extra else ""
    if isinstance(loc[-1], int):
        item = _item_description(annotation)
        return f"{key} holds {_shown(value)}: " + (f"give {item}" if item else f"{key} must be {info.description}")
    suggestion = ""
    if get_origin(annotation) is Literal and isinstance(value, str):
        suggestion = closest(value, [str(a) for a in get_args(annotation)])
    return f"{key} must be {info.description}, got {_shown(value)}{unit}{suggestion}{hint}"


def _item_description(annotation: Any) -> str | None:
    """The description of a list's items (``list[Annotated[str, Field(description=...)]]``), if any."""
    items = get_args(annotation)
    metadata = get_args(items[0])[1:] if items else ()
    return next((m.description for m in metadata if isinstance(m, FieldInfo) and m.description), None)


def _unknown(holder: type[BaseModel], names: list[str], *, is_top: bool) -> str:
    name = names[-1]
    allowed = list(holder.model_fields)
    hint = closest(name, allowed)
    if is_top and all(_is_model(_unwrap(f.annotation)) for f in holder.model_fields.values()):
        listed = ", ".join(f"[{a}]" for a in allowed)
        return f"unknown section [{name}]{hint}; allowed sections: {listed}"
    where = f"in [{'.'.join(names[:-1])}]" if len(names) > 1 else "keys"
    return f"unknown key {'.'.join(names)}{hint}; allowed {where}: {', '.join(allowed)}"
