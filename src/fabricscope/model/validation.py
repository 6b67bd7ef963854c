"""Checking the model against published measurements, row by row.

Reads CSV files with the columns of the shipped validation data (docs/model.md, ``collectives.csv``:
nccl-tests bus bandwidth or latency on named systems; ``training.csv``:
Megatron-LM throughput or iteration time), builds each row's cluster and job
from its hardware description alone, predicts the row's metric and reports the
error.  Optional columns are used when present: ``micro_batch``,
``interleave``, ``flash_attention`` and ``dp_overlap`` for training rows;
``virtualized`` (a cloud VM's virtual NIC, :data:`VIRTUALIZED`) and
``transport`` (one of :data:`TRANSPORTS`) for both kinds.

Every row belongs to a ``group`` (its column; a file without one puts every
row in a group named after the file's kind).  ``validate`` reports the error of
each group as well as overall: a model that is right on average can still be
far off on one kind of system (TCP clusters, PCIe-only nodes), and a group is
the unit the uncertainty of ``predict`` is taken from.  Training rows use the
same mechanism.

Training rows without ``flash_attention`` and ``dp_overlap`` columns are taken
as Megatron-LM runs of 2021-22, the source of the shipped rows: attention
scores materialized in memory (no FlashAttention) and gradients all-reduced
after the backward pass (Megatron-LM added ``--overlap-grad-reduce`` later).
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from fabricscope.errors import ConfigError, UsageError, closest
from fabricscope.model import hardware
from fabricscope.model.cluster import ClusterSpec, IntraFabric, NetworkSpec, TransportName, resolve
from fabricscope.model.estimate import estimate
from fabricscope.model.parallel import (
    FRAMEWORKS,
    PRECISIONS,
    RECOMPUTE,
    Framework,
    ParallelConfig,
    Precision,
    Recompute,
    as_choice,
    check_layout,
    stack_settings,
)
from fabricscope.model.predict import predict
from fabricscope.model.workload import PARAMS_TOLERANCE, ModelSpec, model_presets
from fabricscope.ops import get as get_op
from fabricscope.results import Result
from fabricscope.shown import cut, quoted
from fabricscope.units import is_digits
from fabricscope.userfiles import file_key, read_text

__all__ = [
    "KNOWN_OFF",
    "Comparison",
    "by_group",
    "check_training",
    "default_files",
    "match_gpu",
    "match_nic",
    "megatron_flops",
    "summary",
    "validate_file",
    "validate_files",
]

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
OPTIONAL_COLUMNS = (
    *("group", "source", "quote", "notes", "system", "intra_node", "nic", "transport", "algorithm", "size_bytes"),
    *("virtualized", "flow_gbps", "flows", "params_b", "kv_heads", "ffn", "gated_mlp", "seq_len", "vocab", "model"),
    *("one_gpu_images_per_s", "cp", "ep", "etp", "zero_stage", "micro_batch", "interleave", "framework"),
    *("flash_attention", "hopper_attention", "dp_overlap", "ep_overlap", "node_dedup", "moe_imbalance"),
    *("regather_on_recompute", "ps_servers", "precision", "tp_comm_overlap", "pp_comm_overlap"),
)
"""Columns read where a row has them (docs/model.md, section Validation)."""


def _check_header(where: str, header: list[str]) -> None:
    """A column named twice is refused (which one counts would be a guess), and so is one a letter or
    two away from a column this reader knows (a misspelling that would be ignored); other columns are
    the file's own notes."""
    known = {*COLLECTIVE_COLUMNS, *TRAINING_COLUMNS, *OPTIONAL_COLUMNS}
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ConfigError(f"{where}: column {quoted(name)} is named twice in the header: keep one")
        seen.add(name)
        numbered = name.rstrip("0123456789") in known  # source2, notes_2: a column of the file's own
        near = [] if name in known or numbered else difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if near:
            raise ConfigError(
                f"{where}: column {quoted(name)} is not one fabricscope reads (did you mean {near[0]!r}? "
                "a note column of your own needs a name further from the columns fabricscope reads)"
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
    group: str = ""
    """Kind of system the row measures (``nvlink-node``, ``tcp``, ...); errors are reported per group."""
    known_off: bool = False
    """The row's ``notes`` say it ``stays off:`` and why (what the model lacks)."""

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.published - 1.0)

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "error_pct": self.error_pct}


