"""Ranks gone or stopped where the commands' own fault tests do not reach: before the first exchange, and
when Ctrl-C comes.  Beside tests/test_bench_faults.py, so that the two run on separate workers."""

import os
import signal
import subprocess
import sys

import pytest

from fabricscope.launch import free_port
from fabricscope.results import load
from helpers import alive, assert_gone, cli_env, start_cli, start_measuring

pytestmark = pytest.mark.multiprocess

TIMEOUT_S = 6
ENDLESS = ["bench", "-b", "256K", "-e", "256K", "-N", "0", "--timeout", str(TIMEOUT_S)]


def _wait_exit(proc, within):
    return proc.communicate(timeout=within)


JOIN_AND_LEAVE = """
import os
from fabricscope.launch import lifecycle
from fabricscope.launch.config import LaunchConfig
from fabricscope.launch.world import detect
lifecycle.join(detect(), LaunchConfig(backend="gloo", timeout_s=30), "bench")
os._exit(0)
"""
"""A rank that joins the group as bench's ranks do, then is gone before their first exchange."""


def test_a_rank_gone_before_the_first_exchange_is_said_in_one_line(tmp_path):
    """The ranks' first collective (agreeing on the memory each has free) fails when a peer is gone: one line
    saying so, exit 1, no traceback (a rank frozen there printed gloo's RuntimeError with its stack)."""
    port = free_port()
    world = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "LOCAL_WORLD_SIZE": "2"}
    rank0 = start_cli(["bench", "-b", "1K", "-e", "4K", "-T", "30"], env={**world, "RANK": "0", "LOCAL_RANK": "0"})
    leaver = subprocess.Popen(
        [sys.executable, "-c", JOIN_AND_LEAVE], env=cli_env({**world, "RANK": "1", "LOCAL_RANK": "1"}), cwd=tmp_path
    )
    try:
        stdout, stderr = _wait_exit(rank0, 120)
    finally:
        leaver.kill()
        leaver.wait()
    assert rank0.returncode == 1, (stdout, stderr)
    assert "error: the ranks' first exchange (the memory each has free) failed: " in stderr, stderr
    assert "Traceback" not in stderr


def test_ctrl_c_with_a_stopped_rank_0_still_stops_cleanly(tmp_path):
    """A rank stopped (SIGSTOP) when Ctrl-C comes would take the stop only when continued: the launcher
    continues it after forwarding the stop, so rank 0 keeps its rows as on any Ctrl-C (the file stayed
    ``partial``, after 10 s of waiting)."""
    out = tmp_path / "s.json"
    proc, pids = start_measuring(ENDLESS, out, 4)
    os.kill(pids[0], signal.SIGSTOP)
    proc.send_signal(signal.SIGINT)
    try:
        _, stderr = _wait_exit(proc, 60)
    finally:
        for pid in pids.values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    result = load(out)
    assert result.status == "interrupted", (result.status, result.error)
    assert len(result.records) >= 4
    assert "Traceback" not in stderr
    assert_gone(list(pids.values()))
