"""``--expect FILE``: what a fleet's nodes should look like, in TOML.

::

    [nic]                       # the compute NICs
    count = 8
    rate = "400G"               # per NIC: decimal bits per second (400G, 400Gbps); 50GB/s is bytes = 400G
    mtu = 4092
    link_layer = "InfiniBand"   # or "Ethernet" (RoCE)
    devices = ["mlx5_0", "mlx5_1:1", "eth2"]   # the compute ports/NICs by name (else NCCL_IB_HCA, else all)

    [pcie]                      # every GPU and compute NIC
    gen = 5
    width = 16

    [gpu]
    count = 8
    nic_distance = "PXB"        # farthest allowed: PIX, PXB, PHB, NODE or SYS

    [tcp]
    buffer_max = "16M"          # rmem/wmem maxima at least this: binary suffix in quotes, or bytes; default: the BDP

Every key is optional.  Unknown sections and keys, wrong types and values out
of range are :class:`~fabricscope.errors.ConfigError` naming the file, the key
and what is allowed.  Values are checked in one place,
:meth:`Expectations.__post_init__`, whether they come from a file or from Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricscope.doctor.inventory import DISTANCES
from fabricscope.errors import ConfigError, UsageError, closest
from fabricscope.units import parse_rate, parse_size
from fabricscope.userfiles import read_toml

__all__ = ["LINK_LAYERS", "Expectations", "load_expectations", "parse_expectations"]

LINK_LAYERS = ("InfiniBand", "Ethernet")
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
RATE_GBPS = (1.0, 3200.0)
"""A compute NIC's rate must lie in this range (Gb/s): a value outside it is a unit mistake."""
_DEVICE = re.compile(r"^[^\s,:=^]+(?::[1-9][0-9]{0,2})?$")
_BARE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d*)?|\.\d+)\s*$")
"""A size in quotes needs its suffix (``"16M"``): a bare ``"16"`` is refused, as a bare ``nic.rate`` is."""
MIN_BUFFER_BYTES = 64 << 10
"""The smallest tcp.buffer_max taken: the largest TCP window without window scaling; less is a unit mistake."""
_SIZE_HELP = 'bytes as a whole number (16777216) or a size with its binary suffix in quotes ("16M", "512K")'
_RATE_HELP = (
    "a rate with its decimal prefix in quotes: bits with b, bps, b/s or nothing (400G, 400Gbps, 400Gb/s), "
    "bytes with a capital B (50GB/s = 400 Gb/s)"
)


