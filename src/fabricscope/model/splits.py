"""The ways a job can be split over GPUs, as one array per knob.

``estimate`` uses them to pick the knobs a user left open, ``plan`` to find,
for every candidate network, the split a tuned job would run.  The knobs are
searched as Megatron-LM users set them: tensor parallelism over the divisors
of a node's GPUs (and of the attention heads), context parallelism over the
divisors of the GPUs left that cut the sequence into chunks of at least
``MIN_CP_TOKENS`` (two per rank), pipeline depth over the divisors of the GPUs
left, up to the layer count (stages may hold unequal layer counts: 126 layers
on 16 stages; the first and last chunk may hold only the embedding and the
output layer), data parallelism the rest; expert parallelism (mixture-of-experts
models) over the divisors of the experts that divide the data- and
context-parallel ranks; ZeRO 0, 1 or 3; micro-batches of 1 to 8; each
recomputation policy; 1 or 2 virtual stages per GPU.  A knob the user fixed is
only that value.  Only splits a training stack of ``catalog/frameworks.toml``
runs are kept, each with the stack it assumes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricscope.model.parallel import (
    EMPTY_END_CHUNKS,
    RECOMPUTE,
    ParallelConfig,
    Recompute,
    SplitRequest,
    interleaves,
    stack_numbers,
    stack_settings,
)
from fabricscope.model.stacks import stack_for, stacks_running
from fabricscope.model.training import Job
from fabricscope.model.workload import ModelSpec

__all__ = ["MIN_CP_TOKENS", "Splits", "splits"]

ZERO = (0, 1, 3)
MICRO_BATCH = (1, 2, 4, 8)
INTERLEAVE = (1, 2)
MIN_CP_TOKENS = 8192
"""Context parallelism is searched only where each rank keeps at least this many tokens of a
sequence (Llama 3's 131,072-token run used CP 16: 8,192 per rank)."""


@dataclass(frozen=True, slots=True)
class Splits:
    """Candidate splits: ``configs[i]`` is the i-th element of every array of ``job``."""

    configs: list[ParallelConfig]
    job: Job
    batch: int

    def __len__(self) -> int:
        return len(self.configs)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _options(given: int | None, searched: list[int] | tuple[int, ...]) -> list[int]:
    return [given] if given is not None else list(searched)


def _context(model: ModelSpec, gpus: int, given: int | None) -> list[int]:
    """Context-parallel sizes to try: those cutting a sequence into two chunks per rank of at
    least MIN_CP_TOKENS tokens per rank (and 1)."""
    if given is not None:
        return [given]
    return [c for c in _divisors(gpus) if c == 1 or (model.seq % (2 * c) == 0 and model.seq // c >= MIN_CP_TOKENS)]


def splits(
    model: ModelSpec,
    *,
    gpus: int,
    gpus_per_node: int,
    batch: int = 0,
    request: SplitRequest | None = None,
    any_stack: bool = False,
) -> Splits:
    """Every valid split of ``model`` over ``gpus`` GPUs that keeps what ``request`` fixed and a
    training stack runs (with ``any_stack``, whether one does or not: to tell why none is left)."""
    req = request or SplitRequest()
    batch = batch or req.global_batch or model.batch(gpus)
    found: list[ParallelConfig] = []

    def config(**knobs: Any) -> ParallelConfig:
        return ParallelConfig(
            **knobs,
            precision=req.precision,
            dp_overlap=req.dp_overlap,
            **stack_settings(req),
            ps_servers=req.ps_servers,
            moe_imbalance=req.moe_imbalance,
            etp=req.etp,
            global_batch=batch,
        )

    allowed = stacks_running(req.framework)

    def stack(**knobs: Any) -> str | None:
        found = stack_for(allowed, ps_servers=req.ps_servers, vision=not model.is_transformer, **knobs)
        return "" if found is None and any_stack else found

    zeros = _options(req.zero, (0,) if req.ps_servers else ZERO)
    recomputes: list[Recompute] = [req.recompute] if req.recompute is not None else list(RECOMPUTE)
    if not model.is_transformer:
        dp = gpus
        for zero, mb in itertools.product(
            zeros, _options(req.micro_batch, [batch // gpus] if batch % gpus == 0 else [])
        ):
            if (req.tp or 1) > 1 or (req.pp or 1) > 1 or req.dp not in (None, dp) or batch % (dp * mb):
                continue
            if zero and dp == 1 and req.zero is None:
                continue
            runner = stack(tp=1, pp=1, cp=1, ep=1, zero=zero, interleave=1)
            if runner is not None:
                found.append(config(dp=dp, zero=zero, micro_batch=mb, recompute="none", stack=runner))
    else:
        # Sequence parallelism asked for implies tensor parallelism (it splits over the TP ranks).
        least = 2 if req.sequence_parallel else 1
        tps = _options(
            req.tp, [t for t in _divisors(gpus_per_node) if t >= least and model.tp_fits_heads(t) and gpus % t == 0]
        )
        most = model.layers + EMPTY_END_CHUNKS
        for tp, cp in itertools.product(tps, _context(model, gpus, req.cp)):
            if gpus % (tp * cp):
                continue
            pps = _options(req.pp, [p for p in _divisors(gpus // (tp * cp)) if p <= most])
            for pp in pps:
                dp = gpus // (tp * cp * pp)
                if tp * cp * pp * dp != gpus or (req.dp is not None and req.dp != dp):
                    continue
                ranks = tp * cp * dp if req.etp else dp * cp
                folded = req.etp or 1
                eps = _options(req.ep, [e for e in _divisors(model.experts) if ranks % (e * folded) == 0] or [1])
                for ep, zero, mb, recompute, v in itertools.product(
                    eps, zeros, _options(req.micro_batch, MICRO_BATCH), recomputes, _options(req.interleave, INTERLEAVE)
                ):
                    if pp * v > most or (v > 1 and pp == 1) or batch % (dp * mb) or ranks % (ep * (req.etp or 1)):
                        continue
                    if v > 1 and not interleaves(pp, batch // (dp * mb)):
                        continue
                    if zero and dp * cp == 1 and req.zero is None:
                        continue
                    runner = stack(tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, interleave=v)
                    if runner is None:
                        continue
                    sp = (req.sequence_parallel if req.sequence_parallel is not None else True) and tp > 1
                    found.append(
                        config(
                            tp=tp,
                            pp=pp,
                            dp=dp,
                            cp=cp,
                            ep=ep,
                            zero=zero,
                            micro_batch=mb,
                            recompute=recompute,
                            interleave=v,
                            sequence_parallel=sp,
                            stack=runner,
                        )
                    )

    def column(name: str) -> np.ndarray:
        return np.array([float(getattr(c, name)) for c in found])

    job = Job(
        tp=column("tp"),
        pp=column("pp"),
        dp=column("dp"),
        cp=column("cp"),
        ep=column("ep"),
        imbalance=float(req.moe_imbalance),
        etp=float(req.etp),
        zero=column("zero"),
        micro_batch=column("micro_batch"),
        global_batch=float(batch),
        recompute=np.array([float(RECOMPUTE.index(c.recompute)) for c in found]),
        interleave=column("interleave"),
        sequence_parallel=column("sequence_parallel"),
        dp_overlap=column("dp_overlap"),
        **stack_numbers(req),
        ps_servers=column("ps_servers"),
    )
    return Splits(configs=found, job=job, batch=batch)
