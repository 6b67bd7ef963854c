"""The nccl-tests importer: pure parsing of the logs in tests/store/data (see its README)."""

import json
from pathlib import Path

import pytest

from fabricscope.errors import UsageError
from fabricscope.store import nccl_tests

DATA = Path(__file__).parent / "data"


def parse(name, **kwargs):
    path = DATA / name
    return nccl_tests.parse(path.read_text(), source=str(path), **kwargs)


def rows(result, op=None, placement="out"):
    return [r for r in result.records if r["placement"] == placement and (op is None or r["op"] == op)]


def test_current_format_keeps_every_column_and_the_devices():
    result = parse("current_all_reduce_h100x8.log")
    assert result.kind == "nccl-tests" and result.status == "complete"
    out = rows(result)
    assert [r["size_bytes"] for r in out] == [8 << i for i in range(25)]
    first = out[0]
    assert (first["count"], first["dtype"], first["redop"], first["root"], first["wrong"]) == (2, "float", "sum", -1, 0)
    last = out[-1]
    assert last["size_bytes"] == 134217728 and last["busbw_gbps"] > 300
    assert len(rows(result, placement="in")) == 25
    assert [r["rank"] for r in result.host["ranks"]] == list(range(8))
    assert result.host["ranks"][3]["bus_id"] == "0000:48:00"
    assert result.host["gpus"] == ["NVIDIA H100 80GB HBM3"]
    assert result.env["nccl_tests_version"] == "2.17.1" and result.env["nccl_version_code"] == 22703
    assert result.config["tests"][0]["iters"] == 20 and result.config["tests"][0]["step_factor"] == 2
    summary = result.summary["all_reduce"]
    assert summary["nccl_tests_avg_busbw_gbps"] == pytest.approx(
        sum(r["busbw_gbps"] for r in result.records) / len(result.records), rel=1e-3
    )


def test_several_collectives_in_one_log_and_unchecked_rows():
    result = parse("multi_collective_2x4_a100.log")
    assert result.config["ops"] == ["all_reduce", "all_gather", "broadcast"]
    assert {r["op"] for r in result.records} == {"all_reduce", "all_gather", "broadcast"}
    assert all(r["wrong"] is None for r in result.records)  # -c 0 prints N/A
    assert {r["root"] for r in rows(result, "broadcast")} == {0}
    assert {r["redop"] for r in rows(result, "all_gather")} == {"none"}
    assert result.host["hosts"] == ["node-a", "node-b"]


def test_old_format_error_column_and_devices_without_group():
    result = parse("old_error_column_rtx2080.log")
    assert result.config["ops"] == ["all_gather"]  # from the echoed mpirun command
    out = rows(result)
    assert out[0]["root"] == -1 and out[0]["wrong"] is None
    assert out[0]["max_error"] == pytest.approx(3e-08)
    assert result.host["ranks"][0]["group"] is None and result.host["ranks"][0]["bus_id"] == "0x3d"


def test_old_format_without_program_name_takes_the_file_name_or_op():
    assert parse("old_format_allreduce_8xa100.log").config["ops"] == ["all_reduce"]
    text = (DATA / "old_format_allreduce_8xa100.log").read_text()
    with pytest.raises(UsageError, match="--op"):
        nccl_tests.parse(text, source="run.log")
    assert nccl_tests.parse(text, source="run.log", op="all_reduce").records[-1]["size_bytes"] == 8 << 30


def test_mpirun_tags_are_stripped_and_other_ranks_noise_ignored():
    result = parse("mpirun_tagged_reduce_scatter_2x8.log")
    assert result.status == "complete" and len(result.host["ranks"]) == 16
    assert [r["size_bytes"] for r in rows(result)] == [1 << i for i in range(20, 31)]


def test_slurm_labels_are_stripped():
    result = parse("slurm_labelled_alltoall_4x8.log")
    assert result.config["ops"] == ["alltoall"] and len(result.host["ranks"]) == 32
    assert result.host["hosts"] == ["gpu-000", "gpu-001", "gpu-002", "gpu-003"]


