"""A process started with stdout or stderr closed (``>&-``, as cron and some launchers start jobs).

Every command still runs to its usual exit status with no traceback: the closed stream reads as
``/dev/null``, and ranks or commands it starts inherit that, not a closed descriptor.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, cli_env

LOG = REPO / "tests/store/data/old_error_column_rtx2080.log"
HEALTHY = REPO / "tests/doctor/fixtures/healthy-ib-8gpu"


def _commands(tmp: Path) -> list[tuple[str, list[str], int]]:
    imported = tmp / "imported.json"
    subprocess.run(
        [sys.executable, "-m", "fabricscope", "import", "nccl-tests", str(LOG), "--json", str(imported)],
        env=cli_env(),
        check=True,
        capture_output=True,
    )
    return [
        ("bench", ["bench", "all_reduce", "-b", "1K", "-e", "4K", "-n", "2", "-w", "1", "--nproc", "2"], 0),
        ("pairs", ["pairs", "--nproc", "2", "--size", "64K", "-n", "3"], 0),
        ("predict", ["predict", "all_reduce", "--cluster", "dgx-h100-ndr", "-b", "1M", "-e", "4M"], 0),
        ("estimate", ["estimate", "--cluster", "dgx-h100-ndr", "--model", "gpt3-175b", "--nodes", "8"], 0),
        ("hw", ["hw"], 0),
        ("validate", ["validate"], 0),
        ("import", ["import", "nccl-tests", str(LOG), "--json", str(tmp / "again.json")], 0),
        ("calibrate", ["calibrate", str(imported), "-o", str(tmp / "cal.toml")], 0),
        ("compare", ["compare", str(imported), "--against", str(imported)], 0),
        ("history", ["history"], 0),
        ("doctor", ["doctor", "--root", str(HEALTHY)], 0),
        ("monitor", ["monitor", "--duration", "1"], 0),
        ("dataload", ["dataload", str(LOG), "--duration", "1"], 0),
    ]


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_every_command_runs_with_a_stream_closed(tmp_path: Path, closed: str) -> None:
    env = cli_env({"FABRICSCOPE_HOME": str(tmp_path / "home")})
    redirect = ">&-" if closed == "stdout" else "2>&-"
    for name, argv, code in _commands(tmp_path):
        line = " ".join(f"'{a}'" for a in [sys.executable, "-m", "fabricscope", *argv])
        done = subprocess.run(
            ["sh", "-c", f"exec {line} {redirect}"], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        seen = done.stderr if closed == "stdout" else done.stdout
        assert "Traceback" not in seen and "NoneType" not in seen, (name, seen[-2000:])
        assert done.returncode == code, (name, done.returncode, done.stderr[-1000:])
