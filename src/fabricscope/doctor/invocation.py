"""One doctor invocation: its flags checked once for every mode, the flags a spawned rank gets, the printed report.

Both the command line (:mod:`fabricscope.doctor.cli`) and fleet mode
(:mod:`fabricscope.doctor.fleet_run`) use these, so neither imports the
other.  Only the standard library is imported at import time: the command
line imports this module while it registers its flags.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from fabricscope.errors import UsageError
from fabricscope.launch.world import MAX_LOCAL_RANKS, MAX_TIMEOUT_S, MIN_TIMEOUT_S

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_LOCAL_RANKS",
    "MAX_TIMEOUT_S",
    "MIN_TIMEOUT_S",
    "check_outputs",
    "child_argv",
    "print_report",
]

DEFAULT_TIMEOUT_S = 60.0


def check_outputs(args: argparse.Namespace, ranks: Sequence[int], env: Mapping[str, str] | None = None) -> None:
    """Refuse, before any work, an output that cannot be written or would overwrite what the doctor reads.

    ``ranks`` are the ranks whose ``--root`` and ``--capture`` (``{rank}``
    expanded) are checked.  The inputs are the ``--expect`` file, each
    captured tree read (``--root DIR``), and on the live root ``/sys``,
    ``/proc`` and the files NCCL reads its settings from; ``--json`` goes
    through the one output check (:func:`fabricscope.outputs.check_output_path`),
    and ``--capture`` may not be empty or lie inside an input folder.
    """
    from fabricscope.doctor.diagnosis import expand_placeholders
    from fabricscope.outputs import check_output_path

    roots = {expand_placeholders(args.root, rank=r, local_rank=r) for r in ranks}
    inputs = _inputs(args.expect, sorted(roots), os.environ if env is None else env)
    if args.json is not None:
        check_output_path("--json", args.json, inputs=inputs)
    if args.capture is None:
        return
    if not args.capture.strip():
        raise UsageError("--capture needs a folder name, got an empty one")
    for rank in ranks:
        capture = expand_placeholders(args.capture, rank=rank, local_rank=rank)
        folder = next((f for f in inputs if os.path.isdir(f) and _inside(capture, f)), None)
        if folder is not None:
            raise UsageError(f"--capture {capture} is inside {folder}, which the doctor reads: capture elsewhere")


def _inputs(expect: str | None, roots: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """What the doctor reads: the --expect file, captured trees, and on the live root what NCCL reads there."""
    from fabricscope.doctor.probes.nccl import conf_files
    from fabricscope.doctor.probes.node import passwd_home

    inputs = [expect] if expect else []
    for root in roots:
        if os.path.realpath(root) != "/":
            inputs.append(root)
            continue
        inputs += ["/sys", "/proc", *conf_files(env, passwd_home())]
        if env.get("NCCL_TOPO_FILE"):
            inputs.append(env["NCCL_TOPO_FILE"])
    return inputs


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip("/") + "/")


def child_argv(args: argparse.Namespace, timeout_s: float) -> list[str]:
    """The doctor flags a spawned rank gets: everything but --nproc."""
    argv = ["--root", args.root, "--timeout", f"{timeout_s:g}"]
    for flag, value in (("--expect", args.expect), ("--json", args.json), ("--capture", args.capture)):
        if value is not None:
            argv += [flag, value]
    if args.verbose:
        argv.append("--verbose")
    if args.bench:
        argv.append("--bench")
    if args.live_env:
        argv.append("--live-env")
    return argv


def print_report(render: Callable[[], None]) -> bool:
    """Print the report; False when stdout closed on the way (``doctor | head -1``).

    A health check's exit code is its verdict, also when nobody reads the
    rest of the report: the caller returns the verdict either way.  What is
    left to print goes to ``/dev/null``, so that the flush at exit does not
    fail again.
    """
    try:
        render()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
    return True
