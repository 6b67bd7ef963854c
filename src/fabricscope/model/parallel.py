"""How a training job is split over GPUs, and the checks that it can be split that way.

A :class:`ParallelConfig` is one complete split.  A :class:`SplitRequest` is what a
user fixed on the command line, every knob left ``None`` open to the search of
:func:`fabricscope.model.estimate.best_split`.  Both are checked by the same
functions: :func:`check_values` (each value in range, on its own) and
:func:`check_layout` (the values that are given, against the model and the
cluster), so a bad ``--zero`` is refused whether or not the rest is searched.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal, TypeVar, cast

from fabricscope.errors import InvalidValue, UsageError, closest
from fabricscope.model.training import CONTEXT_GIB, EAGER_CONTEXT_GIB
from fabricscope.model.workload import ModelSpec
from fabricscope.shown import quoted

T = TypeVar("T", bound=str)

__all__ = [
    "EMPTY_END_CHUNKS",
    "FRAMEWORKS",
    "KNOBS",
    "MOE_IMBALANCE",
    "PRECISIONS",
    "RECOMPUTE",
    "STACK_FIELDS",
    "Framework",
    "ParallelConfig",
    "Precision",
    "Recompute",
    "SplitRequest",
    "as_choice",
    "check_layout",
    "check_values",
    "interleaves",
    "stack_numbers",
    "stack_settings",
]

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "tf32", "fp32"]
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp8", "tf32", "fp32")
EMPTY_END_CHUNKS = 2
"""(Virtual) stages that may hold no transformer layer: the first, with only the embedding, and
the last, with only the output layer and loss (Llama 3: 'we reduce one Transformer layer each
from the first and the last stages ... the first model chunk on the first stage has only the
embedding')."""
KNOBS = ("tp", "pp", "dp", "cp", "ep", "zero", "micro_batch", "recompute", "interleave", "sequence_parallel")
"""The parts of a split the search chooses when the user leaves them open."""
MOE_IMBALANCE = 1.0
"""Tokens of the most loaded expert over the mean, by default: balanced routing (auxiliary
losses, DeepSeek-V3's bias terms).  A named parameter (``--moe-imbalance``) where it is not."""


def as_choice(text: str, allowed: tuple[T, ...], flag: str) -> T:
    """``text`` if it is one of ``allowed`` (case-insensitive), else a UsageError naming the closest."""
    key = text.strip().lower()
    for option in allowed:
        if option == key:
            return option
    raise UsageError(f"unknown {flag} {quoted(text)}{closest(key, allowed)}: use {', '.join(allowed)}")


def _flag(key: str) -> str:
    return f"--{key.replace('_', '-')}"


def check_values(split: _Split) -> None:
    """Raise InvalidValue for a value out of range, looking at each given value on its own."""
    for key in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "interleave"):
        value = getattr(split, key)
        if value is not None and value < 1:
            raise InvalidValue(f"must be at least 1, got {value}", key=key)
    if split.zero is not None and not 0 <= split.zero <= 3:
        raise InvalidValue(f"must be 0, 1, 2 or 3, got {split.zero}", key="zero")
    if split.global_batch < 0:
        raise InvalidValue(f"must be positive, got {split.global_batch}", key="global_batch")
    if split.ps_servers < 0:
        raise InvalidValue(f"must not be negative, got {split.ps_servers}", key="ps_servers")
    if split.interleave is not None and split.interleave > 1 and split.pp == 1:
        raise InvalidValue("needs pipeline parallelism: a pipeline of 2 or more stages", key="interleave")
    if split.ps_servers and split.zero:
        raise InvalidValue(
            "replaces the all-reduce of plain data parallelism: use it without ZeRO (stage 0)", key="ps_servers"
        )


