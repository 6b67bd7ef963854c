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

Every key is optional.  The file's shape is one pydantic model in strict mode
(:class:`ExpectFile`, bounds in ``Field``), read through the one safe reader
(:func:`fabricscope.userfiles.read_toml`: regular files only, size and depth
capped): unknown sections and keys, wrong types and values out of range are
one :class:`~fabricscope.errors.ConfigError` naming the file, the key and what
is allowed.  :class:`Expectations` built from Python is checked by the same
model, so values are checked in one place.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationInfo

from fabricscope.doctor.inventory import DISTANCES
from fabricscope.errors import ConfigError, UsageError
from fabricscope.schema import StrictModel, any_case, no_bool, validate
from fabricscope.units import parse_rate, parse_size
from fabricscope.userfiles import read_toml

__all__ = ["LINK_LAYERS", "ExpectFile", "Expectations", "load_expectations", "parse_expectations"]

LINK_LAYERS = ("InfiniBand", "Ethernet")
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
RATE_GBPS = (1.0, 3200.0)
"""A compute NIC's rate must lie in this range (Gb/s): a value outside it is a unit mistake."""
_DEVICE = r"^[^\s,:=^]+(?::[1-9][0-9]{0,2})?$"
_BARE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d*)?|\.\d+)\s*$")
"""A size in quotes needs its suffix (``"16M"``): a bare ``"16"`` is refused, as a bare ``nic.rate`` is."""
MIN_BUFFER_BYTES = 64 << 10
"""The smallest tcp.buffer_max taken: the largest TCP window without window scaling; less is a unit mistake."""
_SIZE_HELP = 'bytes as a whole number (16777216) or a size with its binary suffix in quotes ("16M", "512K")'
_RATE_HELP = (
    "a rate with its decimal prefix in quotes: bits with b, bps, b/s or nothing (400G, 400Gbps, 400Gb/s), "
    "bytes with a capital B (50GB/s = 400 Gb/s)"
)
_DEVICE_HELP = "an RDMA device (mlx5_0), a port (mlx5_0:1) or a netdev name (eth2)"
_UNIT_MISTAKE = 'a unit mistake? give a size with its binary suffix in quotes ("16M")'
_UNITS = {"units": True}
"""Validation context of a file: rates and sizes are written with their units there (``"400G"``, ``"16M"``)."""


def _with_units(read: Callable[[Any], Any]) -> Any:
    """A before-validator: in a file (context ``units``) the value is written with its unit and ``read``
    converts it (``"400G"`` -> 400.0 Gb/s); from Python it is already a number."""

    def convert(value: Any, info: ValidationInfo) -> Any:
        return read(value) if info.context and info.context.get("units") else value

    return convert


def _read_rate(value: Any) -> float:
    wrong = ValueError(f"must be {_RATE_HELP}, got {value!r} (a bare number would be bits per second)")
    if not isinstance(value, str):
        raise wrong
    try:
        return parse_rate(value, what="nic.rate") / 1e9
    except UsageError:
        raise wrong from None