def test_a_build_without_mpi_keeps_the_first_process_table():
    result = parse("mpirun_without_mpi_build.log")
    assert [r["host"] for r in result.host["ranks"]] == ["ip-10-0-1-5"]
    assert len(rows(result)) == 7 and "other process" in result.summary["notes"][0]


def test_cputime_and_timestamp_columns():
    result = parse("cputime_timestamps_sendrecv_rccl.log")
    assert len(rows(result)) == 15 and result.host["ranks"][1]["bus_id"] == "0000:25:00.0"
    assert rows(result)[0]["time_us"] == pytest.approx(11.89)


def test_truncated_log_keeps_rows_before_the_cut():
    result = parse("truncated_all_reduce.log")
    assert result.status == "partial" and "ends inside a row" in result.error
    assert rows(result)[-1]["size_bytes"] == 8388608  # the 16M row was cut


def test_truncated_log_at_a_line_end_is_partial_too():
    text = (DATA / "current_all_reduce_h100x8.log").read_text()
    cut = text[: text.index("# Out of bounds")]
    result = nccl_tests.parse(cut, source="x.log")
    assert result.status == "partial" and "footer" in result.error and len(result.records) == 50


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("        1024           256", "1" + "0" * 400 + "           256", "at most 20 digits"),
        ("        1024           256", "        1024           ²", "at most 20 digits"),
        ("1024           256     float     sum      -1    32.12", "1024           256     float", "fields"),
        ("    32.12    0.03", "    3x.12    0.03", "not a number"),
        ("    32.12    0.03", "    \u0663\u0662.12    0.03", "not a number"),  # Arabic-Indic digits: float() takes them
        ("0.06       0    31.24", "0.06       " + "9" * 400 + "    31.24", "not a number"),  # a #wrong of 400 digits
        ("0.06       0    31.24", "0.06    1e308    31.24", "not a number"),  # nor is 1e308 a count
        ("0.06       0    31.24", "0.06      -5    31.24", "is negative"),
        ("32.12    0.03    0.06", "32.12    0.03   -0.06", "is negative"),
    ],
)
def test_a_row_that_cannot_be_read_is_left_out_and_said(old, new, why):
    """A corrupt row in the middle of a table (400 digits, a superscript, a cut line) is named, not dropped silently."""
    text = (DATA / "current_all_reduce_h100x8.log").read_text()
    assert text.count(old) == 1
    result = nccl_tests.parse(text.replace(old, new), source="x.log")
    assert result.status == "partial"
    assert "all_reduce: 1 table row could not be read and was left out (the first: " in result.error
    assert why in result.error
    assert 1024 not in [r["size_bytes"] for r in rows(result)] and len(rows(result)) == 24


def test_lines_that_only_start_with_digits_are_not_rows_and_a_cut_row_is_named_as_such():
    text = (DATA / "current_all_reduce_h100x8.log").read_text()
    row = "        2048           512     float     sum      -1"
    stamped = "1746425807 dgx-a07:4100:4100 [0] NCCL WARN NET/IB : Got async event : port error\n"
    result = nccl_tests.parse(text.replace(row, stamped + row), source="x.log")  # NCCL_DEBUG_TIMESTAMP_FORMAT=%s_
    assert result.status == "complete" and len(result.records) == 50
    # a killed job: the log ends inside a row, and the launcher's message follows it
    cut = text[: text.index(row) + len(row) + 12] + "\nslurmstepd: error: *** STEP 42.0 CANCELLED AT 2026-12-01 ***\n"
    result = nccl_tests.parse(cut, source="x.log")
    assert result.status == "partial" and "the log ends inside a row" in result.error
    assert "could not be read" not in result.error and len(rows(result)) == 8


