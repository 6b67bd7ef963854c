"""In a real terminal (a pseudo-terminal): the live rich view, and Ctrl-C reaching the command exactly once."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

from helpers import cli_env


def spawn_in_pty(args: list[str]) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.execve(sys.executable, [sys.executable, "-m", "fabricscope", "monitor", *args], cli_env({"TERM": "xterm"}))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    return pid, fd


def read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while needle not in out and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            out += chunk
    return out


def finish(pid: int, fd: int, out: bytes) -> tuple[bytes, int]:
    out += read_until(fd, b"\0never\0", 20)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out, os.waitstatus_to_exitcode(status)


def test_live_view_in_a_terminal() -> None:
    pid, fd = spawn_in_pty(["--interval", "0.1", "--duration", "1", "--all-interfaces"])
    out, code = finish(pid, fd, b"")
    text = out.decode(errors="replace")
    assert code == 0, text
    for fragment in ("fabricscope monitor", "rx Gb/s", "line rate", "lo", "verdict: "):
        assert fragment in text, fragment


def test_ctrl_c_in_a_terminal_reaches_the_command_once() -> None:
    script = (
        "import signal, sys, time\n"
        "count = [0]\n"
        "signal.signal(signal.SIGINT, lambda *_: count.__setitem__(0, count[0] + 1))\n"
        "print('ready', flush=True)\n"
        "deadline = time.time() + 30\n"
        "while count[0] == 0 and time.time() < deadline:\n    time.sleep(0.05)\n"
        "time.sleep(0.5)\n"  # a second, forwarded SIGINT would have arrived by now
        "print(f'SIGINT x{count[0]}', flush=True)\n"
        "sys.exit(4)\n"
    )
    pid, fd = spawn_in_pty(["--interval", "0.1", "--", sys.executable, "-c", script])
    out = read_until(fd, b"ready", 30)
    assert b"ready" in out
    os.write(fd, b"\x03")  # Ctrl-C: the terminal signals its whole foreground process group
    out, code = finish(pid, fd, out)
    text = out.decode(errors="replace")
    assert "SIGINT x1" in text, text
    assert code == 4 and "verdict: " in text
