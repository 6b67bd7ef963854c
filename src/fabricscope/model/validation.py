"""Checking the model against published measurements, row by row.

Reads CSV files with the columns of shared/validation (``collectives.csv``:
nccl-tests bus bandwidth or latency on named systems; ``training.csv``:
Megatron-LM throughput or iteration time), builds each row's cluster and job
from its hardware description alone, predicts the row's metric and reports the
error.  Optional columns are used when present: ``micro_batch``,
``interleave``, ``flash_attention`` and ``dp_overlap`` for training rows.

Training rows without ``flash_attention`` and ``dp_overlap`` columns are taken
as Megatron-LM runs of 2021-22, the source of the shipped rows: attention
scores materialized in memory (no FlashAttention) and gradients all-reduced
after the backward pass (Megatron-LM added ``--overlap-grad-reduce`` later).
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fabricscope.errors import ConfigError, UsageError, closest
from fabricscope.model import hardware
from fabricscope.model.cluster import ClusterSpec, IntraFabric, NetworkSpec, TransportName, resolve
from fabricscope.model.estimate import estimate
from fabricscope.model.fabric import fabric_of
from fabricscope.model.parallel import RECOMPUTE, ParallelConfig, Recompute, check_layout
from fabricscope.model.predict import predict_op
from fabricscope.model.workload import PARAMS_TOLERANCE, ModelSpec
from fabricscope.ops import get as get_op
from fabricscope.userfiles import read_text

__all__ = ["Comparison", "default_files", "match_gpu", "match_nic", "summary", "validate_file"]

COLLECTIVE_COLUMNS = (
    "id",
    "gpu",
    "gpus_per_node",
    "nodes",
    "nics_per_node",
    "collective",
    "size_bytes",
    "metric",
    "value",
)
TRAINING_COLUMNS = (
    "id",
    "gpu",
    "gpus_per_node",
    "nics_per_node",
    "layers",
    "hidden",
    "heads",
    "seq_len",
    "vocab",
    "tp",
    "pp",
    "dp",
    "gpus",
    "global_batch",
    "recompute",
    "metric",
    "value",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Comparison:
    """One row: what was published, what the model says, and the error."""

    id: str
    file: str
    description: str
    metric: str
    published: float
    predicted: float
    detail: str = ""

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.published) / self.published

    def record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "file": self.file,
            "description": self.description,
            "metric": self.metric,
            "published": self.published,
            "predicted": self.predicted,
            "error_pct": self.error_pct,
            "detail": self.detail,
        }


def default_files() -> list[Any]:
    """The validation data shipped with fabricscope (a copy of shared/validation)."""
    folder = resources.files("fabricscope.model") / "data" / "validation"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".csv")), key=lambda p: p.name)


_GPU_FAMILIES = ("v100", "a100", "h100", "h200", "h20", "b200", "l40s", "mi300x", "4090")


def match_gpu(text: str) -> str:
    """Catalog name of a GPU as nvidia-smi or a paper writes it (``A100-SXM4-80GB``)."""
    low = text.lower().replace(" ", "-")
    if low in ("", "any"):
        return "a100-sxm-80gb"
    family = next((f for f in _GPU_FAMILIES if re.search(rf"(^|[^a-z0-9]){f}($|[^0-9])", low)), None)
    if family is None:
        raise UsageError(f"cannot match GPU {text!r} to the catalog ({', '.join(hardware.entries('gpu'))})")
    names = [n for n in hardware.entries("gpu") if family in n]
    memory = re.search(r"(\d+)\s*gb", low)
    for name in names:
        if memory and f"{memory.group(1)}gb" in name:
            return name
    return names[-1]


_IB_GENERATIONS = {"edr": "ib-edr", "hdr": "ib-hdr", "ndr": "ib-ndr", "xdr": "ib-xdr"}


def match_nic(text: str) -> str:
    """Catalog name of a NIC written as ``200G HDR InfiniBand`` or ``100G Ethernet``."""
    low = text.lower()
    for word, name in _IB_GENERATIONS.items():
        if word in low:
            return name
    speed = re.search(r"(\d+)\s*g", low)
    if not speed:
        raise UsageError(f"cannot match NIC {text!r}: write its speed (for example '100G Ethernet')")
    link = "infiniband" if "infiniband" in low else "ethernet"
    for name, nic in hardware.entries("nic").items():
        if nic.link == link and nic.speed_gbps == float(speed.group(1)):
            return str(name)
    raise UsageError(f"no catalog NIC of {speed.group(1)} Gb/s {link}")


def _transport(text: str, nic: str) -> TransportName:
    low = text.lower()
    if "tcp" in low or "socket" in low:
        return "tcp-socket"
    if "rdma" in low and "gdr" not in low:
        return "rdma"
    return "rdma-gdr" if hardware.entries("nic")[nic].rdma else "tcp-socket"


def _intra(text: str) -> IntraFabric | None:
    low = text.lower()
    if "nvswitch" in low:
        return "nvswitch"
    if "nvlink" in low:
        return "nvlink-mesh"
    if "pcie" in low:
        return "pcie"
    if "xgmi" in low or "infinity" in low:
        return "xgmi"
    return None


def _algorithm(text: str) -> str:
    low = text.lower().strip()
    if not low or "default" in low:
        return "auto"
    if low.startswith("nvls"):
        return "nvls"
    if low.startswith("collnet"):
        return "sharp"
    word = low.split()[0]
    return word if word in ("ring", "tree", "hier", "sharp") else "auto"


def _number(row: Mapping[str, str], key: str, *, whole: bool = False, allow_zero: bool = False) -> Any:
    """A numeric column: a finite number above zero (or zero, with ``allow_zero``)."""
    text = (row.get(key) or "").strip()
    try:
        value: float = int(text) if whole else float(text)
    except ValueError:
        raise ValueError(f"{key} = {text!r} is not a {'whole ' if whole else ''}number") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{key} = {text!r} must be {'0 or more' if allow_zero else 'a positive number'}")
    return value


def _cluster(row: Mapping[str, str], nodes: int, gpus_per_node: int | None = None) -> Any:
    nic_text = row.get("nic", "") or ""
    nics = _number(row, "nics_per_node", whole=True, allow_zero=True) if (row.get("nics_per_node") or "").strip() else 0
    nic = match_nic(nic_text) if nic_text else "ib-ndr"
    spec = ClusterSpec(
        nodes=nodes,
        gpus_per_node=gpus_per_node or _number(row, "gpus_per_node", whole=True),
        gpu=match_gpu(row["gpu"]),
        intra=_intra(row.get("intra_node", "") or ""),
        network=NetworkSpec(nic=nic, nics_per_node=nics, transport=_transport(row.get("transport", "") or "", nic)),
    )
    return resolve(spec, name=row["id"], source="its hardware")


def check_collective(row: Mapping[str, str], where: str) -> Comparison:
    nodes = _number(row, "nodes", whole=True)
    cluster = _cluster(row, nodes)
    op = get_op((row.get("collective") or "").split()[0] if (row.get("collective") or "").strip() else "")
    size = _number(row, "size_bytes", whole=True)
    published = _number(row, "value")
    prediction = predict_op(
        op,
        fabric_of(cluster),
        sizes=[size],
        dtypes=["float"],
        redops=["sum"],
        root=0,
        gpus_per_node=cluster.gpus_per_node,
        nodes=nodes,
        algo=_algorithm(row.get("algorithm", "") or ""),
    )
    record = prediction.records[0]
    metric = row["metric"]
    if metric == "busbw_GBps":
        predicted = record.busbw_gbps
    elif metric == "latency_us":
        predicted = record.time_us
    elif metric == "per_nic_GBps":
        nics_used = 1 if op.name in ("sendrecv", "gather", "scatter") else max(cluster.spec.network.nics_per_node, 1)
        predicted = record.busbw_gbps / nics_used
    else:
        raise ConfigError(f"metric {metric!r} is not one of busbw_GBps, latency_us, per_nic_GBps")
    return Comparison(
        id=row["id"],
        file=Path(where).name,
        description=row.get("system", ""),
        metric=metric,
        published=published,
        predicted=predicted,
        detail=f"{op.name} {size} B on {nodes}x{cluster.gpus_per_node} {cluster.gpu.name}: {record.algorithm}",
    )


def _flag(row: Mapping[str, str], key: str, default: bool) -> bool:
    text = (row.get(key) or "").strip().lower()
    return default if not text else text in ("1", "true", "yes")


SEQUENCE_PARALLEL = "+sequence-parallel"


def _recompute(text: str) -> tuple[Recompute, bool]:
    """The ``recompute`` column: none, selective or full, optionally ``+sequence-parallel``."""
    low = text.strip().lower()
    policy = low.removesuffix(SEQUENCE_PARALLEL) or "none"
    for option in RECOMPUTE:
        if option == policy:
            return option, low.endswith(SEQUENCE_PARALLEL)
    allowed = ", ".join(RECOMPUTE)
    raise UsageError(
        f"recompute = {text!r} is not one of {allowed}{closest(policy, RECOMPUTE)} "
        f"(each may end in {SEQUENCE_PARALLEL})"
    )


def _check_params(row: Mapping[str, str], model: ModelSpec) -> None:
    """A ``params_b`` column must agree with the row's shape, as ``params`` in a model file."""
    if not (row.get("params_b") or "").strip():
        return
    given = _number(row, "params_b") * 1e9
    shaped = model.shape_params
    if abs(given / shaped - 1) > PARAMS_TOLERANCE:
        raise UsageError(
            f"params_b = {given / 1e9:g} but layers, hidden and vocab give {shaped / 1e9:.3g} billion parameters "
            f"(more than {PARAMS_TOLERANCE:.0%} apart): fix the row's shape or params_b"
        )


