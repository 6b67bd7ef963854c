"""One rank of a ``bench`` run: join the world, sweep, report, exit cleanly.

Run as ``python -m fabricscope.bench.worker`` by the local spawner (config in
``FABRICSCOPE_BENCH_CONFIG``), or called in-process by ``fabricscope bench``
when torchrun, mpirun or srun started this process.

Exit codes: 0 success; 1 wrong elements, a failed or hung peer, or a file
that could not be written; 2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import replace
from typing import Any

from fabricscope import launch
from fabricscope import ops as ops_registry
from fabricscope.bench.config import BenchConfig
from fabricscope.bench.outcome import Ending, decide
from fabricscope.bench.runner import CollectiveFailed, Interrupted, StopFlag, Sweep
from fabricscope.errors import FabricscopeError, RunError, UsageError
from fabricscope.launch import rank
from fabricscope.launch.heartbeat import Heartbeat, describe_exception
from fabricscope.metadata import collect_env

__all__ = ["CONFIG_VARIABLE", "main", "run_rank"]

CONFIG_VARIABLE = "FABRICSCOPE_BENCH_CONFIG"


def run_rank(config: BenchConfig, world: launch.World) -> int:
    """Run this rank's part of the benchmark; return its exit code.

    Usage errors that every rank finds identically (the config against the
    world size) are printed by rank 0 only; the others by the rank that saw them.
    """
    rank.guard_startup(world.rank)
    rank.stop_when_orphaned()
    try:
        notes = config.fit_to_world(world.world_size)
    except UsageError as exc:
        if world.rank == 0:
            rank.say(0, f"error: {exc}")
        return exc.exit_code
    try:
        return _run(config, world, notes)
    except FabricscopeError as exc:
        rank.say(world.rank, f"error: {exc}")
        return exc.exit_code


def _run(config: BenchConfig, world: launch.World, notes: list[str]) -> int:
    # Local checks first (in join_group): a rank that cannot run says so before the others wait for it.
    try:
        group = rank.join_group(world, backend=config.backend, timeout_s=config.timeout_s)
    except RunError as exc:
        rank.say(world.rank, f"error: {exc}")
        rank.finish_process(1)
    torch, dist, backend, device, peers = group.torch, group.dist, group.backend, group.device, list(group.peers)
    try:
        note = _fit_to_memory(config, world, torch, dist, device)
    except UsageError:
        if world.rank == 0:
            raise
        return 2  # every rank found the same; rank 0 says it

    stop = StopFlag()
    output = None
    if world.rank == 0:
        from fabricscope.bench.output import Output

        env = collect_env(backend=backend, world_size=world.world_size, launcher=world.launcher)
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

    heartbeat = rank.start_heartbeat(world, peers, on_stall)

    # From here on a stop request ends the current row, keeps every row finished,
    # and exits cleanly on every rank; before, there is nothing to keep (see main()).
    def on_signal(signum: int, frame: Any) -> None:
        stop.set(now=True)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
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
    except Interrupted as stopped:
        return _stop_interrupted(world, output, heartbeat, wrong_total, output_closed=stopped.output_closed)
    except RunError as exc:
        _end(world, output, Ending(kind="run_error", reason=str(exc)))
    except CollectiveFailed as failure:
        if stop.is_set or rank.orphaned():
            # We were asked to stop too (or our launcher died, and with it maybe the
            # store): a peer that stopped first left this collective failing.  Clean.
            stop.set()
            return _stop_interrupted(world, output, heartbeat, wrong_total)
        culprit = heartbeat.diagnose()
        if not culprit and heartbeat.left_on_purpose:
            # A peer was asked to stop (the signal reached it only): a clean interruption.
            return _stop_interrupted(world, output, heartbeat, wrong_total)
        reason = f"{culprit or describe_exception(failure.cause)}, during {failure.phase}"
        if culprit:
            reason += f" [{describe_exception(failure.cause)}]"
        _end(world, output, Ending(kind="peer_failed", reason=reason))
    heartbeat.stop()
    code = _end(world, output, Ending(kind="complete", wrong=wrong_total), exit_now=False)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return code


def _end(world: launch.World, output: Any, ending: Ending, *, exit_now: bool = True) -> int:
    """Record and say how the run ended (the policy is :func:`~fabricscope.bench.outcome.decide`).

    Rank 0 holds the output; another rank only says what it saw.  With
    ``exit_now`` the process leaves at once (a peer may be dead: no clean-up).
    """
    if output is None:
        verdict = decide(ending)
        code = verdict.exit_code
        if ending.kind in ("peer_failed", "run_error"):
            rank.say(world.rank, f"error: {ending.reason}")
    else:
        config = output.config
        full = replace(
            ending,
            records=len(output.result.records),
            json_path=config.json_path,
            below_minimum=tuple(output.below_minimum),
            min_busbw_gbps=config.min_busbw_gbps,
        )
        if ending.kind in ("complete", "stdout_closed"):
            output.finish(decide(full).status, decide(full).error)
            # The file's own write may have failed just now: judge with it.
            full = replace(full, write_error=output.write_errors[0] if output.write_errors else None)
        verdict = decide(full)
        if ending.kind not in ("complete", "stdout_closed"):
            output.finish(verdict.status, verdict.error)
        for line in verdict.messages:
            rank.say(0, line)
        code = verdict.exit_code
    if exit_now:
        rank.finish_process(code)
    return code


_RESERVE_BYTES = 1 << 30
"""Memory left to everything else on each rank (nccl-tests keeps 1 GiB too)."""


def _fit_to_memory(config: BenchConfig, world: launch.World, torch: Any, dist: Any, device: Any) -> str:
    """Lower -e to what every rank can hold, as nccl-tests does; return the note to print.

    A rank holds a send and a receive buffer of up to -e bytes each (the
    check's expected values are made in small chunks).  CPU ranks on one host
    share its memory.  The smallest budget over all ranks decides, so every
    rank runs the same sweep.
    """
    free = rank.tightest_free_bytes(world, torch, dist, device)
    buffers = 2 * config.streams  # --streams K: every stream has its own pair
    limit = max(0, (free - _RESERVE_BYTES) // buffers)
    if config.max_bytes <= limit:
        return ""
    if config.min_bytes > limit:
        raise UsageError(
            f"-b {config.min_bytes} needs {'two' if buffers == 2 else buffers} buffers of that size on every rank, "
            "but the tightest rank has "
            f"{free} bytes free: the largest size that fits is {limit} bytes"
        )
    config.max_bytes = limit
    return f"#  Reducing maxBytes to {limit} due to memory limitation"


def _stop_interrupted(
    world: launch.World, output: Any, heartbeat: Heartbeat, wrong: int, *, output_closed: bool = False
) -> int:
    heartbeat.mark_stopped()
    if output_closed:
        return _end(world, output, Ending(kind="stdout_closed", wrong=wrong))
    why = "its launcher died" if rank.orphaned() else ""
    return _end(world, output, Ending(kind="signal", wrong=wrong, reason=why))


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
