"""One rank of a ``pairs`` run: join the world, test its links round by round, report, exit.

Run as ``python -m fabricscope.pairs.worker`` by the local spawner (config in
``FABRICSCOPE_PAIRS_CONFIG``), or called in-process by ``fabricscope pairs``
when torchrun, mpirun, srun (or plain ``RANK``/``WORLD_SIZE`` variables)
started this process.

Every round starts with a one-number all_reduce in which the ranks agree
whether to stop (a signal reached any of them), then each rank tests the link
to its partner of the round (or rests), then rank 0 gathers what was timed
and rewrites the Result.  Exit codes: 0 complete; 1 a failed or hung peer,
or a file that could not be written; 2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from fabricscope import launch
from fabricscope.errors import FabricscopeError, RunError, UsageError
from fabricscope.launch import rank
from fabricscope.launch.heartbeat import Heartbeat, Peer, describe_exception
from fabricscope.metadata import collect_env
from fabricscope.pairs.config import PairsConfig
from fabricscope.pairs.exchange import Buffers, ExchangeFailed, Stopped, measure_pair
from fabricscope.pairs.schedule import round_robin

__all__ = ["CONFIG_VARIABLE", "endpoints", "main", "run_rank"]

CONFIG_VARIABLE = "FABRICSCOPE_PAIRS_CONFIG"
_RESERVE_BYTES = 256 << 20
"""Memory left to everything else on each rank."""


def endpoints(peers: list[Peer], by: str) -> list[int]:
    """The ranks whose links are tested: all, or by node the lowest rank of each host."""
    if by == "rank":
        return [p.rank for p in peers]
    first: dict[str, int] = {}
    for peer in sorted(peers, key=lambda p: p.rank):
        first.setdefault(peer.host, peer.rank)
    return list(first.values())


def run_rank(config: PairsConfig, world: launch.World) -> int:
    """Run this rank's part; return its exit code (usage errors every rank finds are said by rank 0)."""
    rank.guard_startup(world.rank)
    rank.stop_when_orphaned()
    try:
        config.check_world(world.world_size, hosts=2)
    except UsageError as exc:
        if world.rank == 0:
            rank.say(0, f"error: {exc}")
        return exc.exit_code
    try:
        return _run(config, world)
    except FabricscopeError as exc:
        rank.say(world.rank, f"error: {exc}")
        return exc.exit_code


class _Stop:
    """Set by SIGINT/SIGTERM; read at the start of every round."""

    def __init__(self) -> None:
        self.requested = False

    def set(self, signum: int = 0, frame: Any = None) -> None:
        self.requested = True


