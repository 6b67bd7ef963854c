"""The monitored command never outlives the monitor; flags that do nothing are refused; a missing interface is said."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabricscope.results import load
from helpers import alive, assert_gone, cli_env, run_cli

CHILD = "import os, pathlib, sys, time\npathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\ntime.sleep(60)\n"


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    marker = tmp_path / "child.pid"
    command = [sys.executable, "-c", CHILD, str(marker)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", *extra, "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    deadline = time.monotonic() + 30
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, int(marker.read_text())


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM])
def test_a_hangup_or_terminate_reaches_the_command_and_keeps_the_summary(tmp_path, signum):
    out = tmp_path / "m.json"
    proc, child = _start(tmp_path, "--json", str(out))
    proc.send_signal(signum)
    proc.communicate(timeout=30)
    assert_gone([child], within=10)
    assert proc.returncode == 128 + signum
    assert load(out).kind == "monitor"


def test_a_killed_monitor_leaves_no_stray_command(tmp_path):
    proc, child = _start(tmp_path)
    assert alive(child)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert_gone([child], within=10)


def test_rule_thresholds_without_alert_rules_are_refused():
    done = run_cli(["monitor", "--utilization", "50%", "--duration", "1"], timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --utilization set the thresholds of the rules --alert-rules prints: add --alert-rules"
    )


def test_an_interface_that_is_not_there_is_said(tmp_path):
    out = tmp_path / "m.json"
    done = run_cli(
        ["monitor", "--interfaces", "nosuch0,lo", "--duration", "0.3", "--interval", "0.1", "--json", str(out)]
    )
    assert done.returncode == 0, done.stderr
    assert "interface nosuch0 was not found (watched: " in done.stdout + done.stderr
    assert any("nosuch0" in note for note in load(out).summary["notes"])