def check_training(row: Mapping[str, str], where: str) -> Comparison:
    gpus, per_node = _number(row, "gpus", whole=True), _number(row, "gpus_per_node", whole=True)
    if gpus % per_node and gpus > per_node:
        raise UsageError(f"gpus = {gpus} must be a multiple of gpus_per_node = {per_node} (whole nodes)")
    per_node = min(per_node, gpus)
    cluster = _cluster(row, gpus // per_node, per_node)
    layers, hidden, seq, vocab = (_number(row, key, whole=True) for key in ("layers", "hidden", "seq_len", "vocab"))
    batch = _number(row, "global_batch", whole=True)
    published = _number(row, "value")
    model = ModelSpec(
        name=row["id"],
        layers=layers,
        hidden=hidden,
        heads=_number(row, "heads", whole=True),
        seq=seq,
        vocab=vocab,
        flash_attention=_flag(row, "flash_attention", False),
        global_batch=batch,
    )
    recompute, sequence_parallel = _recompute(row.get("recompute") or "")
    _check_params(row, model)
    par = ParallelConfig(
        tp=_number(row, "tp", whole=True),
        pp=_number(row, "pp", whole=True),
        dp=_number(row, "dp", whole=True),
        zero=int(row.get("zero_stage") or 0),
        micro_batch=int(row.get("micro_batch") or 1),
        interleave=int(row.get("interleave") or 1),
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        dp_overlap=_flag(row, "dp_overlap", False),
    )
    check_layout(par, model, gpus=gpus, gpus_per_node=per_node, batch=batch, row=True)
    result = estimate(model, cluster, par, what_ifs=False)
    step = result.step_s
    metric = row["metric"]
    if metric == "iteration_s":
        predicted = step
    elif metric == "tflops_per_gpu":
        # Counted as the papers count: Narayanan et al. eq. 3, with recomputation when it ran.
        if par.recompute == "full":
            flops = 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
        else:
            flops = 72 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))
        predicted = flops / gpus / step / 1e12
    else:
        raise ConfigError(f"metric {metric!r} is not one of tflops_per_gpu, iteration_s")
    return Comparison(
        id=row["id"],
        file=Path(where).name,
        description=row.get("source", ""),
        metric=metric,
        published=published,
        predicted=predicted,
        detail=f"{gpus}x {cluster.gpu.name} tp{par.tp} pp{par.pp} dp{par.dp} {par.recompute}: {result.bottleneck}",
    )


