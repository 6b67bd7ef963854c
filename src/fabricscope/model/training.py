"""One training step, priced part by part, vectorized over parallelism and hardware.

``step`` takes numeric descriptions whose fields may be numpy arrays and returns every part of
the step as arrays of the broadcast shape, so the same function prices the one configuration of
``estimate`` and the million of ``plan``.  What each part counts (GEMMs on a roofline,
attention, memory-bound kernels, tensor, pipeline, data, expert and context parallelism, the
overlap rule, framework effects, memory, data loading) and where each constant comes from is
written once, in docs/model.md, section 1 ("A training step", "Mixture of experts").
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from fabricscope.model import collective_cost as coll
from fabricscope.model.calibrated_cost import predicted_seconds
from fabricscope.model.fabric import Fabric, Num, inside_node

__all__ = [
    "BREAKDOWN",
    "GEMM_DERATE",
    "Device",
    "Job",
    "Shape",
    "Step",
    "expert_load",
    "expert_tokens",
    "expert_tp",
    "grouped_gemm_efficiency",
    "grouped_mlp_scale",
    "mlp_width",
    "step",
    "wire_grad_bytes",
]


GEMM_DERATE = 0.80
"""Matmul efficiency in training / best-shape MAMF.  The one constant fitted to
training measurements (the Megatron A100 rows of the shipped validation data, docs/model.md): A100
0.869 x 0.80 = 0.70 of peak on transformer GEMMs."""
TOUCH_FWD = 2.0
"""Forward: every stored activation byte is written once and read once."""
TOUCH_BWD = 4.0
"""Backward: stored activations read, their gradients written and read, plus the saved inputs."""
KERNEL_OVERHEAD_S = 3e-6
"""Launch and tail of one kernel that does not overlap with the next."""
KERNELS_PER_LAYER_FWD = 23
"""Kernels of one transformer layer forward in Megatron-LM (GEMMs, norms, softmax, dropout, adds)."""
OPTIMIZER_BYTES_PER_PARAM = 30.0
"""Adam with fp32 master weights: read weight, gradient, m, v (16 B); write weight, m, v and the
16-bit copy (14 B)."""
ACCUMULATE_BYTES_PER_PARAM = 10.0
"""Adding a micro-batch's 16-bit gradient into an fp32 accumulator: read 2 and 4 bytes, write 4."""
CONTEXT_GIB = 0.92
"""CUDA's own memory on a GPU once PyTorch uses it (its context and kernel modules), which no tensor
accounts for: stas00/ml-engineering, training/performance/README.md, "Preloaded CUDA kernels memory
usage", A100 80GB, PyTorch 2.1.1: 0.47 GiB when only ``torch.ones`` has run with lazy loading, 0.92 GiB
with every module loaded, and "the actual memory allocated at run time with other code using torch API
will be somewhere between 0.47 and 0.92GiB": a training step runs most kernels, so the upper figure."""
EAGER_CONTEXT_GIB = 1.78
"""The same with PyTorch 1.10.2, which loaded every module at start (the same source): the stacks of
2021-22."""
NCCL_COMM_BYTES = 688e6
"""GPU memory of one NCCL communicator of more than 2 ranks once it has run a collective (its
channels' LL, LL128 and Simple buffers per peer): 688 MB on 4 A100 over NVLink (NVIDIA/nccl issue 964:
'for group with more than 2 devices, it requires 688 MB')."""
NCCL_PAIR_COMM_BYTES = 544e6
"""The same for a communicator of 2 ranks (issue 964: 'for group with only 2 devices, it requires 544 MB'):
a pipeline stage's link to each neighbour."""
FLASH_BWD_FACTOR = 2.5
"""FlashAttention's backward does 2.5x the forward FLOPs (it recomputes the scores)."""
MOE_KERNELS_FWD = 10
"""Kernels an MoE layer adds forward: router GEMM, score function, top-k, permute, dispatch, two
grouped GEMMs and the activation, combine, unpermute (Megatron-Core's MoELayer with the all-to-all
dispatcher)."""
GROUPED_GEMM_EFFICIENCY = ((256.0, 0.68), (512.0, 0.76), (1024.0, 0.83), (4096.0, 1.0))
"""(tokens per expert, throughput of the experts' grouped GEMM over a dense GEMM of the same N and K):
DeepGEMM's README at 989c9e3 (H800 SXM5, NVCC 12.8), 'Grouped GEMMs for MoE models (masked layout)'
with 256, 512 and 1024 tokens per group against the dense M = 4096 rows of the same N and K (mean of
N, K = 4096, 7168: 932, 1040, 1233 of 1410 TFLOPS, and 7168, 2048: 815, 916, 925 of 1168), and its
contiguous layout with 4096-8192 tokens per group at the dense rows' rate (1346 and 1214).  Between
the points the efficiency follows log2 of the tokens; below 256 it stays at 0.68 and above 4096 at 1.
Measured in FP8; BF16's torch._grouped_mm on H100 at 512 tokens per expert on average (pytorch/ao
PR 2490: 525-545 TFLOP/s) reaches 0.66-0.69 of the best-shape dense rate (MAMF), where this table with
the model's dense rate (GEMM_DERATE of MAMF) gives 0.61."""
OVERLAP_SM_SHARE = 20.0 / 132.0
"""Share of the GPU's SMs an all-to-all running beside compute takes from it: 'only 20 SMs are
sufficient to fully utilize the bandwidths of IB and NVLink' of an H800's 132 (DeepSeek-V3
technical report, section 3.2.2).  Overlapped all-to-alls cost this share of the time they overlap."""
BUCKET_BYTES = 25e6
"""Gradient bucket of PyTorch DDP (``bucket_cap_mb = 25``): the unit of a vision model's reduction."""

