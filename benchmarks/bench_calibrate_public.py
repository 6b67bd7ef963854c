"""Calibrate on a public nccl-tests log at 8 nodes, predict the same cluster at 16 nodes.

The logs are one cluster's own all_reduce_perf runs (RTX 2080 Ti nodes, 8 nodes x 4 GPUs and
16 nodes x 1 GPU, over 10 GbE sockets and over 100 Gb/s InfiniBand), shipped as test data in
tests/model/data/hkbu-2080ti (source and licence there).  Every step is the real command:
``import nccl-tests``, ``calibrate`` on the 8-node log alone, ``predict --nodes 16
--gpus-per-node 1``; the script prints the error per size (every 16th of the 268 sizes) and the
median |error| (target: 15% or less), and, as the peer, the catalog model of the catalog
parts (what predict says with no measurement).

Run:  python benchmarks/bench_calibrate_public.py
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench_calibrate import run, times  # the same commands and the same reading of a Result

__all__ = ["main"]

DATA = Path(__file__).resolve().parent.parent / "tests" / "model" / "data" / "hkbu-2080ti"
CATALOG = {
    # The catalog parts of that cluster: RTX 2080 Ti on PCIe Gen3, one NIC per node.
    "10gbe": ("eth-10g", "tcp-socket"),
    "100g": ("ib-edr", "rdma"),  # GeForce cards have no GPUDirect RDMA: NCCL stages through host memory
}


def one(fabric: str, tmp: Path) -> tuple[float, float]:
    small, large = tmp / f"{fabric}-8.json", tmp / f"{fabric}-16.json"
    run("import", "nccl-tests", str(DATA / f"{fabric}-8nodes-4gpus.log"), "--op", "all_reduce", "--json", str(small))
    run("import", "nccl-tests", str(DATA / f"{fabric}-16nodes-1gpu.log"), "--op", "all_reduce", "--json", str(large))
    run("calibrate", str(small), "-o", str(tmp / f"{fabric}.toml"))
    nic, transport = CATALOG[fabric]
    (tmp / f"{fabric}-catalog.toml").write_text(
        f'nodes = 16\ngpus_per_node = 1\ngpu = "rtx-2080-ti"\nintra = "pcie"\npcie = "gen3"\n\n'
        f'[network]\nnic = "{nic}"\nnics_per_node = 1\ntransport = "{transport}"\n'
    )
    sweep = ["-b", "1M", "-e", "512M", "-i", "2000000", "all_reduce"]
    shape = ["--nodes", "16", "--gpus-per-node", "1"]
    run("predict", "--cluster", str(tmp / f"{fabric}.toml"), *shape, *sweep, "--json", str(tmp / "p.json"))
    run("predict", "--cluster", str(tmp / f"{fabric}-catalog.toml"), *shape, *sweep, "--json", str(tmp / "c.json"))
    measured, predicted, catalog = (
        {size: t for (_, size), t in times(path).items()} for path in (large, tmp / "p.json", tmp / "c.json")
    )
    print(f"\n{fabric}: calibrated on 8 nodes x 4 GPUs, predicted and measured on 16 nodes x 1 GPU")
    print(f"{'size':>10} {'16 nodes us':>12} {'predicted':>10} {'error':>8} {'catalog err':>12}")
    errors, catalog_errors = [], []
    for i, size in enumerate(sorted(measured)):
        error = predicted[size] / measured[size] - 1
        other = catalog[size] / measured[size] - 1
        errors.append(abs(error))
        catalog_errors.append(abs(other))
        if i % 16 == 0:
            shown = f"{size:>10} {measured[size]:>12.1f} {predicted[size]:>10.1f}"
            print(f"{shown} {100 * error:>+7.1f}% {100 * other:>+11.1f}%")
    median, peer = 100 * statistics.median(errors), 100 * statistics.median(catalog_errors)
    print(f"{len(errors)} sizes from 1 MiB: median |error| {median:.1f}% (target 15%), worst {100 * max(errors):.1f}%")
    print(
        f"catalog model without calibration: median |error| {peer:.1f}%; ratio catalog/calibrated {peer / median:.1f}x"
    )
    return median, peer


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        for fabric in CATALOG:
            one(fabric, Path(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