def validate_file(path: Any) -> list[Comparison]:
    """Predict every row of one validation CSV (a collectives or a training file)."""
    where = str(path)
    text = read_text(str(path), what="validation CSV")
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise ConfigError(f"{where}: no rows (expected the columns described in docs/model.md, section Validation)")
    columns = set(rows[0])
    if set(TRAINING_COLUMNS) <= columns:
        check, kind = check_training, "training"
    elif set(COLLECTIVE_COLUMNS) <= columns:
        check, kind = check_collective, "collectives"
    else:
        missing = sorted(set(COLLECTIVE_COLUMNS) - columns)
        raise ConfigError(
            f"{where}: not a validation file: missing columns {', '.join(missing)} "
            f"(a collectives file needs {', '.join(COLLECTIVE_COLUMNS)}; a training file {', '.join(TRAINING_COLUMNS)})"
        )
    checks = []
    for number, row in enumerate(rows, start=2):
        try:
            checks.append(check(row, where))
        except UsageError as exc:
            raise ConfigError(f"{where}: line {number} ({kind} row {row.get('id', '?')}): {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{where}: line {number} ({kind} row {row.get('id', '?')}): invalid value ({exc})"
            ) from None
    return checks


def summary(checks: Iterable[Comparison]) -> dict[str, float]:
    errors = [abs(c.error_pct) for c in checks]
    if not errors:
        return {}
    return {
        "rows": len(errors),
        "median_abs_error_pct": statistics.median(errors),
        "worst_abs_error_pct": max(errors),
    }
