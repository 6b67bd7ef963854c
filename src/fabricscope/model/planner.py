"""Which network to buy: every candidate network x every way to split the job, priced at once.

A candidate network is a NIC (speed and link type), a count per node, a
transport, SHARP on or off, a topology and an oversubscription.  For each one
the planner finds the split of the job (tensor, pipeline, data parallelism,
ZeRO, micro-batch, recomputation) that trains fastest and fits in memory, the
GPU utilization that reaches, the latency of a small all-reduce across the job,
and what the network costs (NICs, switch ports, cables of a one- to
three-tier fat tree).  The recommendation is the cheapest network that meets
the utilization target (and the latency budget, when there is one).

All (network, split) pairs go through :func:`training.step` as one broadcast
array computation, in chunks that stay in cache.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast

import numpy as np

from fabricscope.errors import InvalidValue, UsageError
from fabricscope.model import collective_cost as coll
from fabricscope.model import hardware, training
from fabricscope.model.cluster import Cluster, ClusterSpec, NetworkSpec, Topology, TransportName, resolve
from fabricscope.model.estimate import check_finite, device_for, shape_of
from fabricscope.model.fabric import Fabric, fabric_columns, take
from fabricscope.model.hardware import GPU, NIC, Transport
from fabricscope.model.parallel import Precision, SplitRequest
from fabricscope.model.splits import Splits, splits
from fabricscope.model.workload import ModelSpec
from fabricscope.results import Result
from fabricscope.schema import FORBID_EXTRA, build, require
from fabricscope.shown import quoted
from fabricscope.userfiles import read_toml

__all__ = ["LATENCY_PROBE_BYTES", "Network", "Plan", "Scenario", "plan", "scenarios", "search_space"]

TRANSPORT_PREFERENCE = ("rdma-gdr", "rdma", "tcp-socket")
"""Between options of equal cost, utilization and latency: GPUDirect RDMA first (no host copies,
no CPU), then RDMA, then sockets."""
FRONTIER_STEP = 0.001
"""A frontier row must buy at least this much more utilization (0.1 point) than the one before."""
LATENCY_PROBE_BYTES = 4096
"""The "small all-reduce" of the latency budget: 4 KiB across every GPU of the job."""
CHUNK_ELEMENTS = 1 << 16


@dataclass(kw_only=True, slots=True)
class Scenario:
    """A kind of buyer: the choices on the table and what is good enough."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    description: str
    gpu: str
    target_util: float
    links: list[Literal["ethernet", "infiniband"]]
    transports: list[Literal["tcp-socket", "rdma", "rdma-gdr"]]
    nic_speeds_gbps: list[float]
    nics_per_node: list[int]
    oversubscription: list[float]
    topologies: list[Literal["fat-tree", "rail-optimized"]]
    sharp: list[bool]
    max_latency_us: float = 0.0
    virtualized: bool = False
    """The servers are a cloud provider's VMs: their NICs are virtual (``[network] virtualized``)."""
    source: str = ""

    def __post_init__(self) -> None:
        require("target_util", self.target_util, "in (0, 1]", lambda v: 0 < v <= 1)
        require("max_latency_us", self.max_latency_us, "0 (no budget) or more", lambda v: v >= 0)
        for value in (*self.nic_speeds_gbps, *self.oversubscription):
            require("nic_speeds_gbps and oversubscription", value, "positive", lambda v: v > 0)
        for key in (
            "links",
            "transports",
            "nic_speeds_gbps",
            "nics_per_node",
            "oversubscription",
            "topologies",
            "sharp",
        ):
            if not getattr(self, key):
                raise InvalidValue(f"{key} must list at least one choice")


@functools.cache
def scenarios() -> dict[str, Scenario]:
    data = read_toml(str(hardware.catalog_dir() / "scenarios.toml"))
    return {
        name: build(Scenario, {"name": name, **entry}, source=f"scenarios.toml [{name}]")
        for name, entry in data.items()
    }


def scenario(name: str) -> Scenario:
    table = scenarios()
    if name not in table:
        raise UsageError(
            f"unknown scenario {quoted(name)}{hardware.suggest(name[:100], table)}: use one of {', '.join(table)}"
        )
    return table[name]


@dataclass(frozen=True, kw_only=True, slots=True)
class Network:
    """One candidate network."""

    nic: NIC
    count: int
    transport: Transport
    sharp: bool
    topology: str
    oversubscription: float
    virtualized: bool = False

    def label(self) -> str:
        if not self.count:
            return "no scale-out network (one server)"
        sharp = " +SHARP" if self.sharp else ""
        over = f" {self.oversubscription:g}:1" if self.oversubscription > 1 else ""
        return f"{self.count}x {self.nic.name} {self.transport.name}{sharp} {self.topology}{over}"