def default_files() -> list[Any]:
    """The validation data shipped with fabricscope (published measurements, each with its source)."""
    folder = resources.files("fabricscope.model") / "data" / "validation"
    return sorted((p for p in folder.iterdir() if p.name.endswith(".csv")), key=lambda p: p.name)


_GPU_FAMILIES = (
    "p100",
    "v100",
    "a100",
    "a800",
    "h100",
    "h200",
    "h800",
    "h20",
    "b200",
    "gb200",
    "l40s",
    "mi300x",
    "2080-ti",
    "4090",
    "5090",
)
_FORM_FACTORS = ("pcie", "sxm", "nvl")


def _family_word(family: str) -> str:
    """A GPU family as a word of a name: ``b200`` in ``NVIDIA B200`` and ``b200``, not in ``gb200``; ``h20``
    not in ``h200``."""
    return rf"(^|[^a-z0-9]){re.escape(family)}($|[^0-9])"


def match_gpu(text: str) -> str:
    """Catalog name of a GPU as nvidia-smi or a paper writes it (``A100-SXM4-80GB``)."""
    low = text.lower().replace(" ", "-")
    if not low.strip("-"):
        raise UsageError("gpu is empty: name the GPU the source ran on (A100-SXM4-80GB, H100 SXM5, ...)")
    if low == "any":
        return "a100-sxm-80gb"
    family = next((f for f in _GPU_FAMILIES if re.search(_family_word(f), low)), None)
    if family is None:
        raise UsageError(f"cannot match GPU {quoted(text)} to the catalog ({', '.join(hardware.entries('gpu'))})")
    names = [n for n in hardware.entries("gpu") if re.search(_family_word(family), n)]
    form = next((f for f in _FORM_FACTORS if f in low), None)
    if form is not None and any(form in n for n in names):
        names = [n for n in names if form in n]
    elif form is None or form == "sxm":
        socketed = [n for n in names if "pcie" not in n and "nvl" not in n]
        if form == "sxm" and not socketed:
            raise UsageError(f"cannot match GPU {text!r}: the catalog has no SXM {family} ({', '.join(names)})")
        names = socketed or names
    memory = re.search(r"(\d+)\s*gb", low, re.ASCII)
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
    speed = re.search(r"(\d+)\s*g", low, re.ASCII)
    if not speed:
        raise UsageError(f"cannot match NIC {text!r}: write its speed (for example '100G Ethernet')")
    link = "infiniband" if "infiniband" in low else "ethernet"
    for name, nic in hardware.entries("nic").items():
        if nic.link == link and nic.speed_gbps == float(speed.group(1)):
            return str(name)
    raise UsageError(f"no catalog NIC of {speed.group(1)} Gb/s {link}")


VIRTUALIZED = "virtualized"
"""The optional column that says a row's NIC is a cloud VM's virtual NIC (the cluster's ``[network]
virtualized``): ``true`` or ``false`` (also ``yes``/``no``, ``1``/``0``).  Where a row leaves it
empty, the ``nic`` text decides: the whole word ``virtualized`` (``25G Ethernet virtualized (Azure
VM)``) marks a virtual NIC unless a negation comes just before it (``not virtualized``,
``non-virtualized``, ``unvirtualized``), which marks bare metal."""
_VIRTUAL_WORD = re.compile(r"(?<![a-z0-9])virtuali[sz]ed(?![a-z0-9])")
_NEGATED = re.compile(r"(?<![a-z0-9])(?:not|non|un|no|never|isn't|without)[\s-]*virtuali[sz]ed(?![a-z0-9])")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _virtualized(row: Mapping[str, str], nic_text: str) -> bool:
    text = (row.get(VIRTUALIZED) or "").strip().lower()
    if text:
        if text not in (*_TRUE, *_FALSE):
            raise UsageError(f"virtualized = {quoted(text)} must be true or false (or empty: the nic text decides)")
        return text in _TRUE
    low = nic_text.lower()
    return bool(_VIRTUAL_WORD.search(low)) and not _NEGATED.search(low)


