"""The one output check, through the real CLI: nothing is lost, overwritten or waited on forever."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

import pytest

from fabricscope.errors import UsageError
from fabricscope.outputs import atomic_write_text, check_output_path
from fabricscope.results import Result, load
from helpers import cli_env, run_cli


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in done.stderr
    return line


def test_an_output_that_is_the_commands_own_input_is_refused(tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text(_preset_text())
    before = cluster.read_text()
    line = _error_line(run_cli(["predict", "--cluster", str(cluster), "--json", str(cluster)]))
    assert "is also an input of this command" in line
    assert cluster.read_text() == before
    csv = tmp_path / "rows.csv"
    csv.write_text("id\n")
    line = _error_line(run_cli(["validate", str(csv), "--json", str(csv)]))
    assert "is also an input" in line and csv.read_text() == "id\n"
    link = tmp_path / "link.json"
    link.symlink_to(cluster)
    line = _error_line(run_cli(["estimate", "--model", "llama-7b", "--cluster", str(cluster), "--json", str(link)]))
    assert "is also an input" in line and cluster.read_text() == before


def _preset_text() -> str:
    from fabricscope.model.hardware import catalog_dir

    return (catalog_dir() / "clusters" / "dgx-h100-ndr.toml").read_text()


@pytest.mark.parametrize(
    "command",
    [
        ["predict", "--cluster", "dgx-h100-ndr"],
        ["bench", "-e", "8"],
        ["pairs", "--nproc", "2", "-n", "1"],  # was silently ignored ('' is falsy)
        ["monitor", "--duration", "1"],
    ],
)
def test_empty_dash_and_too_long_names(tmp_path, command):
    assert "needs a file name, got an empty one" in _error_line(run_cli([*command, "--json", ""]))
    long_name = str(tmp_path / ("r" * 5000 + ".json"))
    line = _error_line(run_cli([*command, "--json", long_name]))
    assert "file name too long" in line and len(line) < 400
    done = run_cli([*command, "--json", "-"], timeout=120)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists("-")
    assert json.loads(done.stdout)["status"] == "complete"  # stdout is the JSON alone; the table went to stderr


def test_a_fifo_nobody_reads_is_refused_at_once(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    line = _error_line(run_cli(["predict", "--cluster", "dgx-h100-ndr", "--json", str(fifo)], timeout=30))
    assert "is a FIFO that no process is reading" in line


def test_a_fifo_with_a_reader_gets_the_result(tmp_path):
    fifo, received = tmp_path / "out.json", tmp_path / "received.json"
    os.mkfifo(fifo)
    with received.open("wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
    try:
        _wait_until_opening(reader.pid)
        done = run_cli(["predict", "--cluster", "dgx-h100-ndr", "-e", "1K", "--json", str(fifo)], timeout=60)
        assert done.returncode == 0, done.stderr
        reader.wait(timeout=30)
    finally:
        reader.kill()
    assert json.loads(received.read_text())["kind"] == "predict"


def _wait_until_opening(pid: int) -> None:
    """Until the reader waits in open() for a writer (it counts as the FIFO's reader then)."""
    for _ in range(200):
        with open(f"/proc/{pid}/wchan") as handle:
            if "fifo" in handle.read():
                return
        threading.Event().wait(0.025)


def test_read_only_files_are_refused_and_modes_kept(tmp_path):
    frozen = tmp_path / "frozen.json"
    frozen.write_text("{}")
    frozen.chmod(0o444)
    with pytest.raises(UsageError, match="is read-only"):
        check_output_path("--json", str(frozen))
    assert frozen.read_text() == "{}"
    shared = tmp_path / "shared.json"
    shared.write_text("{}")
    shared.chmod(0o640)
    Result(kind="predict").save(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
    assert load(shared).kind == "predict"


def test_an_output_inside_an_input_folder_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"is inside .* an input of this command"):
        check_output_path("--json", str(tmp_path / "sub" / ".." / "r.json"), inputs=[tmp_path])


def test_a_stream_whose_reader_stops_reading_never_blocks_forever(tmp_path, monkeypatch):
    # A pipe whose reader is alive but takes nothing: the write gives up with one error.
    import fabricscope.outputs as outputs

    monkeypatch.setattr(outputs, "_STREAM_TIMEOUT_S", 1.0)
    reader = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdin=subprocess.PIPE, env=cli_env()
    )
    try:
        path = f"/proc/{os.getpid()}/fd/{reader.stdin.fileno()}"
        with pytest.raises(Exception, match="its reader took nothing for 1 s"):
            atomic_write_text(path, "x" * (1 << 20))
    finally:
        reader.kill()
        reader.wait()
        reader.stdin.close()


def test_two_outputs_that_are_one_file_through_a_link_are_refused(tmp_path):
    # `compare --json c.json --markdown c.md` with c.md a link to c.json: one file, two writers.
    from fabricscope.errors import UsageError
    from fabricscope.outputs import check_outputs

    target = tmp_path / "c.json"
    target.write_text("{}")
    link = tmp_path / "c.md"
    link.symlink_to(target)
    with pytest.raises(UsageError, match="--json and --markdown name the same file"):
        check_outputs([("--json", str(target)), ("--markdown", str(link))])
    dangling = tmp_path / "d.md"
    dangling.symlink_to(tmp_path / "d.json")  # neither exists yet: the link still names the same file
    with pytest.raises(UsageError, match="name the same file"):
        check_outputs([("--json", str(tmp_path / "d.json")), ("--markdown", str(dangling))])
    check_outputs([("--json", str(tmp_path / "a.json")), ("--markdown", str(tmp_path / "a.md"))])
