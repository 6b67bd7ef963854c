"""The ways a job can be split over GPUs, as one array per knob.

``estimate`` uses them to pick a default when no ``--tp/--pp/--dp`` is given,
``plan`` to find, for every candidate network, the split a tuned job would run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fabricscope.model.parallel import RECOMPUTE, ParallelConfig, Precision
from fabricscope.model.training import Job
from fabricscope.model.workload import ModelSpec

__all__ = ["Layouts", "layouts"]

TP = (1, 2, 4, 8)
PP = (1, 2, 4, 8, 16, 32, 64)
ZERO = (0, 1, 3)
MICRO_BATCH = (1, 2, 4, 8)
INTERLEAVE = (1, 2)


@dataclass(frozen=True, slots=True)
class Layouts:
    """Candidate splits: ``configs[i]`` is the i-th element of every array of ``job``."""

    configs: list[ParallelConfig]
    job: Job
    batch: int

    def __len__(self) -> int:
        return len(self.configs)


def layouts(
    model: ModelSpec,
    *,
    gpus: int,
    gpus_per_node: int,
    precision: Precision = "bf16",
    overlap: bool = True,
    batch: int = 0,
) -> Layouts:
    """Every valid (tp, pp, dp, zero, micro-batch, recompute, interleave) for ``gpus`` GPUs."""
    batch = batch or model.batch(gpus)
    found: list[ParallelConfig] = []
    if not model.is_transformer:
        if batch % gpus == 0:
            found.append(ParallelConfig(dp=gpus, micro_batch=batch // gpus, precision=precision, dp_overlap=overlap))
    else:
        for tp, pp, zero, mb, recompute, v in itertools.product(TP, PP, ZERO, MICRO_BATCH, RECOMPUTE, INTERLEAVE):
            if tp > gpus_per_node or gpus_per_node % tp or model.heads % tp or gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            if model.layers % (pp * v) or (v > 1 and pp == 1) or batch % (dp * mb):
                continue
            if zero and dp == 1:
                continue
            found.append(
                ParallelConfig(
                    tp=tp,
                    pp=pp,
                    dp=dp,
                    zero=zero,
                    micro_batch=mb,
                    recompute=recompute,
                    interleave=v,
                    sequence_parallel=tp > 1,
                    precision=precision,
                    dp_overlap=overlap,
                )
            )

    def column(name: str) -> np.ndarray:
        return np.array([float(getattr(c, name)) for c in found])

    job = Job(
        tp=column("tp"),
        pp=column("pp"),
        dp=column("dp"),
        zero=column("zero"),
        micro_batch=column("micro_batch"),
        global_batch=float(batch),
        recompute=np.array([float(RECOMPUTE.index(c.recompute)) for c in found]),
        interleave=column("interleave"),
        sequence_parallel=column("sequence_parallel"),
        dp_overlap=column("dp_overlap"),
        ps_servers=column("ps_servers"),
    )
    return Layouts(configs=found, job=job, batch=batch)
