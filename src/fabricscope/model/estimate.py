"""One training step on a described cluster: the breakdown, the bottleneck, the sensitivities.

This is where typed configs (:class:`ModelSpec`, :class:`Cluster`,
:class:`ParallelConfig`) become the numbers of :mod:`training`, and where the
one-configuration answer is dressed for people: which part of the step holds it
back (the bottleneck), and what a faster network would buy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fabricscope.errors import UsageError
from fabricscope.model import training
from fabricscope.model.cluster import Cluster
from fabricscope.model.datapath import TRANSFORMER_READ_BYTES, DataPath, data_path
from fabricscope.model.fabric import Fabric, fabric_of
from fabricscope.model.hardware import GPU
from fabricscope.model.parallel import RECOMPUTE, ParallelConfig, SplitRequest, check_layout, stack_numbers
from fabricscope.model.splits import MIN_CP_TOKENS, splits
from fabricscope.model.training import BREAKDOWN, Device, Job, Shape, Step
from fabricscope.model.workload import ModelSpec
from fabricscope.results import Result

__all__ = [
    "BOTTLENECKS",
    "BOTTLENECK_SHARE",
    "FP8_MATMUL_SHARE",
    "SENSITIVITIES",
    "Estimate",
    "best_split",
    "device_for",
    "estimate",
    "job_of",
    "searched",
    "shape_of",
]

BOTTLENECKS = {
    "compute": "compute: the GPUs are busy; no overhead takes {share} of the step",
    "recompute": "activation recomputation (memory pressure)",
    "tp_comm": "tensor-parallel communication inside the node (NVLink/PCIe)",
    "ep_comm": "expert-parallel all-to-alls (dispatch and combine; network beyond a node)",
    "cp_comm": "context-parallel key/value passes not hidden by attention compute",
    "pp_comm": "pipeline transfers between stages (network)",
    "bubble": "pipeline bubble (too few micro-batches per stage)",
    "dp_comm": "data-parallel communication (network)",
    "optimizer": "optimizer step (memory bandwidth)",
    "data_stall": "data loading ({limit})",
}
"""What each part of a step means when it is what holds the step back."""
BOTTLENECK_SHARE = 0.10
"""An overhead (any part but compute) of this share of the step or more is the bottleneck;
below it, compute is."""
DATA_LIMITS = {
    "storage media": "the storage devices: seeks and reads",
    "storage server link": "the storage server's network link",
    "node link": "the node's network link to storage",
}

SENSITIVITIES: dict[str, Callable[[Fabric], Fabric]] = {
    "2x network bandwidth": lambda f: dataclasses.replace(f, nic_gbps=f.nic_gbps * 2),
    "100 ns less network latency": lambda f: dataclasses.replace(f, net_extra_us=f.net_extra_us - 0.1),
    "10 us less network latency": lambda f: dataclasses.replace(f, net_extra_us=f.net_extra_us - 10.0),
    "2x intra-node bandwidth": lambda f: dataclasses.replace(f, intra_gbps=f.intra_gbps * 2),
}
"""What-ifs: a changed Fabric each ("2x network bandwidth" also doubles the network links to
storage, see :func:`estimate`)."""

GRAD_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "tf32": 4.0, "fp32": 4.0}
ACT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 2.0, "tf32": 4.0, "fp32": 4.0}
FLASH_ARCHS = ("ampere", "ada", "hopper", "blackwell", "cdna3")
FLASH2_EFFICIENCY = {"hopper": 0.35}
"""Share of peak FlashAttention-2 reaches where it does not use the architecture's own matrix
instructions: on Hopper 'FlashAttention-2 achieves only 35% utilization on the H100 GPU' (Shah et al.
2024, FlashAttention-3, abstract).  Elsewhere it runs at the matmul efficiency (on A100 'reaching
50-73% of the theoretical maximum FLOPs/s', Dao 2023, FlashAttention-2, abstract)."""
FP8_MATMUL_SHARE = 0.71
"""FP8 training's GEMMs reach this share of the 16-bit GEMMs' efficiency (as a share of the FP8 peak):
per-tensor scaling, casts and transposes of every operand, shapes that fill FP8 tensor cores less.
The one constant fitted here, to one published row kept out of the validation rows: NeMo's
performance summary for the NeMo 24.07 container (NVIDIA/NeMo 9c5c5e9, DGX-H100), LLAMA2-7B on 8
H100 at FP8, GBS 128, MBS 1, seq 4096, TP/PP/CP 1: '16934' tokens/s/GPU, '780' model TFLOP/s/GPU
(the model gives 16,880 at 0.71, its output layer in BF16 as Megatron-Core runs it; FP8 then runs the
layers' GEMMs 1.42x as fast as BF16)."""
FLASH_HOPPER_EFFICIENCY = 0.75
"""FlashAttention-3 (or cuDNN's fused attention) on Hopper: 'FP16 reaching up to 740 TFLOPs/s (75%
utilization)' (Shah et al. 2024, abstract)."""
"""Architectures FlashAttention runs on (FlashAttention-2 needs Ampere or newer; ROCm builds it for MI300)."""


def shape_of(model: ModelSpec) -> Shape:
    if not model.is_transformer:
        return Shape(
            transformer=False,
            params=model.param_count,
            vision_flops=model.gflops_per_sample * 1e9,
            vision_traffic=model.traffic_mb_per_sample * 1e6,
            sample_bytes=model.sample_bytes,
            head_params=model.head_params_share,
            head_backward=model.head_backward_share,
        )
    return Shape(
        transformer=True,
        layers=model.layers,
        hidden=model.hidden,
        heads=model.heads,
        kv_width=model.kv_width,
        q_width=model.q_width,
        v_width=model.v_width,
        attention_params=model.attention_params if model.is_mla else 0,
        whole_attention_params=model.whole_attention_params,
        seq=model.seq,
        vocab=model.vocab,
        ffn=model.ffn_width,
        gated=1 if model.gated_mlp else 0,
        flash=1 if model.flash_attention else 0,
        params=model.param_count,
        matmul_params=model.layers * model.active_layer_params + model.vocab * model.hidden,
        sample_bytes=model.sample_bytes,
        moe_share=model.moe_layers / model.layers,
        top_k=model.top_k,
        routed_ffn=model.top_k * model.expert_width if model.is_moe else 0,
        experts=model.experts,
        shared_ffn=model.shared_width,
        capacity=model.capacity_factor,
        expert_params=model.expert_params,
        route_nodes=model.route_nodes,
    )


def job_of(par: ParallelConfig, batch: int) -> Job:
    return Job(
        tp=par.tp,
        pp=par.pp,
        dp=par.dp,
        zero=par.zero,
        micro_batch=par.micro_batch,
        global_batch=batch,
        recompute=RECOMPUTE.index(par.recompute),
        interleave=par.interleave,
        sequence_parallel=1 if par.sequence_parallel else 0,
        dp_overlap=1 if par.dp_overlap else 0,
        **stack_numbers(par),
        ps_servers=par.ps_servers,
        cp=par.cp,
        ep=par.ep,
        etp=par.etp,
        imbalance=par.moe_imbalance,
    )


def device_for(
    gpu: GPU, precision: str, data_bps: float = np.inf, cached: float = 0.0, *, arch_attention: bool = True
) -> Device:
    """The numbers of one GPU at ``precision``, fed by ``data_bps`` per node; ``arch_attention``
    when the stack's attention kernels use the architecture's own instructions (FlashAttention-3)."""
    return Device(
        peak_flops=gpu.peak_flops(precision),
        matmul_eff=gpu.mamf * training.GEMM_DERATE * (FP8_MATMUL_SHARE if precision == "fp8" else 1.0),
        hbm_bps=gpu.hbm_tbps * 1e12,
        memory_bytes=gpu.memory_bytes,
        act_bytes=ACT_BYTES[precision],
        grad_bytes=GRAD_BYTES[precision],
        data_bps_per_node=data_bps,
        cached_fraction=cached,
        flash=1.0 if gpu.arch in FLASH_ARCHS else 0.0,
        attention_eff=attention_efficiency(gpu.arch, arch_attention),
        # FP8 training runs its GEMMs in FP8 and attention in 16 bits: Transformer Engine's fused
        # attention takes FP8 only with NVTE_FP8_DPA=1 (off by default), and DeepSeek-V3 keeps
        # "the attention operators" in BF16 (technical report, section 3.3.1).
        attention_peak=gpu.peak_flops("bf16") if precision == "fp8" else 0.0,
        # And its output layer: Megatron-Core builds it as a plain ColumnParallelLinear, not a Transformer
        # Engine layer, so FP8 autocast leaves it in BF16 (megatron/core/models/gpt/gpt_model.py, core_v0.7.0
        # and later unless fp8_output_proj with MXFP8); DeepSeek-V3 keeps "the output head" in BF16 or FP32 (3.3.1).
        head_flops=gpu.peak_flops("bf16") * gpu.mamf * training.GEMM_DERATE if precision == "fp8" else 0.0,
    )


def attention_efficiency(arch: str, arch_attention: bool) -> float:
    """Share of peak FlashAttention reaches on ``arch`` (0: the matmul efficiency)."""
    if arch_attention and arch == "hopper":
        return FLASH_HOPPER_EFFICIENCY
    return FLASH2_EFFICIENCY.get(arch, 0.0)


def read_bytes(model: ModelSpec) -> float:
    return model.sample_bytes if not model.is_transformer else float(TRANSFORMER_READ_BYTES)


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """One configuration, priced."""

    model: ModelSpec
    cluster: Cluster
    parallel: ParallelConfig
    """The split, with ``global_batch`` the batch the step was priced at."""
    step: Step
    data: DataPath
    sensitivities: dict[str, float] = field(default_factory=dict)
    """What-if name -> step time change in percent (negative is faster)."""
    chosen: tuple[str, ...] = ()
    """The knobs of the split fabricscope chose (the user left them open)."""
    grad_wire_bytes: float | None = None
    """Bytes per gradient element the data-parallel collectives move (the stack's gradient width); None
    where no gradient is reduced (dp x cp = 1)."""

    @property
    def batch(self) -> int:
        return self.parallel.global_batch

    @property
    def gpus(self) -> int:
        return self.cluster.gpus

    def value(self, name: str) -> float:
        return float(getattr(self.step, name))

    @property
    def tokens_per_expert(self) -> float:
        """Tokens one routed expert computes per micro-batch (0 for a dense model)."""
        if not self.model.is_moe:
            return 0.0
        par = self.parallel
        tokens = par.micro_batch * self.model.seq / par.cp
        return float(training.expert_tokens(shape_of(self.model), job_of(par, self.batch), tokens))

    @property
    def step_s(self) -> float:
        return self.value("step")

    @property
    def bottleneck(self) -> str:
        """The largest overhead (any part but compute) once it takes BOTTLENECK_SHARE of the
        step; else compute."""
        overheads = {name: self.value(name) for name in BREAKDOWN if name != "compute"}
        worst = max(overheads, key=lambda k: overheads[k])
        return worst if overheads[worst] >= BOTTLENECK_SHARE * self.step_s else "compute"

    @property
    def bottleneck_text(self) -> str:
        name = self.bottleneck
        text = BOTTLENECKS[name].format(share=f"{BOTTLENECK_SHARE:.0%}", limit=DATA_LIMITS[self.data.limit])
        if name == "compute":
            overheads = {n: self.value(n) for n in BREAKDOWN if n != "compute"}
            worst = max(overheads, key=lambda k: overheads[k])
            if overheads[worst] > 0:
                text += f" (the largest, {worst}, takes {100 * overheads[worst] / self.step_s:.1f}%)"
        return text

    @property
    def gpu_utilization(self) -> float:
        """Share of the step the GPUs spend on the model's own work (no recomputation)."""
        return self.value("compute") / self.step_s

    @property
    def mfu(self) -> float:
        peak = self.cluster.gpu.peak_flops(self.parallel.precision)
        return self.value("model_flops") / (self.step_s * self.gpus * peak)

    @property
    def tflops_per_gpu(self) -> float:
        return self.value("model_flops") / self.step_s / self.gpus / 1e12

    @property
    def samples_per_s(self) -> float:
        return self.batch / self.step_s

    @property
    def tokens_per_s(self) -> float | None:
        return self.batch * self.model.seq / self.step_s if self.model.is_transformer else None

    @property
    def fits(self) -> bool:
        return self.value("memory_bytes") <= self.cluster.gpu.memory_bytes

    def result(self, *, uncertainty: dict[str, Any] | None = None) -> Result:
        """The Result of ``estimate --json``: this estimate's record, and the request it answers."""
        record = self.record()
        return Result(
            kind="estimate",
            config={
                "model": self.model.name,
                "cluster": self.cluster.name,
                "nodes": self.cluster.nodes,
                "parallel": dataclasses.asdict(self.parallel),
                "split_chosen_by_fabricscope": list(self.chosen),
                "cluster_spec": dataclasses.asdict(self.cluster.spec),
            },
            records=[record],
            summary={
                "bottleneck": record["bottleneck"],
                "step_time_s": record["step_time_s"],
                "uncertainty": uncertainty,
            },
        )

    def record(self) -> dict[str, Any]:
        """The JSON record of ``estimate --json``."""
        return {
            "model": self.model.name,
            "cluster": self.cluster.name,
            "gpus": self.gpus,
            "parallel": dataclasses.asdict(self.parallel),
            "chosen_by_fabricscope": list(self.chosen),
            "global_batch": self.batch,
            "step_time_s": self.step_s,
            "gpu_utilization": self.gpu_utilization,
            "mfu": self.mfu,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "bottleneck": self.bottleneck,
            "bottleneck_text": self.bottleneck_text,
            "breakdown": {name: self.value(name) for name in BREAKDOWN},
            "memory_gb_per_gpu": self.value("memory_bytes") / 1e9,
            "memory_gib_per_gpu": self.value("memory_bytes") / 2**30,
            "fits_in_memory": self.fits,
            "data_read_s": self.value("data_time"),
            "data_bps_per_node": self.data.bps_per_node,
            "data_limit": self.data.limit,
            "dp_comm_before_overlap_s": self.value("dp_comm_total"),
            "grad_wire_bytes": self.grad_wire_bytes,
            "tokens_per_expert": self.tokens_per_expert,
            "sensitivities_pct": self.sensitivities,
        }


def _batch(model: ModelSpec, gpus: int, given: int) -> int:
    return given or model.batch(gpus)


def _device(
    cluster: Cluster, model: ModelSpec, precision: str, link_factor: float = 1.0, *, arch_attention: bool = True
) -> tuple[Device, DataPath]:
    path = data_path(cluster, read_bytes(model), link_factor=link_factor)
    device = device_for(
        cluster.gpu, precision, path.bps_per_node, cluster.spec.storage.cached_fraction, arch_attention=arch_attention
    )
    return device, path


def check_finite(model: ModelSpec, step_s: Any) -> None:
    """Raise UsageError when a step time is not a finite number: a value of the model file is out
    of the range the model computes in (never a memory misfit: memory is priced apart)."""
    if not np.all(np.isfinite(step_s)):
        raise UsageError(
            f"the step time of {model.name} is not a finite number: its sizes, FLOPs or traffic "
            f"({model.source or 'the model file'}) are out of the range the model computes in"
        )


def estimate(
    model: ModelSpec, cluster: Cluster, par: ParallelConfig, *, what_ifs: bool = True, chosen: tuple[str, ...] = ()
) -> Estimate:
    """Price one step of ``model`` on ``cluster`` split as ``par``."""
    batch = _batch(model, cluster.gpus, par.global_batch)
    check_layout(par, model, gpus=cluster.gpus, gpus_per_node=cluster.gpus_per_node, batch=batch)
    par = dataclasses.replace(par, global_batch=batch)
    shape, job = shape_of(model), job_of(par, batch)
    device, path = _device(cluster, model, par.precision, arch_attention=par.hopper_attention)
    fab = fabric_of(cluster)
    result = training.step(shape, job, device, fab)
    check_finite(model, result.step)
    changes: dict[str, float] = {}
    if what_ifs:
        base = float(result.step)

        def change(dev: Device, changed: Fabric) -> float:
            return 100.0 * (float(training.step(shape, job, dev, changed).step) / base - 1.0)

        faster_links, _ = _device(cluster, model, par.precision, 2.0, arch_attention=par.hopper_attention)
        for name, what_if in SENSITIVITIES.items():
            changes[name] = change(faster_links if name == "2x network bandwidth" else device, what_if(fab))
        faster_data = dataclasses.replace(device, data_bps_per_node=device.data_bps_per_node * 2)
        changes["2x storage throughput"] = change(faster_data, fab)
    return Estimate(
        model=model,
        cluster=cluster,
        parallel=par,
        step=result,
        data=path,
        sensitivities=changes,
        chosen=chosen,
        grad_wire_bytes=float(training.wire_grad_bytes(job, device)) if par.dp * par.cp > 1 else None,
    )


def searched(model: ModelSpec, request: SplitRequest) -> tuple[str, ...]:
    """The knobs of ``request`` the search really chooses for ``model``: not expert parallelism for
    a dense model, nor context parallelism for sequences too short to split."""
    knobs = request.open
    if not model.is_moe:
        knobs = [k for k in knobs if k != "ep"]
    if not model.is_transformer or model.seq < 2 * MIN_CP_TOKENS:
        knobs = [k for k in knobs if k != "cp"]
    return tuple(knobs)


def best_split(model: ModelSpec, cluster: Cluster, request: SplitRequest | None = None) -> ParallelConfig:
    """The fastest split of ``model`` over ``cluster`` that fits in memory and keeps what
    ``request`` fixed (what a tuned job runs).  When only one split is left it is the answer,
    fitting or not (the estimate says whether it fits)."""
    req = request or SplitRequest()
    gpus, per_node = cluster.gpus, cluster.gpus_per_node
    batch = _batch(model, gpus, req.global_batch)
    check_layout(req, model, gpus=gpus, gpus_per_node=per_node, batch=batch)
    cand = splits(model, gpus=gpus, gpus_per_node=per_node, batch=batch, request=req)
    if not len(cand):
        given = [f"--{k.replace('_', '-')} {getattr(req, k)}" for k in req.fixed]
        if req.etp:  # not a knob of the search, but it folds the expert groups every split must fit
            given.append(f"--etp {req.etp}")
        fixed = ", ".join(given) or "nothing fixed"
        if len(splits(model, gpus=gpus, gpus_per_node=per_node, batch=batch, request=req, any_stack=True)):
            stack = f" that runs {req.framework}" if req.framework else ""
            raise UsageError(
                f"no training stack{stack} runs {model.name} on {gpus} GPUs with {fixed}: Megatron-Core and "
                "DeepSpeed shard at most ZeRO 1 with a pipeline, PyTorch FSDP ZeRO 2, DeepSpeed has no ring "
                "context parallelism nor interleaving (catalog/frameworks.toml); change --zero, --pp, --cp or "
                "--framework"
            )
        if (req.interleave or 1) > 1:
            plain = splits(
                model,
                gpus=gpus,
                gpus_per_node=per_node,
                batch=batch,
                request=dataclasses.replace(req, interleave=None),
            )
            if len(plain) and all(c.pp == 1 for c in plain.configs):
                others = ", ".join(f"--{k.replace('_', '-')} {getattr(req, k)}" for k in req.fixed if k != "interleave")
                raise UsageError(
                    f"--interleave {req.interleave} needs pipeline parallelism (--pp 2 or more), but {others} "
                    f"leave pp = 1 on {gpus} GPUs: leave out --interleave, or lower --tp, --dp or --cp so that "
                    "a pipeline of 2 or more stages fits"
                )
        raise UsageError(
            f"no way to split {model.name} over {gpus} GPUs with a global batch of {batch} ({fixed}): "
            "give --global-batch as a multiple of the data-parallel size, or change the fixed flags"
        )
    if len(cand) == 1:
        return cand.configs[0]
    device, _ = _device(cluster, model, req.precision, arch_attention=req.hopper_attention)
    result = training.step(shape_of(model), cand.job, device, fabric_of(cluster))
    fits = np.asarray(result.memory_bytes) <= device.memory_bytes
    total = np.where(fits, np.broadcast_to(result.step, fits.shape), np.inf)
    index = int(np.argmin(total))
    if not np.isfinite(total[index]):
        check_finite(model, np.broadcast_to(result.step, fits.shape)[fits])
        smallest = float(np.min(result.memory_bytes)) / 2**30
        raise UsageError(
            f"{model.name} does not fit on {gpus} x {cluster.gpu.name} ({cluster.gpu.memory_gb:g} GiB) "
            f"in any split tried (the smallest needs {smallest:.0f} GiB per GPU): add nodes (--nodes)"
        )
    return cand.configs[index]
