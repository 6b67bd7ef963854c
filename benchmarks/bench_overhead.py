"""fabricscope bench against a minimal hand-written torch.distributed timing loop.

Both run the same op (all_reduce, float, sum), sizes, iterations, warmups and
rank counts on gloo over loopback, launched the same way (one process group
per size), alternating which goes first in every round.  The raw loop is the
usual one: warm up, barrier, time ``n`` back-to-back calls, average the time
across ranks.  fabricscope's figure is the out-of-place column of its table,
read from its --json result.

Prints, per rank count and size, the median over rounds of each tool's busbw
and their ratio (target >= 0.97 from 1 MiB up), the time overhead at 8 B
(target <= 5%), and the wall time of the default ``fabricscope bench`` sweep.

    python benchmarks/bench_overhead.py [--rounds 5] [--iters 20] [--warmup 5]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = [8, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
RANKS = [2, 4]


def raw_worker() -> None:
    """One rank of the hand-written loop; rank 0 prints {size: seconds per call}."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    size, iters, warmup = (int(v) for v in os.environ["RAW_ARGS"].split(","))
    tensor = torch.ones(max(size // 4, 1) if size >= 4 else 2, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor)
    elapsed = (time.perf_counter() - start) / iters
    mean = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(mean)
    if rank == 0:
        print(json.dumps({"seconds": mean.item() / world}))
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_raw(size: int, ranks: int, iters: int, warmup: int) -> float:
    env = dict(
        os.environ,
        WORLD_SIZE=str(ranks),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_port()),
        RAW_ARGS=f"{size},{iters},{warmup}",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--raw-worker"],
            env=dict(env, RANK=str(r)),
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(ranks)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"raw loop failed at {size} B on {ranks} ranks")
    return float(json.loads(outputs[0])["seconds"])


def run_fabricscope(size: int, ranks: int, iters: int, warmup: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [
            sys.executable,
            "-m",
            "fabricscope",
            "bench",
            "all_reduce",
            "-b",
            str(size),
            "-e",
            str(size),
            "-n",
            str(iters),
            "-w",
            str(warmup),
            "-c",
            "0",
            "--nproc",
            str(ranks),
            "--json",
            str(out),
        ]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        records = json.loads(out.read_text())["records"]
    return float(next(r["time_us"] for r in records if r["placement"] == "out")) / 1e6


def busbw(size: int, ranks: int, seconds: float) -> float:
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--raw-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_worker:
        raw_worker()
        return

    print(
        f"# all_reduce float sum, gloo on 127.0.0.1, {os.cpu_count()} CPU cores; -n {args.iters} -w {args.warmup};"
        f" median of {args.rounds} alternating rounds"
    )
    print(
        f"# {'ranks':>5} {'size(B)':>10} {'raw us':>10} {'fs us':>10} {'raw busbw':>10} {'fs busbw':>10} {'fs/raw':>7}"
    )
    for ranks in RANKS:
        for size in SIZES:
            raw_times, fs_times = [], []
            for round_index in range(args.rounds):
                order = (run_raw, run_fabricscope) if round_index % 2 == 0 else (run_fabricscope, run_raw)
                for runner in order:
                    seconds = runner(size, ranks, args.iters, args.warmup)
                    (raw_times if runner is run_raw else fs_times).append(seconds)
            raw_t, fs_t = statistics.median(raw_times), statistics.median(fs_times)
            raw_bw, fs_bw = busbw(size, ranks, raw_t), busbw(size, ranks, fs_t)
            ratio = raw_t / fs_t  # = fs busbw / raw busbw, defined at 8 B too
            note = f"  time overhead {100 * (fs_t / raw_t - 1):+.1f}%" if size == 8 else ""
            print(
                f"  {ranks:>5} {size:>10} {raw_t * 1e6:>10.1f} {fs_t * 1e6:>10.1f} {raw_bw:>10.4f} {fs_bw:>10.4f}"
                f" {ratio:>7.3f}{note}",
                flush=True,
            )

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fabricscope", "bench"], check=True, stdout=subprocess.DEVNULL)
    print(
        f"# wall time of the default sweep (fabricscope bench: all_reduce 8 B..32 MiB, 2 ranks): "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