def search_space(sc: Scenario, gpus_per_node: int) -> list[Network]:
    """Every network the scenario allows (RDMA needs an RDMA NIC, SHARP InfiniBand and RDMA)."""
    nics = [n for n in hardware.entries("nic").values() if n.link in sc.links and n.speed_gbps in sc.nic_speeds_gbps]
    transports = [hardware.lookup("transport", t, Transport) for t in sc.transports]
    found = []
    for nic, count, transport, sharp, topology, over in itertools.product(
        nics, sc.nics_per_node, transports, sc.sharp, sc.topologies, sc.oversubscription
    ):
        if count > gpus_per_node or (transport.name != "tcp-socket" and not nic.rdma):
            continue
        if transport.name == "tcp-socket" and nic.link != "ethernet":
            continue
        if sharp and (nic.link != "infiniband" or transport.name == "tcp-socket"):
            continue
        found.append(
            Network(
                nic=nic,
                count=count,
                transport=transport,
                sharp=sharp,
                topology=topology,
                oversubscription=over,
                virtualized=sc.virtualized,
            )
        )
    return found


def network_cost(networks: list[Network], nodes: int) -> np.ndarray:
    """USD of NICs, switch ports and cables of a fat tree (rails count as separate trees)."""
    costs = []
    for net in networks:
        ports = nodes * net.count
        per_tree = nodes if net.topology == "rail-optimized" else ports
        trees = net.count if net.topology == "rail-optimized" else 1
        radix = net.nic.switch_radix
        if nodes <= 1:
            switch_ports, links = 0.0, 0.0
        elif per_tree <= radix:
            switch_ports, links = float(ports), float(ports)
        else:
            up = per_tree / net.oversubscription
            tiers = 2 if per_tree <= radix * radix / 2 else 3
            switch_ports = trees * (per_tree + 2 * up * (tiers - 1))
            links = trees * (per_tree + up * (tiers - 1))
        costs.append(ports * net.nic.price_usd + switch_ports * net.nic.switch_port_usd + links * net.nic.link_usd)
    return np.array(costs)


def cluster_of(net: Network, gpu: GPU, gpus_per_node: int, nodes: int) -> Cluster:
    """The cluster ``nodes`` servers of ``gpus_per_node`` x ``gpu`` make with network ``net``."""
    spec = ClusterSpec(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu=gpu.name,
        network=NetworkSpec(
            nic=net.nic.name,
            nics_per_node=net.count,
            transport=cast(TransportName, net.transport.name),
            sharp=net.sharp,
            topology=cast(Topology, net.topology),
            oversubscription=net.oversubscription,
            virtualized=net.virtualized,
        ),
    )
    return resolve(spec, name=net.label(), source="plan")


def fabric_arrays(networks: list[Network], gpu: GPU, gpus_per_node: int, nodes: int) -> Fabric:
    """One Fabric whose fields are column arrays, one row per network (:func:`fabric_columns`
    of the clusters the networks make)."""
    return fabric_columns([cluster_of(net, gpu, gpus_per_node, nodes) for net in networks])


