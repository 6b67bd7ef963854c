"""``fabricscope import nccl-tests`` on a large log, against the plainest parser of the same rows.

Writes an nccl-tests all_reduce log of ``--rows`` size rows (300,000 by default: 35 MB, the size
issue 25 measured at 59 s and 1.76 GB), then runs ``fabricscope import nccl-tests LOG --json OUT``
in a child process and reads its wall time and peak memory (``RUSAGE_CHILDREN``).  The peer is the
plainest thing a user could write instead, run in a child too: split each row into its 13 fields and
dump them as JSON, with no checks (what AWS's nccl_to_csv-style scripts do).  Prints both and the
ratio; fabricscope also checks every value it writes by reading the file back through its loader.

    python benchmarks/bench_import.py [--rows 300000]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = """
import json, sys
rows = []
for line in open(sys.argv[1]):
    fields = line.split()
    if len(fields) == 13 and fields[0].isdigit():
        rows.append(fields)
json.dump(rows, open(sys.argv[2], "w"))
"""


def write_log(path: Path, rows: int) -> None:
    lines = [
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#  Rank  0 Group  0 Pid  12345 on node1 device  0 [0x1b] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong",
    ]
    for i in range(rows):
        size = 8 * (i + 1)
        t = 30 + i * 0.001
        part = f"{t:8.2f}    1.00    1.75      0"
        lines.append(f"{size:>12} {size // 4:>12}     float     sum      -1  {part}  {part}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.75", ""]
    path.write_text("\n".join(lines))


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident MB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "big.log"
        write_log(log, args.rows)
        size_mb = log.stat().st_size / 1e6
        plain_s, plain_mb = timed([sys.executable, "-c", PLAIN, str(log), str(Path(folder) / "plain.json")])
        ours_s, ours_mb = timed(
            [
                sys.executable,
                "-m",
                "fabricscope",
                "import",
                "nccl-tests",
                str(log),
                "--json",
                str(Path(folder) / "fs.json"),
            ]
        )
    print(f"log: {args.rows} rows, {size_mb:.1f} MB")
    print(f"plain split + json.dump: {plain_s:6.2f} s, peak {plain_mb:7.0f} MB (the peer; peak is the larger so far)")
    print(f"fabricscope import:      {ours_s:6.2f} s, peak {ours_mb:7.0f} MB")
    print(f"ratio fabricscope / plain: {ours_s / plain_s:.1f}x time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
