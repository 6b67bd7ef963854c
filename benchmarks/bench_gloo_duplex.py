"""Does gloo move data both ways at once between two ranks?  One shaped link, four ways of crossing it.

gloo's own all-to-all extrapolated badly from 2 ranks to 4 in bench_calibrate.
This measures why, on the same fabric (two network namespaces behind a bridge,
each veth shaped both ways by a token bucket, ``--rate``):

- gloo, one way: rank 0 sends ``--bytes`` to rank 1 (``dist.send``/``recv``);
- gloo, both ways, send first: each rank sends ``--bytes`` to the other at once,
  posting its ``isend`` before its ``irecv`` (as gloo's ``alltoall.cc`` does);
- gloo, both ways, receive first: the same with the ``irecv`` posted first (what
  fabricscope's point-to-point ops do, ``ops._exchange``);
- raw TCP, both ways: one socket, each end sending ``--bytes`` while a
  thread receives (the peer: the link and kernel without gloo's transport).

A gloo send waits for the peer's notice that its receive is posted, and the
notice travels on the pair's one TCP connection behind whatever that peer has
already written there: posted after a send, it waits behind the send's bytes,
and the two directions take turns.  Each of ``--runs`` runs builds a fresh
fabric and fresh processes; it prints every run's rates in MB/s and the ratio
of each gloo both-ways rate to the raw socket's (the two gloo orders take turns at
going first on the connection).  Needs root with ``ip``, ``tc``
and ``unshare``.

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
rank, size, turn = dist.get_rank(), int(sys.argv[1]) // 4, int(sys.argv[2])
a, b = torch.ones(size), torch.zeros(size)
def one_way():
    dist.send(a, 1) if rank == 0 else dist.recv(b, 0)
def send_first():
    s, r = dist.isend(a, 1 - rank), dist.irecv(b, 1 - rank)
    s.wait(); r.wait()
def receive_first():
    r, s = dist.irecv(b, 1 - rank), dist.isend(a, 1 - rank)
    s.wait(); r.wait()
both = [("gloo, both, send first", send_first), ("gloo, both, recv first", receive_first)]
ways = [("gloo, one way", one_way), *(both if turn % 2 == 0 else both[::-1])]  # each order goes first in turn
for name, run in ways:
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


def _one_run(rate: str, size: int, turn: int) -> dict[str, float]:
    """The four rates on a fabric of their own: fresh namespaces, processes and connections."""
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
            command = ["ip", "netns", "exec", names[rank], sys.executable, str(gloo), str(size), str(turn)]
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
    for turn in range(args.runs):
        for name, value in _one_run(args.rate, size, turn).items():
            rates.setdefault(name, []).append(value)
    link = float(args.rate.removesuffix("mbit")) / 8
    print(f"# {args.rate} link ({link:.2f} MB/s each way), {size} bytes per direction, best of 3 in each run")
    for name, values in rates.items():
        print(f"{name:<22} " + " ".join(f"{value:>6.2f}" for value in values) + " MB/s")
    raw = rates.get("raw TCP, both ways")
    for name in ("gloo, both, send first", "gloo, both, recv first"):
        both = rates.get(name)
        if both and raw:
            ratios = " ".join(f"{b / r:.2f}" for b, r in zip(both, raw, strict=True))
            print(f"# {name} / raw TCP both ways, per run: {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