def _rows(fab: Fabric) -> int:
    """Networks in a Fabric of column arrays."""
    return max(
        [int(np.shape(getattr(fab, name))[0]) for name in Fabric.__slots__ if np.ndim(getattr(fab, name)) == 2] or [1]
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class BestSplits:
    """Per network: the best split, its step, and how many (network, split) pairs were priced."""

    best: np.ndarray
    """Index into the layouts of the fastest split that fits, or -1."""
    step_s: np.ndarray
    utilization: np.ndarray
    evaluated: int


def sweep(model: ModelSpec, cand: Splits, gpu: GPU, fab: Fabric, precision: str) -> BestSplits:
    """Price every (network, split) pair; keep the fastest split per network.  Its utilization is the
    least compute any fitting split needs over that step: one yardstick for every network, so more
    utilization is always a shorter step (a split's own compute share is not: a split that computes
    slower computes a larger share of a longer step)."""
    shape = shape_of(model)
    dev = device_for(gpu, precision)
    n_net = _rows(fab)
    rows = max(1, CHUNK_ELEMENTS // max(len(cand), 1))
    best = np.full(n_net, -1)
    step_s = np.full(n_net, np.inf)
    least = np.inf
    for start in range(0, n_net, rows):
        part = take(fab, slice(start, start + rows))
        result = training.step(shape, cand.job, dev, part)
        total = np.where(result.memory_bytes <= dev.memory_bytes, result.step, np.inf)
        total = np.broadcast_to(total, (min(rows, n_net - start), len(cand)))
        index = np.argmin(total, axis=1)
        taken = np.arange(len(index))
        chosen = total[taken, index]
        fits = np.broadcast_to(result.memory_bytes <= dev.memory_bytes, total.shape)
        compute = np.broadcast_to(result.compute, total.shape)
        if fits.any():
            least = min(least, float(np.min(compute[fits])))
        best[start : start + len(index)] = np.where(np.isfinite(chosen), index, -1)
        step_s[start : start + len(index)] = chosen
    util = np.where(np.isfinite(step_s), least / np.where(np.isfinite(step_s), step_s, 1.0), 0.0)
    return BestSplits(best=best, step_s=step_s, utilization=util, evaluated=n_net * len(cand))


@dataclass(frozen=True, kw_only=True, slots=True)
class Option:
    network: Network
    cost_usd: float
    utilization: float
    step_s: float
    latency_us: float
    parallel: Any
    meets: bool

    def rank(self) -> tuple[float, float, float, int]:
        """Cheapest first; at equal cost more utilization (a shorter step), then less latency, then the
        better transport."""
        transport = TRANSPORT_PREFERENCE.index(self.network.transport.name)
        return (self.cost_usd, -self.utilization, self.latency_us, transport)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    model: ModelSpec
    gpu: GPU
    gpus: int
    scenario: Scenario
    target_util: float
    max_latency_us: float
    options: list[Option]
    frontier: list[Option]
    recommended: Option | None
    evaluated: int
    gpu_cost_usd: float
    batch: int
    """Global batch the splits were priced at."""
    precision: str = "bf16"
    notes: list[str] = field(default_factory=list)

    def result(self, *, seconds: float, uncertainty: dict[str, Any] | None = None) -> Result:
        """The Result of ``plan --json``: the frontier's options, then the recommended one."""
        records = [option_record(o, "frontier") for o in self.frontier]
        if self.recommended is not None:
            records.append(option_record(self.recommended, "recommended"))
        return Result(
            kind="plan",
            config={
                "model": self.model.name,
                "gpus": self.gpus,
                "gpu": self.gpu.name,
                "scenario": self.scenario.name,
                "target_util": self.target_util,
                "max_latency_us": self.max_latency_us,
                "latency_probe_bytes": LATENCY_PROBE_BYTES,
                "precision": self.precision,
                "global_batch": self.batch,
            },
            records=records,
            summary={
                "evaluated": self.evaluated,
                "networks": len(self.options),
                "seconds": seconds,
                "recommended": records[-1] if self.recommended is not None else None,
                "notes": self.notes,
                "uncertainty": uncertainty,
            },
        )


def option_record(option: Option, role: str) -> dict[str, Any]:
    """One network option as ``plan --json`` keeps it (``role``: ``frontier`` or ``recommended``)."""
    net = option.network
    return {
        "role": role,
        "nic": net.nic.name if net.count else None,
        "nics_per_node": net.count,
        "transport": net.transport.name if net.count else None,
        "sharp": net.sharp,
        "topology": net.topology,
        "oversubscription": net.oversubscription,
        "network_cost_usd": option.cost_usd,
        "gpu_utilization": option.utilization,
        "step_time_s": option.step_s,
        "small_allreduce_us": option.latency_us,
        "meets_target": option.meets,
        "parallel": dataclasses.asdict(option.parallel) if option.parallel else None,
    }


def percent(share: float) -> str:
    """A share as a percentage rounded down to 0.1 point, so that 99.96% never reads as 100%."""
    return f"{math.floor(share * 1000 + 1e-9) / 10:.1f}%"


def plan(
    model: ModelSpec,
    *,
    gpus: int,
    gpu_name: str | None = None,
    scenario_name: str = "research-medium",
    target_util: float | None = None,
    max_latency_us: float | None = None,
    precision: Precision | None = None,
    global_batch: int = 0,
) -> Plan:
    """Search the scenario's networks for ``model`` on ``gpus`` GPUs."""
    sc = scenario(scenario_name)
    gpu = hardware.lookup("gpu", gpu_name or sc.gpu, GPU)
    if gpus < 1:
        raise InvalidValue(f"must be at least 1, got {gpus}", key="gpus")
    per_node = min(8, gpus)
    if gpus % per_node:
        raise InvalidValue(f"must be a multiple of 8 (servers of 8 GPUs) or 8 or fewer, got {gpus}", key="gpus")
    target = sc.target_util if target_util is None else target_util
    if not 0 < target <= 1:
        raise InvalidValue(f"must be in (0, 1], got {target}", key="target_util")
    if max_latency_us is not None and not max_latency_us > 0:
        # 0 is the scenarios' "no budget"; a caller who asks for a budget gives a positive one.
        raise InvalidValue(f"must be positive, got {max_latency_us}", key="max_latency_us")
    budget = sc.max_latency_us if max_latency_us is None else max_latency_us
    precision = precision or cast(Precision, gpu.default_precision)
    gpu.peak_flops(precision)
    nodes = gpus // per_node
    if global_batch < 0:
        raise InvalidValue(f"must be at least 1, got {global_batch}", key="global_batch")
    cand = splits(
        model, gpus=gpus, gpus_per_node=per_node, batch=global_batch, request=SplitRequest(precision=precision)
    )
    if not len(cand):
        raise UsageError(
            f"no way to split {model.name} over {gpus} GPUs with a global batch of {cand.batch}: "
            "the batch must be a multiple of the data-parallel size"
        )
    networks = search_space(sc, per_node)
    if not networks:
        raise UsageError(f"scenario {sc.name} allows no network for servers of {per_node} GPUs")
    if nodes == 1:
        # One server: its GPUs talk over NVLink or PCIe; there is no network to buy.
        networks = [dataclasses.replace(networks[0], count=0, sharp=False, oversubscription=1.0)]
    fab = fabric_arrays(networks, gpu, per_node, nodes)
    result = sweep(model, cand, gpu, fab, precision)
    latency = (
        np.ravel(coll.fastest(coll.all_reduce(fab, float(LATENCY_PROBE_BYTES), float(per_node), float(nodes)))) * 1e6
    )
    latency = np.broadcast_to(latency, (len(networks),))
    costs = network_cost(networks, nodes)
    options = []
    for i, net in enumerate(networks):
        index = int(result.best[i])
        ok = index >= 0 and result.utilization[i] >= target and (budget == 0 or latency[i] <= budget)
        options.append(
            Option(
                network=net,
                cost_usd=float(costs[i]),
                utilization=float(result.utilization[i]),
                step_s=float(result.step_s[i]),
                latency_us=float(latency[i]),
                parallel=cand.configs[index] if index >= 0 else None,
                meets=bool(ok),
            )
        )
    usable = [o for o in options if o.parallel is not None]
    if not usable:
        one = training.step(shape_of(model), cand.job, device_for(gpu, precision), take(fab, 0))
        fits = np.asarray(one.memory_bytes) <= device_for(gpu, precision).memory_bytes
        check_finite(model, np.broadcast_to(one.step, fits.shape)[fits])
        smallest = float(np.min(one.memory_bytes)) / 2**30
        raise UsageError(
            f"{model.name} does not fit in {gpus} x {gpu.name} ({gpu.memory_gb:g} GiB) in any split tried "
            f"(the smallest needs {smallest:.0f} GiB per GPU): give more --gpus or a GPU with more memory (--gpu)"
        )
    frontier: list[Option] = []
    for option in sorted(usable, key=Option.rank):
        if not frontier or option.utilization >= frontier[-1].utilization + FRONTIER_STEP:
            frontier.append(option)
    meeting = [o for o in usable if o.meets]
    recommended = min(meeting, key=Option.rank) if meeting else None
    notes = []
    if nodes == 1:
        notes.append(
            f"{gpus} GPUs fit in one server: they talk over {gpu.fabric}, and no scale-out network is needed "
            "(the plan prices the server alone)"
        )
    if recommended is None:
        best = frontier[-1]
        where = "one server reaches" if nodes == 1 else "no network reaches"
        notes.append(
            f"{where} {100 * target:g}% utilization"
            + (f" within {budget:g} us" if budget else "")
            + f"; the best is {percent(best.utilization)} ({best.network.label()})"
        )
    return Plan(
        model=model,
        gpu=gpu,
        gpus=gpus,
        scenario=sc,
        target_util=target,
        max_latency_us=budget,
        options=options,
        frontier=frontier,
        recommended=recommended,
        evaluated=result.evaluated,
        gpu_cost_usd=gpus * gpu.price_usd,
        batch=cand.batch,
        precision=precision,
        notes=notes,
    )
