"""The SQLite history: saves, filters, schema, concurrent writers, damaged files."""

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from fabricscope.errors import UsageError
from fabricscope.results import Result
from fabricscope.store import baselines, runs
from fabricscope.store.history import DATABASE_NAME, SCHEMA_VERSION, History, HistoryError, database_path, home
from helpers import cli_env


def bench(host="node1", busbw=10.0, created=None):
    result = Result(
        kind="bench",
        records=[{"op": "all_reduce", "size_bytes": 1 << 20, "placement": "out", "busbw_gbps": busbw, "time_us": 1.0}],
        host={"hostname": host, "ranks": [{"rank": 0, "host": host}, {"rank": 1, "host": host}]},
    )
    if created:
        result.created = created
    return result


def test_home_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("FABRICSCOPE_HOME", str(tmp_path / "fs"))
    assert database_path() == tmp_path / "fs" / "history.sqlite"
    monkeypatch.delenv("FABRICSCOPE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert home() == tmp_path / "data" / "fabricscope"


def test_add_list_filter_get_remove(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        old = (datetime.now(UTC) - timedelta(days=10)).isoformat(timespec="seconds")
        a = history.add(bench("node1", 12.5, created=old), label="before")
        b = history.add(bench("node2", 11.0), label="after")
        c = history.add(Result(kind="estimate", summary={"step_time_s": 1.5, "bottleneck": "compute"}))
        assert [e.id for e in history.entries()] == [a, b, c]
        assert [e.id for e in history.entries(kind="bench")] == [a, b]
        assert [e.id for e in history.entries(label="after")] == [b]
        assert [e.id for e in history.entries(host="node1")] == [a]
        assert [e.id for e in history.entries(since=datetime.now(UTC) - timedelta(days=1))] == [b, c]
        entry = history.entry(a)
        assert entry.hosts == ("node1",) and entry.ranks == 2 and entry.headline == "all_reduce peak busbw 12.50 GB/s"
        assert history.entry(c).headline == "step 1.5 s, bottleneck compute"
        assert history.get(a).to_dict() == bench("node1", 12.5, created=old).to_dict()
        history.remove(a)
        with pytest.raises(UsageError, match="no run 1 in the history"):
            history.get(a)
    with sqlite3.connect(tmp_path / "h.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_reading_a_missing_history_creates_nothing(tmp_path):
    with History(tmp_path / "none" / "h.sqlite", create=False) as history:
        assert history.entries() == []
        with pytest.raises(UsageError, match="nothing is saved yet"):
            history.get(1)
        with pytest.raises(UsageError, match="nothing is saved yet"):
            history.remove(1)  # it asserted an open database before
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("document", "why"),
    [("[" * 100_000 + "]" * 100_000, "nested more than 64 levels deep"), ('{"a": ' + "9" * 5000 + "}", "4300 digits")],
    ids=["deep", "long-number"],
)
def test_a_damaged_stored_run_is_one_error_as_a_damaged_file_is(tmp_path, document, why):
    with History(tmp_path / DATABASE_NAME) as history:
        run_id = history.add(bench())
    with sqlite3.connect(tmp_path / DATABASE_NAME) as conn:
        conn.execute("UPDATE runs SET document = ? WHERE id = ?", (document, run_id))
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "history", "show", str(run_id)],
        capture_output=True,
        text=True,
        env={**cli_env(), "FABRICSCOPE_HOME": str(tmp_path)},
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: history run {run_id}: ") and why in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "content",
    [b"SQLite format 3\x00" + b"\xff" * 200, b"garbage " * 2000, b"{}\n"],
    ids=["bad-header", "garbage", "json"],
)
def test_a_damaged_database_is_one_error_and_left_untouched(tmp_path, content):
    path = tmp_path / "h.sqlite"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=r"damaged or not a database.*left untouched"):
        History(path).add(bench())
    assert path.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["h.sqlite"]


