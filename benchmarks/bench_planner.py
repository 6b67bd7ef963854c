"""How fast ``plan`` prices configurations: the vectorized sweep against loops over the same model.

One configuration is one (network, split) pair priced by ``training.step``:
compute, tensor/pipeline/data-parallel communication through the collective
cost model, bubble, optimizer, memory.  Three ways to price them, all calling
the very same function (there is one model; only the batching differs):

* the sweep: every pair at once, as numpy arrays in cache-sized chunks (what
  ``plan`` runs);
* a per-network loop: one call per network with all its splits as arrays (what
  ``estimate`` does to choose a split, repeated for each network);
* a per-configuration loop: one call per pair with Python floats.  The model's
  numpy functions then run on scalars, at about a microsecond per operation:
  this is the cost of the scalar path, not of hand-written float arithmetic.

Everything runs pinned to one CPU core.

    python benchmarks/bench_planner.py [--model llama-70b] [--gpus 4096] [--loop-samples 2000]

Prints configurations per second for each and the ratios (target: the sweep
above 1,000,000 configurations per second on one core).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from fabricscope.model import hardware, planner, training  # noqa: E402
from fabricscope.model.estimate import device_for, job_of, shape_of  # noqa: E402
from fabricscope.model.fabric import take  # noqa: E402
from fabricscope.model.hardware import GPU  # noqa: E402
from fabricscope.model.splits import splits  # noqa: E402
from fabricscope.model.workload import load_model  # noqa: E402

WIDE = planner.Scenario(
    name="benchmark",
    description="every NIC, count, transport, SHARP, topology and oversubscription in the catalog",
    gpu="h100-sxm",
    target_util=0.8,
    links=["ethernet", "infiniband"],
    transports=["tcp-socket", "rdma", "rdma-gdr"],
    nic_speeds_gbps=[1, 10, 25, 100, 200, 400, 800],
    nics_per_node=[1, 2, 4, 8],
    oversubscription=[1.0, 1.5, 2.0, 3.0, 4.0],
    topologies=["fat-tree", "rail-optimized"],
    sharp=[False, True],
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-70b")
    parser.add_argument("--gpus", type=int, default=4096)
    parser.add_argument("--loop-samples", type=int, default=2000, help="pairs the per-configuration loop prices")
    parser.add_argument("--network-samples", type=int, default=100, help="networks the per-network loop prices")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    model = load_model(args.model)
    gpu = hardware.lookup("gpu", WIDE.gpu, GPU)
    per_node = 8
    nodes = args.gpus // per_node
    cand = splits(model, gpus=args.gpus, gpus_per_node=per_node)
    networks = planner.search_space(WIDE, per_node)
    fab = planner.fabric_arrays(networks, gpu, per_node, nodes)
    shape = shape_of(model)
    device = device_for(gpu, "bf16")

    runs = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        result = planner.sweep(model, cand, gpu, fab, "bf16")
        runs.append(time.perf_counter() - start)
    sweep_s = statistics.median(runs)
    vector_rate = result.evaluated / sweep_s

    rng = np.random.default_rng(0)
    sampled = rng.choice(len(networks), size=min(args.network_samples, len(networks)), replace=False)
    fabrics = {int(i): take(fab, int(i)) for i in sampled}
    start = time.perf_counter()
    for i in sampled:
        float(np.min(training.step(shape, cand.job, device, fabrics[int(i)]).step))
    network_s = time.perf_counter() - start
    network_rate = len(sampled) * len(cand) / network_s

    pairs = [(int(rng.integers(len(networks))), int(rng.integers(len(cand)))) for _ in range(args.loop_samples)]
    fabrics.update({i: take(fab, i) for i, _ in pairs})
    jobs = {j: job_of(cand.configs[j], cand.batch) for _, j in pairs}
    start = time.perf_counter()
    for i, j in pairs:
        float(training.step(shape, jobs[j], device, fabrics[i]).step)
    loop_s = time.perf_counter() - start
    loop_rate = len(pairs) / loop_s

    # The loops and the sweep are one code path: spot-check that they agree.
    full = training.step(shape, cand.job, device, fab)
    i, j = pairs[0]
    same = np.isclose(
        float(np.broadcast_to(full.step, (len(networks), len(cand)))[i, j]),
        float(training.step(shape, jobs[j], device, fabrics[i]).step),
    )

    print(f"model {model.name} on {args.gpus} x {gpu.name}: {len(networks)} networks x {len(cand)} splits")
    print(
        f"vectorized sweep          : {result.evaluated:,} configurations in {sweep_s:.3f} s "
        f"(median of {args.repeat}) = {vector_rate:,.0f} configurations/s on one core"
    )
    print(
        f"per-network loop          : {len(sampled)} calls of training.step, each with one network's "
        f"{len(cand)} splits as arrays = {network_rate:,.0f} configurations/s"
    )
    print(
        f"per-configuration loop    : {len(pairs):,} calls of training.step with Python floats "
        f"(numpy on scalars) = {loop_rate:,.0f} configurations/s"
    )
    print(
        f"ratio                     : {vector_rate / network_rate:,.1f}x the per-network loop, "
        f"{vector_rate / loop_rate:,.0f}x the per-configuration loop (target: sweep >= 1,000,000/s)"
    )
    print(f"same model                : loop and sweep agree on a sampled pair: {bool(same)}")


if __name__ == "__main__":
    main()