@dataclass(kw_only=True, slots=True)
class StackParameters:
    """How a training stack moves data and runs kernels, beyond the split: the named parameters
    every :class:`Framework` sets (with its source) and every split's settings carry."""

    regather_on_recompute: bool = False
    """ZeRO 3: recomputation gathers each unit's weights again before the backward gathers them."""
    bucket_mb: float = 25.0
    """Gradients reduced per collective (a vision model's unit): PyTorch DDP's ``bucket_cap_mb``."""
    cycle_ms: float = 0.0
    """Horovod's cycle time: each cycle all-reduces the gradients that became ready in it (0: none)."""
    unit_tensors: int = 1
    """Data-parallel collectives per transformer layer (1: the layer is one flat FSDP unit)."""
    rank_copies: bool = False
    """Gathers and reduce-scatters through the list API: one copy kernel per rank each."""
    live_params: float = 0.0
    """ZeRO 3: gathered parameters held at once (0: the unit in use and the one prefetched)."""
    pp_scatter_gather: bool = True
    """Each tensor-parallel rank sends 1/t of a stage's output to the next stage (Megatron)."""
    p2p_batched: bool = True
    """A stage sends to one neighbour while it receives from the other (Megatron's batched
    isend/irecv: two transfer times per micro-batch); else one transfer after the other (four)."""
    hopper_attention: bool = True
    """On Hopper, attention kernels of the FlashAttention-3 class (cuDNN fused attention, FA3: 75% of
    peak); else FlashAttention-2, which reaches 35% of an H100's peak."""
    ep_overlap: bool = False
    """Expert-parallel all-to-alls run beside another micro-batch's compute (DualPipe-like
    schedules: DeepSeek-V3's DualPipe, Megatron-Core's --overlap-moe-expert-parallel-comm)."""
    node_dedup: bool = False
    """The token dispatcher sends a token once to each node holding one of its experts and NVLink
    forwards it there (DeepEP, DeepSeek-V3's kernels); else once per expert (NCCL all-to-all)."""
    fp32_gradients: bool = False
    """Gradients cross the network in 32 bits whatever the compute precision: mixed precision that
    keeps fp32 weights and reduces their gradients as they are (PyTorch AMP with DDP, Horovod with
    tf_cnn_benchmarks); else in the precision's own width (DeepSpeed: 16 bits)."""
    fp32_main_grads: bool = False
    """In bf16, 16-bit weights whose gradients accumulate and are reduced in fp32 buffers (Megatron-LM's
    default: megatron/training/arguments.py sets accumulate_allreduce_grads_in_fp32 for bf16 unless
    --grad-reduce-in-bf16): 2 + 4 + 12 bytes a parameter, and 4-byte gradients on the wire.  Not in
    fp8, where Megatron-LM's Llama 3 H100 FP8 example adds --grad-reduce-in-bf16."""
    bf16_fp32_accumulation: bool = False
    """In bf16, each micro-batch's gradients are added into an fp32 buffer of every parameter the
    GPU holds, not sharded by ZeRO (Megatron-DeepSpeed's BF16 optimizer): 4 more bytes per
    parameter, and one pass over them per micro-batch; fp16 accumulates in its own 16 bits."""
    bf16_grad_comm: bool = False
    """With ``bf16_fp32_accumulation``: the fp32 gradients are all-reduced through a bf16 copy of each
    flat gradient group (DeepSpeed's ``communication_data_type`` is bf16 whenever bf16 is on, and
    ``allreduce_bucket`` runs ``tensor.to(self.communication_data_type)``: deepspeed/runtime/engine.py),
    so 2 bytes per gradient cross the network and a transient copy of 2 bytes per parameter held
    stays reserved by PyTorch's caching allocator; else the fp32 buffer is reduced as it is."""
    tp_comm_overlap: bool = False
    """Tensor-parallel all-gathers and reduce-scatters run in chunks beside the GEMMs that take or make
    them (Transformer Engine's userbuffers: ``tp_comm_overlap``, with sequence parallelism)."""
    pp_comm_overlap: bool = False
    """An interleaved pipeline's sends and receives run beside compute in the 1F1B steady state
    (Megatron-Core's ``overlap_p2p_comm``)."""
    cuda_context_gib: float = CONTEXT_GIB
    """GPU memory CUDA takes when PyTorch uses a GPU, which no tensor accounts for (``training.CONTEXT_GIB``
    for today's PyTorch, ``training.EAGER_CONTEXT_GIB`` for the 2021-22 stacks, with their source)."""


@dataclass(kw_only=True, slots=True)
class Framework(StackParameters):
    """How a training stack runs a split, as named parameters with their sources (not a derate)."""

    flash_attention: bool
    """Attention scores never reach memory (FlashAttention); else they are written and read."""
    dp_overlap: bool
    """Gradient reduction (and ZeRO 3's gathers) run beside compute; else after it, in turn."""
    source: str


