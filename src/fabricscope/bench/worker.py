"""One rank of a ``bench`` run: join the world, sweep, report, exit cleanly.

Run as ``python -m fabricscope.bench.worker`` by the local spawner (config in
``FABRICSCOPE_BENCH_CONFIG``), or called in-process by ``fabricscope bench``
when torchrun, mpirun or srun started this process.

Exit codes: 0 success; 1 wrong elements, a failed or hung peer, or a file
that could not be written; 2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from fabricscope import launch
from fabricscope import ops as ops_registry
from fabricscope.bench.config import BenchConfig
from fabricscope.bench.runner import Sweep
from fabricscope.errors import RunError
from fabricscope.launch import lifecycle, rank
from fabricscope.launch.outcome import Ending, EndingKind
from fabricscope.metadata import collect_env

__all__ = ["CONFIG_VARIABLE", "main", "run_rank"]

CONFIG_VARIABLE = "FABRICSCOPE_BENCH_CONFIG"


def run_rank(config: BenchConfig, world: launch.World) -> int:
    """Run this rank's part of the benchmark; return its exit code (see :func:`lifecycle.run_rank`)."""
    return lifecycle.run_rank(
        world, lambda: config.fit_to_world(world.world_size), lambda notes: _run(config, world, notes)
    )


_RESERVE_BYTES = 1 << 30
"""Memory left to everything else on each rank (nccl-tests keeps 1 GiB too)."""


def _run(config: BenchConfig, world: launch.World, notes: list[str]) -> int:
    group = lifecycle.join(world, config.launch, "bench")
    torch, dist, backend, device, peers = group.torch, group.dist, group.backend, group.device, list(group.peers)
    # A rank holds a send and a receive buffer of up to -e bytes each, per stream (the check's
    # expected values are made in small chunks); CPU ranks on one host share its memory.
    limit = lifecycle.fit_to_memory(
        world,
        group,
        buffers=2 * config.streams,
        reserve_bytes=_RESERVE_BYTES,
        smallest=config.min_bytes,
        largest=config.max_bytes,
        what=f"-b {config.min_bytes}",
    )
    note = f"#  Reducing maxBytes to {limit} due to memory limitation" if limit < config.max_bytes else ""
    config.max_bytes = limit
    if world.rank == 0 and backend == "gloo" and len({p.host for p in peers}) == 1:
        rank.say(0, _cpu_note(len(peers)))

    stop = lifecycle.StopFlag()
    output = None
    if world.rank == 0:
        from fabricscope.bench.output import Output

        env = collect_env(
            backend=backend,
            world_size=world.world_size,
            launcher=world.launcher,
            torch_threads=torch.get_num_threads(),
        )
        if backend == "nccl":
            with contextlib.suppress(Exception):
                env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        output = Output(
            notes=[note] if note else [],
            first_notes=notes,
            config=config,
            peers=peers,
            backend=backend,
            launcher=world.launcher,
            env=env,
            progress_total=_row_count(config) if config.run_cycles else 0,
            # A closed stdout (``bench | head -1``) must not change the verdict: a bounded sweep
            # goes on to its end unread; only an endless one (-N 0) stops, as nothing else ends it.
            on_stdout_closed=stop.set if config.run_cycles == 0 and config.duration_s is None else None,
        )

    def on_stall(message: str) -> None:
        rank.say(world.rank, f"error: {message}; stopping")
        if output is not None:
            output.finish("failed", message)

    heartbeat = lifecycle.start_heartbeat(world, peers, output, on_stall)
    # From here on a stop request ends the current row, keeps every row finished,
    # and exits cleanly on every rank; before, there is nothing to keep (see main()).
    stop.catch_signals()
    sweep = Sweep(
        torch=torch,
        dist=dist,
        config=config,
        rank=world.rank,
        world_size=world.world_size,
        backend=backend,
        device=device,
        heartbeat=heartbeat,
        stop=stop,
    )
    wrong_total = 0
    try:
        for name in config.ops:
            op = ops_registry.get(name)
            if output is not None:
                output.start_op(op)
            for records in sweep.rows(op):
                wrong_total += sum(r.wrong or 0 for r in records)
                if output is not None:
                    output.row(records)
            if output is not None:
                output.end_op(op)
    except lifecycle.Interrupted as stopped:
        kind: EndingKind = "stdout_closed" if stopped.output_closed else "signal"
        return lifecycle.stop_interrupted(world, output, heartbeat, Ending(kind=kind, wrong=wrong_total))
    except RunError as exc:
        lifecycle.conclude(world, output, Ending(kind="run_error", reason=str(exc)))
    except lifecycle.PeerCallFailed as failure:
        ending = replace(lifecycle.classify(failure, stop=stop, heartbeat=heartbeat), wrong=wrong_total)
        if ending.kind == "signal":
            return lifecycle.stop_interrupted(world, output, heartbeat, ending)
        lifecycle.conclude(world, output, ending)
    heartbeat.stop()
    code = lifecycle.conclude(world, output, Ending(kind="complete", wrong=wrong_total), exit_now=False)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return code


def _cpu_note(ranks: int) -> str:
    """What a run of CPU ranks on one host measures, and what to run for the fabric (the default benchmark on
    a machine without GPUs is one); said once the run is sure to start, so a usage error stays one line."""
    return (
        f"note: {ranks} CPU processes on this host (gloo over loopback): the GB/s are this machine's memory and "
        "loopback, not a network; on a GPU node run 'fabricscope bench' (one NCCL rank per GPU), across nodes "
        "'torchrun --nnodes N --nproc-per-node G -m fabricscope bench'"
    )


def _row_count(config: BenchConfig) -> int:
    per_op = len(list(config.sizes())) * max(config.run_cycles, 1) * len(config.dtypes)
    total = 0
    for name in config.ops:
        op = ops_registry.get(name)
        total += per_op * (len(config.redops) if op.reduces else 1)
    return total


def main() -> None:
    """Entry point of a spawned rank."""
    rank.spawned_rank_main("bench", CONFIG_VARIABLE, BenchConfig.from_dict, run_rank)


if __name__ == "__main__":
    main()
