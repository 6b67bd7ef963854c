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

    [bench]                     # doctor --bench: a short bench on the node
    nproc = 8                   # ranks (default: the node's GPUs, else 2)
    iters = 20
    busbw = [{ op = "all_reduce", size = "64M", min = "150GB/s" }]   # nccl-tests' busbw floor per op and size

Every key is optional.  The file's shape is five typed sections (:class:`ExpectFile`),
validated the one way every user file is (:func:`fabricscope.schema.build`:
strict TOML types, unknown keys refused with the closest name) after the one
safe reader (:func:`fabricscope.userfiles.read_toml`: regular files only, size
and depth capped).  Each section checks its own values (``check``, run by ``ExpectFile``),
and :class:`Expectations` built from Python is checked by the same sections:
values are checked in one place, whether they come from a file or from Python.
Every problem is one :class:`~fabricscope.errors.ConfigError` naming the file,
the key, what is allowed and what was found.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from fabricscope.doctor.inventory import DISTANCES
from fabricscope.errors import ConfigError, InvalidValue, UsageError, closest
from fabricscope.schema import FORBID_EXTRA, build
from fabricscope.shown import as_written
from fabricscope.units import parse_rate, parse_size
from fabricscope.userfiles import read_toml

__all__ = [
    "LINK_LAYERS",
    "BenchFloor",
    "BenchSection",
    "ExpectFile",
    "Expectations",
    "GpuSection",
    "NicSection",
    "PcieSection",
    "TcpSection",
    "load_expectations",
    "parse_expectations",
]

LINK_LAYERS = ("InfiniBand", "Ethernet")
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
RATE_GBPS = (1.0, 3200.0)
"""A compute NIC's rate must lie in this range (Gb/s): a value outside it is a unit mistake."""
_DEVICE = re.compile(r"^[^\s,:=^]+(?::[1-9][0-9]{0,2})?$")
_BARE_NUMBER = re.compile(r"^\s*(?:\d+(?:\.\d*)?|\.\d+)\s*$", re.ASCII)
"""A size in quotes needs its suffix (``"16M"``): a bare ``"16"`` is refused, as a bare ``nic.rate`` is."""
MIN_BUFFER_BYTES = 64 << 10
"""The smallest tcp.buffer_max taken: the largest TCP window without window scaling; less is a unit mistake."""
_DEVICE_EXAMPLE = '["mlx5_0", "mlx5_1:1", "eth2"]'
_SIZE_HELP = 'bytes as a whole number (16777216) or a size with its binary suffix in quotes ("16M", "512K")'
_RATE_HELP = (
    "a rate with its decimal prefix in quotes: bits with b, bps, b/s or nothing (400G, 400Gbps, 400Gb/s), "
    "bytes with a capital B (50GB/s = 400 Gb/s)"
)


