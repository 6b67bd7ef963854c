"""``doctor --bench``: an active check, as Azure's health checks run a short NCCL all-reduce on each node.

The passive checks read what the node says about itself; a link can say
400G and deliver half.  This runs the real ``fabricscope bench`` on this node
(its own process group, killed whole on timeout, so no rank outlives it) for
each ``[bench] busbw`` floor of ``--expect`` and turns each measurement into a
finding: ok at or above its floor, fail below it.  Without floors it measures
all_reduce at 64 MiB and reports the figure (info).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from fabricscope.doctor.checks.base import finding
from fabricscope.doctor.expect import BenchFloor, Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.shown import printable

__all__ = ["DEFAULT_FLOOR", "ID", "bench_findings"]

ID = "bench.busbw"
DEFAULT_ITERS = 20
DEFAULT_SIZE = 64 << 20
DEFAULT_FLOOR = BenchFloor(op="all_reduce", size=DEFAULT_SIZE, min=0.0)
"""Measured, never judged: all_reduce at 64 MiB, when ``--expect`` sets no floor."""
TITLE = "Collectives reach their bus bandwidth floor on this node (doctor --bench)"
READS = "a short fabricscope bench on this node, against --expect [bench] busbw"


def bench_findings(expect: Expectations, *, gpus: int, timeout_s: float) -> list[Finding]:
    """One finding per floor (or one measurement without floors), each from its own short bench run."""
    floors = expect.bench_busbw or (DEFAULT_FLOOR,)
    nproc = expect.bench_nproc or (gpus if gpus > 0 else 2)
    iters = expect.bench_iters or DEFAULT_ITERS
    return [_measure(floor, nproc, iters, timeout_s) for floor in floors]


def _measure(floor: BenchFloor, nproc: int, iters: int, timeout_s: float) -> Finding:
    from fabricscope.units import format_size

    subject = f"{floor.op} {format_size(floor.size)} x {nproc} ranks"
    wanted = f">= {floor.min:g} GB/s busbw" if floor.min else ""
    with tempfile.TemporaryDirectory(prefix="fabricscope-doctor-bench-") as folder:
        out = Path(folder) / "bench.json"
        argv = [sys.executable, "-m", "fabricscope", "bench", floor.op, "-b", str(floor.size), "-e", str(floor.size)]
        warmup = str(min(2, iters))
        argv += ["-n", str(iters), "-w", warmup, "--nproc", str(nproc), "--json", str(out), "-T", f"{timeout_s:g}"]
        code, tail = _run(argv, timeout_s)
        busbw = _busbw(out)
    if busbw is None:
        why = "timed out" if code is None else f"exit {code}"
        return finding(
            ID,
            Severity.FAIL,
            subject,
            f"the bench did not measure ({why}): {printable(tail, 200)}",
            wanted,
            "run the same bench by hand (fabricscope bench ... --nproc N) to see why: a rank that hangs or fails "
            "here fails training the same way",
        )
    seen = f"{busbw:.3g} GB/s busbw (out of place)"
    if not floor.min:
        return finding(ID, Severity.INFO, subject, seen, "measured: set a floor in --expect [bench] busbw")
    if busbw >= floor.min:
        return finding(ID, Severity.OK, subject, seen, wanted)
    return finding(
        ID,
        Severity.FAIL,
        subject,
        f"{seen}: {busbw / floor.min:.0%} of the floor",
        wanted,
        "the node moves data slower than its floor: the passive checks above name link, PCIe and NCCL-setting "
        "faults; if none is found, compare with a twin node (fabricscope compare) and look at GPU clocks and NVLink",
    )


def _run(argv: list[str], timeout_s: float) -> tuple[int | None, str]:
    """Run the bench in its own session; on timeout kill the whole group (the ranks too). (exit or None, last line)."""
    margin = timeout_s + 30  # the bench bounds itself with -T; this bounds a bench that cannot
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            _, err = process.communicate(timeout=margin)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return None, f"no result within {margin:g} s"
        finally:
            _kill_group(process)  # a rank left behind by a bench that exited is a stray process
    lines = [line for line in (err or "").splitlines() if line.strip()]
    return process.returncode, lines[-1] if lines else ""


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    process.wait()


def _busbw(path: Path) -> float | None:
    """The out-of-place busbw of the run's one size, from its Result; None when it measured nothing."""
    try:
        records = json.loads(path.read_text(encoding="utf-8")).get("records") or []
    except (OSError, ValueError, AttributeError):
        return None
    values = [r.get("busbw_gbps") for r in records if isinstance(r, dict) and r.get("placement") == "out"]
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return max(numbers) if numbers else None
