"""Calibrate on 2 gloo ranks, predict 4, measure 4: the error of ``calibrate``'s extrapolation.

Every step is the real command: ``fabricscope bench`` runs 2 ranks and then 4,
``fabricscope calibrate`` fits the 2-rank run, ``fabricscope predict``
extrapolates to 4, and the script prints, per op and size, the measured 4-rank
time, the prediction and the error, then per op the median |error| from 64 KiB
up (target: 15% or less), and, as the peer, the error of the catalog model of
the same base cluster (what predict says with no measurement).  Default ops:
all_reduce, all_gather, reduce_scatter and alltoall (the data-parallel, ZeRO and
MoE collectives); ``--rate`` takes several rates, each on a fabric of its own.

Two fabrics:

- ``--fabric netns`` (the default where it can run: root with ``ip``, ``tc``
  and ``unshare``): one network namespace per rank, each its own "node" with
  its own host name, joined through a bridge by a veth "NIC" rate-limited
  both ways with a token bucket (``--rate``, default 50mbit: a weak Ethernet
  fabric).  Ranks join with plain RANK/WORLD_SIZE/MASTER_ADDR variables (the
  ``env`` launcher), gloo bound to the namespace's veth.  The network is what
  the collective waits for, as on a real cluster; calibrate fits the
  inter-node hop and predict extrapolates the node count.
- ``--fabric loopback``: ``bench --nproc`` on this host.  On a host with
  fewer cores than 4 ranks the 4-rank run measures CPU time-sharing (ranks
  wait for a core, not for bytes), which no network model extrapolates: use
  it on a host with a free core per rank.

Namespaces, veths and the bridge are removed afterwards, also on failure.

Run:  python benchmarks/bench_calibrate.py [--fabric netns|loopback] [--rate 50mbit,400mbit] [--burst auto]
                                           [--max 4M] [--iters 5] [--op all_reduce,all_gather]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["communicate_all", "main"]

FABRICSCOPE = [sys.executable, "-m", "fabricscope"]
PORT = 29631


def run(*args: str) -> None:
    done = subprocess.run([*FABRICSCOPE, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"fabricscope {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def times(path: Path) -> dict[tuple[str, int], float]:
    """(op, size) -> median time (us) over the out-of-place and in-place rows."""
    found: dict[tuple[str, int], list[float]] = {}
    for record in json.loads(path.read_text())["records"]:
        found.setdefault((record["op"], record["size_bytes"]), []).append(record.get("p50_us") or record["time_us"])
    return {key: statistics.median(values) for key, values in found.items()}


def auto_burst(rate: str) -> str:
    """A token bucket that holds 10 ms at ``rate`` (tc syntax: 50mbit, 1gbit), at least 32 KiB: a
    bucket smaller than one timer tick's bytes caps the link below its rate."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    text = rate.strip().lower()
    for unit, scale in units.items():
        if text.endswith(unit):
            bits = float(text[: -len(unit)]) * scale
            return f"{max(32, round(bits / 8 * 0.010 / 1024))}kb"
    sys.exit(f"--rate {rate!r}: give a tc rate such as 50mbit or 1gbit")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def netns_missing() -> str | None:
    """Why namespaces cannot be built here, or None."""
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _address(i: int) -> str:
    return f"10.79.0.{i + 1}"


@contextlib.contextmanager
def star(token: str, ranks: int, rate: str, burst: str) -> Iterator[list[str]]:
    """Namespaces ``fc<token>n<i>`` on one bridge (in namespace ``fc<token>sw``), every veth shaped to ``rate``."""
    switch = f"fc{token}sw"
    names = [f"fc{token}n{i}" for i in range(ranks)]
    try:
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, name in enumerate(names):
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
            nic, port = f"c{token}{i}", f"p{token}{i}"
            _ip("link", "add", nic, "netns", name, "type", "veth", "peer", "name", port, "netns", switch)
            _ip("-n", name, "addr", "add", f"{_address(i)}/24", "dev", nic)
            _ip("-n", name, "link", "set", nic, "up")
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            for ns, dev in ((name, nic), (switch, port)):  # the NIC's send side and its receive side
                subprocess.run(
                    ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                     "rate", rate, "burst", burst, "latency", "200ms"],
                    check=True, capture_output=True, timeout=30,
                )  # fmt: skip
        yield names
    finally:
        for name in [*names, switch]:
            _ip("netns", "del", name, check=False)


def bench_netns(token: str, names: list[str], ranks: int, args: list[str], out: Path) -> None:
    """One ``fabricscope bench`` rank per namespace (its own host name), rank 0 writing ``out``."""
    procs = []
    for i in range(ranks):
        env = dict(os.environ)
        env.update(
            RANK=str(i),
            WORLD_SIZE=str(ranks),
            MASTER_ADDR=_address(0),
            MASTER_PORT=str(PORT + ranks),
            GLOO_SOCKET_IFNAME=f"c{token}{i}",
            OMP_NUM_THREADS="1",
        )
        command = " ".join([*FABRICSCOPE, "bench", *args, *(["--json", str(out)] if i == 0 else [])])
        script = f"hostname fcnode{i} && exec {command}"
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", names[i], "unshare", "--uts", "sh", "-c", script],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    errors = [err for _, err in communicate_all(procs, timeout=1800)]
    if any(p.returncode for p in procs):
        sys.exit(f"bench on {ranks} namespaces failed: {[e.strip()[-300:] for e in errors]}")


