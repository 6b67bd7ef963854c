"""The real command line: usage errors, ``-- CMD`` pass-through, exit codes, signals, recordings, --json."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from monitor_helpers import LOOPBACK_SCRIPT, SEQUENCE, LoopbackTraffic

from fabricscope.monitor.recording import load_recording
from fabricscope.results import load
from helpers import cli_env, imported_by_help, run_cli


def monitor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_cli(["monitor", *args], timeout=timeout)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--interval", "0.01"], "--interval must be a duration from 50 ms to 1 h"),
        (["--interval", "2h"], "--interval must be a duration from 50 ms to 1 h"),
        (["--interval", "fast"], "--interval: invalid duration 'fast'"),
        (["--interval", "9" * 400], "--interval "),
        (["--duration", "-3"], "--duration "),
        (["--serve", "localhost:99999"], "the port must be a whole number from 0 to 65535"),
        (["--serve", "::1:9400"], "write an IPv6 address in brackets"),
        (["--serve", "no-such-host.invalid:9400", "--duration", "1"], "cannot resolve 'no-such-host.invalid'"),
        (["--root", "/no/such/dir"], "--root /no/such/dir: no such directory"),
        (["--json", "/"], "--json / is a folder"),
        (["--json", "/no/such/dir/x.json"], "the folder /no/such/dir does not exist"),
        (["--interfaces", ","], "--interfaces needs at least one interface name"),
        (["--interfaces", "lo", "--all-interfaces"], "--interfaces names the interfaces to watch and --all-interfaces"),
        (["--alert-rules", "--utilization", "150%"], "--utilization must be a share from 1% to 100%"),
        (["--alert-rules", "--utilization", "85"], "--utilization must be a share"),
        (["--alert-rules", "--retrans-ratio", "2"], "--retrans-ratio must be a number from 1e-09 to 0.5"),
        (["--alert-rules", "--", "true"], "--alert-rules only prints the rules"),
        (["--"], "nothing after '--'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    result = monitor(*args)
    assert result.returncode == 2, result.stderr
    assert fragment in one_error_line(result)


def test_a_port_in_use_is_a_usage_error_that_writes_nothing(tmp_path: Path) -> None:
    record = tmp_path / "rec.jsonl"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = monitor("--serve", str(port), "--record", str(record), "--duration", "1")
    assert result.returncode == 2
    assert f"port {port} is in use" in one_error_line(result)
    assert not record.exists()  # the recording starts after the port is taken (it left a header-only file)


def test_same_file_for_json_and_record(tmp_path: Path) -> None:
    out = str(tmp_path / "x.json")
    result = monitor("--json", out, "--record", out, "--duration", "1")
    assert result.returncode == 2 and "name the same file" in one_error_line(result)


def test_a_command_not_found_is_127_and_not_executable_is_126(tmp_path: Path) -> None:
    result = monitor("--", "fabricscope-no-such-command", "arg")
    assert result.returncode == 127
    assert one_error_line(result) == "error: fabricscope-no-such-command: command not found"
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    result = monitor("--", str(script))
    assert result.returncode == 126 and "not an executable file" in one_error_line(result)


def test_command_output_passes_through_and_its_exit_code_is_kept(tmp_path: Path) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(7)"
    result = monitor("--interval", "0.1", "--", sys.executable, "-c", code)
    assert result.returncode == 7
    assert result.stdout == "to stdout\n"  # stdout is the command's alone
    assert "to stderr" in result.stderr and "verdict: " in result.stderr


def test_a_command_killed_by_a_signal_is_128_plus_n() -> None:
    result = monitor("--interval", "0.1", "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)")
    assert result.returncode == 128 + 9


def test_loopback_traffic_of_the_command_shows_in_the_summary_and_json(tmp_path: Path) -> None:
    out = tmp_path / "job.json"
    result = monitor(
        "--interval", "0.2", "--interfaces", "lo", "--json", str(out),
        "--", sys.executable, "-c", LOOPBACK_SCRIPT, "60", "1.2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "sent 60 MiB over loopback" in result.stdout
    summary = load(out).summary
    lo = next(p for p in summary["ports"] if p["label"] == "lo")
    assert lo["rx_bytes"] >= 60 << 20  # every byte sent crossed lo (plus TCP/IP headers)
    assert lo["tx_gbit_per_s_peak"] > 0 and lo["rx_gbit_per_s_mean"] > 0
    assert summary["command_exit_status"] == 0
    assert "busiest link lo moved" in summary["verdict"] and "line rate is unknown" in summary["verdict"]
    row = next(line for line in result.stderr.splitlines() if line.strip().startswith("lo "))
    assert float(row.split()[1]) > 0  # the rx mean column of the printed summary
    result_json = json.loads(out.read_text())
    assert result_json["kind"] == "monitor"
    rates = [r["rx_gbit_per_s"] for r in result_json["records"] if r.get("label") == "lo"]
    assert len(rates) >= 3 and max(rates) > 0  # a time series, not one number


def test_sigint_to_the_monitor_reaches_the_command_first(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    code = (
        "import signal, sys, time, pathlib\n"
        "def bye(*_):\n    print('command got SIGINT', flush=True); sys.exit(5)\n"
        "signal.signal(signal.SIGINT, bye)\n"
        f"pathlib.Path({str(marker)!r}).write_text('x')\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 5, err
    assert out == "command got SIGINT\n"
    assert "verdict: " in err and "Traceback" not in err


def test_watch_a_fixture_tree_plainly_with_json(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    result = monitor("--root", str(SEQUENCE / "t1"), "--interval", "0.05", "--duration", "0.3", "--json", str(out))
    assert result.returncode == 0, result.stderr
    loaded = load(out)
    assert loaded.kind == "monitor" and loaded.status == "complete"
    assert loaded.config["root"] == str(SEQUENCE / "t1") and loaded.config["interval_s"] == 0.05
    assert loaded.summary["intervals"] >= 2
    # A static tree moves nothing, and the saturated counter is said once.
    assert result.stdout.count("link_downed is at its 8-bit maximum") == 0
    assert sum("out_of_sequence" in n for n in loaded.summary["notes"]) == 0
    assert "verdict: no interface moved data" in result.stdout


def test_recording_is_flushed_every_interval_and_survives_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fabricscope",
            "monitor",
            "--interval",
            "0.1",
            "--record",
            str(path),
            "--all-interfaces",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # Complete lines only: a records line longer than the write buffer reaches the disk in pieces.
        text = path.read_text() if path.exists() else ""
        if text[: text.rfind("\n") + 1].count('"type":"records"') >= 3:
            break
        time.sleep(0.05)
    proc.kill()  # no chance to finish: what is on disk must stand alone
    proc.communicate(timeout=10)
    text = path.read_text()
    assert text[: text.rfind("\n") + 1].count('"type":"records"') >= 3
    loaded = load_recording(path)
    assert loaded.kind == "monitor" and loaded.status == "interrupted"
    assert loaded.summary["intervals"] >= 3 and any(r["label"] == "lo" for r in loaded.records)
    # A torn last line (killed while writing) is dropped, not an error.
    with path.open("a") as handle:
        handle.write('{"type":"records","rec')
    assert load_recording(path).summary["intervals"] == loaded.summary["intervals"]


def test_a_finished_recording_loads_with_its_summary(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    result = monitor("--root", str(SEQUENCE / "t0"), "--interval", "0.05", "--duration", "0.2", "--record", str(path))
    assert result.returncode == 0, result.stderr
    loaded = load_recording(path)
    assert loaded.status == "complete" and loaded.summary["bound"] == "unknown"
    assert json.loads(path.read_text().splitlines()[0])["format"] == "fabricscope-result-stream"
    # One loader for every RUN: the recording is a Result to results.load and to the store's commands.
    from fabricscope.results import load

    assert load(path).kind == "monitor" and len(load(path).records) == len(loaded.records)
    shown = run_cli(["history", "show", str(path)], timeout=60)
    assert shown.returncode == 0 and "monitor" in shown.stdout, shown.stderr


@pytest.mark.parametrize(
    "text",
    ["", "not json\n{}\n", '{"type": "header", "format": "other"}\n', "[1]\n[2]\n"],
)
def test_a_file_that_is_not_a_recording_is_refused(tmp_path: Path, text: str) -> None:
    from fabricscope.errors import ResultFormatError

    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ResultFormatError):
        load_recording(path)


def test_a_recording_into_a_fifo_without_reader_is_refused_not_hung(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = monitor("--record", str(fifo), "--duration", "0.2", timeout=30)
    assert result.returncode == 2
    assert "is a FIFO that no process is reading" in one_error_line(result)


def test_a_closed_stdout_stops_quietly(tmp_path: Path) -> None:
    # Plain lines are written for links that moved data: keep lo busy, so the monitor writes and
    # finds its reader gone (a monitor with nothing to say learns of it only at its end).
    with LoopbackTraffic():
        proc = subprocess.Popen(
            [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.05", "--duration", "20"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env(),
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.close()  # | head -1
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_alert_rules_on_stdout() -> None:
    result = monitor("--alert-rules", "--utilization", "85%", "--for", "10m", "--retrans-ratio", "2e-3")
    assert result.returncode == 0
    assert "fabricscope_net_link_speed_bytes_per_second > 0.85" in result.stdout and "for: 10m" in result.stdout
    assert "> 0.002" in result.stdout


def test_command_module_imports_only_the_standard_library() -> None:
    modules = (
        "rich",
        "prometheus_client",
        "numpy",
        "torch",
        "fabricscope.monitor.samplers",
        "fabricscope.monitor.exporter",
    )
    assert imported_by_help(modules) == []


def test_an_output_inside_the_root_is_refused(tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(SEQUENCE / "t0", tree, symlinks=True)
    result = monitor("--root", str(tree), "--json", str(tree / "out.json"), "--duration", "0.2")
    assert result.returncode == 2 and "an input of this command" in one_error_line(result)


def test_a_recording_that_fails_mid_run_never_ends_or_changes_the_command(tmp_path: Path) -> None:
    import resource

    record = tmp_path / "rec.jsonl"
    done_file = tmp_path / "done"
    # The command outlives the failure, then exits 3: the monitor must let it finish and return 3.
    code = f"import time, pathlib, sys; time.sleep(2); pathlib.Path({str(done_file)!r}).write_text('ok'); sys.exit(3)"

    def small_files() -> None:  # writes past 3000 bytes fail (EFBIG), as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    result = subprocess.run(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--record", str(record),
         "--", sys.executable, "-c", code],
        capture_output=True, text=True, env=cli_env(), preexec_fn=small_files, timeout=60,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert done_file.read_text() == "ok"  # the command ran to its end
    said = [line for line in result.stderr.splitlines() if f"cannot write {record}" in line]
    assert len(said) == 1 and "the watching goes on" in said[0] and "Traceback" not in result.stderr
    loaded = load_recording(record)
    assert loaded.status == "interrupted" and loaded.summary["intervals"] >= 1


def test_a_recording_that_fails_without_a_command_keeps_watching_then_exits_1(tmp_path: Path) -> None:
    import resource

    record = tmp_path / "rec.jsonl"

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))

    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--duration", "2",
         "--record", str(record)],
        capture_output=True, text=True, env=cli_env(), preexec_fn=small_files, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started >= 2  # watched for the whole duration
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: --record stopped early: cannot write")
    assert load_recording(record).summary["intervals"] >= 1


def test_a_recording_that_cannot_start_is_refused_before_the_command_runs(tmp_path: Path) -> None:
    """Its first line fails (/dev/full): one line naming --record, exit 2, and the command never started
    (it exited 1, which a command's own exit 1 could not be told from)."""
    if not Path("/dev/full").is_char_device():
        pytest.skip("needs /dev/full")
    ran = tmp_path / "ran"
    for tail in (["--", "touch", str(ran)], ["--duration", "1"]):
        result = subprocess.run(
            [sys.executable, "-m", "fabricscope", "monitor", "--no-gpu", "--record", "/dev/full", *tail],
            capture_output=True, text=True, env=cli_env(), timeout=60,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("error: --record: cannot write /dev/full: ") and result.stderr.count("\n") == 1
        assert "nothing was started" in result.stderr and not ran.exists()


def test_a_json_that_cannot_be_written_never_changes_the_commands_status(tmp_path: Path) -> None:
    if not Path("/dev/full").is_char_device():
        pytest.skip("needs /dev/full")
    result = subprocess.run(
        [sys.executable, "-m", "fabricscope", "monitor", "--interval", "0.1", "--json", "/dev/full",
         "--", sys.executable, "-c", "import sys; sys.exit(4)"],
        capture_output=True, text=True, env=cli_env(), timeout=60,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    said = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(said) == 1 and "/dev/full" in said[0] and "Traceback" not in result.stderr


def test_a_link_speed_given_for_an_interface_without_one_gives_its_utilization(tmp_path: Path) -> None:
    """Issue 24: where the kernel reports no speed (lo, virtio), --link-speed IF=RATE gives utilization."""
    out = tmp_path / "job.json"
    result = monitor(
        "--interval", "0.2", "--interfaces", "lo", "--link-speed", "lo=10G", "--json", str(out),
        "--", sys.executable, "-c", LOOPBACK_SCRIPT, "30", "1.0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lo = next(p for p in load(out).summary["ports"] if p["label"] == "lo")
    assert lo["link_speed_gbit_per_s"] == 10.0
    assert lo["utilization_peak"] is not None and lo["utilization_peak"] > 0
    assert "line rate is unknown" not in load(out).summary["verdict"]


@pytest.mark.parametrize(
    ("value", "message"),
    [("eth0", "--link-speed takes IF=RATE items"), ("eth0=400", "give a rate with its decimal prefix"),
     ("=25G", "--link-speed takes IF=RATE items"), ("eth0=-5G", "--link-speed"),
     ("e" * 5000 + "=1G", "is not an interface name"), ("eth0=" + "9" * 400 + "G", "too many digits"),
     ("eth0=²G", "give a rate with its decimal prefix"), ("eth0=10G,eth0=25G", "two rates: give each interface one"),
     ("eth0=99999T", "a link runs from 1 kbit/s"), ("eth0=1", "give a rate with its decimal prefix"),
     ("eth0=0.5k", "a link runs from 1 kbit/s")],
)  # fmt: skip
def test_a_bad_link_speed_is_one_line(value: str, message: str) -> None:
    result = monitor("--link-speed", value, "--duration", "1")
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_repeated_link_speeds_add_up_and_one_for_an_unwatched_interface_is_said(tmp_path: Path) -> None:
    """--link-speed may be given more than once (every rate is kept; the same interface twice is refused above);
    a rate for an interface that is not watched is said in a note, not dropped in silence."""
    out = tmp_path / "m.json"
    result = monitor(
        "--interval", "0.2", "--duration", "0.6", "--interfaces", "lo", "--link-speed", "lo=10G",
        "--link-speed", "nosuch0=25G", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert load(out).config["link_speeds"] == {"lo": 10e9, "nosuch0": 25e9}
    assert "--link-speed nosuch0: no such interface is watched (watched: lo)" in result.stdout + result.stderr


def test_a_bad_interfaces_name_is_one_line() -> None:
    result = monitor("--interfaces", "eth0," + "a" * 5000, "--duration", "1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--interfaces" in result.stderr and "is not an interface name" in result.stderr