FRAMEWORKS: dict[str, Framework] = {
    "megatron-lm-2021": Framework(
        flash_attention=False,
        dp_overlap=False,
        regather_on_recompute=False,
        cuda_context_gib=EAGER_CONTEXT_GIB,
        hopper_attention=False,
        source="Megatron-LM of 2021-22 (Narayanan et al. SC21; Korthikanti et al. 2022): fused softmax that "
        "writes the scores, gradients all-reduced after the backward (--overlap-grad-reduce came with "
        "Megatron-Core in 2023)",
    ),
    "megatron-core": Framework(
        flash_attention=True,
        dp_overlap=True,
        regather_on_recompute=False,
        fp32_main_grads=True,
        source="Megatron-Core (NVIDIA/Megatron-LM core_r0.5+): fused attention through Transformer Engine "
        "(cuDNN's Hopper kernels), --overlap-grad-reduce and --overlap-param-gather; in bf16 gradients "
        "accumulated and reduce-scattered in fp32 (megatron/training/arguments.py: 'accumulate and all-reduce "
        "gradients in fp32 for bfloat16 data type', unless --grad-reduce-in-bf16); its Llama 3 FP8 example on "
        "H100 runs --bf16 --grad-reduce-in-bf16 (examples/llama/train_llama3_8b_h100_fp8.sh), so fp8 reduces "
        "2-byte words (its Megatron-FSDP FP8 example keeps fp32)",
    ),
    "deepspeed-pipeline": Framework(
        flash_attention=False,
        dp_overlap=False,
        regather_on_recompute=False,
        cuda_context_gib=EAGER_CONTEXT_GIB,
        hopper_attention=False,
        p2p_batched=False,
        source="DeepSpeed PipelineEngine (deepspeed/runtime/pipe/engine.py, v0.5): the schedule ends with "
        "ReduceGrads after the last backward, so gradients are reduced after the pipeline flush; "
        "with tensor parallelism each rank sends its 1/t of a stage's output and gradient "
        "(https://github.com/deepspeedai/DeepSpeed/blob/v0.5.4/deepspeed/runtime/pipe/engine.py: "
        "is_pipe_partitioned = is_model_parallel, as in v0.3.14; PartitionedTensor, gathered over the "
        "tensor-parallel group on receipt, as Megatron's scatter/gather), synchronously (p2p.send: "
        "'Doesnt support async_op true'); TrainSchedule.steps "
        "(https://github.com/deepspeedai/DeepSpeed/blob/v0.5.4/deepspeed/runtime/pipe/schedule.py) "
        "issues RecvActivation then SendGrad before a forward and SendActivation then RecvGrad before a "
        "backward as separate instructions, each finished before the next, so a stage spends four "
        "transfer times per micro-batch; Megatron-DeepSpeed of 2021-22 ran Megatron's fused softmax "
        "(no FlashAttention)",
    ),
    "deepspeed-zero3-2021": Framework(
        flash_attention=False,
        dp_overlap=False,
        regather_on_recompute=True,
        cuda_context_gib=EAGER_CONTEXT_GIB,
        hopper_attention=False,
        unit_tensors=4,
        rank_copies=True,
        live_params=1e9,
        source="DeepSpeed ZeRO 3 as of v0.3.14 (April 2021), deepspeed/runtime/zero/partition_parameters.py "
        "and stage3.py: each parameter above stage3_param_persistence_threshold (1e5 elements; the four "
        "weight matrices of a layer) is gathered on its own after torch.cuda.synchronize() and waited for "
        "(PR 1188: 'the async version is not async at all'), through torch.distributed.all_gather and "
        "reduce_scatter on lists of one view per rank; parameters are released after each module's "
        "forward, so recomputation fetches them again; prefetching stops at stage3_max_live_parameters "
        "(1e9)",
    ),
    "pytorch-fsdp": Framework(
        flash_attention=True,
        dp_overlap=True,
        regather_on_recompute=False,
        hopper_attention=False,
        source="PyTorch FSDP (Zhao et al. VLDB 2023): backward and forward prefetch overlap each unit's "
        "all-gather and reduce-scatter with the neighbouring unit's compute; a checkpointed unit is "
        "gathered once in the backward for its recomputation and its gradients; attention through "
        "FlashAttention-2 (2023-24: MosaicML's MPT, Llama 3), before Hopper kernels (FlashAttention-3, July 2024)",
    ),
    "horovod": Framework(
        flash_attention=False,
        dp_overlap=True,
        regather_on_recompute=False,
        hopper_attention=False,
        bucket_mb=64.0,
        cycle_ms=5.0,
        fp32_gradients=True,
        source="Horovod (Sergeev and Del Balso 2018; docs/tensor-fusion.rst): all-reduces run as gradients "
        "become ready during the backward, fused into buffers of HOROVOD_FUSION_THRESHOLD = 64 MB, one "
        "fused all-reduce per cycle (horovod/common/operations.cc: SetCycleTimeMs(5), HOROVOD_CYCLE_TIME); "
        "gradients are reduced in the dtype the framework hands over (Compression.none unless "
        "--fp16-allreduce), and mixed precision keeps fp32 weights: tf_cnn_benchmarks' --use_fp16 "
        "all-reduces tf.gradients of its fp32 variables "
        "(https://github.com/tensorflow/benchmarks/blob/master/scripts/tf_cnn_benchmarks/benchmark_cnn.py: "
        "hvd.allreduce(grad, average=False, ...)), as Horovod's author advised: 'it is likely better to "
        "keep them in FP32 as well' (https://github.com/horovod/horovod/issues/187)",
    ),
    "pytorch-ddp": Framework(
        flash_attention=True,
        dp_overlap=True,
        regather_on_recompute=False,
        hopper_attention=False,
        bucket_mb=25.0,
        fp32_gradients=True,
        source="PyTorch DDP (Li et al. VLDB 2020): gradient buckets of bucket_cap_mb = 25 MB all-reduced "
        "during the backward; under automatic mixed precision the parameters, so their gradients and "
        "DDP's buckets, stay float32 (https://pytorch.org/docs/stable/amp.html; 16-bit reduction is the "
        "opt-in fp16_compress_hook, https://pytorch.org/docs/stable/ddp_comm_hooks.html)",
    ),
}
"""Training stacks the validation rows name (``framework`` column); each field may be overridden."""


