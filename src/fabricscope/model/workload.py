"""Workloads: the model being trained, as a preset name or a TOML file.

A transformer is described by its shape, its parameter count derived from it (a ``params`` given
as well must agree within ``PARAMS_TOLERANCE``); a mixture of experts adds its expert keys; a
vision model gives parameters, FLOPs, memory traffic and bytes per sample.  Presets live in
``catalog/models.toml``; a user file has the same keys (docs/model.md, section 1, "User files").
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from fabricscope.errors import InvalidValue, UsageError
from fabricscope.model import hardware
from fabricscope.schema import FORBID_EXTRA, build, require
from fabricscope.shown import cut
from fabricscope.userfiles import is_path, read_toml

__all__ = ["PARAMS_TOLERANCE", "ModelSpec", "load_model", "model_presets"]

SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "seq", "vocab", "ffn")
"""What describes a transformer."""
MOE_KEYS = ("experts", "top_k", "expert_ffn", "shared_experts", "shared_ffn", "dense_layers", "route_nodes")
"""What describes the mixture-of-experts layers of a transformer (whole numbers)."""
MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "rope_dim", "v_head_dim")
"""What describes multi-head latent attention (DeepSeek-V2/V3): keys and values made from a
compressed latent of ``kv_lora_rank``, queries from one of ``q_lora_rank``; ``head_dim`` is then
each head's non-rotary query/key width."""
VISION_KEYS = (
    "gflops_per_sample",
    "traffic_mb_per_sample",
    "sample_kb",
    "batch_per_gpu",
    "head_params_share",
    "head_backward_share",
)
"""What describes a vision model."""

LIMITS: dict[str, tuple[float, str]] = {
    "params": (1e15, "parameters"),
    "layers": (1 << 16, "layers"),
    "hidden": (1 << 20, "model width"),
    "heads": (1 << 16, "attention heads"),
    "kv_heads": (1 << 16, "key/value heads"),
    "head_dim": (1 << 16, "width of one head"),
    "seq": (1 << 27, "tokens per sequence"),
    "vocab": (1 << 24, "tokens in the vocabulary"),
    "ffn": (1 << 22, "MLP width"),
    "global_batch": (1 << 24, "sequences or samples per step"),
    "gflops_per_sample": (1e7, "forward multiply-adds of one sample, in billions: the GFLOPs vision papers publish"),
    "traffic_mb_per_sample": (1e7, "MB of memory traffic per sample"),
    "sample_kb": (1e9, "KB read per sample"),
    "batch_per_gpu": (1 << 20, "samples per GPU"),
    "experts": (1 << 16, "routed experts"),
    "top_k": (1 << 16, "experts per token"),
    "expert_ffn": (1 << 22, "expert MLP width"),
    "shared_experts": (1 << 16, "shared experts"),
    "shared_ffn": (1 << 22, "shared expert MLP width"),
    "dense_layers": (1 << 16, "dense layers"),
    "route_nodes": (1 << 20, "nodes a token's experts lie on"),
    "q_lora_rank": (1 << 20, "width of the compressed query"),
    "kv_lora_rank": (1 << 20, "width of the compressed keys and values"),
    "rope_dim": (1 << 16, "rotary query/key width per head"),
    "v_head_dim": (1 << 16, "value width per head"),
}
"""Upper bounds of the size keys, far beyond any model built (the largest preset has 128 layers,
a width of 25600, 256 experts and 131072-token sequences), so that absurd values are refused in
one line instead of being carried into integer or float overflow.  0 means "not given"."""


def _within(value: float, *, top: float) -> bool:
    return 0 <= value <= top


PARAMS_TOLERANCE = 0.15
"""How far a transformer's ``params`` may be from the count its shape gives (biases, position
embeddings and rounding stay well inside it)."""


