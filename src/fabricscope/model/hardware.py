"""The hardware catalog: GPUs, GPU links, PCIe, NICs, transports and storage, as data.

Numbers live in ``catalog/*.toml`` beside this module, each entry with a
``source``; this module only gives them types.  ``lookup`` turns an unknown name
into a usage error that suggests the closest entry.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar, Literal, TypeVar

from fabricscope.errors import InvalidValue, UsageError, closest
from fabricscope.schema import FORBID_EXTRA, build, require
from fabricscope.shown import quoted
from fabricscope.userfiles import read_toml

__all__ = [
    "GPU",
    "KINDS",
    "NIC",
    "GPULink",
    "PCIe",
    "Storage",
    "Transport",
    "catalog_dir",
    "entries",
    "lookup",
    "suggest",
]

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")


def _positive(owner: object, *names: str) -> None:
    for name in names:
        require(name, getattr(owner, name), "positive", lambda v: v > 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class GPU:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    arch: Literal["pascal", "volta", "turing", "ampere", "hopper", "blackwell", "ada", "cdna3"]
    tflops_fp32: float
    tflops_tf32: float
    tflops_fp16: float
    tflops_bf16: float
    tflops_fp8: float
    memory_gb: float
    hbm_tbps: float
    """Memory bandwidth, TB/s (1e12 bytes per second)."""
    nvlink: str
    """NVLink generation (an entry of nvlink.toml), or "" for none."""
    nvlink_links: int
    nvls: bool
    """NVLink SHARP: the NVSwitch reduces in the switch."""
    xgmi_links: int
    pcie: str
    fabric: Literal["nvswitch", "nvlink-mesh", "xgmi", "pcie"]
    """How servers built around this GPU connect their GPUs."""
    p2p: bool
    """Peer-to-peer over PCIe (GeForce cards have it disabled)."""
    mamf: float
    """Maximum achievable matmul FLOPS as a fraction of the dense bf16 peak."""
    price_usd: float
    source: str

    def __post_init__(self) -> None:
        _positive(self, "tflops_fp32", "memory_gb", "hbm_tbps", "price_usd")
        require("mamf", self.mamf, "in (0, 1]", lambda v: 0 < v <= 1)

    @property
    def memory_bytes(self) -> float:
        """Device memory in bytes: vendors' GB of HBM are binary (an A100 80GB shows 81,920 MiB in
        nvidia-smi; some boards keep a little of it back, an H100 SXM shows 81,559 MiB)."""
        return self.memory_gb * 2**30

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s of the tensor cores at ``precision``; a UsageError if there are none."""
        if precision not in PRECISIONS:
            raise UsageError(
                f"unknown precision {precision!r}{closest(precision, PRECISIONS)}: use {', '.join(PRECISIONS)}"
            )
        tflops = float(getattr(self, f"tflops_{precision}"))
        if tflops <= 0:
            usable = [p for p in PRECISIONS if float(getattr(self, f"tflops_{p}")) > 0]
            raise InvalidValue(
                f"{precision}: {self.name} has no {precision} tensor cores: use {' or '.join(usable)}",
                key="precision",
            )
        return tflops * 1e12

    @property
    def default_precision(self) -> str:
        """What training on this GPU runs at when nobody says: bf16 where the tensor cores have
        it, else fp16 (V100), else fp32."""
        return next(p for p in ("bf16", "fp16", "fp32") if float(getattr(self, f"tflops_{p}")) > 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class GPULink:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    raw_gbps: float
    """One link, one direction, GB/s."""
    nccl_gbps: float
    """What NCCL's topology model credits one link with, GB/s."""
    nvls_efficiency: float
    switch: str
    """Which NVSwitch generation carries this link, as text (not a catalog name)."""
    max_gpus_nvswitch: int
    """Most GPUs one node's NVSwitch fabric of this generation connects; 0 where none is built."""
    max_gpus_mesh: int
    """Most GPUs a direct mesh of these links connects (one link per peer); 0 where none is built."""
    max_gpus_source: str
    source: str
    multi_node: bool = False
    """The NVLink domain spans compute trays (GB200 NVL72's NVLink Switch trays): a cluster "node" over this
    link is the whole domain, as NCCL's multi-node NVLink (MNNVL) fuses it into one node."""

    def __post_init__(self) -> None:
        _positive(self, "raw_gbps", "nccl_gbps")
        for key in ("max_gpus_nvswitch", "max_gpus_mesh"):
            require(key, getattr(self, key), "0 or more", lambda v: v >= 0)

    def max_gpus(self, intra: str) -> int:
        """Most GPUs per node over this link as ``intra`` (nvswitch, or a mesh)."""
        return self.max_gpus_nvswitch if intra == "nvswitch" else self.max_gpus_mesh


@dataclass(frozen=True, kw_only=True, slots=True)
class PCIe:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    gbps: float
    """x16, one direction, GB/s."""
    nccl_fraction: float
    max_gpus: int
    """Most GPUs one server connects over PCIe."""
    max_gpus_source: str
    source: str
    host_memory_gbps: float = 0.0
    """Memory bandwidth of a dual-socket host of this generation, GB/s (0 = unknown): what GPUs
    without peer-to-peer share when NCCL stages their traffic in host memory."""
    host_memory_source: str = ""

    def __post_init__(self) -> None:
        _positive(self, "gbps", "nccl_fraction", "max_gpus")
        require("host_memory_gbps", self.host_memory_gbps, "0 (unknown) or more", lambda v: v >= 0)

    @property
    def effective_gbps(self) -> float:
        """What a GPU or NIC behind an x16 slot of this generation moves, one direction."""
        return self.gbps * self.nccl_fraction


@dataclass(frozen=True, kw_only=True, slots=True)
class NIC:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    speed_gbps: float
    """Line rate, Gbit/s."""
    link: Literal["ethernet", "infiniband"]
    rdma: bool
    pcie: str
    switch_radix: int
    switch_latency_ns: float
    price_usd: float
    switch_port_usd: float
    link_usd: float
    source: str

    def __post_init__(self) -> None:
        _positive(self, "speed_gbps", "switch_radix", "switch_latency_ns")


@dataclass(frozen=True, kw_only=True, slots=True)
class Transport:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    efficiency: float
    virtualized_efficiency: float
    """Share of line rate on a cloud VM's virtual NIC (``[network] virtualized``)."""
    host_ceiling_gbps: float
    """Per-NIC ceiling from host copies, GB/s; 0 means none."""
    latency_us: float
    cpu_ghz_per_gbps: float
    gdr: bool
    source: str

    def __post_init__(self) -> None:
        for key in ("efficiency", "virtualized_efficiency"):
            require(key, getattr(self, key), "in (0, 1]", lambda v: 0 < v <= 1)
        _positive(self, "latency_us")


@dataclass(frozen=True, kw_only=True, slots=True)
class Storage:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    seq_mbps: float
    access_ms: float
    parallel: int
    link: str
    """For remote storage, the NIC (nics.toml) of the server link; "" for a local disk."""
    link_per_device: bool
    transport: str
    source: str

    def __post_init__(self) -> None:
        _positive(self, "seq_mbps", "access_ms", "parallel")


E = TypeVar("E")

KINDS: dict[str, tuple[str, type[Any]]] = {
    "gpu": ("gpus.toml", GPU),
    "gpulink": ("nvlink.toml", GPULink),
    "pcie": ("pcie.toml", PCIe),
    "nic": ("nics.toml", NIC),
    "transport": ("transports.toml", Transport),
    "storage": ("storage.toml", Storage),
}
"""Catalog kinds: file and entry type."""


def catalog_dir() -> Any:
    """The package directory that holds the catalog TOML files."""
    return resources.files("fabricscope.model") / "catalog"


@functools.cache
def _load(kind: str) -> dict[str, Any]:
    filename, cls = KINDS[kind]
    path = catalog_dir() / filename
    data = read_toml(str(path))
    table: dict[str, Any] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise UsageError(f"{filename}: {name} is not a table")
        table[name] = build(cls, {"name": name, **entry}, source=f"{filename} [{name}]")
    return table


def entries(kind: str) -> dict[str, Any]:
    """Every entry of one catalog kind, by name, in file order."""
    if kind not in KINDS:
        raise UsageError(f"unknown catalog kind {kind!r}{closest(kind, KINDS)}: use {', '.join(KINDS)}")
    return _load(kind)


def suggest(name: str, names: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the names that contain ``name`` (``a100`` -> the A100s),
    else for the closest one; ``""`` when nothing is near."""
    key = name.strip().lower()
    allowed = list(names)
    containing = [n for n in allowed if key and key in n.lower()]
    if len(containing) == 1:
        return f" (did you mean '{containing[0]}'?)"
    if containing:
        return f" (did you mean one of {', '.join(repr(n) for n in containing[:5])}?)"
    return closest(key, allowed)


def lookup(kind: str, name: str, cls: type[E]) -> E:
    """The catalog entry ``name`` of ``kind``; an unknown name suggests the closest one."""
    table = entries(kind)
    name = name.strip().lower()
    if name not in table:
        noun = {"gpulink": "GPU link", "pcie": "PCIe generation"}.get(
            kind, kind.upper() if kind in ("gpu", "nic") else kind
        )
        raise UsageError(f"unknown {noun} {quoted(name)}{suggest(name[:100], table)}: allowed are {', '.join(table)}")
    entry = table[name]
    assert isinstance(entry, cls)
    return entry


def describe(entry: Any) -> list[tuple[str, str]]:
    """(field, value) pairs of a catalog entry, for ``hw show``."""
    return [(f.name, str(getattr(entry, f.name))) for f in dataclasses.fields(entry)]
