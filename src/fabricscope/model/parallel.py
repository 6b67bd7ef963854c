"""How a training job is split over GPUs, and the checks that it can be split that way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar

from fabricscope.errors import UsageError, closest
from fabricscope.model.userfile import InvalidValue
from fabricscope.model.workload import ModelSpec

T = TypeVar("T", bound=str)

__all__ = ["PRECISIONS", "RECOMPUTE", "ParallelConfig", "Precision", "Recompute", "as_choice", "check_layout"]

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8", "tf32", "fp32"]
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp8", "tf32", "fp32")


def as_choice(text: str, allowed: tuple[T, ...], flag: str) -> T:
    """``text`` if it is one of ``allowed`` (case-insensitive), else a UsageError naming the closest."""
    key = text.strip().lower()
    for option in allowed:
        if option == key:
            return option
    raise UsageError(f"unknown {flag} {text!r}{closest(key, allowed)}: use {', '.join(allowed)}")


@dataclass(kw_only=True, slots=True)
class ParallelConfig:
    """Parallelism and training options of one job."""

    tp: int = 1
    """Tensor-parallel ranks (inside a node)."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel replicas."""
    zero: int = 0
    """ZeRO stage: 0 all-reduce; 1-2 reduce-scatter + all-gather; 3 (FSDP) also gathers the weights
    for every micro-batch."""
    micro_batch: int = 1
    global_batch: int = 0
    """Sequences or samples per step; 0 takes the model's."""
    recompute: Recompute = "none"
    interleave: int = 1
    """Virtual pipeline stages per GPU (interleaved 1F1B)."""
    sequence_parallel: bool = False
    precision: Precision = "bf16"
    dp_overlap: bool = True
    """Reduce gradients while the last micro-batch's backward runs (DDP buckets, FSDP prefetch)."""
    ps_servers: int = 0
    """Parameter servers (CPU machines with one NIC each) instead of all-reduce; 0 = all-reduce."""

    def __post_init__(self) -> None:
        for key in ("tp", "pp", "dp", "micro_batch", "interleave"):
            if getattr(self, key) < 1:
                raise InvalidValue(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        if not 0 <= self.zero <= 3:
            raise InvalidValue(f"--zero must be 0, 1, 2 or 3, got {self.zero}")
        if self.global_batch < 0:
            raise InvalidValue(f"--global-batch must be positive, got {self.global_batch}")
        if self.ps_servers < 0:
            raise InvalidValue(f"--ps-servers must not be negative, got {self.ps_servers}")
        if self.interleave > 1 and self.pp == 1:
            raise InvalidValue("--interleave needs pipeline parallelism (--pp 2 or more)")
        if self.ps_servers and self.zero:
            raise InvalidValue("--ps-servers replaces the all-reduce of plain data parallelism: use it with --zero 0")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


def check_layout(par: ParallelConfig, model: ModelSpec, *, gpus: int, gpus_per_node: int, batch: int) -> None:
    """Raise a UsageError saying why ``par`` cannot run ``model`` on this many GPUs."""
    if par.gpus != gpus:
        raise UsageError(
            f"tp*pp*dp = {par.tp}*{par.pp}*{par.dp} = {par.gpus} does not match the cluster's {gpus} GPUs "
            f"(give --dp {max(1, gpus // (par.tp * par.pp))} or change --nodes)"
        )
    if par.tp > gpus_per_node:
        raise UsageError(
            f"--tp {par.tp} is larger than a node ({gpus_per_node} GPUs): tensor parallelism stays inside a node"
        )
    if gpus_per_node % par.tp:
        raise UsageError(f"--tp {par.tp} must divide the {gpus_per_node} GPUs of a node")
    if model.is_transformer:
        if model.heads % par.tp:
            raise UsageError(f"--tp {par.tp} must divide the model's {model.heads} attention heads")
        if model.layers % (par.pp * par.interleave):
            raise UsageError(f"pp*interleave = {par.pp * par.interleave} must divide the model's {model.layers} layers")
    elif par.tp > 1 or par.pp > 1:
        raise UsageError(f"{model.name} is a vision model: use data parallelism only (--tp 1 --pp 1)")
    if batch % (par.dp * par.micro_batch):
        raise UsageError(
            f"the global batch ({batch}) must be a multiple of dp*micro_batch = {par.dp}*{par.micro_batch}"
        )
