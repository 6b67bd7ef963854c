"""The NCCL/CUDA path on one GPU, with a device-to-device copy for reference.

For a machine with an NVIDIA GPU (the CPU path never needs this script):

    python benchmarks/gpu_nccl_check.py [--out DIR]

It prints the GPU and library versions, runs ``fabricscope bench`` with the
NCCL backend on one GPU (CUDA-event timing; with one rank busbw is 0 by
definition, so algbw is the figure), times a plain ``copy_`` between two
device buffers of the same sizes with CUDA events, and prints algbw against
the copy's bandwidth per size.  The Result lands in DIR/gpu_bench.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SIZES = [1 << 20, 16 << 20, 256 << 20, 1 << 30]


def copy_bandwidth(torch, size: int, iters: int = 20) -> float:
    """GB/s (1e9) of ``dst.copy_(src)`` on the current GPU, bytes copied per second."""
    src = torch.ones(size // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / iters
    return size / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".", help="folder for gpu_bench.json")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible: this script is for the NCCL path only")
    out = Path(args.out) / "gpu_bench.json"
    print(f"# torch {torch.__version__} cuda {torch.version.cuda} nccl {torch.cuda.nccl.version()}")
    print(f"# gpu 0: {torch.cuda.get_device_name(0)}")
    cmd = [
        sys.executable,
        "-m",
        "fabricscope",
        "bench",
        "all_reduce",
        "all_gather",
        "-b",
        str(SIZES[0]),
        "-e",
        str(SIZES[-1]),
        "-f",
        "16",
        "--nproc",
        "1",
        "--backend",
        "nccl",
        "--json",
        str(out),
    ]
    print("# " + " ".join(cmd[2:]))
    done = subprocess.run(cmd, text=True, capture_output=True)
    print(done.stdout, end="")
    print(done.stderr, end="", file=sys.stderr)
    if done.returncode != 0:
        raise SystemExit(done.returncode)
    records = json.loads(out.read_text())["records"]
    print("# size(B)  all_reduce algbw (out-of-place)  d2d copy GB/s  ratio")
    for size in SIZES:
        rec = next(
            r for r in records if r["op"] == "all_reduce" and r["size_bytes"] == size and r["placement"] == "out"
        )
        copy = copy_bandwidth(torch, size)
        print(f"{size:>11}  {rec['algbw_gbps']:>10.1f}  {copy:>10.1f}  {rec['algbw_gbps'] / copy:>6.3f}")


if __name__ == "__main__":
    main()
