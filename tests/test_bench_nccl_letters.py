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
    # -g 1 is ours; -z, -m and -u are run for real (nothing to note).
    assert [n.split(":")[1].strip().split()[0] for n in notes] == ["-t", "-G"]
    assert "agg iters: 4 validation: 1 graph: 0 unalign: 1" in done.stdout
    assert "mean of 2 iterations of 4 collectives each (per collective)" in done.stdout
    assert "Traceback" not in done.stderr and "unrecognized" not in done.stderr
    data = json.loads(out.read_text())
    assert {"version", "args", "env", "config", "results", "out_of_bounds", "average_bus_bandwidth"} <= set(data)
    assert [r["size"] for r in data["results"]] == [1024, 2048, 4096]
    assert all({"out_of_place", "in_place"} <= set(r) for r in data["results"])
    assert len(data["config"]["devices"]) == 2
    # nccl-tests' own config keys (src/util.cu), as its -J writes them
    config = data["config"]
    assert (config["minimum_bytes"], config["maximum_bytes"], config["step_factor"]) == (1024, 4096, 2)
    assert (config["iterations"], config["aggregated_iterations"], config["validation"]) == (2, 4, 1)
    assert config["blocking_collectives"] == "true" and config["graph"] == 0


def test_the_nccl_tests_json_reads_back_through_import(tmp_path) -> None:
    out, fab, back = tmp_path / "nt.json", tmp_path / "r.json", tmp_path / "back.json"
    # Two cycles (-N 2): each is rows of its own in -J, as in the table (the second overwrote the first).
    done = run_cli(["bench", "all_reduce,all_gather", "-b", "1K", "-e", "4K", "-n", "2", "-N", "2",
                    "--json", str(fab), "-J", str(out)], timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run_cli(["import", "nccl-tests", str(out), "--json", str(back)], timeout=60)
    assert done.returncode == 0, done.stderr
    ours = sorted((r["op"], r["size_bytes"], r["placement"], r["time_us"]) for r in load(fab).records)
    theirs = sorted((r["op"], r["size_bytes"], r["placement"], r["time_us"]) for r in load(back).records)
    assert len(ours) == 2 * 2 * 3 * 2  # ops x cycles x sizes x placements
    assert [t[:3] for t in theirs] == [o[:3] for o in ours]
    assert [t[3] for t in theirs] == pytest.approx([o[3] for o in ours], rel=1e-3)


@pytest.mark.parametrize(("short", "long", "own", "_"), _LETTERS)
def test_every_letter_at_its_default_says_nothing(short, long, own, _) -> None:
    from fabricscope.bench.cli import nccl_tests_notes
    from fabricscope.cli import build_parser

    args = build_parser().parse_args(["bench", short, own or "1"])
    assert nccl_tests_notes(args) == ([] if own else [f"note: {short} 1: {_}"])


def test_unalign_misaligns_every_op_and_each_checks_clean(tmp_path) -> None:
    # nccl-tests' -u N starts both buffers N elements past their allocation; the results stay right.
    out = tmp_path / "u.json"
    done = run_cli(["bench", "all", "-u", "3", "-b", "1K", "-e", "4K", "-f", "4", "-n", "2", "--nproc", "2",
                    "--json", str(out)], timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("unalign: 3") == len({r["op"] for r in load(out).records}) == 11
    checked = [r for r in load(out).records if r["wrong"] is not None]
    assert checked and all(r["wrong"] == 0 for r in checked)


def test_the_buffers_really_start_past_their_allocation() -> None:
    import torch

    from fabricscope.bench.config import BenchConfig
    from fabricscope.bench.runner import Sweep
    from fabricscope.dtypes import DTYPES
    from fabricscope.ops import get

    runner = Sweep.__new__(Sweep)
    runner.torch, runner.device, runner.rank = torch, torch.device("cpu"), 0
    runner.config = BenchConfig(ops=["all_reduce"], unalign=3)
    layout = get("all_reduce").layout(256, 4, 2)
    send, recv = runner._allocate([layout], DTYPES["float"])
    assert send.storage_offset() == recv.storage_offset() == 3
    assert send.data_ptr() % 16 == 12 and send.numel() == layout.send_count


@pytest.mark.parametrize("blocking", [False, True])
def test_blocking_waits_for_each_collective_before_the_next(blocking) -> None:
    # nccl-tests' -z 1: each timed call is waited for before the next is launched; -z 0 (the default)
    # launches the -n calls back to back and waits once, at the end.
    from types import SimpleNamespace

    from fabricscope.bench.config import BenchConfig
    from fabricscope.bench.runner import Sweep
    from fabricscope.ops import Call

    events: list[str] = []
    sweep = Sweep.__new__(Sweep)
    sweep.config = BenchConfig(ops=["all_reduce"], iters=4, blocking=blocking)
    sweep.cuda = False
    sweep.stop = SimpleNamespace(now=False)
    sweep.dist = SimpleNamespace(barrier=lambda: events.append("barrier"))
    sweep._sync = lambda: events.append("sync")  # type: ignore[method-assign]
    plan = Call(step=lambda: events.append("call"), load=lambda seed: None, expected=None, output=None)
    mean, samples = sweep._time(plan)
    timed = events[events.index("barrier") + 1 :]
    assert timed == (["call", "sync"] * 4 if blocking else ["call"] * 4)
    assert len(samples) == 4 and mean >= 0


@pytest.mark.parametrize("blocking", [False, True])
def test_agg_iters_launches_m_collectives_per_timed_iteration_and_times_one(blocking, monkeypatch) -> None:
    # nccl-tests' -m M: each of the -n timed iterations launches M collectives; every time it reports
    # (the row's and each iteration's) is the iteration's over M.
    from types import SimpleNamespace

    import fabricscope.bench.runner as runner_module
    from fabricscope.bench.config import BenchConfig
    from fabricscope.bench.runner import Sweep
    from fabricscope.ops import Call

    events: list[str] = []
    sweep = Sweep.__new__(Sweep)
    sweep.config = BenchConfig(ops=["all_reduce"], iters=2, agg_iters=3, blocking=blocking)
    sweep.cuda = False
    sweep.stop = SimpleNamespace(now=False)
    sweep.dist = SimpleNamespace(barrier=lambda: events.append("barrier"))
    sweep._sync = lambda: events.append("sync")  # type: ignore[method-assign]
    ticks = iter(range(1000))
    monkeypatch.setattr(runner_module.time, "perf_counter", lambda: float(next(ticks) * 3))  # 3 units a stamp
    plan = Call(step=lambda: events.append("call"), load=lambda seed: None, expected=None, output=None)
    mean, samples = sweep._time(plan)
    timed = events[events.index("barrier") + 1 :]
    assert timed == (["call", "sync"] * 6 if blocking else ["call"] * 6)
    assert samples == [1.0, 1.0] and mean == 1.0  # 3 units per iteration of 3 collectives
