"""Byte counts and bus-bandwidth factors against nccl-tests' definitions."""

import pytest

from fabricscope import ops
from fabricscope.dtypes import DTYPES
from fabricscope.errors import UsageError


def _row(op, size, dtype="float", n=8):
    coll = ops.get(op)
    elt = DTYPES[dtype].size
    layout = coll.layout(size // elt, elt, n)
    return coll, layout, coll.size_bytes(layout, elt)


def test_superbench_log_row_reproduces():
    # SuperBench tests/data/nccl_allreduce.log, 8x A100: 8388608 B in 162.0 us -> 51.79 / 90.63 GB/s
    coll, layout, size = _row("all_reduce", 8388608)
    assert (size, layout.count) == (8388608, 2097152)
    algbw, busbw = coll.bandwidths(layout, 4, 8, 162.0e-6)
    assert round(algbw, 2) == 51.78  # the log rounds the time; 8388608/162e-6/1e9 = 51.78
    assert busbw == pytest.approx(algbw * 2 * 7 / 8)


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce", 2, 1.0),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("alltoall", 16, 15 / 16),
        ("gather", 4, 0.75),
        ("scatter", 4, 0.75),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 8, 1.0),
    ],
)
def test_busbw_factors(op, n, factor):
    assert ops.get(op).busbw_factor(n) == pytest.approx(factor)


def test_all_gather_counts_are_per_rank_and_size_is_the_whole_output():
    coll, layout, size = _row("all_gather", 1 << 20, n=8)
    assert layout.count == 32768
    assert size == 1 << 20
    assert layout.send_count == 32768 and layout.recv_count == 32768 * 8
    algbw, _ = coll.bandwidths(layout, 4, 8, 1.0)
    assert algbw == pytest.approx((1 << 20) / 1e9)


def test_per_rank_count_rounds_down_to_16_bytes():
    _, layout, size = _row("all_gather", 64, dtype="int8", n=3)
    assert (layout.count, size) == (16, 48)
    _, layout, size = _row("reduce_scatter", 8, n=2)
    assert (layout.count, size) == (0, 0)
    _, layout, size = _row("alltoall", 1 << 20, n=4)
    assert (layout.count, size) == (65536, 1 << 20)


def test_gather_and_scatter_are_not_aligned():
    _, layout, size = _row("gather", 64, n=3)
    assert (layout.count, size) == (5, 60)
    _, layout, size = _row("scatter", 64, n=3)
    assert (layout.count, size, layout.send_count, layout.recv_count) == (5, 60, 15, 5)


def test_reduce_scatter_in_place_output_sits_at_the_rank_offset():
    _, layout, _ = _row("reduce_scatter", 1 << 20, n=4)
    assert layout.recv_inplace_offset == layout.count
    assert layout.send_inplace_offset == 0
    assert layout.buffer_count == layout.count * 4


def test_zero_time_gives_zero_bandwidth():
    coll, layout, _ = _row("all_reduce", 1024)
    assert coll.bandwidths(layout, 4, 8, 0.0) == (0.0, 0.0)


def test_every_op_has_a_distinct_program_name():
    programs = [c.program for c in ops.COLLECTIVES.values()]
    assert len(set(programs)) == len(programs) == 11
    assert ops.get("all_reduce").program == "all_reduce_perf"


def test_names_aliases_and_all():
    assert ops.get("allreduce").name == "all_reduce"
    assert ops.get("all_gather_perf").name == "all_gather"
    assert [c.name for c in ops.parse_ops(["all"])] == list(ops.COLLECTIVES)
    assert [c.name for c in ops.parse_ops(["broadcast,reduce", "broadcast"])] == [
        "broadcast",
        "reduce",
    ]


def test_unknown_op_suggests_and_lists():
    with pytest.raises(UsageError) as info:
        ops.get("all_reduse")
    message = str(info.value)
    assert "did you mean 'all_reduce'" in message
    assert "alltoall" in message and "or all" in message
