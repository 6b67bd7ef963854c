"""Standard output that cannot take what a command prints (``> /dev/full``, a full disk): one ``error:`` line
on stderr and exit 1 (doctor: 3, no verdict), never a traceback; what the command measured is still in its
``--json`` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, cli_env

FULL = "/dev/full"
HOST_FAULTS = REPO / "tests/doctor/fixtures/host-faults-8gpu"


def run_into_full(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    with open(FULL, "w") as stdout:
        return subprocess.run(
            [sys.executable, "-m", "fabricscope", *args],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=180,
            env=cli_env(),
            cwd=cwd,
        )


pytestmark = pytest.mark.skipif(not os.path.exists(FULL), reason="no /dev/full on this system")


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["monitor", "--recording-rules"], 1, "error: cannot write the output: No space left on device"),
        (["monitor", "--grafana-dashboard"], 1, "error: cannot write the output: No space left on device"),
        (["predict", "all_reduce", "--cluster", "lab-8gpu-100g-nvme"], 1, "error: cannot write the output"),
        (["doctor", "--root", str(HOST_FAULTS)], 3, "error: cannot write the report: No space left on device"),
    ],
)
def test_a_full_stdout_is_one_line_and_a_failing_exit(tmp_path: Path, args: list[str], code: int, said: str) -> None:
    done = run_into_full(args, tmp_path)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and said in done.stderr, done.stderr


@pytest.mark.parametrize(("command", "kept"), [("bench", "every row"), ("pairs", "every pair")])
def test_a_full_stdout_ends_a_measuring_run_with_exit_1_and_its_file_whole(
    tmp_path: Path, command: str, kept: str
) -> None:
    sweep = ["-b", "1K", "-e", "4K"] if command == "bench" else []
    done = run_into_full([command, "-n", "2", *sweep, "--json", "r.json"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: cannot write the {'table' if command == 'bench' else 'report'} to standard output "
        f"(No space left on device); --json r.json keeps {kept}"
    ], done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["status"] == "complete" and result["records"]