def communicate_all(procs: list[subprocess.Popen[str]], *, timeout: float) -> list[tuple[str, str]]:
    """Each process's (stdout, stderr) once all have ended; any still running after ``timeout`` is killed."""
    try:
        return [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def measure(fabric: str, rate: str, burst: str, sweep: list[str], tmp: Path) -> list[str]:
    """Bench 2 and then 4 ranks into tmp/two.json and tmp/four.json; the shape flags of the 4."""
    if fabric == "netns":
        token = secrets.token_hex(2)
        with star(token, 4, rate, burst) as names:
            bench_netns(token, names, 2, sweep, tmp / "two.json")
            bench_netns(token, names, 4, sweep, tmp / "four.json")
        return ["--nodes", "4", "--gpus-per-node", "1"]
    run("bench", "--nproc", "2", *sweep, "--json", str(tmp / "two.json"))
    run("bench", "--nproc", "4", *sweep, "--json", str(tmp / "four.json"))
    return ["--nodes", "1", "--gpus-per-node", "4"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fabric", choices=("netns", "loopback"), help="default: netns where it can run")
    parser.add_argument(
        "--rate", default="50mbit,400mbit", help="netns: each node's NIC rate(s), tc syntax (default 50mbit,400mbit)"
    )
    parser.add_argument("--burst", default="auto", help="netns: the token bucket's burst (default: 10 ms of the rate)")
    parser.add_argument("--max", default=None, help="largest size (default 4M on netns, 16M on loopback)")
    parser.add_argument("--iters", default="5", help="timed iterations per size (default 5)")
    parser.add_argument(
        "--op", default="all_reduce,all_gather,reduce_scatter,alltoall", help="collectives, comma-separated"
    )
    args = parser.parse_args()
    missing = netns_missing()
    fabric = args.fabric or ("loopback" if missing else "netns")
    if fabric == "netns" and missing:
        sys.exit(f"--fabric netns cannot run here: {missing}")
    largest = args.max or ("4M" if fabric == "netns" else "16M")
    op_names = [name.strip() for name in args.op.split(",") if name.strip()]
    sweep = [",".join(op_names), "-b", "64K", "-e", largest, "-n", args.iters, "-w", "1", "-c", "0"]
    rates = [r.strip() for r in args.rate.split(",") if r.strip()] if fabric == "netns" else ["loopback"]
    summary = []
    for rate in rates:
        burst = auto_burst(rate) if fabric == "netns" and args.burst == "auto" else args.burst
        with tempfile.TemporaryDirectory() as folder:
            tmp = Path(folder)
            shape = measure(fabric, rate, burst, sweep, tmp)
            run("calibrate", str(tmp / "two.json"), "-o", str(tmp / "two.toml"))
            base = ["-b", "64K", "-e", largest, *op_names]
            run("predict", "--cluster", str(tmp / "two.toml"), *shape, *base, "--json", str(tmp / "p.json"))
            run("predict", "--cluster", "lab-8gpu-100g-nvme", *shape, *base, "--json", str(tmp / "catalog.json"))
            measured, predicted, catalog = times(tmp / "four.json"), times(tmp / "p.json"), times(tmp / "catalog.json")
            two = times(tmp / "two.json")
        where = f"{rate} (burst {burst}) network namespaces, one rank per node" if fabric == "netns" else "loopback"
        for op in op_names:
            print(f"\n{op}: calibrated on 2 gloo ranks, predicted and measured on 4 ({where})")
            print(
                f"{'size':>10} {'2 ranks us':>11} {'4 ranks us':>11} {'predicted':>10} {'error':>8} {'catalog err':>12}"
            )
            errors, catalog_errors = [], []
            for key in sorted(k for k in measured if k[0] == op):
                error = 100 * (predicted[key] / measured[key] - 1)
                other = 100 * (catalog[key] / measured[key] - 1)
                errors.append(abs(error))
                catalog_errors.append(abs(other))
                print(
                    f"{key[1]:>10} {two.get(key, float('nan')):>11.1f} {measured[key]:>11.1f} {predicted[key]:>10.1f} "
                    f"{error:>+7.1f}% {other:>+11.1f}%"
                )
            summary.append((rate, op, statistics.median(errors), max(errors), statistics.median(catalog_errors)))
    print(f"\n{'rate':>10} {'op':<15} {'median |err|':>12} {'worst':>8} {'catalog median':>15} {'ratio':>7}")
    for rate, op, median, worst, other in summary:
        print(f"{rate:>10} {op:<15} {median:>11.1f}% {worst:>7.1f}% {other:>14.1f}% {other / max(median, 1e-9):>6.1f}x")
    met = all(median <= 15.0 for _, _, median, _, _ in summary)
    print(f"target median |error| <= 15% per op from 64 KiB up: {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