def _read_size(value: Any) -> int:
    wrong = ValueError(f"must be {_SIZE_HELP}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise wrong
    if isinstance(value, str) and _BARE_NUMBER.match(value):
        raise ValueError(
            f'needs a binary suffix K, M, G or T in quotes ("{value.strip()}M" is {value.strip()} MiB; '
            f'a number of bytes goes without quotes), got "{value}"'
        )
    try:
        return parse_size(value, what="tcp.buffer_max")
    except UsageError:
        raise wrong from None


def _whole(low: int, high: int) -> Any:
    return Field(default=None, ge=low, le=high, description=f"a whole number from {low} to {high}")


class NicSection(StrictModel):
    count: int | None = _whole(0, 1024)
    rate: Annotated[float | None, BeforeValidator(_with_units(_read_rate))] = Field(
        default=None,
        ge=RATE_GBPS[0],
        le=RATE_GBPS[1],
        description=f"from {RATE_GBPS[0]:g} to {RATE_GBPS[1]:g} Gb/s per NIC",
        json_schema_extra={"unit": "Gb/s", "hint": _RATE_HELP},
    )
    mtu: int | None = _whole(68, 65536)
    link_layer: Annotated[Literal["InfiniBand", "Ethernet"] | None, BeforeValidator(any_case(LINK_LAYERS))] = Field(
        default=None, description=f"one of {', '.join(LINK_LAYERS)}"
    )
    devices: list[Annotated[str, Field(pattern=_DEVICE, description=_DEVICE_HELP)]] | None = Field(
        default=None, min_length=1, description='a list of names like ["mlx5_0", "mlx5_1:1", "eth2"]'
    )


class PcieSection(StrictModel):
    gen: int | None = _whole(1, 7)
    width: Annotated[Literal[1, 2, 4, 8, 12, 16, 32] | None, BeforeValidator(no_bool)] = Field(
        default=None, description=f"one of {', '.join(str(w) for w in PCIE_WIDTHS)}"
    )


class GpuSection(StrictModel):
    count: int | None = _whole(0, 1024)
    nic_distance: Annotated[
        Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None, BeforeValidator(any_case(DISTANCES))
    ] = Field(default=None, description=f"one of {', '.join(DISTANCES)}")


class TcpSection(StrictModel):
    buffer_max: Annotated[int | None, BeforeValidator(_with_units(_read_size))] = Field(
        default=None,
        ge=MIN_BUFFER_BYTES,
        description=f"at least 64K ({MIN_BUFFER_BYTES} bytes)",
        json_schema_extra={"unit": "bytes", "hint": _UNIT_MISTAKE},
    )


class ExpectFile(StrictModel):
    """The ``--expect`` file: four optional sections."""

    nic: NicSection | None = None
    """The compute NICs."""
    pcie: PcieSection | None = None
    """Every GPU and compute NIC."""
    gpu: GpuSection | None = None
    tcp: TcpSection | None = None


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
        """Checked by :class:`ExpectFile`, as a file is; choices take their canonical spelling."""
        sections: dict[str, dict[str, Any]] = {}
        for (section, key), name in _FIELDS.items():
            value = getattr(self, name)
            if value is not None:
                sections.setdefault(section, {})[key] = list(value) if isinstance(value, tuple) else value
        checked = validate(ExpectFile, sections, source=self.source or "Expectations")
        for name, value in _flat(checked).items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


_FIELDS = {
    ("nic", "count"): "nic_count",
    ("nic", "rate"): "nic_rate_gbps",
    ("nic", "mtu"): "nic_mtu",
    ("nic", "link_layer"): "link_layer",
    ("nic", "devices"): "compute_devices",
    ("pcie", "gen"): "pcie_gen",
    ("pcie", "width"): "pcie_width",
    ("gpu", "count"): "gpu_count",
    ("gpu", "nic_distance"): "gpu_nic_distance",
    ("tcp", "buffer_max"): "tcp_buffer_bytes",
}
"""Each key of the file and the :class:`Expectations` field it fills."""
_EMPTY = {"nic": NicSection(), "pcie": PcieSection(), "gpu": GpuSection(), "tcp": TcpSection()}


def _flat(checked: ExpectFile) -> dict[str, Any]:
    """The :class:`Expectations` fields of a checked file (lists as tuples)."""
    values: dict[str, Any] = {}
    for (section, key), name in _FIELDS.items():
        value = getattr(getattr(checked, section) or _EMPTY[section], key)
        values[name] = tuple(value) if isinstance(value, list) else value
    return values


def parse_expectations(data: dict[str, Any], source: str) -> Expectations:
    """Validate parsed TOML; every message starts with ``source`` and names the key."""
    return Expectations(source=source, **_flat(validate(ExpectFile, data, source=source, context=_UNITS)))


def load_expectations(path: str) -> Expectations:
    """Read and validate an expectations file; any problem is a :class:`ConfigError` naming ``--expect``."""
    try:
        data = read_toml(path)
    except ConfigError as exc:
        raise ConfigError(f"--expect {exc}") from None
    return parse_expectations(data, path)