BREAKDOWN = (
    "compute",
    "recompute",
    "tp_comm",
    "ep_comm",
    "cp_comm",
    "pp_comm",
    "bubble",
    "dp_comm",
    "optimizer",
    "data_stall",
)
"""Parts of a step, in the order they are printed; they add up to the step time."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """The workload, in numbers (transformer fields are 0 for a vision model)."""

    transformer: bool
    layers: Num = 0
    hidden: Num = 0
    heads: Num = 0
    kv_width: Num = 0
    q_width: Num = 0
    """Width of the query projection: heads x head width (0: hidden)."""
    v_width: Num = 0
    """Width of the values, all heads (0: q_width)."""
    attention_params: Num = 0
    """Weights of one layer's attention projections when they are not Q, K, V and O of ``q_width``
    and ``kv_width`` (multi-head latent attention; 0: those)."""
    whole_attention_params: Num = 0
    """Of those, the weights every tensor-parallel rank runs whole (latent attention's down-projections),
    on all of the tokens unless sequence parallelism gives each rank its 1/t."""
    seq: Num = 1
    vocab: Num = 0
    ffn: Num = 0
    gated: Num = 0
    flash: Num = 1
    params: Num = 0
    matmul_params: Num = 0
    """Weights every token multiplies with: the layers and the output projection to the vocabulary."""
    vision_flops: Num = 0
    """Forward FLOPs per sample (vision)."""
    vision_traffic: Num = 0
    """Memory traffic per sample of a training step at 16-bit activations (vision), bytes."""
    sample_bytes: Num = 0
    head_params: Num = 0
    """Vision: share of the gradient bytes the backward produces first (the last layers' weights;
    0: spread evenly over the backward)."""
    head_backward: Num = 0
    """Vision: share of the backward's time in which it produces them."""
    moe_share: Num = 0
    """Share of the layers whose MLP is a mixture of experts (0: a dense model)."""
    top_k: Num = 0
    routed_ffn: Num = 0
    """MLP width a token multiplies with in its routed experts: top_k x one expert's width."""
    shared_ffn: Num = 0
    """MLP width of the shared experts together."""
    experts: Num = 0
    """Routed experts of one MoE layer (0: a dense model)."""
    capacity: Num = 0
    """Capacity factor (0: dropless, the busiest expert takes what it is routed)."""
    expert_params: Num = 0
    """Weights of every routed expert of every layer."""
    route_nodes: Num = 0
    """Node-limited routing: a token's experts lie on at most this many nodes (0: no limit)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """Parallelism of the job, in numbers."""

    tp: Num = 1
    pp: Num = 1
    dp: Num = 1
    zero: Num = 0
    micro_batch: Num = 1
    global_batch: Num = 1
    recompute: Num = 0
    """0 none, 1 selective, 2 full."""
    interleave: Num = 1
    sequence_parallel: Num = 0
    dp_overlap: Num = 1
    """1: gradient reduction (and ZeRO-3's gathers) run beside compute; 0: after it, in turn."""
    regather: Num = 0
    """ZeRO-3: 1 when recomputation gathers a unit's weights again (DeepSpeed releases them after
    every module forward), 0 when the backward's gather serves recomputation too (FSDP units)."""
    ps_servers: Num = 0
    bucket_bytes: Num = BUCKET_BYTES
    """Gradient bytes per collective of a vision model (DDP buckets, Horovod's fusion buffer)."""
    cycle_s: Num = 0.0
    """Horovod's cycle: every cycle reduces the gradients that became ready in it (0: none)."""
    pp_scatter: Num = 1
    """1: each tensor-parallel rank sends 1/t of a stage's output (Megatron's scatter/gather,
    Narayanan et al. 2021 section 4.1); 0: every rank sends all of it (DeepSpeed's pipeline engine)."""
    p2p_serial: Num = 0
    """0: a stage's send and receive of a micro-batch run together (Megatron's batched isend/irecv);
    1: one after the other (DeepSpeed's pipeline instructions), twice the transfer time."""
    unit_tensors: Num = 1
    """Data-parallel collectives per transformer layer: 1 where a layer is one flat unit (FSDP),
    one per weight matrix where each is gathered on its own (DeepSpeed ZeRO 3 of 2021: 4)."""
    live_params: Num = 0
    """ZeRO 3: gathered parameters allowed at once (DeepSpeed's stage3_max_live_parameters); 0: two
    units, the one in use and the one prefetched (FSDP)."""
    rank_copies: Num = 0
    """1 where each gather or reduce-scatter also runs one copy kernel per rank (the list form of
    ``torch.distributed.all_gather``/``reduce_scatter``, which copies every rank's part between
    its own tensor and NCCL's flat buffer)."""
    cp: Num = 1
    """Context-parallel ranks: each holds ``seq / cp`` tokens of every sequence (ring attention)."""
    ep: Num = 1
    """Expert-parallel ranks: the routed experts are split over them (taken from the ``dp x cp`` ranks)."""
    imbalance: Num = 1.0
    """Tokens of the most loaded expert over the mean (1: perfect balance), without a capacity factor."""
    ep_overlap: Num = 0
    """1 where the all-to-alls run beside another micro-batch's compute (DualPipe), 0 in turn."""
    node_dedup: Num = 0
    """1 where a token crosses the network once per node it goes to (DeepEP), 0 once per expert."""
    fp32_grads: Num = 0
    """1 where gradients cross the network in 32 bits whatever the precision (fp32 weights under
    mixed precision: PyTorch AMP with DDP, Horovod), 0 in the precision's ``grad_bytes``."""
    main_grads32: Num = 0
    """1 where 16-bit weights keep fp32 gradient buffers (Megatron-LM in bf16): 4 bytes of gradient a
    parameter in memory and on the wire, the weights still 2."""
    fp32_accum: Num = 0
    """1 where each micro-batch's 16-bit gradients are added into an unsharded fp32 buffer (reading
    2 + 4 bytes and writing 4 per parameter), 0 where they accumulate in place."""
    grad_cast: Num = 0
    """1 where the fp32 accumulator's gradients are reduced through a bf16 copy (DeepSpeed's BF16
    optimizer): 2 bytes on the wire and 2 bytes per parameter of transient memory."""
    context_bytes: Num = CONTEXT_GIB * 2**30
    """CUDA's own memory on the GPU (its context and kernel modules)."""
    etp: Num = 0
    """Tensor-parallel ranks of the experts (0: ``tp``, expert groups made of data- and
    context-parallel ranks); another value folds the expert groups over the attention's ranks
    (Megatron-Core's MoE parallel folding, ``--expert-tensor-parallel-size``)."""
    tp_overlap: Num = 0
    """1 where tensor-parallel all-gathers and reduce-scatters run in chunks beside the GEMMs that
    take or make them (Transformer Engine's userbuffers, with sequence parallelism), 0 in turn."""
    pp_overlap: Num = 0
    """1 where an interleaved pipeline's sends and receives run beside the other micro-batch's compute
    in the 1F1B steady state (``overlap_p2p_comm``); the fill and the flush still wait for them."""


def expert_tp(job: Job) -> Num:
    """Tensor-parallel ranks each routed expert is split over."""
    return np.where(job.etp > 0, job.etp, job.tp)


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """One GPU and what it reads data from, in numbers."""

    peak_flops: Num
    matmul_eff: Num
    hbm_bps: Num
    memory_bytes: Num
    act_bytes: Num = 2.0
    """Bytes per activation or weight element (2 for 16-bit training)."""
    grad_bytes: Num = 2.0
    """Bytes per gradient element on the wire."""
    data_bps_per_node: Num = np.inf
    """Bytes per second storage delivers to one node."""
    cached_fraction: Num = 0.0
    flash: Num = 1.0
    """1 where the GPU runs FlashAttention (Ampere and newer), else 0."""
    attention_eff: Num = 0.0
    """Share of peak FLOP/s FlashAttention's kernels reach (0: the matmul efficiency)."""
    attention_peak: Num = 0.0
    """Peak FLOP/s attention runs at (0: ``peak_flops``): FP8 training keeps attention in 16 bits."""
    head_flops: Num = 0.0
    """FLOP/s the output layer's GEMM reaches (0: the other GEMMs' rate): FP8 training keeps it in 16 bits."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Step:
    """Every part of one step (seconds), and what follows from them."""

    compute: Num
    recompute: Num
    tp_comm: Num
    ep_comm: Num
    cp_comm: Num
    pp_comm: Num
    bubble: Num
    dp_comm: Num
    optimizer: Num
    data_stall: Num
    step: Num
    model_flops: Num
    """FLOPs of the model per step (no recomputation), all GPUs."""
    hardware_flops: Num
    """FLOPs executed per step including recomputation, all GPUs."""
    memory_bytes: Num
    """Peak memory per GPU."""
    data_time: Num
    """Time to read one step's data (overlapped with the step)."""
    dp_comm_total: Num
    """Data-parallel communication before overlap."""

    def parts(self) -> dict[str, Num]:
        return {name: getattr(self, name) for name in BREAKDOWN}

    def as_dict(self) -> dict[str, Num]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def stage_layers(w: Shape, job: Job) -> Num:
    """Transformer layers on the busiest pipeline stage: ``v`` chunks of ``ceil(L / (p v))``
    layers each (126 layers on 16 stages: 8 on the busiest; Megatron-LM and Llama 3 give the
    first and last stages fewer)."""
    return np.ceil(w.layers / (job.pp * job.interleave)) * job.interleave


def expert_load(w: Shape, job: Job) -> Num:
    """Tokens the busiest expert computes, over the mean: the capacity factor where experts are
    padded to it, else the imbalance when experts are split over ranks (one rank holding every
    expert computes every routed token, whatever their spread)."""
    return np.where(w.capacity > 0, w.capacity, np.where(job.ep > 1, job.imbalance, 1.0))


def mlp_width(w: Shape, job: Job) -> Num:
    """MLP width a token multiplies with, averaged over the layers: a dense layer's ``ffn``, an
    MoE layer's shared experts and ``top_k`` routed experts (scaled by :func:`expert_load`)."""
    return (1.0 - w.moe_share) * w.ffn + w.moe_share * (w.shared_ffn + w.routed_ffn * expert_load(w, job))


def expert_tokens(w: Shape, job: Job, tokens: Num) -> Num:
    """Tokens one routed expert computes per micro-batch, on average: the ``ep`` ranks of its group
    each route ``top_k`` copies of their ``tokens / tp`` (with experts split over ``expert_tp``
    ranks each of those sees all of the expert's tokens), spread over the experts."""
    routed = job.ep * expert_tp(job) * tokens * w.top_k / job.tp
    return routed / np.maximum(w.experts, 1)


def grouped_gemm_efficiency(per_expert: Num) -> Num:
    """Throughput of the experts' grouped GEMM over a dense GEMM's (:data:`GROUPED_GEMM_EFFICIENCY`)."""
    points, shares = zip(*GROUPED_GEMM_EFFICIENCY, strict=True)
    return np.interp(np.log2(np.maximum(per_expert, 1.0)), np.log2(points), shares)


def grouped_mlp_scale(w: Shape, job: Job, tokens: Num) -> Num:
    """Time of the MLP's GEMMs over what dense GEMMs of the same width take: the routed experts' share
    of :func:`mlp_width` runs as a grouped GEMM (:func:`grouped_gemm_efficiency`), slower with fewer
    tokens per expert; dense layers and shared experts run as dense GEMMs."""
    ffn = mlp_width(w, job)
    experts = w.moe_share * w.routed_ffn * expert_load(w, job)
    grouped = experts / grouped_gemm_efficiency(expert_tokens(w, job, tokens))
    return np.where(ffn > 0, (ffn - experts + grouped) / np.where(ffn > 0, ffn, 1.0), 1.0)


def _gemm(m: Num, n: Num, k: Num, dev: Device, batch: Num = 1, rate: Num | None = None) -> Num:
    """Seconds of an (m x k) by (k x n) GEMM, ``batch`` of them: its FLOPs at ``rate`` (None: the device's
    matmul rate) or its operands through memory, whichever is longer."""
    flops = 2.0 * m * n * k * batch
    moved = dev.act_bytes * (m * k + k * n + m * n) * batch
    return np.maximum(flops / (dev.peak_flops * dev.matmul_eff if rate is None else rate), moved / dev.hbm_bps)


def _activation_bytes(w: Shape, job: Job, dev: Device, tokens: Num, flash: Num) -> tuple[Num, Num]:
    """(all stored activation bytes of one layer per GPU, the attention-score part of them)."""
    t = job.tp
    sbh = tokens * w.hidden
    replicated = 10.0 * sbh / np.where(job.sequence_parallel, t, 1)
    ffn = mlp_width(w, job)
    split = (4.0 * sbh + 4.0 * tokens * w.kv_width + np.where(w.gated, 6.0, 4.0) * tokens * ffn) / t
    scores = (1 - flash) * 5.0 * w.heads * w.seq * tokens / t
    scale = dev.act_bytes / 2.0
    return (replicated + split + scores) * scale, scores * scale


def _transformer_microbatch(w: Shape, job: Job, dev: Device, fab: Fabric) -> dict[str, Num]:
    """Seconds per micro-batch on the slowest (last) pipeline stage, by part."""
    b, t = job.micro_batch, job.tp
    chunk = w.seq / job.cp
    tokens = b * chunk
    h = w.hidden
    q = np.where(w.q_width > 0, w.q_width, h)
    v = np.where(w.v_width > 0, w.v_width, q)
    ffn = mlp_width(w, job)
    mlp_scale = grouped_mlp_scale(w, job, tokens)
    # Latent attention's down-projections run whole on every tensor rank; with sequence parallelism
    # each rank feeds them only its 1/t of the tokens, so they split like the rest.
    whole = np.where(job.sequence_parallel > 0, 0.0, w.whole_attention_params)
    projections = np.where(
        w.attention_params > 0,
        _gemm(tokens, (w.attention_params - whole) / (h * t), h, dev)
        + np.where(whole > 0, _gemm(tokens, whole / h, h, dev), 0.0),
        _gemm(tokens, (q + 2 * w.kv_width) / t, h, dev) + _gemm(tokens, h, q / t, dev),
    )
    linear = (
        projections
        + (_gemm(tokens, np.where(w.gated, 2, 1) * ffn / t, h, dev) + _gemm(tokens, h, ffn / t, dev)) * mlp_scale
    )
    head_dim, v_head = q / w.heads, v / w.heads
    batch_heads = b * w.heads / t
    # With context parallelism each rank's queries (seq / cp of them) meet every key.
    dense_attention = _gemm(chunk, w.seq, head_dim, dev, batch_heads) + _gemm(chunk, v_head, w.seq, dev, batch_heads)
    attention_eff = np.where(dev.attention_eff > 0, dev.attention_eff, dev.matmul_eff)
    attention_peak: Num = np.where(dev.attention_peak > 0, dev.attention_peak, dev.peak_flops)
    flash_attention = 0.5 * 2.0 * chunk * w.seq * (head_dim + v_head) * batch_heads / (attention_peak * attention_eff)
    flash = w.flash * dev.flash
    attention = np.where(flash, flash_attention, dense_attention)
    attention_bwd = np.where(flash, FLASH_BWD_FACTOR, 2.0) * attention
    act, scores = _activation_bytes(w, job, dev, tokens, flash)
    # An MoE layer copies each token into its top_k experts' order and back (permute: read one,
    # write top_k; unpermute: read top_k, write one), forward and twice over backward.
    routed = w.moe_share * tokens / t * (2.0 + 2.0 * w.top_k * expert_load(w, job)) * h * dev.act_bytes
    elementwise = (TOUCH_FWD * act + routed) / dev.hbm_bps
    kernels = (KERNELS_PER_LAYER_FWD + MOE_KERNELS_FWD * w.moe_share) * KERNEL_OVERHEAD_S
    fwd = linear + attention + elementwise + kernels
    bwd = 2.0 * linear + attention_bwd + (TOUCH_BWD / TOUCH_FWD) * elementwise + 2.0 * kernels
    selective = attention + TOUCH_FWD * scores / dev.hbm_bps
    recompute = np.where(job.recompute >= 2, fwd, np.where(job.recompute >= 1, selective, 0.0))

    act_message = tokens * h * dev.act_bytes
    all_reduce = coll.fastest(coll.all_reduce(inside_node(fab), act_message, t, 1.0))
    tp_comm = (4.0 + np.where(job.recompute >= 2, 2.0, 0.0)) * all_reduce
    # Overlapped, each collective runs in t ring-exchange chunks, chunk i's transfer beside chunk i-1's
    # GEMM: the first chunk waits, and each later one for what its GEMM chunk does not cover.
    overlapped = (job.tp_overlap > 0) & (job.sequence_parallel > 0)
    covered = (3.0 + np.where(job.recompute >= 2, 1.0, 0.0)) * linear
    tp_comm = np.where(overlapped, np.maximum(tp_comm - covered * (t - 1) / t, tp_comm / t), tp_comm)

    layers = stage_layers(w, job)
    replays = np.where(job.recompute >= 2, 1.0, 0.0)
    # A dense model has no all-to-all, a sweep without context parallelism no ring: skip pricing them.
    dispatch = _all_to_all_distinct(w, job, dev, fab) if np.any(w.moe_share) and np.any(job.ep > 1) else 0.0
    ep_comm = layers * w.moe_share * (4.0 + 2.0 * replays) * dispatch
    ring = _ring_attention(w, job, dev, fab, tokens) if np.any(job.cp > 1) else 0.0 * tokens
    cp_comm = layers * (
        (1.0 + replays) * np.maximum(ring - attention, 0.0) + np.maximum(2.0 * ring - attention_bwd, 0.0)
    )
    head_rate = np.where(dev.head_flops > 0, dev.head_flops, dev.peak_flops * dev.matmul_eff)
    logits = 3.0 * _gemm(tokens, w.vocab / t, h, dev, rate=head_rate) + 3.0 * tokens * w.vocab / t * 4.0 / dev.hbm_bps
    work = layers * (fwd + bwd + recompute)
    return {
        "compute": layers * (fwd + bwd) + logits,
        "recompute": layers * recompute,
        "tp_comm": layers * tp_comm,
        "ep_comm": np.where(
            job.ep_overlap > 0,
            np.maximum(ep_comm - work, 0.0) + OVERLAP_SM_SHARE * np.minimum(ep_comm, work),
            ep_comm,
        ),
        "cp_comm": cp_comm,
        "fwd": layers * fwd + logits / 3.0,
        "bwd": layers * bwd + 2.0 * logits / 3.0,
        "activations": act,
        "scores": scores,
    }


def _all_to_all(w: Shape, job: Job, dev: Device, fab: Fabric, tokens: Num) -> Num:
    """Seconds of one dispatch (or combine) all-to-all of an MoE layer, per micro-batch.

    Each rank sends its share of the tokens (sequence parallelism splits them over the
    tensor-parallel ranks, as Megatron-Core requires with experts) ``top_k`` times.  The ranks
    are ordered tensor, context, data as in Megatron-Core, so an expert-parallel group has
    ``gpus_per_node / (tp cp)`` members on a node and shares the node's NICs with the other groups
    there.  Of a token's copies, those to other nodes leave through the NICs; node-limited routing
    (with a dispatcher that sends a token once per node, DeepEP's) sends each token to at most
    ``route_nodes`` nodes (and NVLink forwards it).
    """
    g = fab.gpus_per_node
    # Classic groups (tp-cp-ep-dp order) stride over tp x cp ranks; folded ones over etp ranks.
    stride = np.where(job.etp > 0, expert_tp(job), job.tp * job.cp)
    local = np.clip(g // stride, 1, job.ep)
    nodes = np.ceil(job.ep / local)
    sent = tokens / job.tp * w.top_k * w.hidden * dev.act_bytes * expert_load(w, job)
    # Copies of a token that leave its node: one per remote expert (top_k (nodes-1)/nodes), or with a
    # dispatcher that sends once per node, one per remote node among those its experts lie on: at
    # most route_nodes with node-limited routing, else (nodes-1)(1 - (1 - 1/nodes)^top_k) on average.
    per_expert = w.top_k * (nodes - 1) / nodes
    spread = np.where(
        w.route_nodes > 0,
        np.minimum(np.minimum(w.route_nodes, w.top_k), nodes) * (nodes - 1) / nodes,
        (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** w.top_k),
    )
    remote = np.where(job.node_dedup > 0, np.minimum(spread, per_expert), per_expert) / np.maximum(w.top_k, 1)
    share = fab.node_net_gbps * local / g
    found = coll.point_to_point(fab, sent, local, nodes, pattern="alltoall", node_net=share, remote=remote)
    seconds = np.where(_a2a_calibrated(fab, nodes), _a2a_measured(fab, sent, local, nodes, remote), coll.fastest(found))
    return np.where((job.ep > 1) & (w.moe_share > 0), seconds, 0.0)


def _all_to_all_distinct(w: Shape, job: Job, dev: Device, fab: Fabric) -> Num:
    """:func:`_all_to_all`, priced once per distinct expert layout of a sweep's splits (as
    :func:`_per_group` does for the data-parallel collectives) and spread back."""
    keys = [job.tp, job.cp, job.ep, job.etp, job.micro_batch, job.node_dedup, job.imbalance]
    arrays = [np.asarray(k, dtype=float) for k in keys]
    lengths = {a.shape[0] for a in arrays if a.ndim == 1}
    if any(a.ndim > 1 for a in arrays) or len(lengths) != 1:
        return _all_to_all(w, job, dev, fab, job.micro_batch * w.seq / job.cp)
    (n,) = lengths
    table = np.stack([np.broadcast_to(a, (n,)) for a in arrays])
    groups, inverse = np.unique(table, axis=1, return_inverse=True)
    tp, cp, ep, etp, mb, dedup, imbalance = groups
    small = Job(tp=tp, cp=cp, ep=ep, etp=etp, micro_batch=mb, node_dedup=dedup, imbalance=imbalance)
    return np.take(_all_to_all(w, small, dev, fab, mb * w.seq / cp), np.ravel(inverse), axis=-1)


def _a2a_calibrated(fab: Fabric, nodes: Num) -> Num:
    """Whether the fabric's calibrated all-to-all covers a group spanning ``nodes`` nodes."""
    if fab.a2a is None:
        return np.zeros_like(np.asarray(nodes, dtype=bool))
    return np.where(nodes > 1, fab.a2a.inter_busbw_gbps > 0, fab.a2a.intra_busbw_gbps > 0)


def _a2a_measured(fab: Fabric, sent: Num, local: Num, nodes: Num, remote: Num) -> Num:
    """An all-to-all from measured terms, priced as ``predict`` prices a calibrated alltoall
    (:func:`fabricscope.model.calibrated_cost.predicted_seconds`): a rank sending ``S`` is the
    alltoall of S bytes.  Across nodes, the measured busbw is that of uniform destinations
    ((nodes-1)/nodes of the bytes leave a node); routing that sends a ``remote`` share instead
    scales the network part by ``remote / uniform``."""
    multi = nodes > 1
    uniform = (nodes - 1) / np.where(multi, nodes, 1.0)
    share = np.where(multi, remote / np.where(multi, uniform, 1.0), 1.0)
    if fab.a2a is None:
        return np.full(np.broadcast(sent, local, nodes).shape, np.inf)
    return predicted_seconds(fab.a2a, "alltoall", sent, local, nodes, net_share=share)


def _ring_attention(w: Shape, job: Job, dev: Device, fab: Fabric, tokens: Num) -> Num:
    """Seconds of ring attention's key/value passes in one layer's forward, per micro-batch:
    ``cp - 1`` steps, each sending this rank's keys and values (its tensor-parallel share) to the
    next rank.  The ring follows the tensor-parallel ranks (ordered tensor, context, data): inside a
    node while ``tp cp`` fits in one, else every step crosses a NIC of the sender's."""
    kv = 2.0 * tokens * w.kv_width * dev.act_bytes / job.tp
    across = job.tp * job.cp > fab.gpus_per_node
    nic = np.minimum(np.minimum(fab.nic_gbps, fab.node_net_gbps / fab.gpus_per_node), fab.gpu_pcie_gbps)
    bw = np.where(across, nic, fab.intra_gbps)
    hop = np.where(across, coll.net_hop(fab, "ring", coll.SIMPLE), coll.HOP_NVLINK_US["ring"][coll.SIMPLE])
    one = (coll.BASE_US["ring"][coll.SIMPLE] + hop) * 1e-6 + kv / (np.maximum(bw, 1e-12) * 1e9)
    return np.where(job.cp > 1, (job.cp - 1) * one, 0.0)


def _vision_microbatch(w: Shape, job: Job, dev: Device) -> dict[str, Num]:
    b = job.micro_batch
    flops = 3.0 * w.vision_flops * b / (dev.peak_flops * dev.matmul_eff)
    traffic = w.vision_traffic * b * (dev.act_bytes / 2.0) / dev.hbm_bps
    # ``vision_flops`` counts multiply-adds and the roofline above prices one FLOP each (its traffic was
    # derived that way: docs/model.md); whatever the traffic, a step is never shorter than its true FLOPs
    # (2 a multiply-add, 3 passes) at the GPU's peak, so its MFU stays at most 100%.
    flops = np.maximum(flops, np.maximum(6.0 * w.vision_flops * b / dev.peak_flops - traffic, 0.0))
    return {
        "compute": flops + traffic,
        "recompute": 0.0 * flops,
        "tp_comm": 0.0 * flops,
        "ep_comm": 0.0 * flops,
        "cp_comm": 0.0 * flops,
        "fwd": 1.0 / 3.0 * (flops + traffic),
        "bwd": 2.0 / 3.0 * (flops + traffic),
        "activations": 0.0 * flops,
        "scores": 0.0 * flops,
    }


def _units(w: Shape, job: Job, dev: Device, backward: Num) -> Num:
    """Data-parallel collectives per pass over one stage's weights: one per transformer layer
    (an FSDP unit, a gradient bucket); a vision model's gradients in buckets of ``bucket_bytes``,
    and with a ``cycle_s`` (Horovod) at least one per cycle of the backward, since each cycle
    reduces what became ready during it."""
    if w.transformer:
        return stage_layers(w, job) * job.unit_tensors
    buckets = np.maximum(1.0, np.ceil(w.params * wire_grad_bytes(job, dev) / job.bucket_bytes))
    cycles = np.where(job.cycle_s > 0, np.ceil(backward / np.where(job.cycle_s > 0, job.cycle_s, 1.0)), 1.0)
    return np.maximum(buckets, cycles)


def wire_grad_bytes(job: Job, dev: Device) -> Num:
    """Bytes per gradient element a data-parallel collective moves: 4 where gradients are fp32, or an
    fp32 accumulator is reduced as it is; the precision's own where the stack casts it (``grad_cast``)."""
    fp32 = (job.fp32_grads > 0) | (job.main_grads32 > 0) | ((_fp32_accum(job) > 0) & (job.grad_cast <= 0))
    return np.where(fp32, np.maximum(dev.grad_bytes, 4.0), dev.grad_bytes)


def _fp32_accum(job: Job) -> Num:
    """1 where gradients accumulate in an unsharded fp32 buffer: DeepSpeed's BF16 optimizer, which
    runs at ZeRO 0 and 1 only (at 2 and 3 the ZeRO optimizer partitions the gradients)."""
    return job.fp32_accum * (job.zero <= 1)


def _zero(job: Job) -> Num:
    """The ZeRO stage the optimizer state is sharded as: the BF16 optimizer always partitions its fp32
    weights and Adam state over the data-parallel ranks (its own stage 1), even at ZeRO 0."""
    return np.where(_fp32_accum(job) > 0, np.maximum(job.zero, 1), job.zero)


def _dp_comm(w: Shape, job: Job, dev: Device, fab: Fabric, units: Num) -> tuple[Num, Num, Num]:
    """Seconds of one unit's (gradient reduction, gradient reduce-scatter, weight all-gather).

    The reduction is an all-reduce, or with ``ps_servers`` a parameter-server exchange.  A
    node's GPUs belong to ``g / local`` data-parallel groups (``local`` members of each on
    the node, ranks ordered tensor, data, pipeline as in Megatron-LM); the groups share the
    node's NICs.
    """
    g = fab.gpus_per_node
    replicas = job.dp * job.cp
    local = np.minimum(replicas, np.maximum(1, g // job.tp))
    dp_nodes = np.ceil(replicas / local)
    share = fab.node_net_gbps * local / g
    weights = _stage_params(w, job) / units
    grads = weights * wire_grad_bytes(job, dev)
    all_reduce = coll.fastest(coll.all_reduce(fab, grads, local, dp_nodes, share))
    scatter = coll.fastest(coll.ring_like(fab, grads, local, dp_nodes, node_net=share))
    gather = coll.fastest(coll.ring_like(fab, weights * dev.act_bytes, local, dp_nodes, node_net=share))
    # Parameter servers (BytePS, non-colocated): reduce inside the node over NVLink, then every
    # worker node pushes and pulls its gradients: max(M/B, n*M/(k*B)) with k server NICs.
    intra = 2.0 * (local - 1) / local * grads / (fab.intra_gbps * 1e9)
    servers = np.maximum(job.ps_servers, 1)
    pushed = np.maximum(grads / (np.maximum(share, 1e-12) * 1e9), dp_nodes * grads / (servers * fab.nic_gbps * 1e9))
    ps = np.where(replicas > 1, intra + pushed, 0.0)
    return np.where(job.ps_servers > 0, ps, all_reduce), scatter, gather


def _per_group(w: Shape, job: Job, dev: Device, fab: Fabric, units: Num) -> tuple[Num, Num, Num]:
    """:func:`_dp_comm`, evaluated once per distinct (tp, pp, dp, ps_servers) of a sweep.

    The collectives depend on nothing else of the job, and a sweep repeats each group for
    every ZeRO stage, micro-batch, recomputation and interleaving: when the job's arrays are
    one row of splits, price the distinct groups and spread the results back.
    """
    keys = [job.tp, job.pp, job.dp, job.ps_servers, job.interleave, job.cp, job.ep, job.etp]
    arrays = [np.asarray(k) for k in keys]
    lengths = {a.shape[0] for a in arrays if a.ndim == 1}
    if any(a.ndim > 1 for a in arrays) or len(lengths) != 1 or np.ndim(units) > 1:
        return _dp_comm(w, job, dev, fab, units)
    (n,) = lengths
    table = np.stack([np.broadcast_to(a, (n,)) for a in arrays] + [np.broadcast_to(units, (n,))])
    groups, inverse = np.unique(table, axis=1, return_inverse=True)
    tp, pp, dp, ps, v, cp, ep, etp, unit = groups
    small = Job(tp=tp, pp=pp, dp=dp, ps_servers=ps, interleave=v, cp=cp, ep=ep, etp=etp)
    return tuple(np.take(part, np.ravel(inverse), axis=-1) for part in _dp_comm(w, small, dev, fab, unit))  # type: ignore[return-value]


def _stage_params(w: Shape, job: Job) -> Num:
    """Parameters one GPU holds: its tensor-parallel share of the busiest stage's layers, and of
    their routed experts its expert-parallel share."""
    if not w.transformer:
        return w.params / (job.tp * job.pp)
    share = np.minimum(stage_layers(w, job) / w.layers, 1.0)
    return ((w.params - w.expert_params) / job.tp + w.expert_params / (job.ep * expert_tp(job))) * share


def _expert_share(w: Shape, job: Job) -> Num:
    """Share of a GPU's weights that are routed experts (sharded by ZeRO over the
    ``tp cp dp / (ep etp)`` ranks that hold the same experts)."""
    if not w.transformer:
        return 0.0
    experts = w.expert_params / (job.ep * expert_tp(job))
    return experts / np.maximum((w.params - w.expert_params) / job.tp + experts, 1.0)


def _expert_replicas(job: Job) -> Num:
    """Ranks holding the same routed experts (their ZeRO group)."""
    return np.maximum(job.tp * job.cp * job.dp / (job.ep * expert_tp(job)), 1.0)


def _beside(units: Num, comm: Num, compute: Num) -> Num:
    """Exposed seconds of ``units`` collectives of ``comm`` each, run beside ``compute`` seconds
    split in as many parts: each waits for its part (or its part waits for it), so the first
    (or last) one is never hidden and no collective hides behind compute another one used."""
    part = compute / units
    return units * np.maximum(comm - part, 0.0) + np.minimum(comm, part)


def _gradients_beside(w: Shape, units: Num, comm: Num, backward: Num) -> Num:
    """Exposed seconds of the gradient reduction (``units`` collectives of ``comm`` each) beside
    the ``backward``.  Evenly spread gradients are :func:`_beside`.  A network whose last layers
    hold most weights (``head_params`` of them, produced in the first ``head_backward`` of the
    backward: ResNet-50's conv5_x and fc hold 67% of its weights and take 19% of its FLOPs) hands
    the network most of its bytes early: the head's collectives run beside the rest of the
    backward, and the tail's queue behind what is left of the head's."""
    evenly = _beside(units, comm, backward)
    if w.transformer:
        return evenly
    share, early = w.head_params, w.head_backward
    total = units * comm
    head_units = np.maximum(units * early, 1.0)
    tail_units = np.maximum(units * (1.0 - early), 1.0)
    head = _beside(head_units, share * total / head_units, early * backward)
    tail = _beside(tail_units, (1.0 - share) * total / tail_units, (1.0 - early) * backward)
    queued = np.maximum(tail, head + (1.0 - share) * total - (1.0 - early) * backward)
    return np.where(early > 0, queued, evenly)


def _pp_comm(w: Shape, job: Job, dev: Device, fab: Fabric) -> Num:
    """Point-to-point seconds per micro-batch: each stage boundary, both directions, each virtual
    stage; a send and a receive together (Megatron) or one after the other (``p2p_serial``)."""
    message = job.micro_batch * w.seq / job.cp * w.hidden * dev.act_bytes / np.where(job.pp_scatter, job.tp, 1)
    # Ranks are ordered tensor, context, data, pipeline: a pipeline longer than a node crosses
    # nodes, and the slowest boundary paces it.
    across_nodes = job.tp * job.cp * job.dp * job.pp > fab.gpus_per_node
    bw = np.where(across_nodes, np.minimum(fab.nic_gbps, fab.node_net_gbps / fab.gpus_per_node), fab.intra_gbps)
    hop = np.where(across_nodes, coll.net_hop(fab, "ring", coll.SIMPLE), coll.HOP_NVLINK_US["ring"][coll.SIMPLE])
    one = (coll.BASE_US["ring"][2] + hop) * 1e-6 + message / (np.maximum(bw, 1e-12) * 1e9)
    return np.where(job.pp > 1, (2.0 + 2.0 * job.p2p_serial) * job.interleave * one, 0.0)


def step(w: Shape, job: Job, dev: Device, fab: Fabric) -> Step:
    """Price one training step; every field of the result has the broadcast shape of the inputs."""
    microbatches = job.global_batch / (job.dp * job.micro_batch)
    mb = _transformer_microbatch(w, job, dev, fab) if w.transformer else _vision_microbatch(w, job, dev)
    p2p = _pp_comm(w, job, dev, fab) if w.transformer else 0.0
    busy_mb = mb["compute"] + mb["recompute"] + mb["tp_comm"] + mb["ep_comm"] + mb["cp_comm"]
    # The fill and the flush (the bubble) wait for their transfers; overlapped (interleaved schedules
    # only), the steady state's hide behind the other micro-batch's compute.
    bubble = (job.pp - 1) / job.interleave * (busy_mb + p2p)
    p2p = np.where((job.pp_overlap > 0) & (job.interleave > 1), np.maximum(p2p - busy_mb, 0.0), p2p)
    per_mb = busy_mb + p2p

    # Data parallelism: what each ZeRO stage sends once per step and every micro-batch, and
    # the compute each part runs beside (see _beside): gradients beside the backward of the
    # last micro-batch, weight gathers beside a forward, ZeRO 3's backward gathers and
    # reduce-scatters one after another on the same NICs.
    forward, backward = mb["fwd"], mb["bwd"] + mb["recompute"]
    units = _units(w, job, dev, backward)
    reduce, scatter, gather = _per_group(w, job, dev, fab, units)
    copies = job.rank_copies * job.dp * job.cp * KERNEL_OVERHEAD_S
    scatter, gather = scatter + copies, gather + copies

    def exposed(comm: Num, compute: Num) -> Num:
        return np.where(job.dp_overlap, _beside(units, comm, compute), units * comm)

    z = _zero(job)
    gradients = np.where(job.dp_overlap, _gradients_beside(w, units, reduce, backward), units * reduce)
    once = np.where(z == 0, gradients, np.where(z == 1, exposed(scatter, backward), 0.0))
    once = once + np.where((z == 1) | (z == 2), exposed(gather, forward), 0.0)
    # ZeRO 3 with recomputation that gathers again: one more gather beside the replayed forward.
    regather = np.where((job.recompute >= 1) & (job.regather > 0), 1.0, 0.0)
    every = np.where(
        z == 2,
        exposed(scatter, backward),
        np.where(
            z == 3,
            exposed(gather, forward)
            + regather * exposed(gather, mb["recompute"])
            + exposed(gather + scatter, mb["bwd"] + (1.0 - regather) * mb["recompute"]),
            0.0,
        ),
    )
    dp_exposed = once + microbatches * every
    dp_total = units * np.select(
        [z == 0, z == 1, z == 2],
        [reduce, scatter + gather, gather + microbatches * scatter],
        microbatches * ((2.0 + regather) * gather + scatter),
    )

    weights = _stage_params(w, job)
    replicas = job.dp * job.cp
    experts = _expert_share(w, job)
    kept = (1.0 - experts) / replicas + experts / _expert_replicas(job)
    optimizer = weights * np.where(z >= 1, kept, 1.0) * OPTIMIZER_BYTES_PER_PARAM / dev.hbm_bps
    optimizer = optimizer + _fp32_accum(job) * microbatches * weights * ACCUMULATE_BYTES_PER_PARAM / dev.hbm_bps

    busy = microbatches * per_mb + bubble + dp_exposed + optimizer
    nodes = np.maximum(job.tp * job.pp * job.dp * job.cp / fab.gpus_per_node, 1)
    data_bytes = job.global_batch * w.sample_bytes * (1.0 - dev.cached_fraction) / nodes
    data_time = data_bytes / dev.data_bps_per_node
    stall = np.maximum(data_time - busy, 0.0)

    tokens = job.global_batch * w.seq
    if w.transformer:
        q = np.where(w.q_width > 0, w.q_width, w.hidden)
        attention_forward = 2.0 * w.layers * (q + np.where(w.v_width > 0, w.v_width, q)) * w.seq * tokens
        layers_forward = 2.0 * (w.matmul_params - w.vocab * w.hidden) * tokens + attention_forward
        model_flops = 6.0 * w.matmul_params * tokens + 3.0 * attention_forward
        replayed = np.where(job.recompute >= 2, layers_forward, np.where(job.recompute >= 1, attention_forward, 0.0))
    else:
        # ``vision_flops`` counts multiply-adds, as vision papers and torchvision publish "GFLOPs": 2 FLOPs
        # each, 3 passes (forward, two backward) - what MFU and model TFLOP/s count.
        model_flops = 6.0 * w.vision_flops * job.global_batch
        replayed = np.zeros(())

    memory = _memory(w, job, dev, weights, mb["activations"], mb["scores"])
    return Step(
        compute=microbatches * mb["compute"],
        recompute=microbatches * mb["recompute"],
        tp_comm=microbatches * mb["tp_comm"],
        ep_comm=microbatches * mb["ep_comm"],
        cp_comm=microbatches * mb["cp_comm"],
        pp_comm=microbatches * p2p,
        bubble=bubble,
        dp_comm=dp_exposed,
        optimizer=optimizer,
        data_stall=stall,
        step=busy + stall,
        model_flops=model_flops,
        hardware_flops=model_flops + replayed,
        memory_bytes=memory,
        data_time=data_time,
        dp_comm_total=dp_total,
    )


def _memory(w: Shape, job: Job, dev: Device, weights: Num, act_layer: Num, scores: Num) -> Num:
    """Peak bytes per GPU: weights, gradients and optimizer state (ZeRO-sharded) and activations.

    The first pipeline stage holds the most micro-batches in flight: ``min(p, m)`` under 1F1B,
    ``(1 + (p - 1) / (p v))`` times more with ``v`` interleaved chunks (Korthikanti et al. 2022,
    section 4.2.3).  What each keeps depends on recomputation: everything (none), everything but
    the attention scores (selective), or only each layer's input (full).  With full
    recomputation only one layer's working activations exist at a time, whatever the number in
    flight: the one being recomputed and back-propagated (Korthikanti et al. 2022, section 5:
    full recomputation stores only each layer's input).
    """
    zero = _zero(job)
    # Bytes per parameter of weight, gradient and optimizer state (ZeRO paper, section 3.1): 2 + 2 + 12 in
    # mixed precision (16-bit weight and gradient; fp32 master weight, m and v); 4 + 4 + 8 where the
    # weights themselves are fp32 (fp32 or tf32 training, and automatic mixed precision, whose fp32
    # gradients say so): no master copy.  Stage 1 shards the optimizer state, 2 the gradients too, 3 all.
    full = (dev.act_bytes >= 4.0) | (job.fp32_grads > 0)
    weight = np.where(full, 4.0, 2.0)
    grad = np.where(full | (job.main_grads32 > 0), 4.0, 2.0)
    optimizer = np.where(full, 8.0, 12.0)
    total = weight + grad + optimizer

    def state_bytes(dp: Num) -> Num:
        return np.select(
            [zero == 0, zero == 1, zero == 2],
            [total, weight + grad + optimizer / dp, weight + (grad + optimizer) / dp],
            total / dp,
        )

    # ZeRO shards over the data- and context-parallel ranks; routed experts over those that hold
    # the same experts (dp cp / ep), as Megatron-Core's distributed optimizer does.
    replicas = job.dp * job.cp
    experts = _expert_share(w, job)
    state = (1.0 - experts) * state_bytes(replicas) + experts * state_bytes(_expert_replicas(job))
    # The BF16 optimizer's unsharded fp32 accumulator, and the bf16 copy it is reduced through.
    state = state + _fp32_accum(job) * (4.0 + 2.0 * (job.grad_cast > 0))
    fixed = _fixed_memory(job)
    if not w.transformer:
        return weights * state + fixed
    tokens = job.micro_batch * w.seq / job.cp
    layer_input = tokens * w.hidden * dev.act_bytes / np.where(job.sequence_parallel, job.tp, 1)
    layers = stage_layers(w, job)
    in_flight = np.minimum(job.pp, job.global_batch / (job.dp * job.micro_batch))
    in_flight = in_flight * np.where(job.interleave > 1, 1.0 + (job.pp - 1) / (job.pp * job.interleave), 1.0)
    kept = np.select(
        [job.recompute >= 2, job.recompute >= 1],
        [layers * layer_input * in_flight + act_layer, layers * (act_layer - scores) * in_flight + scores],
        layers * act_layer * in_flight,
    )
    # ZeRO 3 holds one unit's gathered weights while the next is prefetched (FSDP: two units), or
    # with a cap on live parameters as many as it allows, at least the unit in use (DeepSpeed).
    unit = weights / np.maximum(layers, 1) / job.unit_tensors
    live = np.where(job.live_params > 0, np.maximum(job.live_params, unit), 2.0 * unit)
    gathered = np.where(job.zero == 3, live * dev.act_bytes, 0.0)
    logits = tokens * w.vocab / job.tp * 4.0 * 2.0
    return weights * state + kept + gathered + logits + fixed


def _fixed_memory(job: Job) -> Num:
    """What nvidia-smi shows on a GPU beyond the tensors: CUDA's context and the buffers of each NCCL
    communicator the job runs collectives on (the default group, one per parallel dimension of more
    than one rank, and with a pipeline a 2-rank communicator to each neighbouring stage)."""
    groups = 1.0 + sum(np.where(n > 1, 1.0, 0.0) for n in (job.tp, job.cp, job.dp * job.cp, job.ep))
    pairs = np.where(job.pp > 1, 2.0, 0.0)
    return job.context_bytes + groups * NCCL_COMM_BYTES + pairs * NCCL_PAIR_COMM_BYTES