def _whole(key: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidValue(f"must be a whole number from {low} to {high}, got {value}", key=key)


def _choice(key: str, value: object, allowed: tuple[Any, ...]) -> Any:
    """``value`` in its allowed spelling (choices are matched without regard to case), or InvalidValue."""
    if value is None:
        return None
    found = next((a for a in allowed if str(a).lower() == str(value).lower() and type(a) is type(value)), None)
    if found is None:
        hint = closest(str(value), [str(a) for a in allowed])
        raise InvalidValue(f"must be one of {', '.join(str(a) for a in allowed)}, got {value!r}{hint}", key=key)
    return found


@dataclass(kw_only=True, slots=True)
class NicSection:
    """``[nic]``: the compute NICs."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    count: int | None = None
    rate: float | None = None
    """Per NIC, Gb/s (written with its prefix in a file: ``"400G"``)."""
    mtu: int | None = None
    link_layer: str | None = None
    devices: list[str] | None = None

    def check(self) -> None:
        _whole("nic.count", self.count, 0, 1024)
        low, high = RATE_GBPS
        if self.rate is not None and not low <= self.rate <= high:
            raise InvalidValue(
                f"must be from {low:g} to {high:g} Gb/s per NIC, got {self.rate:g} Gb/s: {_RATE_HELP}", key="nic.rate"
            )
        _whole("nic.mtu", self.mtu, 68, 65536)
        self.link_layer = _choice("nic.link_layer", self.link_layer, LINK_LAYERS)
        if self.devices is not None:
            if not self.devices:
                raise InvalidValue(f"must be a list of names like {_DEVICE_EXAMPLE}, got []", key="nic.devices")
            bad = next((d for d in self.devices if not _DEVICE.match(d)), None)
            if bad is not None:
                raise InvalidValue(
                    f"holds {bad!r}: give an RDMA device (mlx5_0), a port (mlx5_0:1) or a netdev name (eth2)",
                    key="nic.devices",
                )


@dataclass(kw_only=True, slots=True)
class PcieSection:
    """``[pcie]``: every GPU and compute NIC."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    gen: int | None = None
    width: int | None = None

    def check(self) -> None:
        _whole("pcie.gen", self.gen, 1, 7)
        _choice("pcie.width", self.width, PCIE_WIDTHS)


@dataclass(kw_only=True, slots=True)
class GpuSection:
    """``[gpu]``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    count: int | None = None
    nic_distance: str | None = None
    """The farthest a GPU's nearest compute NIC may be: one of :data:`DISTANCES`."""

    def check(self) -> None:
        _whole("gpu.count", self.count, 0, 1024)
        self.nic_distance = _choice("gpu.nic_distance", self.nic_distance, DISTANCES)


@dataclass(kw_only=True, slots=True)
class TcpSection:
    """``[tcp]``."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    buffer_max: int | None = None
    """Bytes (written as a number, or with its binary suffix in quotes in a file: ``"16M"``)."""

    def check(self) -> None:
        if self.buffer_max is not None and self.buffer_max < MIN_BUFFER_BYTES:
            raise InvalidValue(
                f"must be at least 64K ({MIN_BUFFER_BYTES} bytes), got {self.buffer_max} bytes: a unit mistake? "
                'give a size with its binary suffix in quotes ("16M")',
                key="tcp.buffer_max",
            )


@dataclass(kw_only=True, slots=True)
class BenchFloor:
    """One ``[bench] busbw`` entry: the least bus bandwidth an op must reach at a size on this node."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    op: str
    size: int
    """Bytes (written with its binary suffix in a file: ``"64M"``)."""
    min: float
    """nccl-tests' busbw, GB/s (written as a rate in a file: ``"150GB/s"``)."""


@dataclass(kw_only=True, slots=True)
class BenchSection:
    """``[bench]``: what ``doctor --bench`` runs and the floors it holds the node to."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    nproc: int | None = None
    iters: int | None = None
    busbw: list[BenchFloor] | None = None

    def check(self) -> None:
        from fabricscope.ops import get

        _whole("bench.nproc", self.nproc, 1, 1024)
        _whole("bench.iters", self.iters, 1, 10000)
        for floor in self.busbw or []:
            try:
                floor.op = get(floor.op).name
            except UsageError as exc:
                raise InvalidValue(str(exc), key="bench.busbw") from None
            if floor.op == "ps":
                raise InvalidValue("op 'ps' has no busbw to hold a node to: name a collective", key="bench.busbw")
            if not 1 <= floor.size <= 1 << 34:
                raise InvalidValue(f"size must be from 1 byte to 16G, got {floor.size} bytes", key="bench.busbw")
            if not 0 < floor.min <= 1e5:
                raise InvalidValue(
                    f"min must be a busbw above 0 and at most 100TB/s, got {floor.min:g} GB/s", key="bench.busbw"
                )
        if self.nproc == 1 and self.busbw:
            raise InvalidValue(
                "1 holds a busbw floor that no run can meet: one rank moves nothing to another, and nccl-tests' "
                "busbw of one rank is 0; use 2 or more (or leave it out: one rank per GPU)",
                key="bench.nproc",
            )


@dataclass(kw_only=True, slots=True)
class ExpectFile:
    """The ``--expect`` file: five optional sections."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    nic: NicSection = field(default_factory=NicSection)
    pcie: PcieSection = field(default_factory=PcieSection)
    gpu: GpuSection = field(default_factory=GpuSection)
    tcp: TcpSection = field(default_factory=TcpSection)
    bench: BenchSection = field(default_factory=BenchSection)

    def __post_init__(self) -> None:
        """Each section's values; here, so that a message names the key as the file does (``nic.mtu``)."""
        for section in (self.nic, self.pcie, self.gpu, self.tcp, self.bench):
            section.check()


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
    bench_nproc: int | None = None
    bench_iters: int | None = None
    bench_busbw: tuple[BenchFloor, ...] | None = None
    """``doctor --bench``'s floors: op, size and least busbw."""
    source: str | None = None
    """The file these came from, for messages."""

    def __post_init__(self) -> None:
        """Checked by the sections of :class:`ExpectFile`, as a file is; choices take their allowed spelling."""
        sections: dict[str, dict[str, Any]] = {}
        for (section, key), name in _FIELDS.items():
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, tuple):
                    value = [asdict(v) if isinstance(v, BenchFloor) else v for v in value]
                sections.setdefault(section, {})[key] = value
        if not sections:
            return  # nothing expected: nothing to check (and pydantic's validator is not built for a plain run)
        for name, value in _flat(build(ExpectFile, sections, source=self.source or "Expectations")).items():
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for a Result's config (the bench floors as tables)."""
        values = {name: getattr(self, name) for name in self.__slots__}
        if self.bench_busbw is not None:
            values["bench_busbw"] = [asdict(floor) for floor in self.bench_busbw]
        return values


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
    ("bench", "nproc"): "bench_nproc",
    ("bench", "iters"): "bench_iters",
    ("bench", "busbw"): "bench_busbw",
}
"""Each key of the file and the :class:`Expectations` field it fills."""


