"""``fabricscope report`` on a 4,000-rank pairs result: wall time and peak memory, against issue 25's bound.

Writes a pairs Result of ``--ranks`` ranks (4,000 by default) holding ``--rounds`` rounds of the
round-robin schedule (each round: every rank tested against one partner, both directions, both
tests), then runs ``fabricscope report RESULT -o OUT.html`` in a child process and reads its wall
time and peak memory (``RUSAGE_CHILDREN``).  Issue 25 found the report on such a result did not
finish in a minute; the peer is that bound.  Prints both and the ratio.

    python benchmarks/bench_report_pairs.py [--ranks 4000] [--rounds 1 50]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fabricscope.pairs.schedule import round_robin

BOUND_S = 60.0
"""Issue 25: the report on a 4,000-rank pairs result did not finish within a minute."""


def write_result(path: Path, ranks: int, rounds: int) -> int:
    random.seed(1)
    records = []
    for number, pairs in enumerate(round_robin(ranks)[:rounds], start=1):
        for a, b in pairs:
            for src, dst in ((a, b), (b, a)):
                common = {"src": src, "dst": dst, "src_host": f"n{src}", "dst_host": f"n{dst}", "round": number}
                seconds = random.uniform(900e-6, 1100e-6)
                latency = random.uniform(5e-6, 9e-6)
                for test, size, taken in (("bandwidth", 1 << 24, seconds), ("latency", 8, latency)):
                    records.append(
                        {"test": test, **common, "size_bytes": size, "time_us": taken * 1e6,
                         "algbw_gbps": size / taken / 1e9}
                    )  # fmt: skip
    document = {
        "format": "fabricscope-result",
        "version": 1,
        "kind": "pairs",
        "created": "2026-12-02T00:00:00+00:00",
        "status": "complete",
        "error": None,
        "config": {"size_bytes": 1 << 24, "iters": 20, "warmup_iters": 2, "by": "rank", "nproc": ranks},
        "env": {},
        "host": {"ranks": [{"rank": r, "host": f"n{r}", "pid": r, "device": "0"} for r in range(ranks)]},
        "summary": {"rounds_planned": len(round_robin(ranks)), "rounds_done": rounds},
        "records": records,
    }
    path.write_text(json.dumps(document))
    return len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4000)
    parser.add_argument("--rounds", type=int, nargs="+", default=[1, 50])
    args = parser.parse_args()
    for rounds in args.rounds:
        with tempfile.TemporaryDirectory() as tmp:
            result, page = Path(tmp) / "pairs.json", Path(tmp) / "pairs.html"
            count = write_result(result, args.ranks, rounds)
            size = result.stat().st_size
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "fabricscope", "report", str(result), "-o", str(page)],
                capture_output=True,
                text=True,
                check=False,
            )
            seconds = time.perf_counter() - start
            peak_mb = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
            if done.returncode != 0:
                sys.exit(f"report failed: {done.stderr.strip()}")
            print(
                f"{args.ranks} ranks, {rounds} round(s): {count} records, {size / 1e6:.1f} MB -> report "
                f"{seconds:.1f} s, peak {peak_mb:.0f} MB; {seconds / BOUND_S:.2f} of the {BOUND_S:.0f} s bound"
            )


if __name__ == "__main__":
    main()
