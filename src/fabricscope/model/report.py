"""Text that people read: the predict table's preamble, estimate's breakdown, plan's frontier,
validate's rows, and the catalog listings of ``hw``.  Every function returns lines."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabricscope import __version__, table
from fabricscope.model.calibrated_cost import described
from fabricscope.model.cluster import CalibratedOp, Cluster
from fabricscope.model.estimate import Estimate
from fabricscope.model.fabric import fabric_of, transport_extra_us
from fabricscope.model.parallel import KNOBS
from fabricscope.model.planner import Option, Plan, percent
from fabricscope.model.predict import FASTER_BY, Faster
from fabricscope.model.training import BREAKDOWN, grouped_gemm_efficiency
from fabricscope.model.validation import Comparison, by_group, summary
from fabricscope.ops import Collective
from fabricscope.results import CollectiveRecord
from fabricscope.shown import printable

__all__ = [
    "cluster_lines",
    "estimate_lines",
    "faster_lines",
    "plan_lines",
    "predict_lines",
    "validate_lines",
]

PART_NAMES = {
    "compute": "compute",
    "recompute": "recomputation",
    "tp_comm": "tensor-parallel comm",
    "ep_comm": "expert all-to-all",
    "cp_comm": "context-parallel comm",
    "pp_comm": "pipeline comm",
    "bubble": "pipeline bubble",
    "dp_comm": "data-parallel comm",
    "optimizer": "optimizer",
    "data_stall": "data stall",
}


def _usd(value: float) -> str:
    return f"${value:,.0f}"


def cluster_lines(cluster: Cluster) -> list[str]:
    """Two '#' lines: what the cluster is and the bandwidths the model sees."""
    fab = fabric_of(cluster)
    net = cluster.spec.network
    lines = [
        f"# cluster {cluster.name}: {cluster.nodes} node(s) x {cluster.gpus_per_node} {cluster.gpu.name} "
        f"= {cluster.gpus} GPUs",
        f"#   inside a node: {cluster.intra}, {float(fab.intra_gbps):.1f} GB/s per GPU each way",
    ]
    if net.nics_per_node:
        sharp = (", SHARP" if net.sharp else "") + (", virtualized NICs" if net.virtualized else "")
        if net.flow_gbps > 0 and cluster.transport.name == "tcp-socket":
            sharp += f", {net.flows} flow{'s' if net.flows > 1 else ''} of at most {net.flow_gbps:g} Gb/s per NIC"
        over = f" {net.oversubscription:g}:1" if net.oversubscription > 1 else " non-blocking"
        lines.append(
            f"#   network: {net.nics_per_node}x {cluster.nic.name} over {cluster.transport.name}{sharp}: "
            f"{float(fab.nic_gbps):.1f} GB/s per NIC, {float(fab.node_net_gbps):.1f} per node; "
            f"{net.topology},{over}; +{float(fab.net_extra_us):.2f} us per message ({_extra_latency(cluster)})"
        )
        transport = cluster.transport
        if transport.cpu_ghz_per_gbps > 0:
            lines.append(
                f"#   {transport.name}: {transport.latency_us:g} us per message (RDMA: 1-2 us), about "
                f"{8 * transport.cpu_ghz_per_gbps:g} GHz of CPU per GB/s moved"
            )
    return lines


def calibrated_lines(cluster: Cluster, op: str, terms: CalibratedOp) -> list[str]:
    """'#' lines for an op the cluster file prices from measurements: what was measured, the
    fitted terms, and that the catalog hardware does not set these times."""
    measured = []
    if cluster.spec.description:
        measured.append(printable(cluster.spec.description)[:120])
    file_nodes, file_gpus = cluster.file_shape
    return [
        f"# cluster {cluster.name}: {cluster.nodes} node(s) x {cluster.gpus_per_node} = {cluster.gpus} ranks "
        f"({'; '.join(measured) or 'calibrated'}; measured at {file_nodes} x {file_gpus})",
        f"# {op}: time = the cluster's [calibration.{op}] terms, fitted by 'fabricscope calibrate' to "
        f"{terms.points} measured rows (median error {terms.residual_pct:.1f}%), not the catalog's "
        f"{cluster.gpu.name} and {cluster.nic.name}: {described(terms)}",
        "# GB/s = 1e9 bytes/s",
    ]


def _extra_latency(cluster: Cluster) -> str:
    """What the network latency above NCCL's own constants is made of, in the transport's words."""
    parts = ["switches and cables"]
    if transport_extra_us(cluster.transport) > 0:
        parts.insert(0, f"{cluster.transport.name} above GPUDirect RDMA")
    if cluster.spec.network.extra_latency_us:
        parts.append("extra_latency_us")
    return ", ".join(parts)


def predict_lines(
    op: Collective,
    records: Sequence[CollectiveRecord],
    *,
    cluster: Cluster,
    min_bytes: int,
    max_bytes: int,
    step: str,
    faster: Sequence[Faster] = (),
) -> list[str]:
    """The nccl-tests table of one op, predicted: '#' lines name the algorithm of each row group."""
    lines = [f"# fabricscope version {__version__} predict (model, not a measurement)"]
    lines.append(f"# Collective test starting: {op.program}")
    lines.append(f"# nThread 1 nGpus 1 minBytes {min_bytes} maxBytes {max_bytes} step: {step} (predicted)")
    terms = cluster.spec.calibration.get(op.name)
    if cluster.gpus == 1:  # calibrated or not: no collective runs (model.predict.one_rank_copies)
        lines.extend(cluster_lines(cluster))
        lines.append(
            "# 1 rank; time = what NCCL does on one rank: a copy through the GPU's memory out of place (in place "
            "too for alltoall, gather, scatter and a floating-point avg), else nothing; GB/s = 1e9 bytes/s"
        )
    elif terms is None:
        lines.extend(cluster_lines(cluster))
        lines.append(
            f"# {cluster.gpus} ranks; time = NCCL's cost model with the algorithm and protocol it would pick; "
            "GB/s = 1e9 bytes/s"
        )
    else:
        lines.extend(calibrated_lines(cluster, op.name, terms))
    lines.extend(table.header_lines())
    dicts = [r.to_dict() for r in records]
    current = None
    for row in table.pair_rows(dicts):
        label = (row.out or row.inp or {}).get("algorithm")
        if label != current:
            lines.append(f"# algorithm {label}")
            current = label
        lines.append(table.format_row(row, check=False))
    lines.extend(table.footer_lines(dicts, check=False, predicted=True))
    lines.extend(table.summary_lines(dicts))
    lines.extend(faster_lines(faster))
    lines.append("#")
    lines.append(f"# Collective test concluded: {op.program}")
    lines.append("")
    return lines


def faster_lines(faster: Sequence[Faster]) -> list[str]:
    """'#' lines naming the sizes where another algorithm/protocol beats NCCL's choice, one line
    per run of sizes with the same two choices, with the setting that gets the faster one."""
    groups: list[list[Faster]] = []
    for item in faster:
        last = groups[-1][-1] if groups else None
        if last is not None and (last.dtype, last.nccl, last.fastest) == (item.dtype, item.nccl, item.fastest):
            groups[-1].append(item)
        else:
            groups.append([item])
    if not groups:
        return []
    lines = [
        f"# faster than NCCL's choice by more than {FASTER_BY:.0%} (the model's fastest; NCCL's tuner "
        "ranks with corrections of its own):"
    ]
    dtypes = {item.dtype for item in faster}
    for group in groups:
        worst = max(group, key=lambda f: f.nccl_time_us / f.fastest_time_us)
        sizes = f"{group[0].size_bytes}" + (f"-{group[-1].size_bytes}" if len(group) > 1 else "")
        dtype = f" {group[0].dtype}" if len(dtypes) > 1 else ""
        lines.append(
            f"#   {sizes} B{dtype}: {worst.fastest} {worst.fastest_time_us:.2f} us instead of {worst.nccl} "
            f"{worst.nccl_time_us:.2f} us{f' at {worst.size_bytes} B' if len(group) > 1 else ''}; set {worst.env}"
        )
    return lines


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:9.3f} s "
    if value >= 1e-3:
        return f"{value * 1e3:9.3f} ms"
    return f"{value * 1e6:9.3f} us"


def _chosen(est: Estimate) -> str:
    if not est.chosen:
        return ""
    if set(est.chosen) >= set(KNOBS) - {"cp", "ep"}:
        return "  [chosen by fabricscope: the fastest that fits]"
    return f"  [{', '.join(k.replace('_', ' ') for k in est.chosen)} chosen by fabricscope: the fastest that fits]"


def _stack_lines(est: Estimate, framework: str | None = None) -> list[str]:
    """Which training stack runs the split (priced as ``framework`` runs it, when one was named), and
    (for an MoE model) what routing is assumed."""
    from fabricscope.model.stacks import stacks

    lines = []
    stack = stacks().get(est.parallel.stack)
    # The gradient width is where a stack's versions differ most (Megatron-Core's fp32 default, NeMo's bf16).
    grads = "no gradient reduction (dp 1)"
    if est.grad_wire_bytes is not None:
        grads = f"gradients reduced in {est.grad_wire_bytes:g}-byte words"
    if stack is not None and framework:
        lines.append(f"stack: {stack.name} runs this split, priced as {framework} runs it, {grads} (docs/model.md)")
    elif stack is not None:
        # Name what --framework takes: a stack's name is not one of them (it prices no one version).
        choose = f"; --framework {' | '.join(stack.frameworks)} prices it as one" if stack.frameworks else ""
        lines.append(f"stack: {stack.name} runs this split, {grads} (catalog/frameworks.toml{choose})")
    par = est.parallel
    if par.fp32_accumulation:
        lines.append(
            "  gradients accumulate in an unsharded fp32 buffer (BF16 optimizer): +4 bytes per parameter, "
            "a pass over them after every micro-batch (in 'optimizer'), "
            + ("reduced through a bf16 copy" if par.bf16_grad_comm else "reduced in fp32")
            + ("; its fp32 weights and Adam state are sharded at ZeRO 0 too" if par.zero == 0 else "")
        )
    elif par.bf16_fp32_accumulation and framework:
        why = f"ZeRO {par.zero} partitions the gradients" if par.zero >= 2 else f"the run is in {par.precision}"
        lines.append(f"  no fp32 gradient buffer: the BF16 optimizer runs in bf16 at ZeRO 0 and 1 only ({why})")
    overlaps = []
    if par.tp_comm_overlap and par.sequence_parallel and par.tp > 1:
        overlaps.append("tensor-parallel collectives in chunks beside their GEMMs")
    if par.pp_comm_overlap and par.pp > 1 and par.interleave > 1:
        overlaps.append("pipeline transfers beside compute outside the fill and flush")
    if overlaps:
        lines.append("  overlapped: " + "; ".join(overlaps))
    m = est.model
    if m.is_moe:
        load = (
            f"capacity factor {m.capacity_factor:g}"
            if m.capacity_factor
            else f"imbalance {est.parallel.moe_imbalance:g}"
        )
        lines.append(
            f"experts: {m.experts} routed (top {m.top_k})"
            + (f" + {m.shared_experts} shared" if m.shared_experts else "")
            + f", {m.active_params / 1e9:.1f}B of {m.param_count / 1e9:.1f}B parameters active, {load}"
            + (f", tokens to at most {m.route_nodes} nodes" if m.route_nodes else "")
            + (", all-to-alls overlapped with compute" if est.parallel.ep_overlap else "")
        )
        per_expert = est.tokens_per_expert
        lines.append(
            f"  {per_expert:,.0f} tokens per expert per micro-batch: grouped GEMMs at "
            f"{float(grouped_gemm_efficiency(per_expert)):.2f} of the dense rate (1.00 from 4,096 tokens)"
        )
        terms = est.cluster.spec.calibration.get("alltoall")
        if terms is not None and est.parallel.ep > 1:
            across = est.cluster.nodes > 1 and terms.inter_busbw_gbps <= 0
            lines.append(
                f"all-to-all: calibrated ({terms.points} points, fit error {terms.residual_pct:.0f}%, busbw "
                f"{terms.intra_busbw_gbps:.3g} GB/s in a node, {terms.inter_busbw_gbps:.3g} across)"
                + ("; groups across nodes use the catalog network (no inter-node runs measured)" if across else "")
            )
    return lines


def estimate_lines(est: Estimate, framework: str | None = None) -> list[str]:
    par = est.parallel
    c = est.cluster
    split = (
        f"tp {par.tp}, pp {par.pp}"
        + (f" (interleave {par.interleave})" if par.interleave > 1 else "")
        + f", dp {par.dp}"
        + (f", cp {par.cp}" if par.cp > 1 else "")
        + (f", ep {par.ep}" if par.ep > 1 else "")
        + f", zero {par.zero}, micro-batch {par.micro_batch}, global batch {est.batch}, "
        f"recompute {par.recompute}"
        + (", sequence parallel" if par.sequence_parallel else "")
        + ("" if par.dp_overlap else ", gradients reduced after the backward pass")
        + (f", {par.ps_servers} parameter servers" if par.ps_servers else "")
    )
    lines = [
        f"estimate: {est.model.name} on {c.name} ({c.nodes} x {c.gpus_per_node} {c.gpu.name} = {c.gpus} GPUs), "
        f"{par.precision}",
        f"split: {split}" + _chosen(est),
        *_stack_lines(est, framework),
        "",
        f"step time              {_seconds(est.step_s)}",
    ]
    for name in BREAKDOWN:
        value = est.value(name)
        if value > 0:
            lines.append(f"  {PART_NAMES[name]:<21}{_seconds(value)}  {100 * value / est.step_s:5.1f}%")
    tokens = f", {est.tokens_per_s:,.0f} tokens/s" if est.tokens_per_s is not None else ""
    lines += [
        "",
        f"GPU utilization        {100 * est.gpu_utilization:5.1f}%  (MFU {100 * est.mfu:.1f}%, "
        f"{est.tflops_per_gpu:.1f} model TFLOP/s per GPU)",
        f"throughput             {est.samples_per_s:,.1f} samples/s{tokens}",
        f"memory per GPU         {est.value('memory_bytes') / 2**30:.1f} GiB of {c.gpu.memory_gb:g} GiB"
        + (
            ""
            if est.fits
            else "  ** does not fit: use --recompute, --zero, more --tp/--pp or a smaller --micro-batch **"
        ),
        f"data per step          {_seconds(est.value('data_time')).strip()} to read from {c.storage.name} "
        f"({est.data.bps_per_node / 1e6:,.0f} MB/s per node, limited by {est.data.limit}; overlapped with the step)",
        f"bottleneck             {est.bottleneck_text}",
    ]
    if est.sensitivities:
        lines.append("what if (step time)    " + "; ".join(f"{k}: {v:+.2f}%" for k, v in est.sensitivities.items()))
    if c.transport.cpu_ghz_per_gbps > 0 and c.nodes > 1:
        lines.append(
            f"TCP cost               1 GB/s over sockets takes about {8 * c.transport.cpu_ghz_per_gbps:.0f} GHz "
            f"of CPU; {c.transport.latency_us:g} us per message against 1-2 us for RDMA"
        )
    return lines


def _option_row(o: Option, marker: str) -> str:
    par = o.parallel
    split = (
        f"tp{par.tp} pp{par.pp} dp{par.dp}"
        + (f" cp{par.cp}" if par.cp > 1 else "")
        + (f" ep{par.ep}" if par.ep > 1 else "")
        + f" z{par.zero} mb{par.micro_batch} {par.recompute} ({par.stack})"
        if par
        else "-"
    )
    return (
        f"{marker}{_usd(o.cost_usd):>12}  {o.network.label():<44} {percent(o.utilization):>6}  "
        f"{o.step_s:9.3f}  {o.latency_us:8.1f}  {split}"
    )


def _servers(gpus: int) -> str:
    per_server = min(8, gpus)
    servers = gpus // per_server
    if servers == 1:
        return f"one server of {gpus}"
    return f"{servers} servers of {per_server}"


def plan_lines(p: Plan, *, top: int, seconds: float) -> list[str]:
    sc = p.scenario
    budget = f", small all-reduce <= {p.max_latency_us:g} us" if p.max_latency_us else ""
    lines = [
        f"plan: {p.model.name} on {p.gpus} x {p.gpu.name} ({_servers(p.gpus)}), scenario {sc.name}: {sc.description}",
        f"target: GPU utilization >= {100 * p.target_util:g}%{budget}",
        f"searched {len(p.options)} network{'s' if len(p.options) != 1 else ''} x "
        f"{p.evaluated // max(len(p.options), 1)} splits = {p.evaluated:,} "
        f"configurations in {seconds:.2f} s",
        "",
        "cost/utilization frontier (cheapest first; each row buys more utilization; * = recommended):",
        f"  {'network cost':>12}  {'network':<44} {'util':>6}  {'step (s)':>9}  {'lat (us)':>8}  split",
    ]
    shown = p.frontier[-top:] if len(p.frontier) > top else list(p.frontier)
    if p.recommended is not None and not any(o is p.recommended for o in shown):
        shown = sorted([*shown, p.recommended], key=Option.rank)
    for option in shown:
        lines.append(_option_row(option, "* " if option is p.recommended else "  "))
    lines.append("")
    if p.recommended is not None and not p.recommended.network.count:
        r = p.recommended
        lines.append(
            f"recommended: no scale-out network: one server of {p.gpus} {p.gpu.name} reaches "
            f"{percent(r.utilization)} utilization ({r.latency_us:.1f} us small all-reduce)"
        )
    elif p.recommended is not None:
        r = p.recommended
        share = 100 * r.cost_usd / (r.cost_usd + p.gpu_cost_usd)
        lines.append(
            f"recommended: {r.network.label()} for {_usd(r.cost_usd)} ({share:.1f}% of a "
            f"{_usd(r.cost_usd + p.gpu_cost_usd)} GPU+network bill): {percent(r.utilization)} utilization, "
            f"{r.latency_us:.1f} us small all-reduce"
        )
    lines.extend(f"note: {note}" for note in p.notes)
    lines.append("prices are street-price estimates (catalog/nics.toml): compare options, do not quote them")
    return lines


def validate_lines(checks: Sequence[Comparison]) -> list[str]:
    """Every row by file, then the error of every group of rows and of all of them."""
    lines: list[str] = []
    by_file: dict[str, list[Comparison]] = {}
    for check in checks:
        by_file.setdefault(check.file, []).append(check)
    width = max((len(c.group) for c in checks), default=5)
    for name, rows in by_file.items():
        lines.append(f"{name}:")
        lines.append(
            f"  {'id':<5} {'group':<{width}} {'metric':<15} {'published':>10} {'predicted':>10} {'error':>8}  detail"
        )
        for c in rows:
            lines.append(
                f"  {c.id:<5} {c.group:<{width}} {c.metric:<15} {c.published:>10.4g} {c.predicted:>10.4g} "
                f"{c.error_pct:>+7.1f}%{'*' if c.known_off else ' '} {c.detail}"
            )
        stats = summary(rows)
        lines.append(
            f"  {int(stats['rows'])} rows: median |error| {stats['median_abs_error_pct']:.1f}%, "
            f"worst {stats['worst_abs_error_pct']:.1f}%"
        )
        lines.append("")
    groups = by_group(checks)
    if groups:
        lines.append("error by group (|error|; 'kept': without the rows marked * in their notes as known to be off):")
        head = f"{'rows':>4} {'median':>8} {'worst':>8}"
        lines.append(f"  {'group':<{max(width, 7)}} {head}   {head.replace('rows', 'kept')}")
        for group, stats in groups.items():
            tail = (
                f"{int(stats['kept_rows']):>4} {stats['kept_median_abs_error_pct']:>7.1f}% "
                f"{stats['kept_worst_abs_error_pct']:>7.1f}%"
                if stats["kept_rows"]
                else f"{0:>4} {'-':>8} {'-':>8}"
            )
            lines.append(
                f"  {group:<{max(width, 7)}} {int(stats['rows']):>4} {stats['median_abs_error_pct']:>7.1f}% "
                f"{stats['worst_abs_error_pct']:>7.1f}%   {tail}"
            )
    return lines


def entry_lines(entry: Any) -> list[str]:
    """Every field of a catalog entry, one per line."""
    return [f"  {f.name:<18} {getattr(entry, f.name)}" for f in dataclasses.fields(entry) if f.name != "name"]


def listing_lines(title: str, items: Iterable[tuple[str, str]]) -> list[str]:
    lines = [f"{title}:"]
    lines.extend(f"  {name:<22} {text}" for name, text in items)
    return lines


def calibrate_lines(fitted: Mapping[str, CalibratedOp]) -> list[str]:
    """``calibrate``'s table: per op, the fitted terms and the fit error against the times fitted."""
    lines = [
        f"{'op':<15} {'points':>6} {'base_us':>8} {'hop_us':>8} {'busbw GB/s':>11} {'net hop_us':>10} "
        f"{'net GB/s':>9} {'fit error':>9}"
    ]
    for op, terms in fitted.items():
        lines.append(
            f"{op:<15} {terms.points:>6} {terms.base_us:>8.1f} {terms.intra_hop_us:>8.1f} "
            f"{terms.intra_busbw_gbps:>11.3g} {terms.inter_hop_us:>10.1f} {terms.inter_busbw_gbps:>9.3g} "
            f"{terms.residual_pct:>8.1f}%"
        )
    lines.append(
        "# fit error: the median |error| of the fit against each row's median (p50) time, the time it fits "
        "(bench's table prints the mean); predict at the measured shape shows exactly this error against those times"
    )
    return lines
