"""``monitor -- CMD``: however the monitor ends (SIGTERM, SIGHUP, SIGKILL, killed by its own command),
nothing the command started keeps running: not the command, not its children, not their children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import cli_env

WAIT_S = 30.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purpose (its parent has not reaped it yet)
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _job(tmp_path: Path, extra: str = "") -> tuple[subprocess.Popen[str], list[int]]:
    """A monitor watching a shell that starts two background sleeps (its children) and a nested shell
    with a sleep of its own (a grandchild); their pids are written to a file once all are running.
    ``extra`` runs once the test has seen them all alive (it creates ``go``)."""
    pids = tmp_path / "pids"
    go = tmp_path / "go"
    script = (
        f"sleep 300 & a=$!; sleep 300 & b=$!; sh -c 'sleep 300 & echo $! > {pids}.inner; wait' & "
        f"while [ ! -s {pids}.inner ]; do sleep 0.05; done; echo $a $b $(cat {pids}.inner) > {pids}; "
        f"while [ ! -e {go} ]; do sleep 0.05; done; {extra} wait"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    deadline = time.monotonic() + WAIT_S
    while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(p) for p in pids.read_text().split()]
    alive = len(started) == 3 and all(_alive(p) for p in started)
    go.write_text("")
    if not alive:
        proc.kill()
        proc.communicate()
    assert alive
    return proc, started


def _all_gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_the_monitor_ending_ends_the_whole_job(tmp_path: Path, signum: int) -> None:
    proc, started = _job(tmp_path)
    proc.send_signal(signum)
    proc.communicate(timeout=WAIT_S)
    assert _all_gone(started), [p for p in started if _alive(p)]
    if signum != signal.SIGKILL:
        assert proc.returncode == 128 + signum  # the command's status: killed by the forwarded signal


def test_a_command_that_kills_its_monitor_leaves_nothing_behind(tmp_path: Path) -> None:
    # The shell finds the monitor (its parent's parent: the monitor runs a group leader that runs the shell).
    proc, started = _job(tmp_path, extra="kill -9 $(ps -o ppid= -p $PPID);")
    proc.communicate(timeout=WAIT_S)
    assert proc.returncode == -signal.SIGKILL
    assert _all_gone(started), [p for p in started if _alive(p)]


def test_grandchildren_left_by_a_finished_command_are_ended(tmp_path: Path) -> None:
    marker = tmp_path / "orphan"
    script = f"sh -c 'sleep 300 & echo $! > {marker}' ; while [ ! -s {marker} ]; do sleep 0.05; done; exit 3"
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert _all_gone([int(marker.read_text())])


def test_the_command_starts_with_default_signal_handling() -> None:
    """An ignored signal stays ignored across exec: the shim ignores SIGINT and Python ignores SIGPIPE and
    SIGXFSZ, and the command got them ignored (Ctrl-C never reached it, a closed pipe never ended `yes`)."""
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "monitor", "--no-gpu", "--interval", "0.1", "--",
         "grep", "SigIgn", "/proc/self/status"],
        capture_output=True, text=True, env=cli_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ignored = int(next(line for line in done.stdout.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    for signum in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (signum - 1)), (signal.Signals(signum).name, done.stdout)


def test_sigint_to_the_monitor_ends_a_command_that_keeps_the_default(tmp_path: Path) -> None:
    started = tmp_path / "started"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--no-gpu", "--interval", "0.1", "--",
         "sh", "-c", f"touch {started}; exec sleep 300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )  # fmt: skip
    deadline = time.monotonic() + WAIT_S
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # `exec sleep` has replaced the shell
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=WAIT_S)  # before the fix: until the sleep ends (300 s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err


def test_a_monitor_started_ignoring_sigint_passes_that_on_to_its_command() -> None:
    """A background job of a script runs with SIGINT ignored: the command keeps it so (Ctrl-C is not for it)."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "os.execv(sys.executable, [sys.executable, '-m', 'fabricscope', 'monitor', '--no-gpu', '--interval', "
         "'0.1', '--', 'grep', 'SigIgn', '/proc/self/status'])"],
        capture_output=True, text=True, env=cli_env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ignored = int(next(line for line in done.stdout.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGINT - 1))
    assert not ignored & (1 << (signal.SIGPIPE - 1))
