"""The sweep a config describes, stepped exactly as nccl-tests steps it."""

import pytest

from fabricscope.bench.config import BenchConfig
from fabricscope.errors import UsageError


@pytest.mark.parametrize(
    ("kwargs", "sizes"),
    [
        ({"min_bytes": 8, "max_bytes": 64}, [8, 16, 32, 64]),
        ({"min_bytes": 8, "max_bytes": 100}, [8, 16, 32, 64]),
        ({"min_bytes": 1024, "max_bytes": 4096, "step_factor": 1, "step_bytes": 1024}, [1024, 2048, 3072, 4096]),
        ({"min_bytes": 1, "max_bytes": 100, "step_factor": 10}, [1, 10, 100]),
        ({"min_bytes": 0, "max_bytes": 0}, [0]),
        ({"min_bytes": 8, "max_bytes": 8, "step_factor": 1, "step_bytes": 0}, [8]),
        ({"min_bytes": 0, "max_bytes": 2000, "step_factor": 1, "step_bytes": 1000}, [0, 1000, 2000]),
    ],
)
def test_sizes(kwargs, sizes):
    assert list(BenchConfig(**kwargs).sizes()) == sizes


def test_warmup_runs_over_the_range_by_factor_two():
    assert list(BenchConfig(min_bytes=1000, max_bytes=5000, step_factor=1, step_bytes=1000).warmup_sizes()) == [
        1000,
        2000,
        4000,
    ]


def test_fit_to_world_drops_only_ops_that_came_from_all():
    config = BenchConfig(ops=["all_reduce", "sendrecv"], optional_ops=["sendrecv"])
    assert config.fit_to_world(1) == ["# sendrecv skipped: it needs at least 2 ranks and this world has 1"]
    assert config.ops == ["all_reduce"]
    with pytest.raises(UsageError, match="sendrecv needs at least 2 ranks"):
        BenchConfig(ops=["sendrecv"]).fit_to_world(1)
    with pytest.raises(UsageError, match="-r \\(root\\) 3 is not a rank"):
        BenchConfig(ops=["broadcast"], root=3).fit_to_world(2)
    assert BenchConfig(ops=["all_reduce"], root=3).fit_to_world(2) == []  # no rooted op: the root is unused


def test_config_round_trips_through_a_dict():
    config = BenchConfig(ops=["alltoall"], dtypes=["half"], redops=["max"], min_busbw_gbps=5.0)
    assert BenchConfig.from_dict(config.to_dict()) == config


def test_a_sweep_of_too_many_rows_in_all_is_refused_before_it_runs():
    """10,000 sizes are allowed, and so is every op, datatype and reduction of a default sweep; all of them
    at once is more rows than MAX_TABLE_ROWS (a million took minutes and gigabytes to price and print)."""
    from fabricscope.sweep import MAX_TABLE_ROWS, SweepConfig

    every = {"ops": ["all_reduce", "reduce_scatter", "all_gather"], "dtypes": ["float", "half", "int8", "double"]}
    every["redops"] = ["sum", "prod", "max", "min", "avg"]
    SweepConfig(**every)  # the default sizes: 23 x 4 x (5 + 5 + 1) rows
    SweepConfig(min_bytes=8, max_bytes=80_000, step_bytes=8, step_factor=1)
    # reductions multiply the reducing ops only: all_gather with every reduction is 10,000 x 4 rows
    SweepConfig(min_bytes=8, max_bytes=80_000, step_bytes=8, step_factor=1, **{**every, "ops": ["all_gather"]})
    assert MAX_TABLE_ROWS < 440_000
    with pytest.raises(UsageError, match=r"has 440000 rows \(10000 sizes x 4 datatypes x 11 op and reduction pairs\)"):
        SweepConfig(min_bytes=8, max_bytes=80_000, step_bytes=8, step_factor=1, **every)
