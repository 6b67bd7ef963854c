"""``monitor -- CMD ARGS...``: run the command being watched, as a shell would.

The command inherits stdin, stdout and stderr, so its output passes through
untouched; when ``--json -`` or ``--record -`` hold stdout for their data, the
command's stdout goes to stderr, as the monitor's own report does.  Its exit
status becomes the monitor's: the code it exited with, ``128 + N`` when
signal N killed it, 127 when it is not found and 126 when it cannot be
executed (as POSIX shells report).

Ctrl-C reaches the command first.  In a terminal the kernel sends SIGINT to
the whole foreground process group, the command included, so the monitor
only notes it and keeps sampling until the command has exited.  When SIGINT
or SIGTERM is sent to the monitor alone (``kill``, a batch system), the
monitor forwards it to the command and waits likewise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

from fabricscope.errors import FabricscopeError
from fabricscope.launch.spawn import set_parent_death_signal
from fabricscope.outputs import stdout_holds_data
from fabricscope.shown import cut

__all__ = ["CommandNotRunnable", "WatchedCommand", "exit_status", "resolve_command"]


class CommandNotRunnable(FabricscopeError):
    """The command after ``--`` cannot be started: 127 not found, 126 not executable."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def resolve_command(argv: Sequence[str]) -> str:
    """The path of ``argv[0]`` (looked up in ``PATH`` unless it holds a ``/``), or :class:`CommandNotRunnable`."""
    if not argv or not argv[0]:
        raise CommandNotRunnable("no command after '--'", 2)
    name = argv[0]
    shown = cut(name, 80)
    if "/" not in name:
        found = shutil.which(name)
        if found is None:
            raise CommandNotRunnable(f"{shown}: command not found", 127)
        return found
    if not os.path.exists(name):
        raise CommandNotRunnable(f"{shown}: no such file", 127)
    if os.path.isdir(name) or not os.access(name, os.X_OK):
        raise CommandNotRunnable(f"{shown}: not an executable file", 126)
    return name


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: negative (killed by signal N) becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class WatchedCommand:
    """The running command; :meth:`forward` passes on a signal the monitor received."""

    __slots__ = ("argv", "process")

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        executable = resolve_command(self.argv)
        try:
            # The command ends (SIGTERM) with the monitor, even one killed by SIGKILL: no stray job.
            # With --json - (or --record -) stdout carries the data: the command's output goes to stderr.
            self.process = subprocess.Popen(
                [executable, *self.argv[1:]],
                stdout=sys.stderr.fileno() if stdout_holds_data() else None,
                preexec_fn=set_parent_death_signal,
            )
        except PermissionError:
            raise CommandNotRunnable(f"{self.argv[0]}: permission denied", 126) from None
        except OSError as exc:  # ENOEXEC (no #! line, not a binary) and the like
            raise CommandNotRunnable(f"{self.argv[0]}: cannot execute ({exc.strerror or exc})", 126) from None

    def poll(self) -> int | None:
        return self.process.poll()

    def forward(self, signum: int) -> None:
        """Pass ``signum`` on, unless the terminal already sent it to the command (Ctrl-C in a shell)."""
        if signum == signal.SIGINT and _terminal_sent_it():
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def stop(self, grace_s: float = 5.0) -> None:
        """End the command (SIGTERM, then SIGKILL after ``grace_s``): the monitor is failing and leaves no strays."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait()

    def wait(self) -> int:
        """Wait for the command; its status as a shell reports it."""
        while True:
            try:
                return exit_status(self.process.wait())
            except KeyboardInterrupt:  # pragma: no cover - handlers are installed while the command runs
                continue


def _terminal_sent_it() -> bool:
    """Whether SIGINT most likely came from the terminal to our (foreground) process group, the command's too."""
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        try:
            fd = stream.fileno()
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except (OSError, ValueError, AttributeError):
            continue
    return False