def test_a_truncated_database_is_refused_and_kept(tmp_path):
    path = tmp_path / "h.sqlite"
    with History(path) as history:
        for _ in range(40):
            history.add(bench())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(HistoryError, match="damaged"), History(path) as history:
        history.entries()
        history.add(bench())
    assert path.read_bytes() == data[: len(data) // 2]


def test_foreign_sqlite_and_newer_schema_are_refused(tmp_path):
    foreign = tmp_path / "other.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(HistoryError, match="not a fabricscope history"):
        History(foreign)
    newer = tmp_path / "newer.sqlite"
    History(newer).close()
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(HistoryError, match="upgrade fabricscope"):
        History(newer)


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_database_path_that_is_not_a_file_is_refused(tmp_path, kind):
    path = tmp_path / "h.sqlite"
    path.mkdir() if kind == "folder" else os.mkfifo(path)
    with pytest.raises(HistoryError, match="not a regular"):
        History(path)


SAVER = """
import sys
from fabricscope.results import Result
from fabricscope.store.history import History
for i in range(int(sys.argv[2])):
    with History() as history:
        history.add(Result(kind="bench", host={"hostname": f"p{sys.argv[1]}"}), label=f"{sys.argv[1]}-{i}")
"""


def test_eight_processes_saving_at_once_lose_nothing(tmp_path):
    env = cli_env({"FABRICSCOPE_HOME": str(tmp_path)})
    procs = [
        subprocess.Popen([sys.executable, "-c", SAVER, str(p), "15"], env=env, stderr=subprocess.PIPE, text=True)
        for p in range(8)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 8, errors
    with History(tmp_path / "history.sqlite") as history:
        labels = sorted(e.label for e in history.entries())
    assert labels == sorted(f"{p}-{i}" for p in range(8) for i in range(15))


def test_runs_resolve_files_ids_and_refuse_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICSCOPE_HOME", str(tmp_path / "home"))
    with History() as history:
        run_id = history.add(bench())
    path = tmp_path / "r.json"
    bench("filehost").save(path)
    assert runs.resolve(str(path)).result.host["hostname"] == "filehost"
    assert runs.resolve(str(run_id)).run_id == run_id
    assert runs.resolve(f"#{run_id}").source == f"run {run_id}"
    with pytest.raises(UsageError, match="neither a result file nor a history id"):
        runs.resolve("yesterday")
    with pytest.raises(UsageError, match="is a 'bench' result; this needs 'doctor'"):
        runs.resolve(str(run_id), kinds=["doctor"])
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular"):
        runs.resolve(str(fifo))
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="not a regular"):
        runs.resolve(str(zero))
    with pytest.raises(UsageError, match="a directory"):
        runs.resolve(str(tmp_path))
    with pytest.raises(UsageError, match="file name too long"):
        runs.resolve(str(tmp_path / ("x" * 5000)))
    broken = tmp_path / "cut.json"
    broken.write_text(path.read_text()[:50])
    with pytest.raises(UsageError, match="corrupt result file"):
        runs.resolve(str(broken))


def test_baselines_point_at_history_runs(tmp_path):
    with History(tmp_path / "h.sqlite") as history:
        file_run = runs.Run(result=bench("a"), source="a.json", path="a.json")
        first = baselines.set_baseline(history, "lab-a", file_run)
        assert history.entry(first).label == "baseline lab-a"
        second = history.add(bench("b"))
        again = runs.Run(result=bench("b"), source="x", run_id=second)
        assert baselines.set_baseline(history, "lab-a", again) == second
        assert [(b.name, b.run_id) for b in baselines.listing(history)] == [("lab-a", second)]
        assert baselines.get(history, "lab-a").result.host["hostname"] == "b"
        with pytest.raises(UsageError, match="is the baseline lab-a"):
            history.remove(second)
        baselines.remove(history, "lab-a")
        history.remove(second)
        with pytest.raises(UsageError, match="no baseline named 'lab-a'"):
            baselines.get(history, "lab-a")
        for bad in ["", "-x", "a b", "x" * 65, "a/b"]:
            with pytest.raises(UsageError, match="not allowed"):
                baselines.check_name(bad)


def test_save_helpers(tmp_path, monkeypatch):
    import argparse

    from fabricscope.store.save import add_save_options, check_save_options, save_request, save_result

    monkeypatch.setenv("FABRICSCOPE_HOME", str(tmp_path))
    parser = argparse.ArgumentParser()
    add_save_options(parser)
    assert save_request(parser.parse_args([])) is None
    assert save_result(save_request(parser.parse_args([])), bench()) is None
    assert not (tmp_path / "history.sqlite").exists()
    args = parser.parse_args(["--label", " nightly "])
    check_save_options(args)
    run_id = save_result(save_request(args), bench("labelled"))
    with History() as history:
        assert history.entry(run_id).label == "nightly"
    with pytest.raises(UsageError, match="label"):
        check_save_options(parser.parse_args(["--label", "\x07"]))
