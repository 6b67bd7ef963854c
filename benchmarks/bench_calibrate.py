"""Calibrate on 2 gloo ranks, predict 4, measure 4: the error of ``calibrate``'s extrapolation.

Every step is the real command: ``fabricscope bench`` runs 2 ranks and then 4
(gloo on this machine's CPUs), ``fabricscope calibrate`` fits the 2-rank run,
``fabricscope predict --gpus-per-node 4`` extrapolates, and the script prints,
per size, the measured 4-rank time, the prediction and the error, then the
median |error| from 64 KiB up (target: 15% or less), and, as the peer, the
error of the catalog model of the same base cluster (what predict says with no
measurement).

Run:  python benchmarks/bench_calibrate.py [--max 16M] [--iters 20] [--op all_reduce]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

FABRICSCOPE = [sys.executable, "-m", "fabricscope"]


def run(*args: str) -> None:
    done = subprocess.run([*FABRICSCOPE, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"fabricscope {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def times(path: Path) -> dict[int, float]:
    """size -> median time (us) over the out-of-place and in-place rows."""
    found: dict[int, list[float]] = {}
    for record in json.loads(path.read_text())["records"]:
        found.setdefault(record["size_bytes"], []).append(record.get("p50_us") or record["time_us"])
    return {size: statistics.median(values) for size, values in found.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", default="16M", help="largest size (default 16M)")
    parser.add_argument("--iters", default="20", help="timed iterations per size (default 20)")
    parser.add_argument("--op", default="all_reduce", help="collective (default all_reduce)")
    args = parser.parse_args()
    sweep = ["-b", "64K", "-e", args.max, "-n", args.iters, "-w", "3", "-c", "0"]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        run("bench", args.op, "--nproc", "2", *sweep, "--json", str(tmp / "two.json"))
        run("calibrate", str(tmp / "two.json"), "-o", str(tmp / "two.toml"))
        run("bench", args.op, "--nproc", "4", *sweep, "--json", str(tmp / "four.json"))
        base = ["-b", "64K", "-e", args.max, args.op]
        run("predict", "--cluster", str(tmp / "two.toml"), "--gpus-per-node", "4", *base, "--json", str(tmp / "p.json"))
        run("predict", "--cluster", "lab-8gpu-100g-nvme", "--gpus-per-node", "4", "--nodes", "1", *base,
            "--json", str(tmp / "catalog.json"))  # fmt: skip
        measured, predicted, catalog = times(tmp / "four.json"), times(tmp / "p.json"), times(tmp / "catalog.json")
        two = times(tmp / "two.json")
        print((tmp / "two.toml").read_text().split("[calibration.")[1].strip())
    print(f"\n{args.op}: calibrated on 2 gloo ranks, predicted and measured on 4")
    print(f"{'size':>10} {'2 ranks us':>11} {'4 ranks us':>11} {'predicted':>10} {'error':>8} {'catalog err':>12}")
    errors, catalog_errors = [], []
    for size in sorted(measured):
        error = 100 * (predicted[size] / measured[size] - 1)
        other = 100 * (catalog[size] / measured[size] - 1)
        errors.append(abs(error))
        catalog_errors.append(abs(other))
        print(
            f"{size:>10} {two.get(size, float('nan')):>11.1f} {measured[size]:>11.1f} {predicted[size]:>10.1f} "
            f"{error:>+7.1f}% {other:>+11.1f}%"
        )
    median = statistics.median(errors)
    print(f"\nmedian |error| from 64 KiB up: {median:.1f}% (target 15%), worst {max(errors):.1f}%")
    print(f"catalog model without calibration: median |error| {statistics.median(catalog_errors):.1f}%")
    print(f"ratio catalog/calibrated median error: {statistics.median(catalog_errors) / max(median, 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
