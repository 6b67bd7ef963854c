"""``fabricscope bench``: the command line of the collective benchmark.

Flags keep nccl-tests' letters and meanings (``-b -e -i -f -n -w -c -o -d -r
-a -N -T`` and their long forms); sizes take binary K/M/G suffixes.  Only the
standard library is imported here; torch is imported by the ranks.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import sys
from typing import Any

from fabricscope import options
from fabricscope.bench.config import (
    AVERAGE_MODES,
    MAX_AGG_ITERS,
    MAX_CHECK_ITERS,
    MAX_DURATION_S,
    MAX_ITERS,
    MAX_RANKS,
    MIN_DURATION_S,
)
from fabricscope.bench.streams import MAX_STREAMS
from fabricscope.errors import UsageError
from fabricscope.options import Flags, SubParsers
from fabricscope.store.save import add_save_options, check_save_options, wants_save

__all__ = ["add_parser", "build_config", "nccl_tests_notes", "run"]

_EPILOG = """\
ops: all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter ps hypercube, or all
  (ps: the parameter-server pattern, run beside an all_reduce of the same bytes; --servers K;
   hypercube: nccl-tests' recursive-doubling all-gather, on a power-of-two number of ranks;
   not available: nccl-tests' alltoallv, whose per-peer counts its binary fixes)
datatypes: float half bfloat16 double int8 uint8 int32 int64, or all
  (aliases: float32 fp32 float16 fp16 float64 fp64 bf16 char int)
reductions: sum prod min max avg, or all

Without a launcher, bench spawns --nproc local ranks (gloo on CPU, NCCL on GPUs).
Under torchrun, mpirun (Open MPI, MPICH/Intel MPI) or srun it joins that world.
NCCL_TESTS_MIN_BW=GB/s (as nccl-tests): exit 1 when an op's average busbw is below 0.9 x it.
Ctrl-C or SIGTERM ends the current row at once; every finished row is kept (exit 130).

examples:
  fabricscope bench                                  # all_reduce, 8 B to 32 MiB, 2 local ranks
  fabricscope bench all -b 1K -e 16M --json out.json
  fabricscope bench all_gather -d bfloat16 -n 50 -w 5 --nproc 4
  torchrun --nproc-per-node 8 -m fabricscope bench -b 8 -e 8G -f 2
  mpirun -np 16 -x MASTER_ADDR=node1 fabricscope bench reduce_scatter
"""


def add_parser(subparsers: SubParsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="collective benchmark (nccl-tests compatible) over torch.distributed",
        description="Measure collectives over torch.distributed and print the nccl-tests table.",
        epilog=_EPILOG,
    )
    parser.add_argument(
        "ops",
        nargs="*",
        metavar="OP",
        help="collectives to run, by name or comma-separated (default all_reduce; 'all' for every op)",
    )
    sizes = parser.add_argument_group("sizes (nccl-tests flags; K/M/G are binary)")
    timing = parser.add_argument_group("timing and checking")
    data = parser.add_argument_group("data")
    options.add_sweep_options(sizes, data=data)
    options.add_iteration_options(
        timing,
        maximum=MAX_ITERS,
        iters_help="timed iterations per size",
        warmup_help="warmup iterations per size",
        warmup_default=1,
    )
    timing.add_argument(
        "-c",
        "--check",
        type=options.whole(minimum=0, maximum=MAX_CHECK_ITERS),
        default="1",
        help="correctness-check iterations, 0 = off (default 1)",
    )
    timing.add_argument(
        "-z",
        "--blocking",
        type=options.choice({0: "back to back", 1: "blocking"}),
        default="0",
        help="1: wait for each collective before launching the next, as nccl-tests' -z 1 (default 0: back to back)",
    )
    timing.add_argument(
        "-m",
        "--agg_iters",
        type=options.whole(minimum=1, maximum=MAX_AGG_ITERS),
        default="1",
        help="collectives per timed iteration, launched back to back; times are per collective, as nccl-tests' -m "
        "(default 1; launched one by one, not in one NCCL group)",
    )
    timing.add_argument(
        "-u",
        "--unalign",
        type=options.whole(minimum=0, maximum=MAX_UNALIGN),
        default="0",
        help="misalign the send and receive buffers by N elements, as nccl-tests' -u (default 0)",
    )
    timing.add_argument(
        "-a",
        "--average",
        type=options.choice(AVERAGE_MODES),
        default="1",
        help="combine ranks' times: 0 rank0, 1 avg, 2 min, 3 max (default 1)",
    )
    timing.add_argument(
        "-N",
        "--run_cycles",
        type=options.whole(minimum=0, maximum=MAX_ITERS),
        default=None,
        help="repeat the sweep N times (default 1); 0 = until interrupted (one op, datatype and reduction)",
    )
    timing.add_argument(
        "--duration",
        type=options.seconds(minimum=MIN_DURATION_S, maximum=MAX_DURATION_S),
        default=None,
        metavar="S",
        help="instead of -N: repeat the sweep (or one size, -b = -e) of each op for S seconds and keep every "
        "iteration: p50, p99, max, CV, spikes above 3x the median and the time series (in --json)",
    )
    timing.add_argument(
        "--streams",
        type=options.whole(minimum=1, maximum=MAX_STREAMS, hint="1 runs one collective at a time, as nccl-tests"),
        default="1",
        metavar="K",
        help="run K collectives at once, each on its own process group (threads; CUDA streams on GPUs); "
        "prints the aggregate busbw and each stream's (default 1)",
    )
    data.add_argument(
        "--servers",
        type=options.whole(minimum=1, maximum=MAX_RANKS),
        default="1",
        metavar="K",
        help="ps: server ranks 0..K-1, each owning 1/K of the gradient (default 1)",
    )
    launching = parser.add_argument_group("launch and output")
    options.add_launch_options(
        launching,
        nproc_help="local ranks to spawn when no launcher is used (default one per GPU, else 2)",
        timeout_default=300,
        timeout_help="time any collective may take",
    )
    launching.add_argument("--json", default=None, metavar="FILE", help="write a Result (rewritten after every row)")
    launching.add_argument("--csv", default=None, metavar="FILE", help="write a flat CSV table")
    launching.add_argument(
        "-J",
        "--output_file",
        dest="nccl_json",
        default=None,
        metavar="FILE",
        help="also write the run in nccl-tests' own -J JSON layout (every op in one file)",
    )
    add_save_options(launching)
    _add_nccl_tests_letters(parser.add_argument_group("other nccl-tests flags (accepted; see the note each prints)"))
    parser.set_defaults(func=run)


MAX_UNALIGN = 1 << 20
"""Largest -u: a misalignment of up to a million elements (nccl-tests takes any int)."""

_LETTERS: tuple[tuple[str, str, str, str], ...] = (
    # (short, long, value that is fabricscope's own behaviour, what fabricscope does instead)
    ("-t", "--nthreads", "1", "fabricscope runs one thread per process: start more ranks (--nproc, or your launcher)"),
    (
        "-g",
        "--ngpus",
        "1",
        "fabricscope runs one GPU per rank: start one rank per GPU (--nproc N, torchrun --nproc-per-node N)",
    ),
    ("-p", "--parallel_init", "0", "torch.distributed creates the communicator: nothing to parallelise"),
    ("-y", "--stream_null", "0", "collectives run on torch's current stream"),
    ("-G", "--cudagraph", "0", "no CUDA graph capture: each iteration is launched"),
    ("-C", "--report_cputime", "0", "the time column is the collective's time, not the CPU launch time"),
    ("-R", "--local_register", "0", "buffers are torch tensors, not registered with NCCL"),
    ("-x", "--cta_policy", "", "NCCL's CTA policy is not set by fabricscope (use NCCL_* variables)"),
    ("-D", "--device_implementation", "0", "collectives run through torch.distributed, not NCCL's device API"),
    ("-V", "--device_cta_count", "", "collectives run through torch.distributed, not NCCL's device API"),
    ("-I", "--per_iter_timing", "0", "every iteration's time is kept in --json (samples_us, p50, p99, CV)"),
    ("-K", "--per_iter_skip", "0", "every iteration's time is kept in --json (samples_us, p50, p99, CV)"),
    ("-S", "--report_timestamps", "0", "--json records when the run was made (created)"),
    ("-M", "--memory", "0", "memory use is not printed"),
)
"""nccl-tests letters fabricscope takes so that a command line copied from nccl-tests runs: at their default
they change nothing; any other value prints one note of what fabricscope does instead."""


def _add_nccl_tests_letters(group: Flags) -> None:
    for short, long, _, _ in _LETTERS:
        group.add_argument(
            short,
            long,
            dest=f"nt_{long[2:]}",
            type=options.whole(minimum=0, maximum=1 << 20),
            default=None,
            metavar="N",
            help=argparse.SUPPRESS,
        )


def nccl_tests_notes(args: argparse.Namespace) -> list[str]:
    """One ``note:`` line for each nccl-tests letter given a value other than fabricscope's behaviour."""
    notes = []
    for short, long, own, instead in _LETTERS:
        value = getattr(args, f"nt_{long[2:]}", None)
        if value is None or str(value) == own:
            continue
        notes.append(f"note: {short} {value}: {instead}")
    return notes


def _min_busbw() -> float | None:
    text = os.environ.get("NCCL_TESTS_MIN_BW")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"NCCL_TESTS_MIN_BW must be a bandwidth in GB/s, got {text!r}") from None


