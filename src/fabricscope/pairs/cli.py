"""``fabricscope pairs``: bandwidth and latency of every link between ranks (or nodes), to find the slow one.

Only the standard library is imported here; torch is imported by the ranks.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Any

from fabricscope import options
from fabricscope.options import SubParsers
from fabricscope.pairs.config import BY, MAX_ITERS, MAX_SIZE
from fabricscope.store.save import add_save_options, check_save_options, wants_save

__all__ = ["add_parser", "build_config", "run"]

_EPILOG = """\
Pairs that share no rank run at the same time, in n-1 rounds (circle method; n
rounds for an odd n, one rank resting each round).  Each link is tested both
ways: bandwidth (--size messages, back to back) and latency (8 B ping-pong).
Outliers: a modified z-score (median absolute deviation) beyond 3.5 on the slow side,
or a link 10x slower than the median.

Without a launcher, pairs spawns --nproc local ranks; under torchrun, mpirun,
srun or RANK/WORLD_SIZE/MASTER_ADDR variables it joins that world.  --json is
rewritten after every round; Ctrl-C stops at once and keeps the finished rounds.

examples:
  fabricscope pairs --nproc 4 --size 16M
  torchrun --nnodes 8 --nproc-per-node 8 ... -m fabricscope pairs --by node --json pairs.json
  srun -N 16 --ntasks-per-node 1 fabricscope pairs
"""


def add_parser(subparsers: SubParsers) -> None:
    parser = subparsers.add_parser(
        "pairs",
        help="bandwidth and latency between every pair of ranks or nodes: find the slow link",
        description="Test every link both ways, print the matrices, flag outliers and name the slowest link.",
        epilog=_EPILOG,
    )
    parser.add_argument(
        "--size",
        type=options.size(minimum=1, maximum=MAX_SIZE),
        default="64M",
        help="bandwidth test message, K/M/G binary (default 64M; the latency test uses 8 B)",
    )
    parser.add_argument("--by", choices=BY, default="rank", help="pair every rank (default) or every node")
    options.add_iteration_options(
        parser,
        maximum=MAX_ITERS,
        iters_help="timed messages per direction and test",
        warmup_help="untimed messages before each timed series",
        warmup_default=2,
    )
    options.add_launch_options(
        parser,
        min_ranks=2,
        nproc_default="2",
        nproc_help="local ranks to spawn when no launcher is used (default 2)",
        timeout_default=120,
        timeout_help="time any message may take before its peer is declared failed",
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="write a Result (rewritten after every round)")
    add_save_options(parser)
    parser.set_defaults(func=run)


def build_config(args: argparse.Namespace) -> Any:
    """The :class:`PairsConfig` the flags describe."""
    from fabricscope.outputs import OutputConfig
    from fabricscope.pairs.config import PairsConfig

    return PairsConfig(
        size_bytes=args.size,
        iters=args.iters,
        warmup_iters=args.warmup_iters,
        by=args.by,
        launch=options.launch_config(args),
        output=OutputConfig(json_path=args.json, save=wants_save(args), label=args.label, argv=list(sys.argv)),
    )


def run(args: argparse.Namespace) -> int:
    from fabricscope import launch
    from fabricscope.errors import MissingDependencyError

    check_save_options(args)
    config = build_config(args)
    world = launch.detect(master_addr=config.launch.master_addr, master_port=config.launch.master_port)
    if (world is None or world.rank == 0) and config.output.json_path is not None:
        from fabricscope.outputs import check_output_path

        check_output_path("--json", config.output.json_path)
    if world is not None:
        from fabricscope.pairs.worker import run_rank

        config.launch.nproc = world.world_size
        return run_rank(config, world)
    if importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("fabricscope pairs needs torch: pip install 'fabricscope[torch]'")
    from fabricscope.launch.rank import import_torch
    from fabricscope.pairs.worker import CONFIG_VARIABLE

    master_addr = config.launch.master_addr or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    return launch.spawn(
        config.launch.nproc,
        ["fabricscope.pairs.worker"],
        {CONFIG_VARIABLE: json.dumps(config.to_dict())},
        grace_s=config.launch.timeout_s + 15.0,
        master_addr=master_addr,
        master_port=config.launch.master_port,
        on_rank_killed=lambda message: _mark_failed(config.output.json_path, message),
        warm=lambda: import_torch("pairs"),
    )


def _mark_failed(json_path: str | None, message: str) -> None:
    """Rank 0 cannot mark its file any more when it was the one killed: the launcher does."""
    from fabricscope.outputs import written_through
    from fabricscope.results import mark_unfinished

    if json_path and not written_through(json_path):
        mark_unfinished(json_path, "failed", message)
