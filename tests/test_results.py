import json
import os
import stat
import subprocess
import sys

import pytest

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.outputs import atomic_write_text, check_output_path
from fabricscope.results import FORMAT, VERSION, CollectiveRecord, Result, load, percentile
from helpers import cli_env, run_cli


def _record(**overrides):
    fields = dict(
        op="all_reduce",
        size_bytes=1024,
        count=256,
        dtype="float",
        redop="sum",
        root=-1,
        placement="out",
        time_us=10.0,
        algbw_gbps=0.1,
        busbw_gbps=0.1,
        wrong=0,
    )
    fields.update(overrides)
    return CollectiveRecord(**fields)


def test_result_round_trip(tmp_path):
    path = tmp_path / "r.json"
    result = Result(
        kind="bench", config={"ops": ["all_reduce"]}, records=[_record(samples_us=[3.0, 1.0, 2.0]).to_dict()]
    )
    result.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT
    assert data["version"] == VERSION
    assert data["created"].endswith("+00:00")
    loaded = load(path)
    assert loaded.kind == "bench"
    assert loaded.records[0]["p50_us"] == 2.0
    assert loaded.records[0]["min_us"] == 1.0
    assert loaded.records[0]["max_us"] == 3.0


def test_measured_and_predicted_records_share_the_fields():
    measured = _record(samples_us=[1.0, 2.0]).to_dict()
    predicted = _record(algorithm="ring").to_dict()
    shared = {
        "op",
        "size_bytes",
        "count",
        "dtype",
        "redop",
        "root",
        "placement",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "wrong",
    }
    assert shared <= set(measured)
    assert shared <= set(predicted)
    assert "samples_us" not in predicted


def test_percentile_as_nccl_tests_indexes_it():
    # nccl-tests takes sorted[n * pct / 100]: the upper median for even n.
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 50) == 51
    assert percentile(values, 99) == 100
    assert percentile(values, 100) == 100
    assert percentile([5.0], 99) == 5.0
    twenty = [float(v) for v in range(20)]
    assert percentile(twenty, 50) == twenty[10]
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0


def test_coefficient_of_variation_is_kept_with_the_samples():
    from fabricscope.results import coefficient_of_variation

    assert coefficient_of_variation([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(2.138 / 5, rel=1e-3)
    assert coefficient_of_variation([3.0]) is None
    record = _record(size_bytes=8, count=2, algbw_gbps=0.0, busbw_gbps=0.0, samples_us=[9.0, 10.0, 11.0])
    assert record.cv == pytest.approx(0.1)
    assert record.p50_us == 10.0


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "corrupt result file"),
        ("[]", "expected a JSON object"),
        ('{"format": "nccl-tests"}', "not a fabricscope result"),
        (
            json.dumps({"format": FORMAT, "version": 99, "kind": "bench", "records": [], "config": {}}),
            "version 99",
        ),
        (
            json.dumps({"format": FORMAT, "version": 1, "kind": "bench", "records": {}, "config": {}}),
            "'records'",
        ),
        (
            json.dumps(
                {
                    "format": FORMAT,
                    "version": 1,
                    "kind": "bench",
                    "records": [],
                    "config": {},
                    "status": "odd",
                }
            ),
            "status 'odd'",
        ),
    ],
)
def test_load_rejects_bad_files_with_one_clear_line(tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ResultFormatError) as info:
        load(path)
    assert fragment in str(info.value)
    assert str(path) in str(info.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(ResultFormatError, match="no such result file"):
        load(tmp_path / "absent.json")


def test_atomic_write_keeps_old_content_when_the_write_fails(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(RunError, match="cannot write"):
        atomic_write_text(tmp_path / "missing-dir" / "r.json", "new")
    assert path.read_text() == "old"
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert os.listdir(tmp_path) == ["r.json"]


def test_bad_placement_is_an_internal_error():
    with pytest.raises(ValueError):
        _record(placement="sideways")


def test_saved_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


def test_a_link_is_followed_and_kept(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_pipe_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        check_output_path("--json", str(fifo))
        atomic_write_text(fifo, "through")
        assert os.read(reader, 100) == b"through"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("missing/r.json", "does not exist"),
        (".", "is a folder: give a file name"),
    ],
)
def test_output_paths_that_cannot_be_written_are_refused(tmp_path, name, fragment):
    with pytest.raises(UsageError, match=fragment):
        check_output_path("--json", str(tmp_path / name))


def test_an_output_folder_where_no_file_can_be_created_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"--json /proc/r\.json: cannot create a file in /proc"):
        check_output_path("--json", "/proc/r.json")
    check_output_path("--json", str(tmp_path / "r.json"))
    assert os.listdir(tmp_path) == []  # the probe file is gone


