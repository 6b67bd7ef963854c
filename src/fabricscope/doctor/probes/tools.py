"""Running the tools a node may have beside sysfs (``nvidia-smi``, MLNX_OFED's ``mlnx_qos``), bounded in time.

Only on the live root; their text is what a capture keeps, so a tree replays
it.  A tool that is not installed is ``absent``; one that hangs (``nvidia-smi``
on a GPU that fell off the bus), cannot start or exits with an error is
``failed: ...`` with its first line, never an exception.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["run_tool"]


def run_tool(name: str, args: Sequence[str], timeout_s: float) -> tuple[str, str | None]:
    """(how it went, its standard output) of ``name args``: ``ran``, ``absent`` or ``failed: <why>``."""
    binary = shutil.which(name)
    if binary is None:
        return "absent", None
    said = " ".join([name, *args])
    try:
        done = subprocess.run(
            [binary, *args], capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return f"failed: {said} gave no answer within {timeout_s:g} s", None
    except OSError as exc:
        return f"failed: {said}: {exc.strerror or exc}", None
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0:
        first = (text.strip() or done.stderr.decode("utf-8", "replace").strip()).splitlines()[:1]
        return f"failed: {said} exited {done.returncode}" + (f": {first[0][:200]}" if first else ""), None
    return "ran", text
