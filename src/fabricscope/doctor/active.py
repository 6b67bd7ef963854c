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
from collections.abc import Mapping
from pathlib import Path

from fabricscope.doctor.checks.base import finding
from fabricscope.doctor.expect import BenchFloor, Expectations
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.shown import printable

__all__ = ["DEFAULT_FLOOR", "ID", "bench_findings", "own_world_env", "run_bounded"]

ID = "bench.busbw"
DEFAULT_ITERS = 20
DEFAULT_SIZE = 64 << 20
DEFAULT_FLOOR = BenchFloor(op="all_reduce", size=DEFAULT_SIZE, min=0.0)
"""Measured, never judged: all_reduce at 64 MiB, when ``--expect`` sets no floor."""
TITLE = "Collectives reach their bus bandwidth floor on this node (doctor --bench)"
READS = "a short fabricscope bench on this node, against --expect [bench] busbw"


_LAUNCHER_PREFIXES = ("TORCHELASTIC_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MV2_", "HYDRA_", "FABRICSCOPE_LAUNCHER")
_WORLD_VARIABLES = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
}
"""What a launcher tells its ranks: a measuring command doctor starts must not join doctor's own world."""


def own_world_env(world: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the launcher's world (fleet mode runs under one), plus ``world``:
    the one a command doctor starts is to form (none: it spawns its own local ranks)."""
    env = {k: v for k, v in os.environ.items() if k not in _WORLD_VARIABLES and not k.startswith(_LAUNCHER_PREFIXES)}
    env.update(world or {})
    return env


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
        # The bench bounds itself with -T; this bounds one that cannot.
        code, tail = run_bounded(argv, timeout_s + 30, env=own_world_env())
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


def run_bounded(argv: list[str], limit_s: float, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run a measuring command in its own session; past ``limit_s`` kill the whole group (its ranks too).

    Returns its exit status (None when it was killed) and the last line it wrote on stderr.
    """
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    ) as process:
        try:
            _, err = process.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return None, f"no result within {limit_s:g} s"
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
