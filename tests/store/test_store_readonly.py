"""A history on a read-only or full file system: reading works; a save says why it cannot, and the
measurement stays in its --json file."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from helpers import run_cli, skip_or_fail

LOG = str(Path(__file__).parent / "data" / "current_all_reduce_h100x8.log")


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "8m") -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), env={"FABRICSCOPE_HOME": str(home)}, timeout=120)


def test_a_read_only_history_is_read_and_a_save_says_why_not(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home") as home:
        assert cli(home, "import", "nccl-tests", LOG, "--save", "--label", "before").returncode == 0
        assert cli(home, "baseline", "set", "ref", "1").returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(home)], check=True)
        for argv in (
            ["history"],
            ["history", "show", "1"],
            ["baseline", "list"],
            ["compare", "1", "--baseline", "ref"],
        ):
            done = cli(home, *argv)
            assert done.returncode == 0, (argv, done.stderr)
        assert "before" in cli(home, "history").stdout
        out = tmp_path / "kept.json"
        done = cli(home, "import", "nccl-tests", LOG, "--save", "--json", str(out))
        assert done.returncode != 0
        [line] = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert "cannot be written: its file system is read-only" in line and f"is kept in {out}" in line
        assert json.loads(out.read_text())["kind"] == "nccl-tests"


def test_a_full_disk_under_the_history_says_so_and_keeps_the_json(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "home", size="1m") as home:
        assert cli(home, "import", "nccl-tests", LOG, "--save").returncode == 0
        filler = home / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
        out = tmp_path / "kept.json"
        done = cli(home, "import", "nccl-tests", LOG, "--save", "--json", str(out))
        assert done.returncode != 0
        [line] = [x for x in done.stderr.splitlines() if x.startswith("error:")]
        assert "cannot be written: its disk is full" in line and f"is kept in {out}" in line, line
        assert json.loads(out.read_text())["records"]
        assert cli(home, "history").returncode == 0  # still readable
