"""Workloads: the model being trained, as a preset name or a TOML file.

Transformers are described by their shape (layers, hidden, heads, seq, vocab,
ffn...); their parameter count follows from it unless ``params`` is given.
Vision models (``kind = "vision"``) are described by parameters, forward FLOPs
and memory traffic per sample, and the bytes each sample costs to read.
Presets live in ``catalog/models.toml``; a user file has the same keys::

    kind = "transformer"
    layers = 32
    hidden = 4096
    heads = 32
    seq = 4096
    vocab = 32000
    ffn = 11008
    gated_mlp = true
    global_batch = 1024
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from fabricscope.errors import UsageError, closest
from fabricscope.model import hardware
from fabricscope.model.userfile import FORBID_EXTRA, InvalidValue, build, read_toml

__all__ = ["ModelSpec", "load_model", "model_presets"]


@dataclass(kw_only=True, slots=True)
class ModelSpec:
    """One workload; zero means "not given" for the fields that have a derived default."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str = "custom"
    kind: Literal["transformer", "vision"] = "transformer"
    description: str = ""
    params: float = 0.0
    """Parameters; derived from the shape of a transformer when 0."""
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    kv_heads: int = 0
    """Key/value heads (grouped-query attention); 0 means as many as heads."""
    seq: int = 0
    vocab: int = 0
    ffn: int = 0
    """MLP width; 0 means 4 x hidden."""
    gated_mlp: bool = False
    tied_embeddings: bool = True
    flash_attention: bool = True
    global_batch: int = 0
    """Sequences (or samples) per optimizer step; 0 means batch_per_gpu x GPUs."""
    gflops_per_sample: float = 0.0
    """Vision: forward GFLOPs of one sample."""
    traffic_mb_per_sample: float = 0.0
    """Vision: memory traffic of one training step per sample, 16-bit activations (MB)."""
    sample_kb: float = 0.0
    """Bytes read from storage per sample (KB); transformers default to 4 bytes per token."""
    batch_per_gpu: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        for key in (
            "params",
            "layers",
            "hidden",
            "heads",
            "kv_heads",
            "seq",
            "vocab",
            "ffn",
            "global_batch",
            "gflops_per_sample",
            "traffic_mb_per_sample",
            "sample_kb",
            "batch_per_gpu",
        ):
            if getattr(self, key) < 0:
                raise InvalidValue(f"{key} must not be negative, got {getattr(self, key)}")
        if self.kind == "transformer":
            for key in ("layers", "hidden", "heads", "seq", "vocab"):
                if getattr(self, key) <= 0:
                    raise InvalidValue(f"a transformer needs {key} > 0 (got {getattr(self, key)})")
            if self.hidden % self.heads:
                raise InvalidValue(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
            if self.kv_heads and self.heads % self.kv_heads:
                raise InvalidValue(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        else:
            for key in ("params", "gflops_per_sample", "sample_kb"):
                if getattr(self, key) <= 0:
                    raise InvalidValue(f"a vision model needs {key} > 0 (got {getattr(self, key)})")
        if self.global_batch == 0 and self.batch_per_gpu == 0:
            raise InvalidValue("give global_batch (sequences or samples per step) or batch_per_gpu")

    @property
    def is_transformer(self) -> bool:
        return self.kind == "transformer"

    @property
    def ffn_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Width of the K (and of the V) projection."""
        return self.hidden * (self.kv_heads or self.heads) // self.heads

    @property
    def layer_params(self) -> int:
        """Weights of one transformer layer (attention, MLP, two norms)."""
        h = self.hidden
        attention = h * (h + 2 * self.kv_width) + h * h
        mlp = (3 if self.gated_mlp else 2) * h * self.ffn_width
        return attention + mlp + 2 * h

    @property
    def param_count(self) -> float:
        if self.params:
            return self.params
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return float(self.layers * self.layer_params + embeddings)

    @property
    def sample_bytes(self) -> float:
        """Bytes read from storage per sample (a sequence: 4-byte token ids)."""
        return self.sample_kb * 1e3 if self.sample_kb else 4.0 * self.seq

    def batch(self, gpus: int) -> int:
        """Global batch for a job of ``gpus`` GPUs."""
        return self.global_batch or self.batch_per_gpu * gpus


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
    if text.endswith(".toml") or path.is_file():
        data = read_toml(path)
        return build(ModelSpec, {"name": path.stem, **data}, source=str(path))
    if text not in _presets():
        raise UsageError(
            f"unknown model {text!r}{closest(text, _presets())}: use a preset ({', '.join(_presets())}) "
            "or the path of a model TOML file"
        )
    return build(ModelSpec, {"name": text, **_presets()[text]}, source=f"models.toml [{text}]")