TRANSPORTS: dict[str, TransportName] = {
    "tcp-socket": "tcp-socket",
    "tcp": "tcp-socket",
    "socket": "tcp-socket",
    "rdma": "rdma",
    "ib-rdma": "rdma",
    "roce": "rdma",
    "rdma-gdr": "rdma-gdr",
    "ib-rdma-gdr": "rdma-gdr",
    "roce-gdr": "rdma-gdr",
    "gdr": "rdma-gdr",
    "efa": "efa",
    "efa-srd": "efa",
    "gpudirect-tcpx": "gpudirect-tcpx",
    "tcpx": "gpudirect-tcpx",
    "gpudirect-tcpxo": "gpudirect-tcpxo",
    "tcpxo": "gpudirect-tcpxo",
}
"""How a row may write its ``transport`` (a comment in parentheses may follow: ``ib-rdma
(host-staged)``); empty means GPUDirect RDMA on an RDMA-capable NIC, else TCP sockets."""


def _transport(text: str, nic: str) -> TransportName:
    word = re.sub(r"\s*\(.*\)\s*$", "", text).strip().lower()
    if not word and text.strip():
        raise UsageError(
            f"transport = {quoted(text)} is only a comment: name the transport before it, one of "
            f"{', '.join(TRANSPORTS)} (or leave it empty: rdma-gdr on an RDMA NIC, else tcp-socket)"
        )
    if not word:
        return "rdma-gdr" if hardware.entries("nic")[nic].rdma else "tcp-socket"
    if word not in TRANSPORTS:
        raise UsageError(
            f"transport = {quoted(text)} is not a known transport{closest(word, TRANSPORTS)}: use one of "
            f"{', '.join(TRANSPORTS)} (or leave it empty: rdma-gdr on an RDMA NIC, else tcp-socket)"
        )
    return TRANSPORTS[word]


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


_NVLS_OFF = re.compile(r"nccl_nvls_enable\s*=\s*0")
"""An algorithm column that names ``NCCL_NVLS_ENABLE=0``: NCCL chooses without NVLink SHARP."""


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
    shown = quoted(text)
    if not text.isascii() or "_" in text:  # int() and float() also read "٣" and "2_32.5"
        raise ValueError(f"{key} = {shown} is not a {'whole ' if whole else ''}number (ASCII digits)")
    digits = text.lstrip("+-").lstrip("0")
    if whole and is_digits(digits) and (len(digits) > 19 or int(digits) >= 2**63):
        raise ValueError(f"{key} has {len(digits)} digits; whole numbers must fit in 64 bits")
    try:
        value: float = int(text) if whole else float(text)
    except ValueError:
        raise ValueError(f"{key} = {shown} is not a {'whole ' if whole else ''}number") from None
    if not math.isfinite(value):
        raise ValueError(f"{key} = {shown} must be a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{key} = {shown} must be {'0 or more' if allow_zero else 'a positive number'}")
    return value


PUBLISHED_RANGE = (1e-9, 1e12)
"""Values a published row can hold (GB/s, seconds, tokens/s, TFLOP/s, GiB, shares): a number past these is a typo,
and an error against it would overflow."""


def _published(row: Mapping[str, str]) -> float:
    value = float(_number(row, "value"))
    low, high = PUBLISHED_RANGE
    if not low <= value <= high:
        raise ValueError(f"value = {quoted(row.get('value') or '')} is outside {low:g} to {high:g}")
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
        network=NetworkSpec(
            nic=nic,
            nics_per_node=nics,
            transport=_transport(row.get("transport", "") or "", nic),
            virtualized=_virtualized(row, nic_text),
            flow_gbps=float(_number(row, "flow_gbps", allow_zero=True))
            if (row.get("flow_gbps") or "").strip()
            else 0.0,
            flows=_optional_whole(row, "flows", 1),
        ),
    )
    cluster = resolve(spec, name=row["id"], source="its hardware")
    if _NVLS_OFF.search((row.get("algorithm") or "").lower()) and cluster.gpu.nvls:
        cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, nvls=False))
    return cluster


def check_collective(row: Mapping[str, str], where: str) -> Comparison:
    nodes = _number(row, "nodes", whole=True)
    cluster = _cluster(row, nodes)
    op = get_op((row.get("collective") or "").split()[0] if (row.get("collective") or "").strip() else "")
    size = _number(row, "size_bytes", whole=True)
    published = _published(row)
    record = predict(cluster, {op.name: [size]}, algo=_algorithm(row.get("algorithm", "") or "")).ops[0].records[0]
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
    detail = f"{op.name} {size} B on {nodes}x{cluster.gpus_per_node} {cluster.gpu.name}: {record.algorithm}"
    return _compared(row, where, "collectives", metric, published, predicted, detail)