@dataclass(kw_only=True, slots=True)
class Expectations:
    """What the node should have; None means "no expectation" for that fact."""

    nic_count: int | None = None
    """Compute NICs: compute RDMA ports when the node has any, else physical NICs that are up."""
    nic_rate_gbps: float | None = None
    """Link rate of each compute NIC, Gb/s."""
    nic_mtu: int | None = None
    link_layer: str | None = None
    """``InfiniBand`` or ``Ethernet``, of every compute RDMA port."""
    compute_devices: tuple[str, ...] | None = None
    """The compute ports and NICs by name: an RDMA device (``mlx5_0``), a port (``mlx5_0:1``) or a netdev."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    gpu_count: int | None = None
    gpu_nic_distance: str | None = None
    """The farthest a GPU's nearest compute NIC may be: one of :data:`DISTANCES`."""
    tcp_buffer_bytes: int | None = None
    """rmem/wmem maxima at least this; None: the bandwidth-delay product of the fastest compute NIC."""
    source: str | None = None
    """The file these came from, for messages."""

    def __post_init__(self) -> None:
        where = self.source or "Expectations"
        for key in _KEYS:
            value = getattr(self, key.field)
            problem = None if value is None else key.check(value)
            if problem is not None:
                raise ConfigError(f"{where}: {key.name} {problem}")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def _whole(low: int, high: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be a whole number from {low} to {high}, got {value!r}"
        return None if low <= value <= high else f"must be from {low} to {high}, got {value}"

    return check


def _one_of(allowed: tuple[Any, ...]) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value in allowed and not isinstance(value, bool):
            return None
        hint = closest(str(value), [str(a) for a in allowed])
        return f"must be one of {', '.join(str(a) for a in allowed)}, got {value!r}{hint}"

    return check


def _rate_range(value: Any) -> str | None:
    low, high = RATE_GBPS
    if isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high:
        return None
    return f"must be from {low:g} to {high:g} Gb/s per NIC, got {value!r} Gb/s: {_RATE_HELP}"


def _buffer_size(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= MIN_BUFFER_BYTES:
        return None
    return (
        f"must be at least 64K ({MIN_BUFFER_BYTES} bytes), got {value!r} bytes: a unit mistake? "
        'give a size with its binary suffix in quotes ("16M")'
    )


def _device_names(value: Any) -> str | None:
    if not isinstance(value, tuple) or not value or not all(isinstance(v, str) for v in value):
        return f'must be a list of names like ["mlx5_0", "mlx5_1:1", "eth2"], got {value!r}'
    bad = [v for v in value if not _DEVICE.match(v)]
    if bad:
        return f"holds {bad[0]!r}: give an RDMA device (mlx5_0), a port (mlx5_0:1) or a netdev name (eth2)"
    return None


def _same(value: Any, where: str) -> Any:
    return value


def _canonical(allowed: tuple[str, ...]) -> Callable[[Any, str], Any]:
    """Choices are matched without regard to case: ``ethernet`` is ``Ethernet``."""

    def read(value: Any, where: str) -> Any:
        if isinstance(value, str):
            return next((a for a in allowed if a.lower() == value.lower()), value)
        return value

    return read


def _read_rate(value: Any, where: str) -> float:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be {_RATE_HELP}; got {value!r} (a bare number would be bits per second)")
    try:
        return parse_rate(value, what=where) / 1e9
    except UsageError as exc:
        raise ConfigError(f"{exc} (a bare number would be bits per second)") from None


def _read_size(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"{where} must be {_SIZE_HELP}; got {value!r}")
    if isinstance(value, str) and _BARE_NUMBER.match(value):
        raise ConfigError(
            f'{where} "{value}" needs a binary suffix K, M, G or T ("{value.strip()}M" is {value.strip()} MiB); '
            "a number of bytes goes without quotes"
        )
    try:
        return parse_size(value, what=where)
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


def _read_names(value: Any, where: str) -> Any:
    return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True, slots=True)
class _Key:
    section: str
    key: str
    field: str
    check: Callable[[Any], str | None]
    """The one validation of a typed value: None when allowed, else what is wrong."""
    read: Callable[[Any, str], Any] = _same
    """From the TOML value to the typed one (units, case); raises for what cannot be read at all."""

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


_KEYS = (
    _Key("nic", "count", "nic_count", _whole(0, 1024)),
    _Key("nic", "rate", "nic_rate_gbps", _rate_range, _read_rate),
    _Key("nic", "mtu", "nic_mtu", _whole(68, 65536)),
    _Key("nic", "link_layer", "link_layer", _one_of(LINK_LAYERS), _canonical(LINK_LAYERS)),
    _Key("nic", "devices", "compute_devices", _device_names, _read_names),
    _Key("pcie", "gen", "pcie_gen", _whole(1, 7)),
    _Key("pcie", "width", "pcie_width", _one_of(PCIE_WIDTHS)),
    _Key("gpu", "count", "gpu_count", _whole(0, 1024)),
    _Key("gpu", "nic_distance", "gpu_nic_distance", _one_of(DISTANCES), _canonical(DISTANCES)),
    _Key("tcp", "buffer_max", "tcp_buffer_bytes", _buffer_size, _read_size),
)
_SECTIONS = {section: [k for k in _KEYS if k.section == section] for section in dict.fromkeys(k.section for k in _KEYS)}


def parse_expectations(data: Mapping[str, Any], source: str) -> Expectations:
    """Validate parsed TOML; every message starts with ``source`` and names the key."""
    values: dict[str, Any] = {}
    for section, body in data.items():
        keys = {k.key: k for k in _SECTIONS.get(section, [])}
        if not keys:
            raise ConfigError(
                f"{source}: unknown section [{section}]{closest(section, _SECTIONS)}; "
                f"allowed sections: {', '.join(f'[{s}]' for s in _SECTIONS)}"
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a table ([{section}] with keys), got {body!r}")
        for name, value in body.items():
            key = keys.get(name)
            if key is None:
                raise ConfigError(
                    f"{source}: unknown key {section}.{name}{closest(name, keys)}; "
                    f"allowed in [{section}]: {', '.join(keys)}"
                )
            values[key.field] = key.read(value, f"{source}: {key.name}")
    return Expectations(source=source, **values)


def load_expectations(path: str) -> Expectations:
    """Read and validate an expectations file; any problem is a :class:`ConfigError` naming ``--expect``."""
    try:
        data = read_toml(path)
    except ConfigError as exc:
        raise ConfigError(f"--expect {exc}") from None
    return parse_expectations(data, path)