def test_json_to_dev_stdout_goes_down_the_pipe():
    # /dev/stdout -> /proc/self/fd/1 -> a pipe that realpath cannot name: written through, as a user expects,
    # and, as with -, the table goes to stderr.
    done = run_cli(["validate", "--json", "/dev/stdout"])
    assert done.returncode == 0, done.stderr
    assert "median |error|" in done.stderr
    assert json.loads(done.stdout)["kind"] == "validate"


def test_json_to_dev_stdout_redirected_to_a_file_is_written_through(tmp_path):
    # `>> out.txt`: /dev/stdout resolves to out.txt itself: written through (appended), never replaced.
    out = tmp_path / "out.txt"
    out.write_text("kept\n")
    with out.open("a") as handle:
        done = subprocess.run(
            [sys.executable, "-m", "fabricscope", "validate", "--json", "/dev/stdout"],
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    kept, document = out.read_text().split("\n", 1)
    assert kept == "kept" and json.loads(document)["kind"] == "validate"
    assert done.stderr.startswith("collectives.csv:") and "median |error|" in done.stderr


def _with(record_change=None, **top):
    record = dict(op="all_reduce", size_bytes=1024, count=256, dtype="float", redop="sum", root=-1)
    record.update(placement="out", time_us=5.0, algbw_gbps=0.2, busbw_gbps=0.35, wrong=0)
    record.update(record_change or {})
    return json.dumps({"format": FORMAT, "version": 1, "kind": "bench", "records": [record], "config": {}, **top})


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (_with({"op": 5}), "record 0 has op = 5: it must be text, not a number"),
        (_with({"dtype": [1]}), "record 0 has dtype = [1]: it must be text, not a list"),
        (_with({"placement": {"a": 1}}), "has placement = {'a': 1}: it must be text, not an object"),
        (_with({"wrong": "3"}), "has wrong = '3': it must be a number"),
        (_with(created=[1, 2]), "field 'created' must be text (an ISO 8601 time), not a list"),
        (_with(summary=[]), "field 'summary' must be a JSON object, not a list"),
        (_with(host="node1"), "field 'host' must be a JSON object, not text"),
        (_with(error=7), "field 'error' must be text, not a number"),
    ],
)
def test_wrong_types_inside_a_result_are_refused_on_load(tmp_path, content, fragment):
    # Valid JSON with the wrong types in it crashed report, history show, compare and calibrate:
    # the loader every command uses checks them, one line naming the field and what it must be.
    path = tmp_path / "typed.json"
    path.write_text(content)
    with pytest.raises(ResultFormatError) as info:
        load(path)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_a_record_without_a_time_prints_na_and_draws_nothing(tmp_path):
    # A null time_us is allowed (a row that never completed): the table says N/A, the plots skip it.
    from fabricscope import table
    from fabricscope.report.plots import Series, busbw_plots, latency_plots

    path = tmp_path / "null.json"
    path.write_text(_with({"time_us": None}))
    result = load(path)
    line = table.format_row(table.pair_rows(result.records)[0], check=True)
    assert "N/A" in line.split()[5]
    series = [Series("run", result)]
    assert busbw_plots(series) and latency_plots(series) == []


def test_a_new_result_carries_its_environment_and_a_loaded_one_keeps_its_own(tmp_path):
    """Every producer's Result says what made it (versions, platform, NCCL variables, command line)
    unless it gives its own; reading a file back never replaces the environment the file holds."""
    from fabricscope import __version__
    from fabricscope.results import Result, load

    made = Result(kind="compare")
    assert made.env["fabricscope"] == __version__ and isinstance(made.env["argv"], list)
    assert {"python", "platform", "hostname", "variables"} <= set(made.env)
    path = tmp_path / "r.json"
    Result(kind="dataload", env={"source": "elsewhere"}).save(str(path))
    assert load(path).env == {"source": "elsewhere"}