FRAMEWORKS["nemo"] = replace(
    FRAMEWORKS["megatron-core"],
    tp_comm_overlap=True,
    pp_comm_overlap=True,
    fp32_main_grads=False,
    source="NeMo's performance recipes on Megatron-Core (NVIDIA/NeMo: each recipe's "
    "pretrain_performance_optimizations and scripts/performance set 'recipe.trainer.plugins."
    "grad_reduce_in_fp32 = False', so gradients are reduced in bf16; "
    "docs/source/features/optimizations/communication_overlap.rst): the distributed optimizer's "
    "gathers and reduce-scatters beside compute; tensor-parallel communication 'chunked and the chunks "
    "are overlapped in pipeline' with the GEMMs (Transformer Engine's userbuffers, tp_comm_overlap, "
    "which needs sequence parallelism), exposing one chunk; with virtual pipelining 'the overlap of the "
    "PP communications with non-dependant computations in the 1F1B stage', while 'the PP "
    "communications in pipeline fill and flush are still exposed'",
)


FRAMEWORKS["megatron-deepspeed-bf16"] = replace(
    FRAMEWORKS["deepspeed-pipeline"],
    bf16_fp32_accumulation=True,
    bf16_grad_comm=True,
    source="Megatron-DeepSpeed with DeepSpeed's BF16 optimizer (February 2022, written for BLOOM): the "
    "pipeline engine above, and in bf16 gradients accumulated in fp32, 'more memory heavy and is a bit "
    "slower - this is compared to fp16 which grad accumulates in fp16. The additional memory usage is "
    "4bytes x params and it's not sharded across gpus' "
    "(https://github.com/bigscience-workshop/bigscience/blob/master/train/tr11-176B-ml/chronicles-prequel.md, "
    "section 'Rebalancing layers')",
)


STACK_FIELDS = tuple(f.name for f in fields(StackParameters))
"""The parameters of a stack that a split's settings carry as they are (a Framework's flash
attention belongs to the model, its gradient overlap is a setting of its own)."""


