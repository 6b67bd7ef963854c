"""``--save`` and ``--label`` on every command that produces a Result, into one real history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "doctor" / "fixtures"


@pytest.mark.multiprocess
def test_every_producing_command_saves_into_one_history(tmp_path):
    env = {"FABRICSCOPE_HOME": str(tmp_path / "home")}
    runs = [
        (["bench", "-b", "8", "-e", "1K", "-f", "8", "-n", "2"], "bench"),
        (["predict", "--cluster", "dgx-h100-ndr", "-e", "1K"], "predict"),
        (["estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr"], "estimate"),
        (["doctor", "--root", str(FIXTURES / "healthy-ib-8gpu")], "doctor"),
        (["monitor", "--duration", "0.5", "--interval", "0.1", "--interfaces", "lo"], "monitor"),
        (["pairs", "--nproc", "2", "--size", "64K", "-n", "2"], "pairs"),
        (["plan", "--model", "llama-7b", "--gpus", "64"], "plan"),
    ]
    printed = {}
    for args, kind in runs:
        done = run_cli([*args, "--label", f"nightly-{kind}"], env=env, timeout=180)
        assert done.returncode == 0, (kind, done.stderr)  # each succeeds here (doctor: a healthy node)
        assert f"saved the {kind} result as run" in done.stderr or "saved " in done.stderr, (kind, done.stderr)
        printed[kind] = done.stdout
    listed = run_cli(["history", "--json", "-"], env=env)
    assert listed.returncode == 0, listed.stderr
    for _, kind in runs:
        done = run_cli(["history", "--kind", kind], env=env)
        assert done.returncode == 0 and f"nightly-{kind}" in done.stdout, (kind, done.stdout)
        shown = run_cli(["history", "show", done.stdout.split("\n")[1].split()[0], "--json", "-"], env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout[shown.stdout.index('{\n "format"') :])["kind"] == kind
        if kind == "pairs":  # the matrices and findings as pairs printed them
            matrix = [line for line in printed[kind].splitlines() if not line.startswith("#")]
            assert matrix and "bandwidth: algbw_gbps (GB/s)" in matrix[0]
            plain = run_cli(["history", "show", done.stdout.split("\n")[1].split()[0]], env=env)
            text = plain.stdout.splitlines()
            assert text[text.index(matrix[0]) :][: len(matrix)] == matrix


def test_calibrate_takes_an_imported_log_and_a_history_id(tmp_path):
    env = {"FABRICSCOPE_HOME": str(tmp_path / "home")}
    log = Path(__file__).parent / "data" / "current_all_reduce_h100x8.log"
    done = run_cli(["import", "nccl-tests", str(log), "--save", "--json", str(tmp_path / "i.json")], env=env)
    assert done.returncode == 0, done.stderr
    for run in (str(tmp_path / "i.json"), "1"):
        out = tmp_path / f"c{len(run)}.toml"
        done = run_cli(["calibrate", run, "-o", str(out)], env=env)
        assert done.returncode == 0, done.stderr
        assert "[calibration.all_reduce]" in out.read_text()


def test_compare_of_sweeps_that_share_nothing_is_an_error_not_a_pass(tmp_path):
    gather, reduce = tmp_path / "g.json", tmp_path / "r.json"
    for op, path in (("all_gather", gather), ("all_reduce", reduce)):
        done = run_cli(["predict", op, "--cluster", "dgx-h100-ndr", "-e", "1K", "--json", str(path)])
        assert done.returncode == 0, done.stderr
    done = run_cli(["compare", str(reduce), "--against", str(gather)])
    assert done.returncode == 2 and "nothing to compare" in done.stderr and done.stderr.count("\n") == 1