def build_config(args: argparse.Namespace) -> Any:
    """The :class:`BenchConfig` the flags describe (raises UsageError on bad input)."""
    from fabricscope import ops as ops_registry
    from fabricscope.bench.config import BenchConfig
    from fabricscope.outputs import OutputConfig

    ops = [c.name for c in ops_registry.parse_ops(args.ops)] if args.ops else ["all_reduce"]
    named = [c.name for c in ops_registry.parse_ops([o for o in args.ops if o.strip().lower() != "all"])]
    optional = [op for op in ops if op not in named] if args.ops else []
    if "ps" in ops and "all_reduce" not in ops:
        # ps is read against an all_reduce of the same bytes: run it beside, right after.
        ops.insert(ops.index("ps") + 1, "all_reduce")
    if args.blocking == 1 and args.streams > 1:
        raise UsageError(
            "-z 1 waits for each collective before the next, and --streams runs several at once: give one of them"
        )
    if args.agg_iters > 1 and args.streams > 1:
        raise UsageError(
            "-m launches several collectives per iteration on one stream, and --streams runs one per stream at "
            "once: give one of them"
        )
    if args.duration is not None and args.run_cycles is not None:
        raise UsageError("-N/--run_cycles and --duration both say how long to repeat the sweep: give one of them")
    return BenchConfig(
        ops=ops,
        **options.sweep_fields(args),
        iters=args.iters,
        warmup_iters=args.warmup_iters,
        check=args.check,
        unalign=args.unalign,
        agg_iters=args.agg_iters,
        blocking=args.blocking == 1,
        average=args.average,
        run_cycles=1 if args.run_cycles is None else args.run_cycles,
        duration_s=args.duration,
        streams=args.streams,
        servers=args.servers,
        optional_ops=optional,
        min_busbw_gbps=_min_busbw(),
        launch=options.launch_config(args, default_nproc=_default_nproc),
        output=OutputConfig(
            json_path=args.json,
            csv_path=args.csv,
            nccl_json_path=args.nccl_json,
            argv=list(sys.argv),
            save=wants_save(args),
            label=args.label,
        ),
    )


