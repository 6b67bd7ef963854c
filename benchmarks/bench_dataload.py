"""``fabricscope dataload`` against fio on the same file, block size, direct flag and workers.

fio (Debian's ``fio``) is the reference storage benchmark; a data-loading figure
that fio would not confirm is worth nothing.  Both read one file written here
(random bytes, on a real disk: ``--dir``, default /var/tmp; not tmpfs, whose
reads are memory copies) with ``pread`` (fio's ``psync`` engine), sequential
large blocks, K workers over disjoint contiguous slices (fio: ``numjobs`` with
``size`` = file/K and ``offset_increment`` = file/K), buffered and direct.
Buffered runs start cold for both: fabricscope drops the file's pages with
``--drop-cache`` (posix_fadvise DONTNEED), fio with its default ``invalidate=1``
(the same call).  Each case runs ``--repeat`` times, the two tools alternating;
printed are the ratio of the medians, the median of the paired ratios (each
fabricscope run over the fio run right after it: both saw about the same load)
and the ratio of the bests.  On a shared machine other loads make single runs
of either tool swing by 2x; the paired median is the statistic least moved by
it.  The load average is printed before and after.  Target: fabricscope / fio
>= 0.9 for large sequential reads.

    python benchmarks/bench_dataload.py [--size 1G] [--dir /var/tmp] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fabricscope.units import parse_size

REPO = Path(__file__).resolve().parents[1]
TARGET = 0.9


@dataclass(frozen=True)
class Case:
    name: str
    block_size: str
    workers: int
    direct: bool
    random: bool = False
    seconds: float | None = None
    """Time-based (both tools stop after this long) instead of one pass."""
    targeted: bool = True


# Direct cases run for 5 s (both tools loop over the file): a one-second pass on a shared disk is
# mostly noise.  Buffered cases make one cold pass: fio drops the cache only before its first loop.
CASES = (
    Case("seq 1M buffered, 1 worker", "1M", 1, False),
    Case("seq 1M direct, 1 worker, 5 s", "1M", 1, True, seconds=5.0),
    Case("seq 4M direct, 4 workers, 5 s", "4M", 4, True, seconds=5.0),
    Case("seq 1M buffered, 4 workers", "1M", 4, False),
    Case("random 64K direct, 2 workers, 3 s", "64K", 2, True, random=True, seconds=3.0, targeted=False),
)


def write_file(path: str, size: int) -> None:
    chunk = 8 << 20
    with open(path, "wb") as handle:
        left = size
        while left:
            n = min(chunk, left)
            handle.write(os.urandom(n))
            left -= n
        handle.flush()
        os.fsync(handle.fileno())


def run_fio(path: str, size: int, case: Case) -> float:
    per_job = size // case.workers
    cmd = [
        "fio",
        "--name=dataload",
        f"--filename={path}",
        "--readonly",
        f"--rw={'randread' if case.random else 'read'}",
        f"--bs={case.block_size}",
        f"--direct={int(case.direct)}",
        "--ioengine=psync",
        f"--numjobs={case.workers}",
        f"--size={per_job}",
        f"--offset_increment={per_job if case.workers > 1 else 0}",
        "--invalidate=1",
        "--thread",
        "--group_reporting",
        "--output-format=json",
    ]
    if case.seconds:
        cmd += [f"--runtime={case.seconds:g}", "--time_based"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return float(report["jobs"][0]["read"]["bw_bytes"])


def run_fabricscope(path: str, case: Case, scratch: str) -> float:
    out = os.path.join(scratch, "dataload.json")
    cmd = [
        sys.executable,
        "-m",
        "fabricscope",
        "dataload",
        path,
        "--workers",
        str(case.workers),
        "--block-size",
        case.block_size,
        "--json",
        out,
    ]
    cmd += ["--direct"] if case.direct else ["--drop-cache"]
    if case.random:
        cmd.append("--random")
    if case.seconds:
        cmd += ["--duration", f"{case.seconds:g}"]
    subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    with open(out, encoding="utf-8") as handle:
        return float(json.load(handle)["summary"]["bytes_per_s"])


def _load() -> str:
    try:
        with open("/proc/loadavg", encoding="ascii") as handle:
            return " ".join(handle.read().split()[:3]) + f" on {os.cpu_count()} CPUs"
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G", help="file size (default 1G)")
    parser.add_argument("--dir", default="/var/tmp", help="folder on a real disk for the file (default /var/tmp)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each tool per case (default 5)")
    args = parser.parse_args()
    if shutil.which("fio") is None:
        print("fio is not installed (apt-get install fio): no peer to compare with", file=sys.stderr)
        return 2
    size = parse_size(args.size)
    scratch = tempfile.mkdtemp(prefix="fabricscope-bench-dataload.", dir=args.dir)
    try:
        path = os.path.join(scratch, "data.bin")
        print(f"# writing {size} B of random data to {path}", flush=True)
        write_file(path, size)
        version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
        print(f"# {version}; {args.repeat} runs of each tool per case, alternating; GB/s = 1e9 B/s")
        print(f"# load average before: {_load()}")
        print(
            f"{'case':<38} {'median: ours':>12} {'fio':>7} {'ratio':>6}   {'paired':>6}   "
            f"{'best: ours':>10} {'fio':>7} {'ratio':>6}"
        )
        worst: dict[str, float] = {}
        for case in CASES:
            ours: list[float] = []
            theirs: list[float] = []
            for _ in range(args.repeat):
                ours.append(run_fabricscope(path, case, scratch))
                theirs.append(run_fio(path, size, case))
            a, b = statistics.median(ours), statistics.median(theirs)
            c, d = max(ours), max(theirs)
            paired = statistics.median(x / y for x, y in zip(ours, theirs, strict=True))
            print(
                f"{case.name:<38} {a / 1e9:>12.3f} {b / 1e9:>7.3f} {a / b:>6.2f}   {paired:>6.2f}   "
                f"{c / 1e9:>10.3f} {d / 1e9:>7.3f} {c / d:>6.2f}{'' if case.targeted else '   (no target)'}",
                flush=True,
            )
            if case.targeted:
                for kind, ratio in (("median", a / b), ("paired median", paired), ("best", c / d)):
                    worst[kind] = min(worst.get(kind, math.inf), ratio)
        print(f"# load average after: {_load()}")
        for kind, ratio in worst.items():
            verdict = "ok" if ratio >= TARGET else "BELOW"
            print(f"# worst {kind} ratio over large sequential reads: {ratio:.2f} (target >= {TARGET}: {verdict})")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
