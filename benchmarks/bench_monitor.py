"""fabricscope's Prometheus exporter against node_exporter, side by side on 127.0.0.1.

Both run as their users run them (``fabricscope monitor --serve`` sampling
every second; Debian's ``prometheus-node-exporter`` with its default
collectors) and are measured the same way:

- CPU while scraped once a second: the exporter process's user + system CPU
  time (``/proc/<pid>/stat``) over ``--cpu-seconds`` of 1 Hz scrapes, as a
  share of one core;
- latency under load: ``--scrapes`` scrapes of ``/metrics`` from
  ``--clients`` concurrent clients (one new connection per scrape), p50 and
  p99, and the errors (a non-200 answer, a refused or timed-out connection).

The two are loaded one after the other (not at once) so they do not compete
for the two cores of a small machine; the CPU phase scrapes both at once,
since 1 Hz leaves the machine idle.  Targets (issue 8): CPU at most
node_exporter's, p99 at most node_exporter's, zero errors.

    python benchmarks/bench_monitor.py [--cpu-seconds 30] [--scrapes 2000] [--clients 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fabricscope.results import percentile

REPO = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime (fields 14 and 15)


def scrape(url: str, timeout: float = 10.0) -> tuple[float, bool]:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
            ok = response.status == 200 and len(body) > 0
    except OSError:
        ok = False
    return time.perf_counter() - start, ok


def wait_up(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if scrape(url, 2)[1]:
            return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer in {timeout:g} s")


def cpu_phase(targets: dict[str, tuple[str, int]], seconds: float) -> dict[str, float]:
    """CPU share of one core per exporter while each is scraped once a second."""
    before = {name: cpu_seconds(pid) for name, (_, pid) in targets.items()}
    start = time.monotonic()
    tick = start
    while time.monotonic() - start < seconds:
        for url, _ in targets.values():
            scrape(url)
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
    wall = time.monotonic() - start
    return {name: (cpu_seconds(pid) - before[name]) / wall for name, (_, pid) in targets.items()}


def load_phase(url: str, scrapes: int, clients: int) -> tuple[list[float], int]:
    """Latencies in seconds of ``scrapes`` scrapes from ``clients`` threads, and the error count."""
    results: list[tuple[float, bool]] = []
    lock = threading.Lock()

    def client(count: int) -> None:
        mine = [scrape(url) for _ in range(count)]
        with lock:
            results.extend(mine)

    share = [scrapes // clients + (1 if i < scrapes % clients else 0) for i in range(clients)]
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, share))
    return sorted(t for t, _ in results), sum(1 for _, ok in results if not ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-seconds", type=float, default=30.0)
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    args = parser.parse_args()
    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if node_exporter is None:
        print("prometheus-node-exporter is not installed (Debian package prometheus-node-exporter)")
        return 2
    ours_port, theirs_port = free_port(), free_port()
    procs = {
        "fabricscope": subprocess.Popen(
            [sys.executable, "-m", "fabricscope", "monitor", "--interval", "1", "--serve", f"127.0.0.1:{ours_port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=REPO,
        ),
        "node_exporter": subprocess.Popen(
            [node_exporter, f"--web.listen-address=127.0.0.1:{theirs_port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    }
    urls = {
        "fabricscope": f"http://127.0.0.1:{ours_port}/metrics",
        "node_exporter": f"http://127.0.0.1:{theirs_port}/metrics",
    }
    try:
        for url in urls.values():
            wait_up(url)
        time.sleep(2)  # past start-up work (imports, the first samples)
        sizes = {name: len(urllib.request.urlopen(url, timeout=10).read()) for name, url in urls.items()}
        cpu = cpu_phase({name: (urls[name], proc.pid) for name, proc in procs.items()}, args.cpu_seconds)
        load = {name: load_phase(url, args.scrapes, args.clients) for name, url in urls.items()}
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"# {os.cpu_count()} CPUs; CPU phase {args.cpu_seconds:g} s at 1 Hz; load {args.scrapes} scrapes")
    print(f"# from {args.clients} concurrent clients, a new connection per scrape")
    print(f"{'exporter':<14} {'bytes':>8} {'CPU %core':>10} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9} {'errors':>7}")
    rows = {}
    for name in procs:
        latencies, errors = load[name]
        p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
        rows[name] = (cpu[name], p50, p99, errors)
        print(
            f"{name:<14} {sizes[name]:>8} {cpu[name] * 100:>10.2f} {p50:>9.2f} {p99:>9.2f}"
            f" {statistics.fmean(latencies) * 1e3:>9.2f} {errors:>7}"
        )
    ours, theirs = rows["fabricscope"], rows["node_exporter"]
    print(
        f"ratios fabricscope/node_exporter: CPU {ours[0] / theirs[0]:.2f}, p50 {ours[1] / theirs[1]:.2f},"
        f" p99 {ours[2] / theirs[2]:.2f} (lower is better; targets: CPU <= 1, p99 <= 1, 0 errors)"
        if theirs[0] > 0
        else "node_exporter used no measurable CPU: no CPU ratio"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
