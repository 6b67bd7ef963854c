"""``fabricscope dataload`` as users run it: the Result, the verdict, bad input, Ctrl-C, a closed stdout."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from dataload_helpers import data_files

from fabricscope.cli import main
from fabricscope.results import load
from helpers import cli_env, run_cli, start_cli


def test_json_records_carry_what_was_read(big_file, tmp_path):
    out = tmp_path / "r.json"
    done = run_cli(["dataload", str(big_file), "--workers", "2", "--block-size", "256K", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    result = load(out)
    assert result.kind == "dataload" and result.status == "complete"
    [record] = result.records
    size = big_file.stat().st_size
    assert record["path"] == str(big_file)
    assert record["bytes"] == size and record["files"] == 1
    assert record["seconds"] > 0
    assert record["bytes_per_s"] == pytest.approx(size / record["seconds"])
    assert result.config["workers"] == 2 and result.config["block_size"] == 256 << 10
    assert result.summary["bytes"] == size and result.summary["verdict"] is None
    assert f"pass 1: {size} B, 1 file(s)" in done.stdout
    assert "reading " in done.stderr and "Traceback" not in done.stderr


def test_a_tree_through_the_command(tree, tmp_path):
    out = tmp_path / "r.json"
    done = run_cli(["dataload", str(tree), "--workers", "3", "--random", "--seed", "5", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    files = data_files(tree)
    summary = load(out).summary
    assert summary["bytes"] == sum(p.stat().st_size for p in files)
    assert summary["files"] == len(files) == summary["dataset_files"]
    assert summary["skipped"] == {"FIFO": 1, "character device": 1, "link to a directory": 1}
    assert "note: skipped what is not a regular file: 1 FIFO, 1 character device, 1 link to a directory" in done.stderr


def test_the_verdict_starves_and_keeps_up(big_file, tmp_path):
    out = tmp_path / "r.json"
    # 1e9 samples/s of 1 MiB: no storage keeps up.
    done = run_cli(["dataload", str(big_file), "--need", "1e9", "--sample-size", "1M", "--json", str(out)])
    assert done.returncode == 1, done.stderr
    result = load(out)
    verdict = result.summary["verdict"]
    measured = result.summary["bytes_per_s"]
    assert verdict["needed_bytes_per_s"] == 1e9 * (1 << 20)
    assert verdict["ratio"] == pytest.approx(measured / (1e9 * (1 << 20)))
    assert verdict["starves"] and verdict["gpu_wait_fraction"] == pytest.approx(1 - verdict["ratio"])
    assert verdict["samples_per_s"] == pytest.approx(measured / (1 << 20))
    assert result.config["need_samples_per_s"] == 1e9 and result.config["sample_size"] == 1 << 20
    assert "verdict: STARVES the GPUs" in done.stdout and "the GPUs would wait" in done.stdout
    # 1 sample of 1 byte a second: any storage keeps up.
    done = run_cli(["dataload", str(big_file), "--need", "1", "--sample-size", "1", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    verdict = load(out).summary["verdict"]
    assert not verdict["starves"] and verdict["gpu_wait_fraction"] == 0
    assert verdict["headroom_fraction"] == pytest.approx(verdict["ratio"] - 1)
    assert "verdict: keeps up" in done.stdout


def test_a_closed_stdout_keeps_the_verdicts_exit_code(big_file):
    code = (
        f"{sys.executable} -m fabricscope dataload {big_file} --need 1e9 --sample-size 1M | head -c 1 >/dev/null;"
        " exit ${PIPESTATUS[0]}"
    )
    done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_a_full_stdout_keeps_the_measurement_in_json_and_says_so_last(big_file, tmp_path):
    """> /dev/full: the report is lost, not the measurement (the --json file was never written)."""
    if not Path("/dev/full").is_char_device():
        pytest.skip("needs /dev/full")
    out = tmp_path / "r.json"
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "fabricscope", "dataload", str(big_file), "--json", str(out)],
            stdout=full, stderr=subprocess.PIPE, text=True, env=cli_env(), timeout=120,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: cannot write the report to standard output (No space left on device); --json {out} keeps every pass"
    )
    assert load(out).status == "complete" and load(out).records


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_keeps_what_was_read(big_file, tmp_path, sig, code):
    out = tmp_path / "r.json"
    proc = start_cli(
        ["dataload", str(big_file), "--duration", "60", "--block-size", "4K", "--json", str(out)],
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "reading ...": the scan is done, the reads begin
    assert line.startswith("reading "), line
    time.sleep(1.0)
    proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # the stop was lost: end it, so nothing leaks into later tests
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    result = load(out)
    assert result.status == "interrupted"
    assert result.summary["bytes"] > 0 and result.summary["seconds"] < 60
    assert result.summary["bytes"] == sum(r["bytes"] for r in result.records)
    assert "interrupted: the figures cover what was read before the stop" in stdout


def test_a_terminal_gets_a_progress_bar_on_stderr(big_file, tmp_path):
    """rich draws the bar when stderr is a terminal; stdout keeps the plain report."""
    leader, follower = pty.openpty()
    report = tmp_path / "stdout.txt"
    with open(report, "w") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabricscope", "dataload", str(big_file), "--duration", "1", "--block-size", "4K"],
            stdout=stdout,
            stderr=follower,
            env=cli_env({"COLUMNS": "100", "TERM": "xterm"}),
        )
    os.close(follower)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = seen.decode(errors="replace")
    assert "reading" in text and "MiB" in text and "\x1b[" in text  # the bar, drawn with escapes
    out = report.read_text()
    assert out.startswith("# dataload ") and "\x1b[" not in out


def test_save_keeps_the_measurement_in_the_history(big_file, tmp_path):
    home = tmp_path / "home"
    done = run_cli(["dataload", str(big_file), "--label", "nvme-cold"], env={"FABRICSCOPE_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert "saved the measurement as run 1" in done.stderr
    listed = run_cli(["history"], env={"FABRICSCOPE_HOME": str(home)})
    assert "dataload" in listed.stdout and "nvme-cold" in listed.stdout


def test_a_file_name_cannot_drive_the_terminal(disk_dir):
    hostile = disk_dir / "x\x1b[2J\x1b[31mred\nnext.bin"
    hostile.write_bytes(os.urandom(10000))
    done = run_cli(["dataload", str(hostile)])
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout + done.stderr
    assert "\\x1b[2J" in done.stdout and "\\n" in done.stdout
    assert len(done.stderr.splitlines()) == 1  # "reading ...": the name's newline is shown, not obeyed


def test_dataload_is_listed_in_help():
    done = run_cli(["--help"])
    assert "dataload" in done.stdout


@pytest.fixture
def paths(tmp_path, big_file):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    os.symlink("/dev/zero", zero)
    empty = tmp_path / "empty"
    empty.mkdir()
    only_special = tmp_path / "special"
    only_special.mkdir()
    os.mkfifo(only_special / "p")
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "empties").mkdir()
    (tmp_path / "empties" / "a").write_bytes(b"")
    (tmp_path / "empties" / "b").write_bytes(b"")
    return {
        "emptyfile": str(tmp_path / "empty.bin"),
        "emptyfiles": str(tmp_path / "empties"),
        "file": str(big_file),
        "dir": str(big_file.parent),
        "fifo": str(fifo),
        "zero": str(zero),
        "empty": str(empty),
        "special": str(only_special),
        "missing": str(tmp_path / "no-such"),
        "long": "/tmp/" + "a" * 5000,
    }


NINES = "9" * 400


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["{missing}"], ["no-such: no such file or directory"]),
        (["{long}"], ["the name is too long"]),
        (["{file}/x"], ["a part of the path is not a directory"]),
        (["{fifo}"], ["is a FIFO", "regular file or a directory"]),
        (["{zero}"], ["is a character device", "regular file or a directory"]),
        (["/dev/zero"], ["/dev/zero is a character device"]),
        (["{empty}"], ["holds no regular file to read (it is empty)"]),
        (["{special}"], ["holds no regular file to read (skipped: 1 FIFO)"]),
        (["{emptyfile}"], ["is empty: there is nothing to read"]),
        (["{emptyfiles}"], ["holds only empty files (2): there is nothing to read"]),
        (["{file}", "--block-size", "0"], ["--block-size must be a size from 512 to 256M, got '0'"]),
        (["{file}", "--block-size", "12Q"], ["invalid size '12Q'", "K, M, G"]),
        (["{file}", "--block-size", NINES], ["--block-size", "has too many digits"]),
        (["{file}", "--block-size", "1G"], ["--block-size must be a size from 512 to 256M, got '1G'"]),
        (
            ["{file}", "--direct", "--block-size", "6000"],
            ["direct reads need a block size", "multiple of 4096", "6000"],
        ),
        (
            ["{file}", "--workers", "256", "--block-size", "256M"],
            ["256 workers x 256M blocks need 64G of read buffers; at most 4G"],
        ),
        (["{file}", "--workers", "0"], ["--workers must be a whole number from 1 to 256, got '0'"]),
        (["{file}", "--workers", "100000"], ["--workers must be a whole number from 1 to 256, got '100000'"]),
        (["{file}", "--workers", NINES], ["--workers must be a whole number from 1 to 256, got '999"]),
        (["{file}", "--workers", "two"], ["--workers must be a whole number from 1 to 256, got 'two'"]),
        (["{file}", "--duration", "0"], ["--duration must be a duration from 100 ms to 7 days", "got '0'"]),
        (["{file}", "--duration", "30d"], ["--duration must be a duration from 100 ms to 7 days", "got '30d'"]),
        (["{file}", "--duration", "9999h"], ["--duration must be a duration from 100 ms to 7 days"]),
        (["{file}", "--duration", NINES], ["--duration"]),
        (["{file}", "--need", "100"], ["--need needs --sample-size too"]),
        (["{file}", "--sample-size", "1M"], ["--sample-size needs --need too"]),
        (["{file}", "--need", "0", "--sample-size", "1M"], ["--need must be a number from 0.001 to 1e+09 samples/s"]),
        (["{file}", "--need", "nan", "--sample-size", "1M"], ["--need must be a number from 0.001", "got 'nan'"]),
        (["{file}", "--need", NINES, "--sample-size", "1M"], ["--need must be a number from 0.001"]),
        (["{file}", "--need", "10", "--sample-size", "0"], ["--sample-size must be a size from 1 to 1T, got '0'"]),
        (["{file}", "--seed", "-1"], ["--seed must be a whole number from 0 to 4294967295"]),
        (["{file}", "--json", "{file}"], ["is also an input of this command"]),
        (["{dir}", "--json", "{dir}/r.json"], ["is inside {dir}, an input of this command"]),
        (["{file}", "--json", "/no/such/dir/r.json"], ["--json /no/such/dir/r.json", "does not exist"]),
        (["{file}", "--json", "{dir}"], ["is a folder"]),
        (["{file}", "--json", "{fifo}"], ["is a FIFO that no process is reading"]),
        (["{file}", "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    ],
)
def test_bad_input_is_one_error_line_exit_2(paths, capsys, args, fragments):
    argv = ["dataload", *(a.format(**paths) for a in args)]
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors (flag converters) exit from parse_args
        code = stop.code
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment.format(**paths) in lines[0]
    assert len(lines[0]) < 400  # a 400-digit number or a 5,000-character name is not echoed whole
    assert captured.out == ""


def test_an_unreadable_file_is_a_usage_error():
    folder = tempfile.mkdtemp(prefix="fabricscope-test-dataload.", dir="/tmp")
    try:
        os.chmod(folder, 0o755)
        secret = os.path.join(folder, "secret.bin")
        with open(secret, "wb") as handle:
            handle.write(b"x" * 10000)
        os.chmod(secret, 0o000)
        # Root reads anything: ask as nobody (who can still run this checkout's Python).
        preexec = _as_nobody if os.geteuid() == 0 else None
        if preexec is not None and not _nobody_can_run_python():
            pytest.skip("user nobody cannot run this checkout's Python: cannot test an unreadable file as root")
        done = subprocess.run(
            [sys.executable, "-m", "fabricscope", "dataload", secret],
            capture_output=True,
            text=True,
            env=cli_env(),
            timeout=60,
            preexec_fn=preexec,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == f"error: {secret}: permission denied (it must be readable)"
    finally:
        shutil.rmtree(folder)


def _as_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


def _nobody_can_run_python() -> bool:
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import fabricscope.dataload.cli"],
            capture_output=True,
            env=cli_env(),
            timeout=60,
            preexec_fn=_as_nobody,
        )
    except OSError:
        return False
    return done.returncode == 0


WRITE_ONLY = "/proc/sys/vm/drop_caches"


def test_a_file_nobody_may_read_is_a_usage_error(capsys):
    """A write-only sysctl file: procfs refuses reads to root too."""
    try:
        os.close(os.open(WRITE_ONLY, os.O_RDONLY))
        pytest.skip(f"{WRITE_ONLY} is readable here")
    except PermissionError:
        pass
    except OSError as exc:
        pytest.skip(f"no {WRITE_ONLY} here ({exc})")
    assert main(["dataload", WRITE_ONLY]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {WRITE_ONLY}: permission denied (it must be readable)\n"
