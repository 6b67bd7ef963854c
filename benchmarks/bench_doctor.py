"""How long a full ``fabricscope doctor`` takes on a captured 8-GPU node (the issue wants well under 1 s).

Timings, each the median (and min) over ``--repeat`` runs:

- in process: open the root, probe, run every check, render the report to a
  throw-away console (everything but interpreter start-up);
- the command line: ``python -m fabricscope doctor --root <tree>`` as a user
  runs it, interpreter start-up and imports included;
- a floor: reading the very files the probes read, with nothing else done;
- a second floor, the whole walk raw: those files, the absent ones tried,
  the directories listed and the paths whose links were followed (one
  ``stat`` each), which the doctor also has to do to find the devices.

Peer: no health checker that reads the same facts (LBNL NHC, Azure's aznhc,
``ibstat``, ``nvidia-smi topo``) is installed on this machine and none of them
runs on a captured tree, so there is no fair peer ratio to print; the ratio
printed is against the raw-read floor.

    python benchmarks/bench_doctor.py [--tree tests/doctor/fixtures/healthy-ib-8gpu] [--repeat 20]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fabricscope.doctor.diagnosis import diagnose, open_root
from fabricscope.doctor.report import make_console, render_findings, verdict_line
from fabricscope.sysroot import SysRoot

REPO = Path(__file__).resolve().parents[1]
PEERS = ("nhc", "aznhc", "ibstat", "nvidia-smi", "lstopo")


def full_run(tree: str) -> int:
    report = diagnose(open_root(tree), env={})
    console = make_console(width=120)
    console.file = io.StringIO()
    render_findings(console, report.findings, title="bench")
    console.print(verdict_line(report.findings, report.node.hostname))
    return report.exit_code


def cli_run(tree: str) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "doctor", "--root", tree],
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    return done.returncode


def files_read(tree: str) -> list[str]:
    root = open_root(tree)
    diagnose(root, env={})
    return [root.file(rel) for rel, text in root.read_paths().items() if text is not None]


def sysroot_reads(tree: str, rels: list[str]) -> int:
    """The doctor's own reads of the same files (confined to the root, recorded for --capture), nothing else."""
    root = SysRoot(tree)
    return sum(len(root.text(rel) or "") for rel in rels)


def raw_reads(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb") as handle:
            total += len(handle.read())
    return total


def tree_reads(tree: str) -> tuple[list[str], list[str], list[str], list[str]]:
    """Everything the probes read of the tree, as host paths: the files read (found, then failed), the
    directories listed, and the paths whose links or existence were checked."""
    root = open_root(tree)
    diagnose(root, env={})
    texts = root.read_paths()
    found = [root.file(rel) for rel, text in texts.items() if text is not None]
    failed = [str(Path(tree, rel)) for rel, text in texts.items() if text is None]
    return (
        found,
        failed,
        [str(Path(tree, rel)) for rel in root.listings()],
        [str(Path(tree, rel)) for rel in root.touched()],
    )


def raw_tree_reads(found: list[str], failed: list[str], listed: list[str], touched: list[str]) -> int:
    """The raw floor of the whole walk: each file opened and read, each directory listed, each checked path
    stat-ed (the kernel resolves it in one call: the cheapest way to follow its links)."""
    total = raw_reads(found)
    for path in failed:
        with contextlib.suppress(OSError), open(path, "rb") as handle:
            total += len(handle.read())
    for path in listed:
        with contextlib.suppress(OSError):
            total += len(os.listdir(path))
    for path in touched:
        with contextlib.suppress(OSError):
            os.stat(path)
    return total


def measure(run: Callable[[], object], repeat: int) -> tuple[float, float]:
    run()  # warm the page cache and imports
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), min(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(REPO / "tests/doctor/fixtures/healthy-ib-8gpu"))
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    paths = files_read(args.tree)
    root = open_root(args.tree)
    diagnose(root, env={})
    rels = [rel for rel, text in root.read_paths().items() if text is not None]
    full = measure(lambda: full_run(args.tree), args.repeat)
    own = measure(lambda: sysroot_reads(args.tree, rels), args.repeat)
    floor = measure(lambda: raw_reads(paths), args.repeat)
    walk = tree_reads(args.tree)
    tree_floor = measure(lambda: raw_tree_reads(*walk), args.repeat)
    cli = measure(lambda: cli_run(args.tree), max(3, args.repeat // 4))

    print(f"# tree: {args.tree} ({len(paths)} files read by the probes)")
    print(f"{'what':<40} {'median ms':>10} {'min ms':>10}")
    for name, (median, best) in (
        ("doctor in process (probe+check+render)", full),
        ("fabricscope doctor (command line)", cli),
        ("the doctor's reads alone (SysRoot)", own),
        ("raw reads of the same files (floor)", floor),
        ("raw walk: files, listings, link checks", tree_floor),
    ):
        print(f"{name:<40} {median * 1e3:>10.1f} {best * 1e3:>10.1f}")
    print(f"# in process / raw-read floor: {full[0] / floor[0]:.1f}x (target 2x)")
    print(f"# the doctor's reads / raw-read floor: {own[0] / floor[0]:.1f}x")
    found, failed, listed, touched = walk
    print(
        f"# in process / raw walk ({len(found)} files, {len(failed)} absent, {len(listed)} directories listed, "
        f"{len(touched)} paths checked): {full[0] / tree_floor[0]:.1f}x"
    )
    found = [p for p in PEERS if shutil.which(p)]
    print(f"# peer tools on this machine: {', '.join(found) if found else 'none'}; no fair peer ratio")
    verdict = "well under" if cli[0] < 0.5 else "under" if cli[0] < 1.0 else "OVER"
    print(f"# target: a full doctor run well under 1 s: {verdict} ({cli[0]:.2f} s end to end)")


if __name__ == "__main__":
    main()