def _check_output_paths(config: Any) -> None:
    from fabricscope.outputs import check_outputs

    check_outputs(config.output.flagged())


def _gpu_count() -> int:
    """NVIDIA GPUs the driver lists (read without importing torch); 0 without the driver."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def _default_nproc() -> int:
    """One rank per GPU when NVIDIA GPUs are present, else 2."""
    return _gpu_count() or 2


def run(args: argparse.Namespace) -> int:
    from fabricscope import launch
    from fabricscope.errors import MissingDependencyError, UsageError

    check_save_options(args)
    config = build_config(args)
    world = launch.detect(master_addr=config.launch.master_addr, master_port=config.launch.master_port)
    if world is None or world.rank == 0:
        for note in nccl_tests_notes(args):
            sys.stderr.write(note + "\n")
    if world is None or world.rank == 0:
        _check_output_paths(config)  # only rank 0 writes them, on its own host
    if world is not None:
        from fabricscope.bench.worker import run_rank

        if args.nproc is not None and world.rank == 0:
            sys.stderr.write(f"warning: --nproc is ignored: {world.launcher} started {world.world_size} ranks\n")
        config.launch.nproc = world.world_size
        return run_rank(config, world)

    if importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("fabricscope bench needs torch: pip install 'fabricscope[torch]'")
    copy.deepcopy(config).fit_to_world(config.launch.nproc)  # refuse now; rank 0 notes what it skips
    if config.launch.backend == "nccl" and not _gpu_count():  # once here, not once per rank
        raise UsageError("--backend nccl needs CUDA GPUs and none is visible here; use --backend gloo or auto")
    from fabricscope.bench.worker import CONFIG_VARIABLE
    from fabricscope.launch.rank import import_torch

    _note_oversubscription(config.launch.nproc, config.launch.backend)
    master_addr = config.launch.master_addr or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    launch.check_master_reachable(
        launch.World(
            rank=0,
            world_size=config.launch.nproc,
            local_rank=0,
            local_world_size=config.launch.nproc,
            master_addr=master_addr,
            master_port=config.launch.master_port or 1,
            launcher="spawn",
        ),
        1.0,
    )
    return launch.spawn(
        config.launch.nproc,
        ["fabricscope.bench.worker"],
        {CONFIG_VARIABLE: json.dumps(config.to_dict())},
        grace_s=config.launch.timeout_s + 15.0,
        master_addr=master_addr,
        master_port=config.launch.master_port or _env_port(),
        on_rank_killed=lambda message: _mark_failed(config.output.json_path, message),
        warm=lambda: import_torch("bench"),
    )


def _mark_failed(json_path: str | None, message: str) -> None:
    """Rank 0 cannot mark its file any more when it was the one killed: the launcher does."""
    from fabricscope.outputs import written_through
    from fabricscope.results import mark_unfinished

    if json_path and not written_through(json_path):
        mark_unfinished(json_path, "failed", message)


def _note_oversubscription(nproc: int, backend: str) -> None:
    """Say when CPU ranks outnumber the cores they may run on: their times then include waiting."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if nproc > cores and (backend == "gloo" or not _gpu_count()):
        sys.stderr.write(
            f"note: {nproc} ranks on {cores} CPU core(s): ranks take turns on the cores (oversubscribed), "
            "so the times include waiting for a core\n"
        )


def _env_port() -> int | None:
    """``MASTER_PORT`` from the environment for spawned ranks, checked as --master-port is."""
    from fabricscope.errors import UsageError

    text = os.environ.get("MASTER_PORT", "").strip()
    if not text:
        return None
    try:
        return options.port()(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"MASTER_PORT {exc}") from None