def test_json_output():
    result = parse("json_all_reduce_2x8.json")
    assert result.status == "complete" and result.config["ops"] == ["all_reduce"]
    assert len(result.records) == 2 * 26 and rows(result)[0]["root"] == -1 and rows(result)[0]["wrong"] == 0
    assert result.env["nccl_env"] == {"NCCL_IB_HCA": "mlx5_0,mlx5_3", "NCCL_DEBUG": "WARN"}
    assert result.host["hosts"] == ["h100-0", "h100-1"] and len(result.host["ranks"]) == 16


def test_a_json_result_that_cannot_be_read_is_left_out_and_said():
    data = json.loads((DATA / "json_all_reduce_2x8.json").read_text())
    data["results"][3]["in_place"]["time"] = "fast"
    data["results"][3]["out_of_place"]["bus_bw"] = None  # one result with both placements unread: counted once
    data["results"][5]["size"] = int("9" * 400)
    data["results"].append(7)
    result = nccl_tests.parse(json.dumps(data), source="x.json")
    assert result.status == "partial" and len(result.records) == 2 * 26 - 4
    assert result.error.startswith("3 results could not be read and were left out (the first: results[3].out_of_place")


def test_json_cut_short_is_partial_with_the_finished_rows():
    result = parse("json_truncated_all_gather.json")
    assert result.status == "partial" and len(rows(result)) == 9
    assert result.config["ops"] == ["all_gather"] and len(result.host["ranks"]) == 8


@pytest.mark.parametrize(
    "text",
    [
        (DATA / "not_nccl_tests_iperf3.txt").read_text(),
        "",
        "{}",
        '{"results": 3}',
        "# size count\n1 2 3\n",
        "\x00" * 100,
    ],
)
def test_other_text_is_refused(text):
    with pytest.raises(UsageError, match="not nccl-tests"):
        nccl_tests.parse(text, source="other.txt")


def test_prefix_and_program_helpers():
    assert nccl_tests.strip_prefix("[1,3]<stdout>:# x") == ("mpi:3", "# x")
    assert nccl_tests.strip_prefix("12: # x") == ("slurm:12", "# x")
    assert nccl_tests.strip_prefix("           8             2") == ("", "           8             2")
    assert nccl_tests.op_from_program("/opt/build/all_reduce_perf_mpi") == "all_reduce"
    assert nccl_tests.guess_op("AllGather-2nodes.log") == "all_gather"
    assert nccl_tests.guess_op("run.log") is None


