"""The store commands end to end: real processes, a real SQLite history under a temporary home."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

from helpers import run_cli

DATA = Path(__file__).parent / "data"
LOG = str(DATA / "current_all_reduce_h100x8.log")
JSON_LOG = str(DATA / "json_all_reduce_2x8.json")


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def cli(home, *args, **kwargs):
    return run_cli([str(a) for a in args], env={"FABRICSCOPE_HOME": str(home)}, **kwargs)


def content(home):
    """Everything the history holds (None when there is no database)."""
    path = home / "history.sqlite"
    if not path.exists():
        return None
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM runs").fetchall(), conn.execute("SELECT * FROM baselines").fetchall()


def assert_usage_error(done, pattern):
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert pattern in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_import_save_list_show_baseline_compare_rm(home, tmp_path):
    done = cli(home, "import", "nccl-tests", LOG, JSON_LOG, "--save", "--label", "week48")
    assert done.returncode == 0, done.stderr
    assert "h100x8.log as run 1" in done.stderr and "2x8.json as run 2" in done.stderr
    listing = cli(home, "history", "--kind", "nccl-tests", "--host", "h100-1")
    assert listing.returncode == 0 and listing.stdout.splitlines()[1].split()[:4] == [
        "2",
        listing.stdout.splitlines()[1].split()[1],
        "nccl-tests",
        "week48",
    ]
    assert len(listing.stdout.splitlines()) == 2
    assert "no saved runs match" in cli(home, "history", "--label", "other").stdout
    shown = cli(home, "history", "show", "1", "--json", tmp_path / "one.json")
    assert shown.returncode == 0 and "dgx-a07" in shown.stdout and "134217728" in shown.stdout
    assert json.loads((tmp_path / "one.json").read_text())["kind"] == "nccl-tests"
    assert cli(home, "baseline", "set", "h100", "1").returncode == 0
    assert "h100" in cli(home, "baseline", "list").stdout
    # Run 2 is another cluster (16 ranks): the sweep is slower below 32M: regressions, exit 1.
    md = tmp_path / "ticket.md"
    compared = cli(home, "compare", "2", "--baseline", "h100", "--markdown", md, "--json", tmp_path / "c.json")
    assert compared.returncode == 1, compared.stderr
    assert "regressed" in compared.stdout and md.read_text().startswith("### run 2 against baseline h100")
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["verdict"] == "regressed"
    same = cli(home, "compare", "1", "--against", tmp_path / "one.json")
    assert same.returncode == 0 and "no row regressed" in same.stdout
    assert cli(home, "compare", "1", "--against", "2", "--tolerance", "1000%").returncode == 0
    assert_usage_error(cli(home, "history", "rm", "1"), "is the baseline h100")
    assert cli(home, "baseline", "rm", "h100").returncode == 0
    assert cli(home, "history", "rm", "1").returncode == 0
    assert [row[0] for row in content(home)[0]] == [2]


def test_bad_input_is_one_line_exit_2_and_history_unchanged(home, tmp_path):
    assert cli(home, "import", "nccl-tests", LOG, "--save").returncode == 0
    before = content(home)
    doctor = tmp_path / "doctor.json"
    doctor.write_text(
        json.dumps({"format": "fabricscope-result", "version": 1, "kind": "doctor", "config": {}, "records": []})
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    long_name = "x" * 5000
    cases = [
        (("compare", "lastweek", "--against", "1"), "neither a result file nor a history id"),
        (("compare", "1", "--against", "99"), "no run 99 in the history"),
        (("compare", doctor, "--against", "1"), "is a 'doctor' result"),
        (("compare", "1"), "needs a reference"),
        (("compare", "1", "--against", LOG, "--tolerance", "lots"), "--tolerance must be a share"),
        (("compare", "1", "--against", LOG, "--tolerance", "1" * 400), "--tolerance must be a share"),
        (("compare", "1", "--baseline", "nope"), "no baseline named 'nope'"),
        (("compare", "1", "--against", fifo), "not a regular"),
        (("compare", "1", "--against", tmp_path), "a directory"),
        (("compare", "1", "--against", tmp_path / long_name), "file name too long"),
        (("compare", "1", "--against", long_name), "neither a result file"),
        (("compare", LOG.replace(".log", ".json"), "--against", "1"), "no such result file"),
        (("compare", LOG, "--against", "1"), "import it first: fabricscope import nccl-tests"),
        (("import", "nccl-tests", DATA / "not_nccl_tests_iperf3.txt", "--save"), "not nccl-tests output"),
        (("import", "nccl-tests", LOG, DATA / "not_nccl_tests_iperf3.txt", "--save"), "not nccl-tests output"),
        (("import", "nccl-tests", zero, "--save"), "not a regular"),
        (("import", "nccl-tests", fifo, "--save"), "not a regular"),
        (("import", "nccl-tests", tmp_path, "--save"), "a directory"),
        (("import", "nccl-tests", tmp_path / long_name), "file name too long"),
        (("import", "nccl-tests", LOG, "--json", LOG), "is also an input"),
        (("import", "nccl-tests", LOG, "--save", "--label", ""), "label"),
        (("import", "nccl-tests", LOG, "--op", "allreduce"), "unknown --op"),
        (("history", "show", "abc"), "neither a result file nor a history id"),
        (("history", "rm", LOG), "history rm takes a history id"),
        (("history", "rm", "42"), "no run 42"),
        (("history", "--since", "last tuesday"), "--since"),
        (("baseline", "set", "bad name", "1"), "not allowed"),
        (("baseline", "set", "x", doctor), "is a 'doctor' result"),
        (("baseline", "rm", "nope"), "no baseline named"),
    ]
    for args, pattern in cases:
        assert_usage_error(cli(home, *args, timeout=30), pattern)
    assert content(home) == before


def test_outputs_that_are_inputs_or_folders_are_refused_before_any_work(home, tmp_path):
    copy = tmp_path / "run.json"
    assert cli(home, "import", "nccl-tests", LOG, "--json", copy).returncode == 0
    text = copy.read_text()
    assert_usage_error(cli(home, "compare", copy, "--against", LOG, "--json", copy), "is also an input")
    assert_usage_error(cli(home, "compare", copy, "--against", LOG, "--markdown", tmp_path), "is a folder")
    assert copy.read_text() == text
    assert content(home) is None  # nothing above needed or created a history


def test_a_damaged_history_is_one_error_and_kept(home):
    home.mkdir()
    damaged = b"SQLite format 3\x00" + b"\x01" * 500
    (home / "history.sqlite").write_bytes(damaged)
    done = cli(home, "import", "nccl-tests", LOG, "--save")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "damaged" in done.stderr
    assert cli(home, "history").returncode == 1
    assert (home / "history.sqlite").read_bytes() == damaged


def test_a_closed_stdout_keeps_the_verdict(home, tmp_path):
    import subprocess
    import sys

    from helpers import cli_env

    older = tmp_path / "older.json"
    assert cli(home, "import", "nccl-tests", LOG, "--json", older).returncode == 0
    command = [sys.executable, "-m", "fabricscope", "compare", LOG, "--against", older, "--json", tmp_path / "c.json"]
    command[4] = str(tmp_path / "current.json")
    assert cli(home, "import", "nccl-tests", JSON_LOG, "--json", command[4]).returncode == 0
    proc = subprocess.Popen(
        [str(c) for c in command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env({"FABRICSCOPE_HOME": str(home)}),
    )
    proc.stdout.close()  # the reader is gone before the first line
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1, stderr
    assert json.loads((tmp_path / "c.json").read_text())["summary"]["verdict"] == "regressed"


@pytest.mark.multiprocess
def test_save_on_bench_predict_estimate_doctor(home, tmp_path):
    from helpers import REPO

    fixture = REPO / "tests" / "doctor" / "fixtures" / "healthy-ib-8gpu"
    commands = [
        ("bench", "-b", "1K", "-e", "4K", "-n", "3", "--nproc", "2", "--save", "--label", "ci"),
        ("predict", "--cluster", "dgx-a100-hdr", "-b", "1M", "-e", "4M", "--save"),
        ("estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--label", "plan-b"),
        ("doctor", "--root", fixture, "--save"),
    ]
    for args in commands:
        done = cli(home, *args, timeout=180)
        assert done.returncode in (0, 1), done.stderr  # doctor: 1 is a verdict with warnings
        assert "saved " in done.stderr and " as run " in done.stderr, done.stderr
    runs, _ = content(home)
    assert [(row[3], row[4]) for row in runs] == [
        ("bench", "ci"),
        ("predict", None),
        ("estimate", "plan-b"),
        ("doctor", None),
    ]
    bench = json.loads(runs[0][-1])
    assert bench["status"] == "complete" and bench["records"][0]["samples_us"]
    assert_usage_error(cli(home, "doctor", "--root", fixture, "--nproc", "2", "--save"), "fleet mode does not save")
    assert_usage_error(cli(home, "predict", "--cluster", "dgx-a100-hdr", "--label", ""), "label")
    assert len(content(home)[0]) == 4


def test_values_from_files_are_shown_escaped_in_history_and_baselines(home, tmp_path):
    """A host, op or headline holding an escape sequence (from a log or a result file) cannot rewrite the
    terminal of whoever lists the history: it is shown as its escape, as error lines show it."""
    import os as _os

    from fabricscope.results import loads
    from fabricscope.store.history import History

    done = cli(home, "import", "nccl-tests", LOG, "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    data["host"] = {"hostname": "evil\x1b[2J\x1b[31mhost"}
    data["summary"] = {**data.get("summary", {}), "headline": "\x1b]0;pwned\x07 busbw"}
    result = loads(json.dumps(data), source="hostile")
    _os.environ["FABRICSCOPE_HOME"] = str(home)
    try:
        with History() as history:
            run_id = history.add(result, label="hostile")
    finally:
        del _os.environ["FABRICSCOPE_HOME"]
    assert cli(home, "baseline", "set", "b", run_id).returncode == 0
    for argv in (["history"], ["history", "show", run_id], ["baseline", "list"]):
        done = cli(home, *argv)
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout, argv
    assert "evil\\x1b[2J" in cli(home, "history").stdout


def test_a_baseline_set_from_a_file_the_history_holds_is_not_saved_twice(home, tmp_path):
    """Issue 24: `baseline set NAME file.json` on a file that is already a saved run (import --json beside
    --save, or history show --json) points at that run instead of storing a duplicate; another file is saved."""
    saved = tmp_path / "saved.json"
    done = cli(home, "import", "nccl-tests", LOG, "--save", "--json", saved)
    assert done.returncode == 0, done.stderr
    assert cli(home, "baseline", "set", "h100", saved).returncode == 0
    shown = tmp_path / "shown.json"
    assert cli(home, "history", "show", "1", "--json", shown).returncode == 0
    assert cli(home, "baseline", "set", "again", shown).returncode == 0
    runs, baselines = content(home)
    assert len(runs) == 1 and sorted((b[0], b[1]) for b in baselines) == [("again", 1), ("h100", 1)]
    other = tmp_path / "other.json"
    assert cli(home, "import", "nccl-tests", JSON_LOG, "--json", other).returncode == 0
    assert cli(home, "baseline", "set", "other", other).returncode == 0
    runs, _ = content(home)
    assert len(runs) == 2


def test_history_show_of_a_pairs_file_shows_its_well_formed_records_only(home, tmp_path):
    from fabricscope.results import Result

    good = [
        {"test": test, "src": s, "dst": d, "src_host": f"n{s}", "dst_host": f"n{d}", "size_bytes": size,
         "time_us": t, "algbw_gbps": size / t / 1e3, "round": 1}
        for test, size, t in (("bandwidth", 1 << 20, 100.0), ("latency", 8, 5.0))
        for s, d in ((0, 1), (1, 0))
    ]  # fmt: skip
    junk = [{"test": "bandwidth", "src": "zero", "dst": 1}, {"test": "latency", "src": 0, "dst": 1, "time_us": None}]
    path = tmp_path / "pairs.json"
    Result(kind="pairs", config={"by": "rank"}, records=[*good, *junk]).save(str(path))
    done = run_cli(["history", "show", str(path)])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "bandwidth: algbw_gbps (GB/s) of 1048576 B messages" in done.stdout
    assert "latency: time_us (us) of 8 B messages" in done.stdout and "zero" not in done.stdout
    assert "# 2 record(s) not shown: not pairs records, or malformed ones" in done.stdout


@pytest.mark.parametrize("ranks", [2, 40])  # a matrix, and the slowest links of a world too large for one
def test_history_show_of_a_pairs_file_shows_host_names_as_text(home, tmp_path, ranks):
    from fabricscope.results import Result

    host = {0: "[/]", 1: "[red]x\nfake line"}
    records = [
        {"test": "bandwidth", "src": s, "dst": d, "src_host": host.get(s, f"n{s}"), "dst_host": host.get(d, f"n{d}"),
         "size_bytes": 1 << 20, "time_us": 100.0 + s, "algbw_gbps": 10.0}
        for s in range(ranks) for d in range(ranks) if s != d
    ]  # fmt: skip
    records.append({**records[0], "test": ["bandwidth"]})  # a test that is no name at all
    path = tmp_path / "pairs.json"
    Result(kind="pairs", config={"by": "node"}, records=records).save(str(path))
    done = run_cli(["history", "show", str(path)])
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "[/]" in done.stdout and "[red]x\\nfake line" in done.stdout  # as written, the newline escaped
    assert not any(line.startswith("fake line") for line in done.stdout.splitlines())
