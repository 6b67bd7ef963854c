"""Does gloo move data both ways at once between two ranks?  One shaped link, three ways of crossing it.

bench_calibrate's all-to-all misses when it extrapolates 2 ranks to 4.  This
measures why, on the same fabric (two network namespaces behind a bridge,
each veth shaped both ways by a token bucket, ``--rate``):

- gloo, one way: rank 0 sends ``--bytes`` to rank 1 (``dist.send``/``recv``);
- gloo, both ways: each rank sends ``--bytes`` to the other at once
  (``isend`` + ``irecv``, what a 2-rank all-to-all or ring step does);
- raw TCP, both ways: one socket, each end sending ``--bytes`` while a
  thread receives (the peer: the link and kernel without gloo's transport).

Each of ``--runs`` runs builds a fresh fabric and fresh processes; it prints
every run's rates in MB/s and the ratio of gloo's both-ways rate to the raw
socket's (on this VM gloo's both ways comes out either near the link or near
half of it, run by run).  Needs root with ``ip``, ``tc`` and ``unshare``.

    python benchmarks/bench_gloo_duplex.py [--rate 50mbit] [--bytes 2M] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_calibrate  # the namespaced star fabric it measures on

__all__ = ["main"]

GLOO = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, size = dist.get_rank(), int(sys.argv[1]) // 4
a, b = torch.ones(size), torch.zeros(size)
def one_way():
    dist.send(a, 1) if rank == 0 else dist.recv(b, 0)
def both_ways():
    s, r = dist.isend(a, 1 - rank), dist.irecv(b, 1 - rank)
    s.wait(); r.wait()
for name, run in (("gloo, one way", one_way), ("gloo, both ways", both_ways)):
    run(); dist.barrier()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter(); run(); dist.barrier(); best = min(best, time.perf_counter() - start)
    if rank == 0:
        print(f"{name}\\t{size * 4 / best / 1e6:.2f}", flush=True)
dist.destroy_process_group()
"""

SOCKET = """
import socket, sys, threading, time
role, address, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    listener = socket.create_server((address, 5299)); listener.settimeout(60); sock, _ = listener.accept()
else:
    for _ in range(200):  # the server may not listen yet
        try:
            sock = socket.create_connection((address, 5299)); break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit("the raw TCP server never listened")
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
def receive(want):
    got = 0
    while got < want:
        data = sock.recv(1 << 20)
        if not data:
            break
        got += len(data)
best = float("inf")
for _ in range(3):  # each end sends and receives; a round ends when both halves are done
    start = time.perf_counter()
    thread = threading.Thread(target=receive, args=(size,)); thread.start()
    sock.sendall(b"x" * size); thread.join()
    best = min(best, time.perf_counter() - start)
if role == "client":
    print(f"raw TCP, both ways\t{size / best / 1e6:.2f}", flush=True)
"""


def _bytes(text: str) -> int:
    """``2M`` -> 2097152: ASCII digits and an optional K/M/G, from 1 KiB to 1 GiB."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text.rstrip("KMGkmg")
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 10 and 1 << 10 <= int(digits) * scale <= 1 << 30):
        raise argparse.ArgumentTypeError(f"{text!r}: give a size from 1K to 1G, such as 2M")
    return int(digits) * scale


def _runs(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 3 and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of runs from 1 to 999")
    return int(text)


def _rate(text: str) -> str:
    low = text.strip().lower()
    digits = low.removesuffix("mbit")
    whole = digits.isascii() and digits.isdigit() and len(digits) <= 6
    if not (low.endswith("mbit") and whole and 1 <= int(digits) <= 100000):
        raise argparse.ArgumentTypeError(f"{text!r}: give a rate in mbit, such as 50mbit")
    return low


def _one_run(rate: str, size: int) -> dict[str, float]:
    """The three rates on a fabric of their own: fresh namespaces, processes and connections."""
    token = secrets.token_hex(2)
    rates: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory() as folder,
        bench_calibrate.star(token, 2, rate, bench_calibrate.auto_burst(rate)) as names,
    ):
        gloo, sock = Path(folder) / "gloo.py", Path(folder) / "raw_tcp.py"
        gloo.write_text(GLOO)
        sock.write_text(SOCKET)
        runs = []
        for rank in range(2):
            env = dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR=bench_calibrate._address(0),
                MASTER_PORT="29655",
                GLOO_SOCKET_IFNAME=f"c{token}{rank}",
                OMP_NUM_THREADS="1",
            )
            command = ["ip", "netns", "exec", names[rank], sys.executable, str(gloo), str(size)]
            runs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        done = bench_calibrate.communicate_all(runs, timeout=600)
        if any(run.returncode for run in runs):
            sys.exit(f"the gloo ranks failed: {[err.strip()[-300:] for _, err in done]}")
        peer = bench_calibrate._address(1)
        serve = ["ip", "netns", "exec", names[1], sys.executable, str(sock), "server", peer, str(size)]
        server = subprocess.Popen(serve)
        client = subprocess.run(
            ["ip", "netns", "exec", names[0], sys.executable, str(sock), "client", peer, str(size)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        try:
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        if client.returncode:
            sys.exit(f"the raw TCP client failed: {client.stderr.strip()[-300:]}")
        for line in [*done[0][0].splitlines(), *client.stdout.splitlines()]:
            name, _, value = line.partition("\t")
            rates[name] = float(value)
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=_rate, default="50mbit", help="each veth's rate, tc syntax in mbit")
    parser.add_argument("--bytes", type=_bytes, default=_bytes("2M"), help="sent each way (default 2M)")
    parser.add_argument("--runs", type=_runs, default=3, help="fresh fabrics and processes, each printed (default 3)")
    args = parser.parse_args()
    missing = bench_calibrate.netns_missing()
    if missing:
        sys.exit(f"cannot run here: {missing}")
    size = args.bytes
    rates: dict[str, list[float]] = {}
    for _ in range(args.runs):
        for name, value in _one_run(args.rate, size).items():
            rates.setdefault(name, []).append(value)
    link = float(args.rate.removesuffix("mbit")) / 8
    print(f"# {args.rate} link ({link:.2f} MB/s each way), {size} bytes per direction, best of 3 in each run")
    for name, values in rates.items():
        print(f"{name:<22} " + " ".join(f"{value:>6.2f}" for value in values) + " MB/s")
    both, raw = rates.get("gloo, both ways"), rates.get("raw TCP, both ways")
    if both and raw:
        ratios = " ".join(f"{b / r:.2f}" for b, r in zip(both, raw, strict=True))
        print(f"# gloo both ways / raw TCP both ways, per run: {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