def stack_settings(source: StackParameters) -> dict[str, Any]:
    """The :data:`STACK_FIELDS` of a Framework, a SplitRequest or a ParallelConfig."""
    return {name: getattr(source, name) for name in STACK_FIELDS}


def stack_numbers(source: _Settings) -> dict[str, float]:
    """The :data:`STACK_FIELDS` of ``source`` as the numbers of a ``training.Job`` at its precision
    (the attention kernels go to the Device instead)."""
    return {
        "regather": 1.0 if source.regather_on_recompute else 0.0,
        "bucket_bytes": float(source.bucket_mb) * 1e6,
        "cycle_s": float(source.cycle_ms) * 1e-3,
        "unit_tensors": float(source.unit_tensors),
        "rank_copies": 1.0 if source.rank_copies else 0.0,
        "live_params": float(source.live_params),
        "pp_scatter": 1.0 if source.pp_scatter_gather else 0.0,
        "p2p_serial": 0.0 if source.p2p_batched else 1.0,
        "ep_overlap": 1.0 if source.ep_overlap else 0.0,
        "node_dedup": 1.0 if source.node_dedup else 0.0,
        "fp32_grads": 1.0 if source.fp32_gradients else 0.0,
        "main_grads32": 1.0 if source.fp32_main_grads and source.precision == "bf16" else 0.0,
        "fp32_accum": 1.0 if source.bf16_fp32_accumulation and source.precision == "bf16" else 0.0,
        "grad_cast": 1.0 if source.bf16_grad_comm and source.precision == "bf16" else 0.0,
        "context_bytes": float(source.cuda_context_gib) * 2**30,
        "tp_overlap": 1.0 if source.tp_comm_overlap else 0.0,
        "pp_overlap": 1.0 if source.pp_comm_overlap else 0.0,
    }


@dataclass(kw_only=True, slots=True)
class _Settings(StackParameters):
    """What a job is run with, whatever its split (and the stack's parameters, modern by default)."""

    global_batch: int = 0
    """Sequences or samples per step; 0 takes the model's."""
    precision: Precision = "bf16"
    dp_overlap: bool = True
    """Reduce gradients while the last micro-batch's backward runs (DDP buckets, FSDP prefetch)."""
    ps_servers: int = 0
    """Parameter servers (CPU machines with one NIC each) instead of all-reduce; 0 = all-reduce."""
    moe_imbalance: float = MOE_IMBALANCE
    """Tokens of the most loaded expert over the mean (mixture-of-experts models, no capacity factor)."""
    etp: int = 0
    """Tensor-parallel ranks of each expert; 0: tp.  Another value folds the expert groups over
    the tp x cp x dp ranks (Megatron-Core's MoE parallel folding)."""

    def __post_init__(self) -> None:
        check_values(cast(_Split, self))
        if not 1.0 <= self.moe_imbalance <= 1e6:
            raise InvalidValue(f"must be from 1 (balanced) up, got {self.moe_imbalance}", key="moe_imbalance")


@dataclass(kw_only=True, slots=True)
class ParallelConfig(_Settings):
    """Parallelism and training options of one job."""

    tp: int = 1
    """Tensor-parallel ranks (inside a node)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel replicas."""
    cp: int = 1
    """Context-parallel ranks (each holds seq / cp tokens of every sequence)."""
    ep: int = 1
    """Expert-parallel ranks (routed experts split over them; taken from the dp x cp ranks)."""

    zero: int = 0
    """ZeRO stage: 0 all-reduce; 1 reduce-scatter + all-gather; 2 as 1 with gradients sharded
    (reduce-scattered every micro-batch); 3 (FSDP) also gathers the weights for every micro-batch."""
    micro_batch: int = 1
    recompute: Recompute = "none"
    interleave: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B)."""
    sequence_parallel: bool = False
    stack: str = ""
    """The training stack (``catalog/frameworks.toml``) that runs this split; empty when none was asked."""

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def fp32_accumulation(self) -> bool:
        """The stack's BF16 optimizer runs: bf16, at ZeRO 0 or 1 (training._fp32_accum prices it)."""
        return self.bf16_fp32_accumulation and self.precision == "bf16" and self.zero <= 1