def _flat(checked: ExpectFile) -> dict[str, Any]:
    """The :class:`Expectations` fields of a checked file (lists as tuples)."""
    values: dict[str, Any] = {}
    for (section, key), name in _FIELDS.items():
        value = getattr(getattr(checked, section), key)
        values[name] = tuple(value) if isinstance(value, list) else value
    return values


def _out_of_range(exc: UsageError, wrong: InvalidValue) -> InvalidValue:
    """parse_size/parse_rate's own words for a well-formed value out of range (they name the key),
    the file's spelling help for a malformed one."""
    text = str(exc)
    return wrong if text.startswith("invalid ") else InvalidValue(text)


def _read_rate(value: object, key: str = "nic.rate") -> float:
    """A rate in Gb/s (bits)."""
    wrong = InvalidValue(
        f"must be {_RATE_HELP}, got {as_written(value)} (a bare number would be bits per second)", key=key
    )
    if not isinstance(value, str):
        raise wrong
    try:
        return parse_rate(value, what=key) / 1e9
    except UsageError as exc:
        raise _out_of_range(exc, wrong) from None


def _read_size(value: object, key: str = "tcp.buffer_max") -> int:
    wrong = InvalidValue(f"must be {_SIZE_HELP}, got {as_written(value)}", key=key)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise wrong
    if isinstance(value, str) and _BARE_NUMBER.match(value):
        raise InvalidValue(
            f'needs a binary suffix K, M, G or T in quotes ("{value.strip()}M" is {value.strip()} MiB; '
            f'a number of bytes goes without quotes), got "{value}"',
            key=key,
        )
    try:
        return parse_size(value, what=key)
    except UsageError as exc:
        raise _out_of_range(exc, wrong) from None


def _read_floors(value: object) -> Any:
    """``[bench] busbw``'s sizes and rates read into bytes and GB/s (a malformed entry is left to the schema)."""
    if not isinstance(value, list):
        return value
    floors = []
    for entry in value:
        if isinstance(entry, dict):
            entry = dict(entry)
            if "size" in entry:
                entry["size"] = _read_size(entry["size"], key="bench.busbw size")
            if "min" in entry:
                entry["min"] = _read_rate(entry["min"], key="bench.busbw min") * 1e9 / 8 / 1e9
        floors.append(entry)
    return floors


_UNITS = {("nic", "rate"): _read_rate, ("tcp", "buffer_max"): _read_size, ("bench", "busbw"): _read_floors}
"""Values a file writes with their units (``"400G"``, ``"16M"``), read into numbers before validation."""


def parse_expectations(data: dict[str, Any], source: str) -> Expectations:
    """Validate parsed TOML; every message starts with ``source`` and names the key."""
    data = dict(data)
    for (section, key), read in _UNITS.items():
        body = data.get(section)
        if isinstance(body, dict) and body.get(key) is not None:
            try:
                data[section] = {**body, key: read(body[key])}
            except InvalidValue as exc:
                raise ConfigError(f"{source}: {exc}") from None
    return Expectations(source=source, **_flat(build(ExpectFile, data, source=source)))


def load_expectations(path: str) -> Expectations:
    """Read and validate an expectations file; any problem is a :class:`ConfigError` (the CLI names ``--expect``)."""
    try:
        data = read_toml(path)
    except ConfigError as exc:
        raise InvalidValue(str(exc), key="expect") from None
    return parse_expectations(data, path)