@dataclass(kw_only=True, slots=True)
class ModelSpec:
    """One workload; zero means "not given" for the fields that have a derived default."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str = "custom"
    kind: Literal["transformer", "vision"] = "transformer"
    description: str = ""
    params: float = 0.0
    """Parameters; derived from the shape of a transformer when 0 (and checked against it when not)."""
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 means as many as heads."""
    seq: int = 0
    vocab: int = 0
    ffn: int = 0
    """MLP width; 0 means 4 x hidden."""
    head_dim: int = 0
    """Width of one attention head; 0 means hidden / heads (Qwen3-235B: 64 heads of 128 on a 4096-wide model)."""
    gated_mlp: bool = False
    tied_embeddings: bool = True
    flash_attention: bool = True
    global_batch: int = 0
    """Sequences (or samples) per optimizer step; 0 means batch_per_gpu x GPUs, or --global-batch."""
    gflops_per_sample: float = 0.0
    """Vision: forward GFLOPs of one sample."""
    traffic_mb_per_sample: float = 0.0
    """Vision: memory traffic of one training step per sample, 16-bit activations (MB)."""
    sample_kb: float = 0.0
    """Bytes read from storage per sample (KB); transformers default to 4 bytes per token."""
    batch_per_gpu: int = 0
    head_params_share: float = 0.0
    """Vision: share of the weights in the last layers of the network, whose gradients the
    backward produces first (ResNet-50: conv5_x and fc, 67%); 0 means spread evenly."""
    head_backward_share: float = 0.0
    """Vision: share of the backward's time those last layers take (ResNet-50: conv5_x, 19%)."""
    experts: int = 0
    """Routed experts per mixture-of-experts layer; 0 for a dense model."""
    top_k: int = 0
    """Routed experts each token goes to."""
    expert_ffn: int = 0
    """Width of one routed expert's MLP; 0 means ffn."""
    shared_experts: int = 0
    """Experts every token goes to (DeepSeek's shared experts)."""
    shared_ffn: int = 0
    """Width of one shared expert's MLP; 0 means expert_ffn."""
    dense_layers: int = 0
    """Leading layers whose MLP is dense (width ffn) in a mixture-of-experts model."""
    capacity_factor: float = 0.0
    """Tokens an expert takes, as a multiple of its even share (padded to it, the rest dropped); 0: dropless."""
    route_nodes: int = 0
    """Node-limited routing: a token's routed experts lie on at most this many nodes; 0: no limit."""
    q_lora_rank: int = 0
    """Multi-head latent attention: width of the compressed query (0: queries projected directly)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention: width of the compressed keys and values (0: standard attention)."""
    rope_dim: int = 0
    """Multi-head latent attention: rotary width added to each head's query and key."""
    v_head_dim: int = 0
    """Multi-head latent attention: each head's value width (0: head_dim)."""
    source: str = ""

    def __post_init__(self) -> None:
        for key, (top, what) in LIMITS.items():
            allowed = f"from 0 to {top:.0f}" if top < 1e9 else f"from 0 to {top:.0e}"
            require(key, getattr(self, key), f"{allowed} ({what})", functools.partial(_within, top=top))
        for key in ("head_params_share", "head_backward_share"):
            require(key, getattr(self, key), "at least 0 and below 1 (a share)", lambda v: 0 <= v < 1)
        if bool(self.head_params_share) != bool(self.head_backward_share):
            raise InvalidValue(
                "head_params_share and head_backward_share go together: give both (the last layers' share "
                "of the weights and of the backward's time) or neither"
            )
        if self.kind == "transformer":
            for key in ("layers", "hidden", "heads", "seq", "vocab"):
                if getattr(self, key) <= 0:
                    raise InvalidValue(f"a transformer needs {key} > 0 (got {getattr(self, key)})")
            if not self.head_dim and self.hidden % self.heads:
                raise InvalidValue(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
            if self.kv_heads and self.heads % self.kv_heads:
                raise InvalidValue(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
            self._check_mla()
            self._check_experts()
            shaped = self.shape_params
            if self.params and abs(self.params / shaped - 1) > PARAMS_TOLERANCE:
                raise InvalidValue(
                    f"params = {self.params:.4g} but layers, hidden, ffn and vocab give {shaped:.4g} parameters "
                    f"(more than {PARAMS_TOLERANCE:.0%} apart): fix the shape, or leave params out to derive it"
                )
        else:
            for key, what in (
                ("params", "parameters"),
                (
                    "gflops_per_sample",
                    "forward multiply-adds of one sample, in billions: the GFLOPs vision papers publish",
                ),
                ("traffic_mb_per_sample", "memory traffic of one training step per sample, MB at 16-bit activations"),
                ("sample_kb", "KB read from storage per sample"),
            ):
                if getattr(self, key) <= 0:
                    raise InvalidValue(f"a vision model needs {key} > 0 ({what}; got {getattr(self, key)})")

    def _check_mla(self) -> None:
        if self.kv_lora_rank:
            if not self.head_dim:
                raise InvalidValue(
                    "must be given with kv_lora_rank (multi-head latent attention): each head's non-rotary "
                    "query/key width (DeepSeek-V3: 128)",
                    key="head_dim",
                )
            if self.kv_heads:
                raise InvalidValue(
                    f"is {self.kv_heads} but kv_lora_rank is set: latent attention gives every head its "
                    "own keys and values, leave kv_heads out",
                    key="kv_heads",
                )
            return
        for key in ("q_lora_rank", "rope_dim", "v_head_dim"):
            if getattr(self, key):
                raise InvalidValue(
                    f"is {getattr(self, key)} but kv_lora_rank is 0: it describes multi-head latent "
                    "attention, which kv_lora_rank turns on",
                    key=key,
                )

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def _check_experts(self) -> None:
        require(
            "capacity_factor",
            self.capacity_factor,
            "0 (dropless) or at least 1 (at most 1000)",
            lambda v: v == 0 or 1 <= v <= 1e3,
        )
        if not self.experts:
            for key in ("top_k", "expert_ffn", "shared_experts", "shared_ffn", "dense_layers", "route_nodes"):
                if getattr(self, key):
                    raise InvalidValue(
                        f"is {getattr(self, key)} but experts is 0: a dense model has no experts", key=key
                    )
            return
        if not 1 <= self.top_k <= self.experts:
            raise InvalidValue(
                f"must be from 1 to experts ({self.experts}): each token goes to top_k distinct experts, "
                f"got {self.top_k}",
                key="top_k",
            )
        if self.dense_layers >= self.layers:
            raise InvalidValue(
                f"must be fewer than layers ({self.layers}), got {self.dense_layers}", key="dense_layers"
            )

    @property
    def is_moe(self) -> bool:
        return self.is_transformer and self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.ffn_width

    @property
    def shared_width(self) -> int:
        """All shared experts of a layer together, as one MLP's width."""
        return self.shared_experts * (self.shared_ffn or self.expert_width)

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    @property
    def expert_params(self) -> float:
        """Weights of every routed expert of every layer (what expert parallelism splits)."""
        return float(self.moe_layers * self.experts * self._mlp(self.expert_width))

    def _moe_layer(self, routed: int) -> int:
        attention = self.layer_params - self._mlp(self.ffn_width)
        experts = routed * self._mlp(self.expert_width) + self.hidden * self.experts
        return attention + self._mlp(self.shared_width) + experts

    @property
    def active_layer_params(self) -> float:
        """Weights one token multiplies with per layer, averaged over the layers (a dense model: all)."""
        if not self.is_moe:
            return float(self.layer_params)
        return (self.dense_layers * self.layer_params + self.moe_layers * self._moe_layer(self.top_k)) / self.layers

    @property
    def active_params(self) -> float:
        """Parameters one token uses: the active weights of the layers and the embeddings."""
        if not self.is_moe:
            return self.param_count
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.active_layer_params + embeddings

    @property
    def is_transformer(self) -> bool:
        return self.kind == "transformer"

    def tp_fits_heads(self, tp: int) -> bool:
        """Whether Megatron-Core splits the attention over ``tp`` ranks: every rank takes the same number of
        query heads, and of key/value groups when there are at least ``tp`` of them, or one group shared
        by ``tp / kv_heads`` ranks when there are fewer (megatron/core/transformer/transformer_config.py:
        "num_query_groups must be a multiple or divisor of tensor_model_parallel_size"; attention.py gives each
        partition one group below tp).  Older Megatron-Core required a multiple only."""
        if self.heads % tp:
            return False
        groups = self.kv_heads if self.kv_heads and not self.is_mla else 0
        if not groups:
            return True
        return groups % tp == 0 if groups >= tp else tp % groups == 0

    @property
    def ffn_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Width of the K (and of the V) projection (latent attention, whose keys are wider than its
        values: their mean, so that K and V together are ``2 x kv_width``)."""
        if self.is_mla:
            return (self.q_width + self.v_width) // 2
        if self.head_dim:
            return self.head_dim * (self.kv_heads or self.heads)
        return self.hidden * (self.kv_heads or self.heads) // self.heads

    @property
    def q_width(self) -> int:
        """Width of the queries (and keys) all heads together: heads x head width (latent attention:
        with the rotary part)."""
        return self.heads * (self.head_dim + self.rope_dim) if self.head_dim else self.hidden

    @property
    def v_width(self) -> int:
        """Width of the values all heads together (and of the attention output before its projection)."""
        if self.v_head_dim:
            return self.heads * self.v_head_dim
        return self.heads * self.head_dim if self.is_mla else self.q_width

    @property
    def attention_params(self) -> int:
        """Weights of one layer's attention projections."""
        h = self.hidden
        if not self.is_mla:
            return h * (self.q_width + 2 * self.kv_width) + self.q_width * h
        # DeepSeek-V2 (arXiv 2405.04434) section 2.1.2: W^DQ, W^UQ (with the rotary W^QR), W^DKV with
        # the shared rotary key W^KR, W^UK and W^UV, W^O; the latents' own norms.
        queries = h * self.q_lora_rank + self.q_lora_rank * self.q_width if self.q_lora_rank else h * self.q_width
        latent = h * (self.kv_lora_rank + self.rope_dim)
        keys_values = self.kv_lora_rank * self.heads * self.head_dim + self.kv_lora_rank * self.v_width
        return queries + latent + keys_values + self.v_width * h + self.q_lora_rank + self.kv_lora_rank

    @property
    def whole_attention_params(self) -> int:
        """Weights of the attention projections every tensor-parallel rank runs whole: latent attention's
        down-projections (W^DQ, W^DKV with the rotary key; Megatron-Core builds them ``duplicated``)."""
        if not self.is_mla:
            return 0
        return self.hidden * (self.q_lora_rank + self.kv_lora_rank + self.rope_dim)

    @property
    def layer_params(self) -> int:
        """Weights of one transformer layer (attention, MLP, two norms)."""
        h = self.hidden
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_width
        return self.attention_params + mlp + 2 * h

    @property
    def shape_params(self) -> float:
        """Parameters of a transformer as its shape gives them: layers and embeddings."""
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        if self.is_moe:
            layers = self.dense_layers * self.layer_params + self.moe_layers * self._moe_layer(self.experts)
            return float(layers + embeddings)
        return float(self.layers * self.layer_params + embeddings)

    @property
    def param_count(self) -> float:
        return self.params or self.shape_params

    @property
    def sample_bytes(self) -> float:
        """Bytes read from storage per sample (a sequence: 4-byte token ids)."""
        return self.sample_kb * 1e3 if self.sample_kb else 4.0 * self.seq

    def batch(self, gpus: int) -> int:
        """Global batch for a job of ``gpus`` GPUs; a UsageError when the model file gives none."""
        batch = self.global_batch or self.batch_per_gpu * gpus
        if not batch:
            raise UsageError(
                f"model {self.name!r} gives no batch size: pass --global-batch, or set global_batch "
                "(or batch_per_gpu) in its file"
            )
        return batch

    def shown(self) -> list[tuple[str, str]]:
        """(field, value) pairs that describe this model, for ``hw show``: the kind's own fields,
        and the derived ones (parameter count, MLP width, KV heads) as they are used."""
        moe = (*MOE_KEYS, "capacity_factor") if self.is_moe else ()
        mla = MLA_KEYS if self.is_mla else ()
        transformer = (*SHAPE_KEYS, *moe, *mla, "gated_mlp", "tied_embeddings", "flash_attention", "global_batch")
        keys = ("kind", "description", *(transformer if self.is_transformer else (*VISION_KEYS, "global_batch")))
        derived = {"kv_heads": self.kv_heads or self.heads, "ffn": self.ffn_width}
        rows = [("params", f"{self.param_count:.4g}" + ("" if self.params else " (from the shape)"))]
        if self.is_moe:
            rows.append(("active_params", f"{self.active_params:.4g}"))
        for key in keys:
            value = derived.get(key, getattr(self, key))
            if key in ("description", "global_batch", "batch_per_gpu") and not value:
                continue
            rows.append((key, str(value)))
        if not self.is_transformer or self.sample_kb:
            rows.append(("sample_bytes", f"{self.sample_bytes:.4g}"))
        rows.append(("source", self.source))
        return rows


@functools.cache
def _presets() -> dict[str, dict[str, Any]]:
    data = read_toml(str(hardware.catalog_dir() / "models.toml"))
    return {name: dict(entry) for name, entry in data.items()}


def model_presets() -> dict[str, ModelSpec]:
    """Every model preset, by name."""
    return {
        name: build(ModelSpec, {"name": name, **entry}, source=f"models.toml [{name}]")
        for name, entry in _presets().items()
    }


def load_model(text: str) -> ModelSpec:
    """A preset name or the path of a model TOML file."""
    path = Path(text)
    if is_path(text):
        data = read_toml(path, presets=_presets(), what="model file")
        return build(ModelSpec, {"name": path.stem, **data}, source=str(path))
    name = text.strip().lower()
    if name not in _presets():
        raise UsageError(
            f"unknown model {cut(text)!r}{hardware.suggest(text, _presets())}: use a preset "
            f"({', '.join(_presets())}) or the path of a model TOML file"
        )
    return build(ModelSpec, {"name": name, **_presets()[name]}, source=f"models.toml [{name}]")