@dataclass(kw_only=True, slots=True)
class SplitRequest(_Settings):
    """The knobs of a split a user fixed (see :class:`ParallelConfig`); ``None`` leaves one open
    to the search."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    zero: int | None = None
    micro_batch: int | None = None
    recompute: Recompute | None = None
    interleave: int | None = None
    sequence_parallel: bool | None = None
    framework: str | None = None
    """Only splits the stack running this framework (``catalog/frameworks.toml``) runs; None: any stack."""

    @property
    def fixed(self) -> list[str]:
        """The knobs the user gave, in :data:`KNOBS` order."""
        return [k for k in KNOBS if getattr(self, k) is not None]

    @property
    def open(self) -> list[str]:
        """The knobs left to the search."""
        return [k for k in KNOBS if getattr(self, k) is None]


_Split = ParallelConfig | SplitRequest
"""A split, complete or partial (``None`` = open): what the checks below look at."""


def check_layout(
    split: _Split, model: ModelSpec, *, gpus: int, gpus_per_node: int, batch: int, row: bool = False
) -> None:
    """Raise a UsageError saying why the given parts of ``split`` cannot run ``model`` on this
    many GPUs (parts left ``None`` are not checked).

    Messages name command-line flags (``--tp 16``), or with ``row`` the columns of a validation
    row (``tp = 16``), and say what to change there.
    """
    tp, pp, dp, mb, v = split.tp, split.pp, split.dp, split.micro_batch, split.interleave
    cp = split.cp

    def named(key: str, value: object) -> str:
        return f"{key} = {value}" if row else f"{_flag(key)} {value}"

    if tp is not None and pp is not None and dp is not None and tp * pp * dp * (cp or 1) != gpus:
        c = cp or 1
        names, values = ("tp*pp*dp*cp", f"{tp}*{pp}*{dp}*{c}") if c > 1 else ("tp*pp*dp", f"{tp}*{pp}*{dp}")
        hint = (
            f"set dp = {max(1, gpus // (tp * pp * c))} or gpus = {tp * pp * dp * c} in the row"
            if row
            else f"give --dp {max(1, gpus // (tp * pp * c))} or change --nodes"
        )
        raise UsageError(
            f"{names} = {values} = {tp * pp * dp * c} does not match the {'row' if row else 'cluster'}'s "
            f"{gpus} GPUs ({hint})"
        )
    _check_experts_and_context(split, model, gpus=gpus)
    if tp is not None:
        if tp > gpus_per_node:
            raise UsageError(
                f"{named('tp', tp)} is larger than a node ({gpus_per_node} GPUs): tensor parallelism stays inside "
                "a node"
            )
        if gpus_per_node % tp:
            raise UsageError(f"{named('tp', tp)} must divide the {gpus_per_node} GPUs of a node")
    if split.ps_servers > gpus:
        raise UsageError(
            f"--ps-servers {split.ps_servers} is more than the job's {gpus} GPUs (servers beyond one per "
            f"worker node already buy nothing): use 1 to {gpus}"
        )
    if not model.is_transformer:
        if (tp or 1) > 1 or (pp or 1) > 1:
            raise UsageError(f"{model.name} is a vision model: use data parallelism only (--tp 1 --pp 1)")
        if split.recompute not in (None, "none") or split.sequence_parallel:
            given = f"--recompute {split.recompute}" if split.recompute not in (None, "none") else "--sequence-parallel"
            raise UsageError(f"{given} applies to transformer layers and {model.name} is a vision model: leave it out")
    else:
        if tp == 1 and split.sequence_parallel:
            given = "recompute = ...+sequence-parallel" if row else "--sequence-parallel"
            raise UsageError(
                f"{given} splits activations over the tensor-parallel ranks and has no effect "
                f"with {named('tp', 1)}: give {'tp' if row else '--tp'} 2 or more, or leave sequence parallelism out"
            )
        if tp is not None and model.heads % tp:
            raise UsageError(f"{named('tp', tp)} must divide the model's {model.heads} attention heads")
        if tp is not None and not model.tp_fits_heads(tp):
            raise UsageError(
                f"{named('tp', tp)} must divide the model's {model.kv_heads} key/value heads, or be a multiple of "
                "them (Megatron-Core gives each rank the same number of groups, or one group shared by tp / "
                "kv_heads ranks)"
            )
        if pp is not None and pp * (v or 1) > model.layers + EMPTY_END_CHUNKS:
            raise UsageError(
                f"pp*interleave = {pp * (v or 1)} is more than the model's {model.layers} layers + "
                f"{EMPTY_END_CHUNKS}: every (virtual) stage needs a layer, but the first and the last"
            )
    fixed = [(name, value) for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp)) if value is not None]
    product = 1
    for _, value in fixed:
        product *= value
    if fixed and gpus % product:
        names = "*".join(name for name, _ in fixed)
        values = "*".join(str(value) for _, value in fixed)
        shown = f"{names} = {values} = {product}" if len(fixed) > 1 else f"--{names} {product}"
        hint = (
            "change the split or gpus in the row"
            if row
            else ("give --dp or change --nodes" if dp is None else "change the split or --nodes")
        )
        raise UsageError(f"{shown} does not divide the cluster's {gpus} GPUs: {hint}")
    if dp is None and tp is not None and pp is not None:
        dp = gpus // (tp * pp * (cp or 1))
    if dp is not None and batch % (dp * (mb or 1)):
        raise UsageError(f"the global batch ({batch}) must be a multiple of dp*micro_batch = {dp}*{mb or 1}")
    if dp is not None and pp is not None and v is not None and v > 1:
        microbatches = batch // (dp * (mb or 1))
        if not interleaves(pp, microbatches):
            raise UsageError(
                f"an interleaved pipeline runs micro-batches in groups of pp: {microbatches} micro-batches "
                f"(global batch / (dp*micro_batch)) is not a multiple of pp {pp} (Megatron-Core's "
                "interleaved schedule, torch's Interleaved1F1B): change the batch or the split, or leave "
                "interleave at 1"
            )


def interleaves(pp: int, microbatches: int) -> bool:
    """Whether an interleaved pipeline of ``pp`` stages runs ``microbatches``: in groups of ``pp`` contiguous
    micro-batches per virtual stage (megatron/core/pipeline_parallel/schedules.py: a group is at least pp
    and at most M, and M left over after the groups must be 0 or at least pp; by default a group is pp)."""
    return microbatches >= pp and microbatches % pp == 0


def _check_experts_and_context(split: _Split, model: ModelSpec, *, gpus: int) -> None:
    """Raise InvalidValue (naming ``ep`` or ``cp``) for expert or context parallelism the model
    or the cluster cannot take."""
    cp, ep = split.cp, split.ep
    if cp is not None and cp > 1:
        if not model.is_transformer:
            raise InvalidValue(f"splits a sequence's tokens and {model.name} is a vision model: use 1", key="cp")
        if model.seq % (2 * cp):
            raise InvalidValue(
                f"must split the sequence ({model.seq} tokens) into 2 x cp equal chunks (ring attention gives each "
                f"rank two chunks to balance causal work), got {cp}: use a cp with 2 x cp dividing {model.seq}",
                key="cp",
            )
    if ep is not None and ep > 1:
        if not model.is_moe:
            raise InvalidValue(
                f"splits routed experts and {model.name} has none (experts = 0): use 1, got {ep}", key="ep"
            )
        if model.experts % ep:
            raise InvalidValue(f"must divide the model's {model.experts} experts, got {ep}", key="ep")
        if gpus % ep:
            raise InvalidValue(f"must divide the {gpus} GPUs, got {ep}", key="ep")
        etp = getattr(split, "etp", 0) or 0
        if etp and gpus % (ep * etp):
            raise InvalidValue(
                f"x ep = {etp} x {ep} must divide the {gpus} GPUs (each expert group holds ep x etp ranks), got {etp}",
                key="etp",
            )
        if etp and split.dp is not None and split.tp is not None:
            ranks = split.tp * (cp or 1) * split.dp
            if ranks % (ep * etp):
                raise InvalidValue(
                    f"x etp = {ep * etp} must divide tp x cp x dp = {ranks} (folded expert groups), got ep {ep}",
                    key="ep",
                )
        elif split.dp is not None and (split.dp * (cp or 1)) % ep:
            raise InvalidValue(
                f"must divide dp x cp = {split.dp * (cp or 1)} (expert-parallel groups are made of data- and "
                f"context-parallel ranks), got {ep}",
                key="ep",
            )
