"""fabricscope bench against a minimal hand-written torch.distributed timing loop.

Both run the same op (all_reduce, float, sum), sizes, iterations, warmups and
rank counts on gloo over loopback, launched the same way (one process group
per size), alternating which goes first in every round.  The raw loop is the
usual one: warm up, barrier, time ``n`` back-to-back calls, average the time
across ranks.  fabricscope's figure is the out-of-place column of its table,
read from its --json result.

Prints, per rank count and size, the median over rounds of each tool's busbw
(from the mean time per call) and their ratio (target >= 0.97 from 1 MiB up),
the same ratio for the median per-call time (robust to the scheduler noise of
a small machine), the time overhead at 8 B (target <= 5%), and the wall time
of the default ``fabricscope bench`` sweep.  A control runs the raw loop a
second time in every round: raw2/raw shows how far two identical loops differ
on this machine, the yardstick for reading fs/raw.

The harness alone (issue 12), measured two ways:

- **per call**: fabricscope's own timed loop (``Sweep._time``, the code that
  times every row) around a no-op collective, against a bare loop around the
  same no-op; the difference is what the harness adds to each call, in ns.
- **background threads**: the raw loop again with the threads every
  fabricscope rank runs (the heartbeat, which writes to the rendezvous store
  every 0.5 s, and the launcher watch, which looks every second):
  ``thr/raw`` against the control ``raw2/raw`` says whether they cost anything
  visible at that size.

    python benchmarks/bench_overhead.py [--rounds 5] [--iters 50] [--warmup 5] [--ranks 2 4] [--sizes 8 1048576]
    python benchmarks/bench_overhead.py --harness-only --rounds 5 --ranks 2 --sizes 8 --iters 500
"""

from __future__ import annotations

import argparse
import itertools
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
    """One rank of the hand-written loop; rank 0 prints the rank-averaged mean and median seconds per call."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    size, iters, warmup = (int(v) for v in os.environ["RAW_ARGS"].split(","))
    if os.environ.get("RAW_THREADS") == "1":
        _start_fabricscope_threads(rank, world)
    tensor = torch.ones(max(size // 4, 1) if size >= 4 else 2, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    dist.barrier()
    stamps = [time.perf_counter()]
    for _ in range(iters):
        dist.all_reduce(tensor)
        stamps.append(time.perf_counter())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    times = torch.tensor([(stamps[-1] - stamps[0]) / iters, statistics.median(gaps)], dtype=torch.float64)
    dist.all_reduce(times)
    if rank == 0:
        print(json.dumps({"mean": times[0].item() / world, "median": times[1].item() / world}))
    dist.destroy_process_group()


def _start_fabricscope_threads(rank: int, world: int) -> None:
    """The background threads of a fabricscope rank, as its worker starts them."""
    from fabricscope.launch import rank as rank_life
    from fabricscope.launch.heartbeat import Heartbeat, Peer, make_store_factory

    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    peers = [Peer(rank=r, host=socket.gethostname(), pid=0, device="cpu") for r in range(world)]
    rank_life.stop_when_orphaned()
    Heartbeat(store_factory=make_store_factory(addr, port), rank=rank, peers=peers).start()


def harness_per_call(iters: int) -> tuple[float, float]:
    """Seconds per call of fabricscope's timed loop and of a bare loop, both around a no-op collective."""
    import torch
    import torch.distributed as dist

    from fabricscope.bench.config import BenchConfig
    from fabricscope.bench.runner import StopFlag, Sweep
    from fabricscope.ops import Call

    if not dist.is_initialized():
        store = dist.TCPStore("127.0.0.1", _port(), 1, is_master=True)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def noop() -> None:
        pass

    def load(seed: int) -> None:
        pass

    class Idle:  # the heartbeat's main-thread side, without its thread (timed separately)
        def enter(self, phase: str, deadline_s: float) -> None:
            pass

        def leave(self) -> None:
            pass

    sweep = Sweep(
        torch=torch,
        dist=dist,
        config=BenchConfig(iters=iters),
        rank=0,
        world_size=1,
        backend="gloo",
        device=torch.device("cpu"),
        heartbeat=Idle(),  # type: ignore[arg-type]
        stop=StopFlag(),
    )
    harness, _ = sweep._time(Call(step=noop, load=load, expected=None, output=None))
    clock = time.perf_counter
    stamps = [0.0] * (iters + 1)
    stamps[0] = clock()
    for i in range(1, iters + 1):
        noop()
        stamps[i] = clock()
    return harness, (stamps[iters] - stamps[0]) / iters


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_raw(size: int, ranks: int, iters: int, warmup: int, *, threads: bool = False) -> tuple[float, float]:
    env = dict(
        os.environ,
        RAW_THREADS="1" if threads else "0",
        WORLD_SIZE=str(ranks),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_port()),
        RAW_ARGS=f"{size},{iters},{warmup}",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--raw-worker"], env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True
        )
        for r in range(ranks)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"raw loop failed at {size} B on {ranks} ranks")
    data = json.loads(outputs[0])
    return float(data["mean"]), float(data["median"])