def _run(config: PairsConfig, world: launch.World) -> int:
    try:
        group = rank.join_group(world, backend=config.backend, timeout_s=config.timeout_s, command="pairs")
    except RunError as exc:
        rank.say(world.rank, f"error: {exc}")
        rank.finish_process(1)
    torch, dist, device, peers = group.torch, group.dist, group.device, list(group.peers)
    try:
        config.check_world(world.world_size, hosts=len({p.host for p in peers}))
        _fit_to_memory(config, world, torch, dist, device)
    except UsageError:
        if world.rank == 0:
            raise
        return 2  # every rank found the same; rank 0 says it
    ends = endpoints(peers, config.by)
    schedule = [[(ends[a], ends[b]) for a, b in pairs] for pairs in round_robin(len(ends))]
    output = None
    if world.rank == 0:
        from fabricscope.pairs.output import Output

        env = collect_env(backend=group.backend, world_size=world.world_size, launcher=world.launcher)
        output = Output(config=config, peers=peers, backend=group.backend, env=env, rounds=len(schedule))
        output.save()
        hosts = len({p.host for p in peers})
        print(
            f"# pairs by {config.by}: {len(ends)} endpoints ({world.world_size} ranks on {hosts} host(s)), "
            f"{len(schedule)} rounds; {config.size_bytes} B and 8 B messages, both directions, "
            f"{config.iters} timed + {config.warmup_iters} warmup each; backend {group.backend}",
            flush=True,
        )

    def on_stall(message: str) -> None:
        rank.say(world.rank, f"error: {message}; stopping")
        if output is not None:
            output.finish("failed", message)

    heartbeat = rank.start_heartbeat(world, peers, on_stall)
    stop = _Stop()
    signal.signal(signal.SIGINT, stop.set)
    signal.signal(signal.SIGTERM, stop.set)
    buffers = Buffers.allocate(torch, config.size_bytes, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    host = {p.rank: p.host for p in peers}
    # Each message may take the backend's whole timeout: the watchdog is only a backstop.
    round_deadline = config.timeout_s * (4 * (config.iters + config.warmup_iters + 2)) + 30.0
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    try:
        for number, pairs in enumerate(schedule, start=1):
            heartbeat.enter(f"round {number} of {len(schedule)}", round_deadline)
            flag.fill_(1 if stop.requested or rank.orphaned() else 0)
            try:
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            except RuntimeError as exc:
                raise ExchangeFailed(f"the start of round {number}", exc) from None
            if int(flag.item()):
                return _interrupted(world, output, heartbeat)
            partner = next((b if a == world.rank else a for a, b in pairs if world.rank in (a, b)), None)
            timed = []
            if partner is not None:
                timed = measure_pair(
                    dist,
                    buffers,
                    me=world.rank,
                    peer=partner,
                    iters=config.iters,
                    warmup=config.warmup_iters,
                    sync=sync,
                    stopped=lambda: stop.requested,
                )
            records = [
                {
                    "test": test,
                    "src": src,
                    "dst": dst,
                    "src_host": host[src],
                    "dst_host": host[dst],
                    "size_bytes": size,
                    "time_us": seconds * 1e6,
                    "algbw_gbps": size / seconds / 1e9 if seconds > 0 else 0.0,
                    "round": number,
                }
                for src, dst, test, size, seconds in timed
            ]
            gathered: list[Any] | None = [None] * world.world_size if world.rank == 0 else None
            try:
                dist.gather_object(records, gathered, dst=0)
            except RuntimeError as exc:
                raise ExchangeFailed(f"the end of round {number}", exc) from None
            heartbeat.leave()
            if output is not None and gathered is not None:
                output.add_round(sorted((r for part in gathered for r in part), key=_order))
    except Stopped:
        return _interrupted(world, output, heartbeat)
    except ExchangeFailed as failure:
        if stop.requested or rank.orphaned():
            return _interrupted(world, output, heartbeat)
        culprit = heartbeat.diagnose()
        if not culprit and heartbeat.left_on_purpose:
            return _interrupted(world, output, heartbeat)
        reason = f"{culprit or describe_exception(failure.cause)}, during {failure.phase}"
        if culprit:
            reason += f" [{describe_exception(failure.cause)}]"
            # Say we leave because of the culprit, so that ranks diagnosing later name it, not us.
            heartbeat.mark_stopped()
        if output is not None:
            output.finish("failed", reason)
            kept = len(output.result.records)
            where = f" in {config.json_path}" if config.json_path else ""
            rank.say(0, f"error: {reason}; the {kept} records measured before are kept{where}")
        else:
            rank.say(world.rank, f"error: {reason}")
        rank.finish_process(1)
    heartbeat.stop()
    code = 0
    if output is not None:
        output.finish("complete", None)
        for problem in output.write_errors:
            rank.say(0, f"error: {problem}; the report above holds every pair measured")
            code = 1
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return code


def _order(record: dict[str, Any]) -> tuple[int, int, str]:
    return int(record["src"]), int(record["dst"]), str(record["test"])


def _interrupted(world: launch.World, output: Any, heartbeat: Heartbeat) -> int:
    heartbeat.mark_stopped()
    if output is not None:
        why = "its launcher died" if rank.orphaned() else "interrupted by a signal"
        output.finish("interrupted", why)
        kept = len(output.result.records)
        where = f" in {output.config.json_path}" if output.config.json_path else ""
        rank.say(0, f"interrupted ({why}): the {kept} records measured so far are kept{where}")
    rank.finish_process(130)
    return 130  # pragma: no cover - finish_process does not return


def _fit_to_memory(config: PairsConfig, world: launch.World, torch: Any, dist: Any, device: Any) -> None:
    """Refuse a message size that some rank cannot hold (one buffer of that size per rank)."""
    free = rank.tightest_free_bytes(world, torch, dist, device)
    limit = free - _RESERVE_BYTES
    if config.size_bytes > limit:
        raise UsageError(
            f"a {config.size_bytes}-byte message needs a buffer of that size on every rank, but the tightest "
            f"rank has {free} bytes free: the largest size that fits is {max(limit, 0)} bytes"
        )


def main() -> None:
    """Entry point of a spawned rank."""
    rank.spawned_rank_main("pairs", CONFIG_VARIABLE, PairsConfig.from_dict, run_rank)


if __name__ == "__main__":
    main()
