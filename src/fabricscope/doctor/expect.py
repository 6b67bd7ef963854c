"""``--expect FILE``: what a fleet's nodes should look like, in TOML.

::

    [nic]                       # the compute NICs: RDMA ports when there are any
    count = 8
    rate = "400G"               # link rate, decimal bits per second
    mtu = 4092
    link_layer = "InfiniBand"   # or "Ethernet" (RoCE)

    [pcie]                      # every GPU and compute NIC
    gen = 5
    width = 16

    [gpu]
    count = 8
    nic_distance = "PXB"        # farthest allowed: PIX, PXB, PHB, NODE or SYS

    [tcp]
    buffer_max = "16M"          # rmem/wmem maxima at least this (binary suffixes)

Every key is optional.  Unknown sections and keys, wrong types and values out
of range are :class:`~fabricscope.errors.ConfigError` naming the file, the key
and what is allowed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricscope.doctor.inventory import DISTANCES
from fabricscope.errors import ConfigError, UsageError, closest
from fabricscope.units import parse_rate, parse_size

__all__ = ["DEFAULT_TCP_BUFFER", "Expectations", "load_expectations", "parse_expectations"]

DEFAULT_TCP_BUFFER = 16 << 20
"""rmem/wmem maxima below this warn: 16 MiB covers 200 Gb/s at 0.5 ms of round trip."""

LINK_LAYERS = ("InfiniBand", "Ethernet")
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)


@dataclass(kw_only=True, slots=True)
class Expectations:
    """What the node should have; None means "no expectation" for that fact."""

    nic_count: int | None = None
    """Compute NICs: RDMA ports when the node has any, else physical NICs that are up."""
    nic_rate_gbps: float | None = None
    """Link rate of each compute NIC, Gb/s."""
    nic_mtu: int | None = None
    link_layer: str | None = None
    """``InfiniBand`` or ``Ethernet``, of every compute RDMA port."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    gpu_count: int | None = None
    gpu_nic_distance: str | None = None
    """The farthest a GPU's nearest compute NIC may be: one of :data:`DISTANCES`."""
    tcp_buffer_bytes: int = DEFAULT_TCP_BUFFER
    source: str | None = None
    """The file these came from, for messages."""

    def __post_init__(self) -> None:
        if self.link_layer is not None and self.link_layer not in LINK_LAYERS:
            raise ValueError(f"link_layer must be one of {LINK_LAYERS}, got {self.link_layer!r}")
        if self.gpu_nic_distance is not None and self.gpu_nic_distance not in DISTANCES:
            raise ValueError(f"gpu_nic_distance must be one of {DISTANCES}, got {self.gpu_nic_distance!r}")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _int_in(low: int, high: int) -> Callable[[Any, str], int]:
    def convert(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be a whole number from {low} to {high}, got {value!r}")
        if not low <= value <= high:
            raise ConfigError(f"{where} must be from {low} to {high}, got {value}")
        return value

    return convert


def _choice(allowed: tuple[Any, ...]) -> Callable[[Any, str], Any]:
    def convert(value: Any, where: str) -> Any:
        if isinstance(value, str):
            for option in allowed:
                if isinstance(option, str) and option.lower() == value.lower():
                    return option
        elif value in allowed and not isinstance(value, bool):
            return value
        shown = ", ".join(str(a) for a in allowed)
        hint = closest(str(value), [str(a) for a in allowed])
        raise ConfigError(f"{where} must be one of {shown}, got {value!r}{hint}")

    return convert


def _rate(value: Any, where: str) -> float:
    if not isinstance(value, str):
        raise ConfigError(f'{where} must be a rate with its unit in quotes, like "400G" or "200Gbps"; got {value!r}')
    try:
        return parse_rate(value, what=where) / 1e9
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


def _size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f'{where} must be bytes, like 16777216 or "16M"; got {value!r}')
    try:
        return parse_size(value, what=where)
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


_SCHEMA: dict[str, dict[str, tuple[str, Callable[[Any, str], Any]]]] = {
    "nic": {
        "count": ("nic_count", _int_in(0, 1024)),
        "rate": ("nic_rate_gbps", _rate),
        "mtu": ("nic_mtu", _int_in(68, 65536)),
        "link_layer": ("link_layer", _choice(LINK_LAYERS)),
    },
    "pcie": {
        "gen": ("pcie_gen", _int_in(1, 7)),
        "width": ("pcie_width", _choice(PCIE_WIDTHS)),
    },
    "gpu": {
        "count": ("gpu_count", _int_in(0, 1024)),
        "nic_distance": ("gpu_nic_distance", _choice(DISTANCES)),
    },
    "tcp": {
        "buffer_max": ("tcp_buffer_bytes", _size),
    },
}


def parse_expectations(data: Mapping[str, Any], source: str) -> Expectations:
    """Validate parsed TOML; every message starts with ``source`` and names the key."""
    values: dict[str, Any] = {}
    for section, body in data.items():
        keys = _SCHEMA.get(section)
        if keys is None:
            raise ConfigError(
                f"{source}: unknown section [{section}]{closest(section, _SCHEMA)}; "
                f"allowed sections: {', '.join(f'[{s}]' for s in _SCHEMA)}"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}] with keys), got {body!r}")
        for key, value in body.items():
            spec = keys.get(key)
            if spec is None:
                raise ConfigError(
                    f"{source}: unknown key {section}.{key}{closest(key, keys)}; "
                    f"allowed in [{section}]: {', '.join(keys)}"
                )
            field_name, convert = spec
            values[field_name] = convert(value, f"{source}: {section}.{key}")
    return Expectations(source=source, **values)


def load_expectations(path: str) -> Expectations:
    """Read and validate an expectations file; any problem is a :class:`ConfigError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"--expect {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--expect {path}: cannot read it ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return parse_expectations(data, path)