def _compared(
    row: Mapping[str, str], where: str, kind: str, metric: str, published: float, predicted: float, detail: str
) -> Comparison:
    """One row's comparison; its id, file, description, group and known-off mark come from the row."""
    return Comparison(
        id=row["id"],
        file=Path(where).name,
        description=row.get("system" if kind == "collectives" else "source", ""),
        metric=metric,
        published=published,
        predicted=predicted,
        detail=detail,
        group=_group(row, kind),
        known_off=KNOWN_OFF in (row.get("notes") or ""),
    )


KNOWN_OFF = "stays off:"
"""A row whose ``notes`` contain this is one the model is known to miss; the note says what it lacks."""
GROUP_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


def _group(row: Mapping[str, str], kind: str) -> str:
    """The row's ``group`` column (lower-case words joined by '-'), or the file's kind."""
    text = (row.get("group") or "").strip().lower()
    if not text:
        return kind
    if not GROUP_NAME.fullmatch(text) or text == "overall":
        raise UsageError(f"group = {quoted(text)} must be 1-40 lower-case letters, digits and '-' (not 'overall')")
    return text


FLAG_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
"""What a yes/no column may hold (case-insensitive); empty keeps the default."""


def _flag(row: Mapping[str, str], key: str, default: bool) -> bool:
    text = (row.get(key) or "").strip().lower()
    if not text:
        return default
    if text not in FLAG_WORDS:
        raise UsageError(f"{key} = {quoted(text)} is not a yes/no value: use true or false (or leave it empty)")
    return FLAG_WORDS[text]


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


TRAINING_METRICS = (
    "tflops_per_gpu",
    "model_tflops_per_gpu",
    "iteration_s",
    "tokens_per_s_per_gpu",
    "images_per_s",
    "scaling_efficiency",
    "memory_gib",
    "neox_tflops_per_gpu",
    "megatron_tflops_per_gpu",
)
"""What a training row may publish: TFLOP/s as Narayanan et al. count them (eq. 3, recomputation
included when it ran), model TFLOP/s (6 x matmul parameters + attention per token, the MFU
numerator of PaLM and Llama 3), seconds per step, tokens per second per GPU, images per second
(all GPUs), scaling efficiency (throughput over GPUs x the throughput of one GPU), the memory
in use on the busiest GPU as nvidia-smi shows it (GiB), and TFLOP/s as GPT-NeoX's logger of 2021-22
counted them (6 x parameters + 60 s h l per token), and TFLOP/s as Megatron-LM's logger counts them
since March 2025 (``num_floating_point_operations`` after NVIDIA/Megatron-LM 8873b55, "Only half of
the attention matrix is non-zero": model FLOPs with causal attention counted half)."""


def _framework(row: Mapping[str, str]) -> Framework:
    """The ``framework`` column's named parameters (:data:`FRAMEWORKS`, megatron-lm-2021 when
    empty), with ``flash_attention``, ``dp_overlap``, ``regather_on_recompute``, ``hopper_attention``,
    ``tp_comm_overlap`` and ``pp_comm_overlap`` overridden by their own columns."""
    name = (row.get("framework") or "").strip().lower() or "megatron-lm-2021"
    if name not in FRAMEWORKS:
        raise UsageError(f"framework = {name!r} is not one of {', '.join(FRAMEWORKS)}{closest(name, FRAMEWORKS)}")
    stack = FRAMEWORKS[name]
    return dataclasses.replace(
        stack,
        flash_attention=_flag(row, "flash_attention", stack.flash_attention),
        dp_overlap=_flag(row, "dp_overlap", stack.dp_overlap),
        regather_on_recompute=_flag(row, "regather_on_recompute", stack.regather_on_recompute),
        hopper_attention=_flag(row, "hopper_attention", stack.hopper_attention),
        tp_comm_overlap=_flag(row, "tp_comm_overlap", stack.tp_comm_overlap),
        pp_comm_overlap=_flag(row, "pp_comm_overlap", stack.pp_comm_overlap),
    )


