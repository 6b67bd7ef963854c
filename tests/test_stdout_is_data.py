"""An output flag given ``-`` owns standard output: the data alone, and it parses; the report goes to stderr.

Every command with an output flag, through the real CLI (bench and pairs with two gloo ranks).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_env, run_cli

TESTS = Path(__file__).parent
LOG_10GBE = TESTS / "model" / "data" / "hkbu-2080ti" / "10gbe-8nodes-4gpus.log"
LOG_H100 = TESTS / "store" / "data" / "current_all_reduce_h100x8.log"
LOG_2X8 = TESTS / "store" / "data" / "json_all_reduce_2x8.json"
DEGRADED = TESTS / "doctor" / "fixtures" / "degraded-ib-8gpu"


def _data(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, done.stderr
    assert "wrote -" not in done.stderr
    return done.stdout


def _json(done: subprocess.CompletedProcess[str], code: int = 0) -> Any:
    return json.loads(_data(done, code))  # the whole of stdout: nothing before or after the document


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A result of an imported nccl-tests log (8 nodes x 4 GPUs on 10 GbE)."""
    path = tmp_path_factory.mktemp("imported") / "x.json"
    done = run_cli(["import", "nccl-tests", str(LOG_10GBE), "--op", "all_reduce", "--json", str(path)])
    assert done.returncode == 0, done.stderr
    return path


@pytest.mark.parametrize(
    ("args", "kind", "report"),
    [
        (["predict", "--cluster", "dgx-h100-ndr", "-e", "1K"], "predict", "# algorithm"),
        (["estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr"], "estimate", "llama-7b"),
        (["plan", "--model", "llama-7b", "--gpus", "64"], "plan", "llama-7b"),
        (["validate"], "validate", "median |error|"),
        (["import", "nccl-tests", str(LOG_H100)], "nccl-tests", "all_reduce peak busbw"),
        (["dataload", str(TESTS / "model" / "data")], "dataload", "total:"),
    ],
)
def test_json_dash_is_the_result_alone_and_the_report_is_on_stderr(args, kind, report):
    done = run_cli([*args, "--json", "-"])
    assert _json(done)["kind"] == kind
    assert report in done.stderr


def test_dataload_verdict_is_kept_when_its_json_goes_to_stdout():
    need = ["--need", "100000000", "--sample-size", "1M"]  # far beyond any disk: the GPUs starve, exit 1
    done = run_cli(["dataload", str(TESTS / "model" / "data"), *need, "--json", "-"])
    assert _json(done, code=1)["kind"] == "dataload"
    assert "verdict: STARVES" in done.stderr


def test_calibrate_to_stdout_is_a_cluster_file_that_predict_reads(imported, tmp_path):
    done = run_cli(["calibrate", str(imported), "-o", "-"])
    fitted = tomllib.loads(_data(done))
    assert "all_reduce" in fitted["calibration"]
    assert "fit error" in done.stderr  # the fit table
    piped = tmp_path / "piped.toml"
    piped.write_text(done.stdout)
    again = run_cli(["predict", "--cluster", str(piped), "-b", "64M", "-e", "64M", "--json", "-"])
    assert _json(again)["records"][0]["size_bytes"] == 64 << 20


def test_history_and_compare_to_stdout(tmp_path):
    env = {"FABRICSCOPE_HOME": str(tmp_path / "home")}
    runs = []
    for log in (LOG_H100, LOG_2X8):
        runs.append(tmp_path / f"{log.stem}.json")
        done = run_cli(["import", "nccl-tests", str(log), "--save", "--json", str(runs[-1])], env=env)
        assert done.returncode == 0, done.stderr
    listed = _json(run_cli(["history", "--json", "-"], env=env))
    assert [entry["kind"] for entry in listed] == ["nccl-tests", "nccl-tests"]
    shown = run_cli(["history", "show", "1", "--json", "-"], env=env)
    assert _json(shown)["kind"] == "nccl-tests" and "dgx-a07" in shown.stderr
    # The 16-rank run is slower than the 8-rank one below 32M: regressions, exit 1, with either output on stdout.
    compared = run_cli(["compare", str(runs[1]), "--against", str(runs[0]), "--json", "-"])
    assert _json(compared, code=1)["summary"]["verdict"] == "regressed"
    assert "regressed" in compared.stderr
    ticket = run_cli(["compare", str(runs[1]), "--against", str(runs[0]), "--markdown", "-"])
    assert _data(ticket, code=1).startswith("### ") and "regressed" in ticket.stderr
    page = run_cli(["report", str(runs[0]), "-o", "-"])
    assert _data(page).lstrip().lower().startswith("<!doctype html") and _data(page).rstrip().endswith("</html>")
    assert "plots" in page.stderr


