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
MAX_LOCAL_RANKS = 1024
"""``--nproc`` bound, as bench's: more ranks than this on one machine is a typo, not a fleet."""
MIN_TIMEOUT_S = 1.0
MAX_TIMEOUT_S = 7 * 86400.0
"""``--timeout`` bounds, as bench's: under a second no rendezvous completes; a week is no health check.

The converters of :mod:`fabricscope.options` apply both bounds while the flags are parsed."""


def check_outputs(args: argparse.Namespace, ranks: Sequence[int], env: Mapping[str, str] | None = None) -> None:
    """Refuse, before any work, an output that cannot be written or would overwrite what the doctor reads.

    ``ranks`` are the ranks whose ``--root`` and ``--capture`` (``{rank}``
    expanded) are checked.  An output may not be the ``--expect`` file, lie
    inside a captured tree that is read (``--root DIR``), or, on the live
    root, be a file NCCL reads its settings from (or lie under ``/sys`` or
    ``/proc``).  An empty name is refused, not ignored.
    """
    from fabricscope.doctor.diagnosis import expand_placeholders
    from fabricscope.results import check_output_path

    outputs: list[tuple[str, str]] = []
    if args.json is not None:
        if not args.json.strip():
            raise UsageError("--json needs a file name, got an empty one")
        check_output_path("--json", args.json)
        outputs.append(("--json", args.json))
    if args.capture is not None:
        if not args.capture.strip():
            raise UsageError("--capture needs a folder name, got an empty one")
        outputs += [("--capture", expand_placeholders(args.capture, rank=r, local_rank=r)) for r in ranks]
    for flag, path in outputs:
        if args.expect is not None and _same_file(path, args.expect):
            raise UsageError(f"{flag} {path} is the --expect file: the output would replace its input; give another")
        for rank in ranks:
            root = expand_placeholders(args.root, rank=rank, local_rank=rank)
            reason = _reads(root, path, os.environ if env is None else env)
            if reason is not None:
                raise UsageError(f"{flag} {path} {reason}: the output would change what the doctor reads; give another")


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(path))


def _same_file(a: str, b: str) -> bool:
    if _real(a) == _real(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except (OSError, ValueError):
        return False


def _inside(path: str, folder: str) -> bool:
    real, top = _real(path), _real(folder)
    return real == top or real.startswith(top.rstrip("/") + "/")


def _reads(root: str, path: str, env: Mapping[str, str]) -> str | None:
    """Why writing ``path`` would change what the doctor reads under ``root``, or None."""
    from fabricscope.doctor.nccl_settings import conf_files
    from fabricscope.doctor.probe import passwd_home

    if _real(root) != "/":
        return f"is inside --root {root}" if _inside(path, root) else None
    for pseudo in ("/sys", "/proc"):
        if _inside(path, pseudo):
            return f"is inside {pseudo}, which the doctor reads"
    read = [*conf_files(env, passwd_home()), env.get("NCCL_TOPO_FILE") or ""]
    same = next((f for f in read if f and _same_file(path, f)), None)
    return None if same is None else f"is {same}, which NCCL (and the doctor) reads settings from"


def child_argv(args: argparse.Namespace, timeout_s: float) -> list[str]:
    """The doctor flags a spawned rank gets: everything but --nproc."""
    argv = ["--root", args.root, "--timeout", f"{timeout_s:g}"]
    for flag, value in (("--expect", args.expect), ("--json", args.json), ("--capture", args.capture)):
        if value is not None:
            argv += [flag, value]
    if args.verbose:
        argv.append("--verbose")
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