def _row_model(row: Mapping[str, str], batch: int, flash: bool) -> ModelSpec:
    """The row's workload: a preset named in ``model`` (a vision row), or its transformer shape."""
    name = (row.get("model") or "").strip().lower()
    if name:
        presets = model_presets()
        if name not in presets:
            raise UsageError(f"model = {name!r} is not a preset{closest(name, presets)}: use {', '.join(presets)}")
        seq = _number(row, "seq_len", whole=True) if (row.get("seq_len") or "").strip() else presets[name].seq
        return dataclasses.replace(presets[name], global_batch=batch, seq=seq)
    gated = _flag(row, "gated_mlp", False)
    return ModelSpec(
        name=row["id"],
        layers=_number(row, "layers", whole=True),
        hidden=_number(row, "hidden", whole=True),
        heads=_number(row, "heads", whole=True),
        kv_heads=_number(row, "kv_heads", whole=True) if (row.get("kv_heads") or "").strip() else 0,
        ffn=_number(row, "ffn", whole=True) if (row.get("ffn") or "").strip() else 0,
        gated_mlp=gated,
        tied_embeddings=not gated,
        seq=_number(row, "seq_len", whole=True),
        vocab=_number(row, "vocab", whole=True),
        flash_attention=flash,
        global_batch=batch,
    )


def _optional_whole(row: Mapping[str, str], key: str, default: int, *, allow_zero: bool = False) -> int:
    return int(_number(row, key, whole=True, allow_zero=allow_zero)) if (row.get(key) or "").strip() else default