@pytest.mark.parametrize(
    "text",
    [
        "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
        + "9" * 5000
        + " 2 float sum -1 1 1 1 0 1 1 1 0\n",
        '{"config": {}, "results": [{"size": ' + "9" * 5000 + "}]}",
        '{"config": {}, "results": [{"size": ' + "9" * 400 + ', "count": 1, "type": "float", "redop": "sum", '
        '"out_of_place": {"time": 1, "alg_bw": 1, "bus_bw": 1, "nwrong": 0}}]}',
        '{"config": ' + "[" * 5000 + "]" * 5000 + ', "results": []}',
        '{"config": {}, "results": [' + "[" * 5000,
    ],
    ids=["5000-digit-row", "5000-digit-json", "400-digit-json", "nested-5000", "nested-cut"],
)
def test_hostile_numbers_and_nesting_are_refused_or_skipped(text):
    try:
        result = nccl_tests.parse(text, source="hostile.log", op="all_reduce")
    except UsageError as exc:
        assert "hostile.log" in str(exc)
    else:
        assert all(len(str(r["size_bytes"])) <= 20 for r in result.records)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        # (a #wrong of 1e308 is no count: its row is left out and said, test_a_row_that_cannot_be_read_...)
        ("           8             2     float", "99999999999999999999             2     float", "size_bytes"),
    ],
)
def test_import_writes_nothing_fabricscope_cannot_read_back(tmp_path, old, new, field):
    # Before, the import exited 0 and then history show, compare and report refused the file.
    from helpers import run_cli

    text = (DATA / "current_all_reduce_h100x8.log").read_text()
    assert old in text
    log = tmp_path / "odd.log"
    log.write_text(text.replace(old, new, 1))
    out = tmp_path / "odd.json"
    done = run_cli(["import", "nccl-tests", str(log), "--json", str(out)], timeout=60)
    assert done.returncode == 2 and not out.exists()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {log}: records[") and field in lines[0]


def _long_log(path: Path, rows: int) -> None:
    lines = [
        "# Collective test starting: all_reduce_perf",
        "#  Rank  0 Group  0 Pid  12345 on node1 device  0 [0x1b] NVIDIA H100 80GB HBM3",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
        "busbw #wrong",
    ]
    part = "   30.00    1.00    1.75      0"
    lines += [f"{8 * (i + 1):>12} {2 * (i + 1):>12}     float     sum      -1  {part}  {part}" for i in range(rows)]
    path.write_text("\n".join([*lines, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 1.75", ""]))


@pytest.mark.slow
def test_a_long_import_shows_its_progress_on_a_terminal_only(tmp_path):
    """Issue 25: long work shows progress.  A 60,000-row log takes seconds: a terminal's stderr sees
    how far the reading is; a pipe sees nothing but the summary."""
    import subprocess
    import sys

    from helpers import cli_env, run_with_terminal_stderr

    log = tmp_path / "long.log"
    _long_log(log, 60_000)
    code, stdout, terminal = run_with_terminal_stderr(
        ["import", "nccl-tests", str(log), "--json", str(tmp_path / "r.json")], timeout=300
    )
    assert code == 0, terminal
    assert "import reading" in terminal and "/60,005 lines" in terminal, terminal[-2000:]
    assert "all_reduce; 120000 records" in stdout, stdout  # out-of-place and in-place rows
    piped = subprocess.run(
        [sys.executable, "-m", "fabricscope", "import", "nccl-tests", str(log)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=300,
    )
    assert piped.returncode == 0 and "import reading" not in piped.stderr and "lines" not in piped.stderr


def test_the_older_error_column_may_say_nan_and_its_row_is_kept():
    text = (DATA / "old_error_column_rtx2080.log").read_text()
    old = "   30.42    0.00    0.00  0e+00    31.15"
    assert text.count(old) == 1
    result = nccl_tests.parse(text.replace(old, "   30.42    0.00    0.00   -nan    31.15"), source="x.log")
    assert result.status == "complete"
    row = next(r for r in rows(result) if r["size_bytes"] == 128)
    assert row["time_us"] == 30.42 and "max_error" not in row and row["wrong"] is None


@pytest.mark.parametrize(
    "text",
    [
        '{"config": {}, "results": []}',
        '{"args": ["all_reduce_perf"], "config": {}, "results": [], "end_time": "x"}',
        "\n".join(
            line
            for line in (DATA / "current_all_reduce_h100x8.log").read_text().splitlines()
            if not line.strip()[:1].isdigit()
        ),
    ],
    ids=["json-empty", "json-finished", "text-header-and-footer"],
)
def test_output_without_one_row_is_refused(text):
    with pytest.raises(UsageError, match=r"without one row measured.*nothing to import"):
        nccl_tests.parse(text, source="x", op="all_reduce")


def test_a_count_of_wrong_elements_printed_with_percent_g_is_kept():
    """nccl-tests prints #wrong with %g: 16,777,216 wrong elements read 1.67772e+07; that row is the one that
    says the run was corrupt, and it is kept with its count."""
    text = (DATA / "current_all_reduce_h100x8.log").read_text()
    old = "340.51       0   665.67  201.63  352.85       0"
    assert text.count(old) == 1
    result = nccl_tests.parse(
        text.replace(old, "340.51  1.67772e+07   665.67  201.63  352.85  1.67772e+07"), source="x"
    )
    assert result.status == "complete" and len(result.records) == 50
    assert [r["wrong"] for r in result.records if r["size_bytes"] == 134217728] == [16777200, 16777200]
    assert result.summary["all_reduce"]["wrong"] == 2 * 16777200
