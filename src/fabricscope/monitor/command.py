"""``monitor -- CMD ARGS...``: run the command being watched, as a shell would.

The command inherits stdin, stdout and stderr, so its output passes through
untouched; when ``--json -`` or ``--record -`` hold stdout for their data, the
command's stdout goes to stderr, as the monitor's own report does.  Its exit
status becomes the monitor's: the code it exited with, ``128 + N`` when
signal N killed it, 127 when it is not found and 126 when it cannot be
executed (as POSIX shells report).

The command runs in a process group of its own, led by a small shim (:data:`_GROUP_LEADER`)
that starts it and passes its exit status on; whatever the command starts stays in
that group.  So the monitor ends the whole job, grandchildren included: a signal it
forwards goes to the group, and when the monitor dies, even by SIGKILL, the shim is
told (``PR_SET_PDEATHSIG``) and ends the group.  A killed monitor leaves nothing of
its job running unattended.

Ctrl-C reaches the command first.  In a terminal the command's group is made the
terminal's foreground group, as a shell does for a job, so the kernel sends SIGINT
(and the terminal's input) to the command; the monitor keeps sampling until the
command has exited, then takes the terminal back.  When SIGINT, SIGTERM or SIGHUP
is sent to the monitor itself (``kill``, a batch system, a closed session), the
monitor forwards it to the command's group and waits likewise.
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


_GROUP_LEADER = """
import os, signal, sys
parent = os.getppid()
# An ignored signal stays ignored across exec: the command gets back what Python and this shim ignore
# (SIGPIPE and SIGXFSZ, as subprocess restores them; SIGINT unless the monitor was started ignoring it).
restore = [signal.SIGPIPE, signal.SIGXFSZ]
if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    restore.append(signal.SIGINT)
def ended(signum, frame):
    if os.getppid() != parent:  # the monitor died (PR_SET_PDEATHSIG): end the whole job
        os.killpg(0, signal.SIGTERM)
for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(signum, ended if signum != signal.SIGINT else signal.SIG_IGN)
try:
    child = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, setsigdef=restore)
except OSError as exc:
    sys.stderr.write(f"error: {sys.argv[1]}: cannot execute ({exc.strerror or exc})\\n")
    os._exit(126)
while True:
    try:
        _, status = os.waitpid(child, 0)
        break
    except InterruptedError:
        continue
if os.WIFSIGNALED(status):
    if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""
"""Leads the command's process group: starts the command in it, ends the group when the monitor dies,
and exits as the command did (killed by the same signal, or with its code).  SIGINT it leaves to the
command (the terminal or the monitor sends it to the whole group)."""


def _leader_setup() -> None:
    """In the shim (``preexec_fn``): a process group of its own, and SIGTERM when the monitor dies."""
    os.setpgid(0, 0)
    set_parent_death_signal()


class WatchedCommand:
    """The running command, in a process group of its own; :meth:`forward` passes on a signal the monitor got."""

    __slots__ = ("_terminal", "argv", "process")

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        executable = resolve_command(self.argv)
        if not os.access(executable, os.X_OK) or os.path.isdir(executable):
            raise CommandNotRunnable(f"{self.argv[0]}: permission denied", 126)
        try:
            # With --json - (or --record -) stdout carries the data: the command's output goes to stderr.
            self.process = subprocess.Popen(
                [sys.executable, "-c", _GROUP_LEADER, executable, *self.argv[1:]],
                stdout=sys.stderr.fileno() if stdout_holds_data() else None,
                preexec_fn=_leader_setup,
            )
        except OSError as exc:
            raise CommandNotRunnable(f"{self.argv[0]}: cannot execute ({exc.strerror or exc})", 126) from None
        self._terminal = _hand_terminal_to(self.process.pid)

    def poll(self) -> int | None:
        code = self.process.poll()
        if code is not None:
            self._take_terminal_back()
        return code

    def forward(self, signum: int) -> None:
        """Pass ``signum`` on to the command's group (the terminal already did, when it owns the terminal)."""
        if signum == signal.SIGINT and self._terminal is not None:
            return
        self._signal_group(signum)

    def _signal_group(self, signum: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)

    def stop(self, grace_s: float = 5.0) -> None:
        """End the command's group (SIGTERM, then SIGKILL after ``grace_s``): the monitor is failing."""
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.process.wait()
        self._end_group()

    def wait(self) -> int:
        """Wait for the command; its status as a shell reports it.  What it left in its group is ended."""
        while True:
            try:
                code = self.process.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - handlers are installed while the command runs
                continue
        self._end_group()
        return exit_status(code)

    def _end_group(self) -> None:
        """Grandchildren the command left running in its group go with it; the terminal comes back."""
        self._take_terminal_back()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def _take_terminal_back(self) -> None:
        if self._terminal is not None:
            _set_foreground(self._terminal, os.getpgrp())
            self._terminal = None


def _hand_terminal_to(group: int) -> int | None:
    """Make ``group`` the terminal's foreground group when we hold the terminal (as a shell does for a job)."""
    for stream in (sys.stdin, sys.stderr, sys.stdout):
        try:
            fd = stream.fileno()
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return fd if _set_foreground(fd, group) else None
        except (OSError, ValueError, AttributeError):
            continue
    return None


def _set_foreground(fd: int, group: int) -> bool:
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not set it otherwise
    try:
        os.tcsetpgrp(fd, group)
        return True
    except OSError:
        return False
    finally:
        signal.signal(signal.SIGTTOU, previous)
    return False