def run_fabricscope(size: int, ranks: int, iters: int, warmup: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [
            sys.executable, "-m", "fabricscope", "bench", "all_reduce", "-b", str(size), "-e", str(size),
            "-n", str(iters), "-w", str(warmup), "-c", "0", "--nproc", str(ranks), "--json", str(out),
        ]  # fmt: skip
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
        records = json.loads(out.read_text())["records"]
    record = next(r for r in records if r["placement"] == "out")
    # samples_us are already combined across ranks by the mean (-a 1), as the raw loop's are.
    return float(record["time_us"]) / 1e6, float(record["p50_us"]) / 1e6


def run_raw_with_threads(size: int, ranks: int, iters: int, warmup: int) -> tuple[float, float]:
    return run_raw(size, ranks, iters, warmup, threads=True)


def print_harness(args: argparse.Namespace) -> None:
    """The harness alone: its cost per call, and the background threads against the raw loop."""
    calls = max(args.iters, 10_000)
    rounds = [harness_per_call(calls) for _ in range(args.rounds)]
    timed = statistics.median(h for h, _ in rounds)
    bare = statistics.median(b for _, b in rounds)
    print(
        f"# harness per call (no-op collective, {calls} calls, median of {args.rounds}): fabricscope's timed loop "
        f"{timed * 1e9:.0f} ns, bare loop {bare * 1e9:.0f} ns: the harness adds {(timed - bare) * 1e9:+.0f} ns per call"
    )
    print("# thr: the raw loop with fabricscope's background threads; raw2: the raw loop again (the control)")
    print(f"# {'ranks':>5} {'size(B)':>10} {'raw us':>10} {'thr us':>10} {'thr/raw':>8} {'raw2/raw':>9}")
    for ranks in args.ranks:
        for size in args.sizes:
            runners = [("raw", run_raw), ("thr", run_raw_with_threads), ("raw2", run_raw)]
            runs: dict[str, list[float]] = {name: [] for name, _ in runners}
            for round_index in range(args.rounds):
                shift = round_index % len(runners)
                for name, runner in runners[shift:] + runners[:shift]:
                    runs[name].append(runner(size, ranks, args.iters, args.warmup)[0])
            mean = {k: statistics.median(v) for k, v in runs.items()}
            print(
                f"  {ranks:>5} {size:>10} {mean['raw'] * 1e6:>10.1f} {mean['thr'] * 1e6:>10.1f}"
                f" {mean['thr'] / mean['raw']:>8.3f} {mean['raw2'] / mean['raw']:>9.3f}",
                flush=True,
            )


def busbw(size: int, ranks: int, seconds: float) -> float:
    return size / seconds / 1e9 * 2 * (ranks - 1) / ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--ranks", type=int, nargs="+", default=RANKS)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument(
        "--no-control", dest="control", action="store_false", help="skip the raw-against-raw control runs"
    )
    parser.add_argument(
        "--harness-only", action="store_true", help="only the harness: its cost per call and the threads' cost"
    )
    parser.add_argument("--raw-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_worker:
        raw_worker()
        return
    print_harness(args)
    if args.harness_only:
        return

    print(
        f"# all_reduce float sum, gloo on 127.0.0.1, {os.cpu_count()} CPU cores; -n {args.iters} -w {args.warmup};"
        f" median over {args.rounds} rounds of each run's mean (busbw) and median (p50) time per call;"
        " the order of the runs rotates every round"
    )
    if args.control:
        print("# control: the raw loop run twice per round (raw2/raw) shows how far two identical loops differ here")
    print(
        f"# {'ranks':>5} {'size(B)':>10} {'raw us':>10} {'fs us':>10} {'raw busbw':>10} {'fs busbw':>10}"
        f" {'fs/raw':>7} {'p50 fs/raw':>10}" + (f" {'raw2/raw':>9} {'p50 raw2/raw':>12}" if args.control else "")
    )
    for ranks in args.ranks:
        for size in args.sizes:
            runners = [("raw", run_raw), ("fs", run_fabricscope)] + ([("raw2", run_raw)] if args.control else [])
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in runners}
            for round_index in range(args.rounds):
                shift = round_index % len(runners)
                for name, runner in runners[shift:] + runners[:shift]:
                    runs[name].append(runner(size, ranks, args.iters, args.warmup))
            mean = {k: statistics.median(m for m, _ in v) for k, v in runs.items()}
            p50 = {k: statistics.median(p for _, p in v) for k, v in runs.items()}
            # time ratios raw/fs = busbw ratios fs/raw, defined at 8 B too
            line = (
                f"  {ranks:>5} {size:>10} {mean['raw'] * 1e6:>10.1f} {mean['fs'] * 1e6:>10.1f}"
                f" {busbw(size, ranks, mean['raw']):>10.4f} {busbw(size, ranks, mean['fs']):>10.4f}"
                f" {mean['raw'] / mean['fs']:>7.3f} {p50['raw'] / p50['fs']:>10.3f}"
            )
            if args.control:
                line += f" {mean['raw'] / mean['raw2']:>9.3f} {p50['raw'] / p50['raw2']:>12.3f}"
            if size == 8:
                line += f"  time overhead {100 * (mean['fs'] / mean['raw'] - 1):+.1f}%"
            print(line, flush=True)

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fabricscope", "bench"], check=True, stdout=subprocess.DEVNULL)
    print(
        f"# wall time of the default sweep (fabricscope bench: all_reduce 8 B..32 MiB, 2 ranks): "
        f"{time.perf_counter() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