def check_training(row: Mapping[str, str], where: str) -> Comparison:
    gpus, per_node = _number(row, "gpus", whole=True), _number(row, "gpus_per_node", whole=True)
    if gpus % per_node and gpus > per_node:
        raise UsageError(f"gpus = {gpus} must be a multiple of gpus_per_node = {per_node} (whole nodes)")
    per_node = min(per_node, gpus)
    cluster = _cluster(row, gpus // per_node, per_node)
    batch = _number(row, "global_batch", whole=True)
    published = _published(row)
    metric = row["metric"]
    if metric not in TRAINING_METRICS:
        raise ConfigError(f"metric {metric!r} is not one of {', '.join(TRAINING_METRICS)}")
    stack = _framework(row)
    model = _row_model(row, batch, stack.flash_attention)
    recompute, sequence_parallel = _recompute(row.get("recompute") or "")
    if model.is_transformer:
        _check_params(row, model)
    settings = stack_settings(stack)
    settings["ep_overlap"] = _flag(row, "ep_overlap", settings["ep_overlap"])
    settings["node_dedup"] = _flag(row, "node_dedup", settings["node_dedup"])
    par = ParallelConfig(
        tp=_number(row, "tp", whole=True),
        pp=_number(row, "pp", whole=True),
        dp=_number(row, "dp", whole=True),
        cp=_optional_whole(row, "cp", 1),
        ep=_optional_whole(row, "ep", 1),
        etp=_optional_whole(row, "etp", 0, allow_zero=True),
        moe_imbalance=float(_number(row, "moe_imbalance")) if (row.get("moe_imbalance") or "").strip() else 1.0,
        zero=_optional_whole(row, "zero_stage", 0, allow_zero=True),
        micro_batch=_optional_whole(row, "micro_batch", 1),
        interleave=_optional_whole(row, "interleave", 1),
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        dp_overlap=stack.dp_overlap,
        **settings,
        ps_servers=_optional_whole(row, "ps_servers", 0, allow_zero=True),
        precision=_precision(row, cluster),
    )
    check_layout(par, model, gpus=gpus, gpus_per_node=per_node, batch=batch, row=True)
    if (row.get("one_gpu_images_per_s") or "").strip():
        model = _anchored(model, row, par, batch // gpus)
    result = estimate(model, cluster, par, what_ifs=False)
    step = result.step_s
    if metric == "iteration_s":
        predicted = step
    elif metric == "tflops_per_gpu":
        # Counted as the papers count: Narayanan et al. eq. 3, with recomputation when it ran.
        s, n, h, v = model.seq, model.layers, model.hidden, model.vocab
        if par.recompute == "full":
            flops = 96 * batch * s * n * h**2 * (1 + s / (6 * h) + v / (16 * n * h))
        else:
            flops = 72 * batch * s * n * h**2 * (1 + s / (6 * h) + v / (12 * n * h))
        predicted = flops / gpus / step / 1e12
    elif metric == "neox_tflops_per_gpu":
        # GPT-NeoX's own logger (megatron/logging.py get_flops, 2021-22): per token 6 x all parameters
        # + 60 s h l, no recomputation factor.
        per_token = 6 * model.param_count + 60 * model.seq * model.hidden * model.layers
        predicted = batch * model.seq * per_token / gpus / step / 1e12
    elif metric == "model_tflops_per_gpu":
        predicted = result.tflops_per_gpu
    elif metric == "megatron_tflops_per_gpu" and not model.is_transformer:
        raise UsageError(
            "metric megatron_tflops_per_gpu applies to transformer rows (Megatron-LM counts a transformer)"
        )
    elif metric == "megatron_tflops_per_gpu":
        predicted = megatron_flops(model, batch, result.value("model_flops")) / step / gpus / 1e12
    elif metric == "tokens_per_s_per_gpu":
        predicted = batch * model.seq / step / gpus
    elif metric == "memory_gib" and not model.is_transformer:
        raise UsageError(
            "metric memory_gib applies to transformer rows: the model does not count a vision model's "
            "activations, so its memory is no prediction"
        )
    elif metric == "memory_gib":
        # nvidia-smi's figure: MiB of the device in use, as GiB.
        predicted = result.value("memory_bytes") / 2**30
    elif metric == "images_per_s":
        predicted = result.samples_per_s
    else:  # scaling_efficiency: against the same job on one GPU, with the same per-GPU batch
        one = estimate(
            model,
            _cluster(row, 1, 1),
            dataclasses.replace(par, tp=1, pp=1, dp=1, zero=0, ps_servers=0, global_batch=batch // gpus),
            what_ifs=False,
        )
        predicted = result.samples_per_s / (gpus * one.samples_per_s)
    detail = (
        f"{gpus}x {cluster.gpu.name} tp{par.tp} pp{par.pp} dp{par.dp}"
        + (f" cp{par.cp}" if par.cp > 1 else "")
        + (f" ep{par.ep}" if par.ep > 1 else "")
        + f" {par.recompute}: {result.bottleneck}"
    )
    return _compared(row, where, "training", metric, published, predicted, detail)


def megatron_flops(model: ModelSpec, batch: int, model_flops: float) -> float:
    """FLOPs of a step as Megatron-LM's logger counts them since 8873b55 (2025-03): the model's
    count, which takes attention whole (3 x 2 s (q + v) per token and layer), with the scores a causal
    mask leaves out taken back (half of them)."""
    return model_flops - 3.0 * batch * model.seq**2 * model.layers * (model.q_width + model.v_width)


def _anchored(model: ModelSpec, row: Mapping[str, str], par: ParallelConfig, per_gpu: int) -> ModelSpec:
    """The vision model with the memory traffic per sample that makes one GPU of the row run at
    the rate its own table publishes (``one_gpu_images_per_s``): the same derivation as the
    preset's traffic (the time the FLOPs leave, at HBM bandwidth), from the measured stack itself.
    A scaling efficiency then tests the communication against the compute that was measured."""
    if model.is_transformer:
        raise UsageError("one_gpu_images_per_s applies to vision rows (a model preset of kind vision)")
    rate = float(_number(row, "one_gpu_images_per_s"))
    one = dataclasses.replace(par, tp=1, pp=1, dp=1, zero=0, ps_servers=0, global_batch=per_gpu)

    def step_s(traffic_mb: float) -> float:
        changed = dataclasses.replace(model, traffic_mb_per_sample=traffic_mb, global_batch=per_gpu)
        return estimate(changed, _cluster(row, 1, 1), one, what_ifs=False).step_s

    # The one-GPU step is linear in the traffic (the FLOPs and the optimizer, then traffic / HBM) above the
    # little traffic under which the true FLOPs at peak bound the step: the line is taken far above it.
    low, high = step_s(10_000.0), step_s(20_000.0)
    slope = (high - low) / 10_000.0
    bare = low - 10_000.0 * slope
    traffic = (per_gpu / rate - bare) / slope
    if traffic <= 0 or step_s(traffic) > per_gpu / rate * (1 + 1e-9):
        raise UsageError(
            f"one_gpu_images_per_s = {rate:g} is faster than the model's FLOPs alone allow on this GPU "
            f"({per_gpu / step_s(1e-3):.0f} images/s at a batch of {per_gpu})"
        )
    return dataclasses.replace(model, traffic_mb_per_sample=traffic)


def _precision(row: Mapping[str, str], cluster: Any) -> Precision:
    """The ``precision`` column, or bf16 where the GPU has it (fp16 on V100)."""
    text = (row.get("precision") or "").strip().lower()
    if text:
        return as_choice(text, PRECISIONS, "precision")
    return "bf16" if float(cluster.gpu.tflops_bf16) > 0 else "fp16"


def validate_file(path: Any) -> list[Comparison]:
    """Predict every row of one validation CSV (a collectives or a training file)."""
    where = str(path)
    text = read_text(str(path), what="validation CSV")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        _check_header(where, list(reader.fieldnames or []))
        rows = list(reader)
    except csv.Error as exc:  # a cell past the csv module's 131,072-character limit, a NUL byte
        raise ConfigError(f"{where}: not CSV this reads ({exc})") from None  # (csv's line count lags here)
    if not rows:
        raise ConfigError(f"{where}: no rows (expected the columns described in docs/model.md, section Validation)")
    columns = set(rows[0])
    if set(TRAINING_COLUMNS) <= columns:
        check, kind = check_training, "training"
    elif set(COLLECTIVE_COLUMNS) <= columns:
        check, kind = check_collective, "collectives"
    else:  # the missing columns of the kind of file it is closer to
        kinds = (("collectives", COLLECTIVE_COLUMNS), ("training", TRAINING_COLUMNS))
        closer, needed = min(kinds, key=lambda kind: len(set(kind[1]) - columns))
        missing = [c for c in needed if c not in columns]
        raise ConfigError(
            f"{where}: not a validation file: missing columns {', '.join(missing)} (a {closer} file needs "
            f"{', '.join(needed)}; see docs/model.md, section Validation)"
        )
    checks = []
    for number, row in enumerate(rows, start=2):
        row_id = row.get("id") or ""
        shown = row_id if row_id.strip() and row_id.isprintable() and len(row_id) <= 40 else quoted(row_id)
        try:
            if not row_id.strip() or not row_id.isprintable() or len(row_id) > 40:
                raise UsageError(f"id = {shown} must be 1-40 printable characters")
            checks.append(check(row, where))
        except UsageError as exc:
            raise ConfigError(f"{where}: line {number} ({kind} row {shown}): {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{where}: line {number} ({kind} row {shown}): invalid value ({exc})") from None
    return checks


def validate_files(paths: Iterable[Any]) -> list[Comparison]:
    """:func:`validate_file` of each path in turn; a file named twice (by any spelling of its path)
    is refused, as its rows would count twice in every figure."""
    seen: dict[Any, str] = {}
    for path in paths:
        key = file_key(path)  # validate_file says what is wrong with one that cannot be stat-ed
        if key in seen:
            first = seen[key]
            also = "" if first == str(path) else f" (as {cut(first)!r} and {cut(str(path))!r})"
            raise UsageError(
                f"validation CSV {cut(str(path))!r} is named twice{also}: give each file once, "
                "so that its rows count once"
            )
        seen[key] = str(path)
    return [check for path in seen.values() for check in validate_file(path)]


def by_group(checks: Iterable[Comparison], *, known_off: bool = True) -> dict[str, dict[str, float]]:
    """:func:`summary` of every group, in the order groups first appear, then ``overall``;
    without the rows marked as known to be off when ``known_off`` is false.  With them, each group
    also carries the figures without them as ``kept_rows``, ``kept_median_abs_error_pct`` and
    ``kept_worst_abs_error_pct`` (the last two absent where every row of the group is marked)."""
    every = list(checks)
    rows = [c for c in every if known_off or not c.known_off]
    groups: dict[str, list[Comparison]] = {}
    for check in rows:
        groups.setdefault(check.group, []).append(check)
    if rows:
        groups["overall"] = rows
    found = {name: summary(members) for name, members in groups.items()}
    if known_off:
        for name, members in groups.items():
            kept = summary(c for c in members if not c.known_off)
            found[name].update({f"kept_{key}": value for key, value in kept.items()} or {"kept_rows": 0})
    return found


def summary(checks: Iterable[Comparison]) -> dict[str, float]:
    errors = [abs(c.error_pct) for c in checks]
    if not errors:
        return {}
    return {
        "rows": len(errors),
        "median_abs_error_pct": statistics.median(errors),
        "worst_abs_error_pct": max(errors),
    }


def validation_result(files: Iterable[Any], checks: list[Comparison]) -> Result:
    """The Result of ``validate --json``: every row's comparison, the summary of each file and of each group."""
    per_file: dict[str, Any] = {
        name: summary([c for c in checks if c.file == name]) for name in dict.fromkeys(c.file for c in checks)
    }
    per_file["groups"] = by_group(checks)
    return Result(
        kind="validate",
        config={"files": [str(f) for f in files]},
        records=[c.record() for c in checks],
        summary=per_file,
    )
