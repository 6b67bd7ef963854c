"""Command lines copied from nccl-tests run: every letter is taken, -J writes nccl-tests' JSON."""

from __future__ import annotations

import json

import pytest

from fabricscope.bench.cli import _LETTERS
from fabricscope.results import load
from helpers import run_cli

pytestmark = pytest.mark.multiprocess


def test_a_command_line_from_a_public_log_runs_with_one_note_per_letter_that_differs(tmp_path) -> None:
    # `all_reduce_perf -b 8 -e 128M -f 2 -g 1` (nccl-tests issue 119) with the other letters users pass.
    out = tmp_path / "nt.json"
    done = run_cli(
        ["bench", "-b", "1K", "-e", "4K", "-f", "2", "-g", "1", "-t", "2", "-z", "1", "-G", "5", "-m", "4",
         "-u", "1", "-n", "2", "-J", str(out)],
        timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: -")]
    assert [n.split(":")[1].strip().split()[0] for n in notes] == ["-t", "-m", "-z", "-G", "-u"]  # -g 1 is ours
    assert "Traceback" not in done.stderr and "unrecognized" not in done.stderr
    data = json.loads(out.read_text())
    assert {"version", "args", "env", "config", "results", "out_of_bounds", "average_bus_bandwidth"} <= set(data)
    assert [r["size"] for r in data["results"]] == [1024, 2048, 4096]
    assert all({"out_of_place", "in_place"} <= set(r) for r in data["results"])
    assert len(data["config"]["devices"]) == 2


def test_the_nccl_tests_json_reads_back_through_import(tmp_path) -> None:
    out, fab, back = tmp_path / "nt.json", tmp_path / "r.json", tmp_path / "back.json"
    done = run_cli(["bench", "all_reduce,all_gather", "-b", "1K", "-e", "4K", "-n", "2", "--json", str(fab),
                    "-J", str(out)], timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run_cli(["import", "nccl-tests", str(out), "--json", str(back)], timeout=60)
    assert done.returncode == 0, done.stderr
    ours = {(r["op"], r["size_bytes"], r["placement"]): r["time_us"] for r in load(fab).records}
    theirs = {(r["op"], r["size_bytes"], r["placement"]): r["time_us"] for r in load(back).records}
    assert theirs == pytest.approx(ours) and {op for op, _, _ in theirs} == {"all_reduce", "all_gather"}


@pytest.mark.parametrize(("short", "long", "own", "_"), _LETTERS)
def test_every_letter_at_its_default_says_nothing(short, long, own, _) -> None:
    from fabricscope.bench.cli import nccl_tests_notes
    from fabricscope.cli import build_parser

    args = build_parser().parse_args(["bench", short, own or "1"])
    assert nccl_tests_notes(args) == ([] if own else [f"note: {short} 1: {_}"])
