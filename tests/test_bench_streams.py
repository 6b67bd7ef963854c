"""``bench --streams K``: K collectives at once on their own process groups, per-stream and aggregate busbw."""

import threading

import pytest

from fabricscope.bench.streams import GroupDist, time_streams
from fabricscope.results import load
from helpers import run_cli


def test_streams_run_at_once_and_are_timed_each():
    inside, most = [0], [0]
    lock = threading.Lock()
    both = threading.Barrier(3)

    def step():
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        both.wait(timeout=10)  # returns only when all three streams are in a call together
        with lock:
            inside[0] -= 1

    times = time_streams([step, step, step], 4, stopped=lambda: False)
    assert most[0] == 3
    assert len(times.samples) == 4 and len(times.per_stream_s) == 3
    # The aggregate spans every stream: first start to last end.
    assert times.mean_s >= max(times.per_stream_s)
    assert sum(times.samples) <= times.mean_s * 4


def test_a_failing_stream_is_raised_and_the_others_end():
    calls = []

    def good():
        calls.append(1)

    def bad():
        raise RuntimeError("peer closed the connection")

    with pytest.raises(RuntimeError, match="peer closed"):
        time_streams([good, bad], 3, stopped=lambda: False)


def test_a_stop_request_ends_every_stream():
    with pytest.raises(InterruptedError):
        time_streams([lambda: None, lambda: None], 1000, stopped=lambda: True)


def test_group_dist_binds_the_group_to_collectives_only():
    import torch.distributed as dist

    bound = GroupDist(dist, group="G")
    assert bound.all_reduce.func is dist.all_reduce and bound.all_reduce.keywords == {"group": "G"}
    assert bound.P2POp.keywords == {"group": "G"}
    assert bound.isend is dist.isend and bound.ReduceOp is dist.ReduceOp


@pytest.mark.multiprocess
@pytest.mark.parametrize("op", ["all_reduce", "sendrecv", "broadcast", "all_gather"])
def test_streams_run_checked_collectives(tmp_path, op):
    out = tmp_path / "s.json"
    done = run_cli(["bench", op, "-b", "4K", "-e", "16K", "-f", "4", "-n", "5", "--streams", "3", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    assert "# 3 streams at once, each on its own process group" in done.stdout
    assert done.stdout.count("streams, busbw GB/s each: 0: ") == len(load(out).records)
    for record in load(out).records:
        # Every stream's collective is correct on its own group (an in-place sendrecv is run, as
        # nccl-tests runs it, but its result is undefined and not checked).
        assert record["wrong"] == (None if (op, record["placement"]) == ("sendrecv", "in") else 0)
        streams = record["streams"]
        assert [s["stream"] for s in streams] == [0, 1, 2]
        # The aggregate moves the bytes of all three streams in the row's time.
        single = streams[0]["algbw_gbps"] * streams[0]["time_us"]
        assert record["algbw_gbps"] * record["time_us"] == pytest.approx(3 * single)
        for one in streams:
            assert one["busbw_gbps"] / one["algbw_gbps"] == pytest.approx(record["busbw_gbps"] / record["algbw_gbps"])


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "--streams must be a whole number from 1 to 64, got '0'"), ("65", "from 1 to 64"), ("two", "--streams")],
)
def test_streams_usage_errors(value, message):
    done = run_cli(["bench", "--streams", value], timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