def test_doctor_verdict_is_kept_when_its_json_goes_to_stdout():
    done = run_cli(["doctor", "--root", str(DEGRADED), "--json", "-"])
    assert _json(done, code=2)["summary"]["verdict"] == "fail"
    assert "verdict: FAIL" in done.stderr


@pytest.mark.multiprocess
def test_doctor_fleet_json_to_stdout_with_two_ranks():
    done = run_cli(["doctor", "--root", str(DEGRADED), "--nproc", "2", "--json", "-"])
    assert _json(done, code=2)["summary"]["verdict"] == "fail"
    assert "verdict: FAIL" in done.stderr


def test_monitor_json_and_record_to_stdout_and_a_watched_commands_output_to_stderr():
    watch = ["monitor", "--duration", "0.3", "--interval", "0.1", "--interfaces", "lo", "--no-gpu"]
    assert _json(run_cli([*watch, "--json", "-"]))["kind"] == "monitor"
    lines = [json.loads(line) for line in _data(run_cli([*watch, "--record", "-"])).splitlines()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "end"
    done = run_cli([*watch, "--json", "-", "--", sys.executable, "-c", "print('from the command')"])
    assert _json(done)["summary"]["command_exit_status"] == 0
    assert "from the command" in done.stderr


@pytest.mark.parametrize(
    ("args", "clash"),
    [
        (["monitor", "--duration", "0.3", "--json", "-", "--record", "-"], "--json and --record"),
        (
            ["compare", str(LOG_2X8), "--against", str(LOG_H100), "--json", "-", "--markdown", "-"],
            "--json and --markdown",
        ),
    ],
)
def test_two_outputs_on_stdout_are_refused(args, clash):
    done = run_cli(args)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line == f"error: {clash} both write to standard output, where only one can: give one a file name"


def test_dev_stdout_is_standard_output_too():
    done = run_cli(["predict", "--cluster", "dgx-h100-ndr", "-e", "1K", "--json", "/dev/stdout"])
    assert _json(done)["kind"] == "predict" and "# algorithm" in done.stderr


@pytest.mark.multiprocess
def test_bench_json_and_csv_to_stdout_with_two_ranks():
    bench = ["bench", "-b", "8", "-e", "1K", "-f", "8", "-n", "2", "-w", "1", "--nproc", "2", "--backend", "gloo"]
    done = run_cli([*bench, "--json", "-"])
    result = _json(done)
    assert result["status"] == "complete" and len(result["records"]) == 6  # 8, 64, 512 B, out- and in-place
    assert "# Collective test concluded" in done.stderr
    done = run_cli([*bench, "--csv", "-"])
    rows = list(csv.DictReader(io.StringIO(_data(done))))
    assert len(rows) == 6 and {row["op"] for row in rows} == {"all_reduce"}
    assert "# Avg bus bandwidth" in done.stderr


@pytest.mark.multiprocess
def test_pairs_json_to_stdout_with_two_ranks():
    done = run_cli(["pairs", "--size", "4K", "-n", "2", "--nproc", "2", "--json", "-"])
    assert _json(done)["kind"] == "pairs"
    assert "slowest link:" in done.stderr


def test_a_closed_stdout_keeps_the_verdict():
    # `| head -1` takes one line of the JSON and goes; the doctor's verdict (exit 2) stays.
    cmd = f"{sys.executable} -m fabricscope doctor --root {DEGRADED} --json - | head -1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120, env=cli_env()
    )
    assert done.returncode == 2 and done.stdout == "{\n", done.stderr
    assert "Traceback" not in done.stderr
