"""The exit-code policy of bench and pairs as a table: each ending, its status, its lines, its exit code."""

from __future__ import annotations

import pytest

from fabricscope.launch.outcome import Ending, decide

KEPT = "the 12 records"


@pytest.mark.parametrize(
    ("ending", "status", "error", "lines", "code"),
    [
        (Ending(kind="complete"), "complete", None, [], 0),
        (Ending(kind="complete", wrong=3), "complete", None, ["found 3 wrong element(s)"], 1),
        (
            Ending(kind="complete", below_minimum=("all_reduce",), min_busbw_gbps=100.0),
            "complete",
            None,
            ["all_reduce is below 0.9 x NCCL_TESTS_MIN_BW (100 GB/s)"],
            1,
        ),
        (
            Ending(kind="complete", write_errors=("cannot write r.json: No space left on device",)),
            "complete",
            None,
            ["cannot write r.json: No space left on device; the table above holds every row"],
            1,
        ),
        (
            Ending(kind="signal", records=12, json_path="r.json"),
            "interrupted",
            "interrupted by a signal",
            [f"interrupted (interrupted by a signal): {KEPT} measured so far are kept in r.json"],
            130,
        ),
        (
            Ending(kind="signal", records=12),
            "interrupted",
            "interrupted by a signal",
            [f"{KEPT} measured so far are in the table above (no --json file was asked for)"],
            130,
        ),
        (Ending(kind="stdout_closed", records=12), "interrupted", "its output was closed", [], 0),
        (Ending(kind="stdout_closed", wrong=1), "interrupted", "its output was closed", ["1 wrong element"], 1),
        (
            Ending(
                kind="peer_failed", reason="rank 1 (pid 7 on n1) stopped responding", records=12, json_path="r.json"
            ),
            "failed",
            "rank 1 (pid 7 on n1) stopped responding",
            [f"error: rank 1 (pid 7 on n1) stopped responding; {KEPT} measured before are kept in r.json"],
            1,
        ),
        (
            Ending(kind="run_error", reason="collective stalled"),
            "failed",
            "collective stalled",
            ["error: collective"],
            1,
        ),
    ],
)
def test_each_ending(ending, status, error, lines, code):
    verdict = decide(ending)
    assert verdict.status == status
    assert verdict.error == error
    assert verdict.exit_code == code
    assert len(verdict.messages) == len(lines)
    for message, fragment in zip(verdict.messages, lines, strict=True):
        assert fragment in message


def test_several_verdicts_are_all_said():
    verdict = decide(
        Ending(
            kind="complete",
            wrong=2,
            below_minimum=("reduce",),
            min_busbw_gbps=1.0,
            write_errors=("disk full", "history read-only"),
        )
    )
    assert verdict.exit_code == 1
    assert [m.split(" ", 3)[1] for m in verdict.messages] == ["average", "disk", "history", "the"]


def test_pairs_says_what_it_still_shows():
    """pairs ends by the same policy; what is left when its file fails is the printed report."""
    verdict = decide(Ending(kind="complete", write_errors=("cannot write p.json",), shown="the report above holds it"))
    assert verdict.messages == ("error: cannot write p.json; the report above holds it",)
    assert verdict.exit_code == 1
