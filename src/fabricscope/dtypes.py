"""Datatypes and reduction ops, named as nccl-tests names them (``-d``, ``-o``)."""

from __future__ import annotations

from dataclasses import dataclass

from fabricscope.errors import UsageError, closest

__all__ = ["DTYPES", "REDOPS", "DType", "parse_dtypes", "parse_redops"]


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    """nccl-tests name (``float``, ``half``...)."""
    torch_name: str
    """Attribute of the ``torch`` module (``float32``...)."""
    size: int
    """Bytes per element."""
    exact_limit: int
    """Largest integer N such that every integer in [0, N] is exact in this type."""
    is_float: bool


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType(name="int8", torch_name="int8", size=1, exact_limit=127, is_float=False),
        DType(name="uint8", torch_name="uint8", size=1, exact_limit=255, is_float=False),
        DType(name="int32", torch_name="int32", size=4, exact_limit=2**31 - 1, is_float=False),
        DType(name="int64", torch_name="int64", size=8, exact_limit=2**63 - 1, is_float=False),
        DType(name="half", torch_name="float16", size=2, exact_limit=2**11, is_float=True),
        DType(name="float", torch_name="float32", size=4, exact_limit=2**24, is_float=True),
        DType(name="double", torch_name="float64", size=8, exact_limit=2**53, is_float=True),
        DType(name="bfloat16", torch_name="bfloat16", size=2, exact_limit=2**8, is_float=True),
    )
}
"""Supported datatypes in nccl-tests' order (``-d all`` runs them in this order)."""

_DTYPE_ALIASES = {
    "float32": "float",
    "fp32": "float",
    "float16": "half",
    "fp16": "half",
    "float64": "double",
    "fp64": "double",
    "bf16": "bfloat16",
    "char": "int8",
    "int": "int32",
    "uint8_t": "uint8",
}

REDOPS = ("sum", "prod", "max", "min", "avg")
"""Supported reductions in nccl-tests' order (``-o all`` runs them in this order)."""


def parse_dtypes(text: str) -> list[DType]:
    """``"float"`` -> [float]; ``"all"`` -> every type; aliases such as ``fp16`` accepted."""
    name = text.strip().lower()
    if name == "all":
        return list(DTYPES.values())
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise UsageError(
            f"unknown datatype {text!r}{closest(name, [*DTYPES, *_DTYPE_ALIASES])}: allowed are "
            f"{', '.join(DTYPES)} or all (aliases: {', '.join(_DTYPE_ALIASES)})"
        )
    return [DTYPES[name]]


def parse_redops(text: str) -> list[str]:
    """``"sum"`` -> [sum]; ``"all"`` -> every reduction."""
    name = text.strip().lower()
    if name == "all":
        return list(REDOPS)
    if name not in REDOPS:
        raise UsageError(
            f"unknown reduction op {text!r}{closest(name, REDOPS)}: allowed are {', '.join(REDOPS)} or all"
        )
    return [name]
