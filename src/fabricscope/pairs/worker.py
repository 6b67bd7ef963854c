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
from typing import Any

from fabricscope import launch
from fabricscope.launch import lifecycle, rank
from fabricscope.launch.heartbeat import Heartbeat, Peer
from fabricscope.launch.outcome import Ending
from fabricscope.metadata import collect_env
from fabricscope.pair_matrix import PairRecord
from fabricscope.pairs.config import PairsConfig
from fabricscope.pairs.exchange import Buffers, measure_pair
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
    """Run this rank's part; return its exit code (see :func:`lifecycle.run_rank`)."""
    return lifecycle.run_rank(
        world, lambda: config.check_world(world.world_size, hosts=2), lambda _: _run(config, world)
    )


def _run(config: PairsConfig, world: launch.World) -> int:
    group = lifecycle.join(world, config.launch, "pairs")
    dist, peers = group.dist, list(group.peers)
    lifecycle.agreed(lambda: config.check_world(world.world_size, hosts=len({p.host for p in peers})))
    lifecycle.fit_to_memory(
        world,
        group,
        buffers=1,
        reserve_bytes=_RESERVE_BYTES,
        smallest=config.size_bytes,
        largest=config.size_bytes,
        what=f"a {config.size_bytes}-byte message",
    )
    ends = endpoints(peers, config.by)
    schedule = [[(ends[a], ends[b]) for a, b in pairs] for pairs in round_robin(len(ends))]
    output = None
    if world.rank == 0:
        from fabricscope.pairs.output import Output

        env = collect_env(
            backend=group.backend,
            world_size=world.world_size,
            launcher=world.launcher,
            torch_threads=group.torch.get_num_threads(),
        )
        output = Output(config=config, peers=peers, backend=group.backend, env=env, rounds=len(schedule))
        output.save()
        hosts = len({p.host for p in peers})
        output.say(
            f"# pairs by {config.by}: {len(ends)} endpoints ({world.world_size} ranks on {hosts} host(s)), "
            f"{len(schedule)} rounds; {config.size_bytes} B and 8 B messages, both directions, "
            f"{config.iters} timed + {config.warmup_iters} warmup each; backend {group.backend}"
        )

    def on_stall(message: str) -> None:
        rank.say(world.rank, f"error: {message}; stopping")
        if output is not None:
            output.finish("failed", message)

    heartbeat = lifecycle.start_heartbeat(world, peers, output, on_stall)
    stop = lifecycle.StopFlag()
    stop.catch_signals()
    rounds = _Rounds(config, world, group, heartbeat, stop, len(schedule))
    try:
        for number, pairs in enumerate(schedule, start=1):
            gathered = rounds.run(number, pairs)
            if output is not None and gathered is not None:
                output.add_round(gathered)
    except lifecycle.Interrupted:
        return lifecycle.stop_interrupted(world, output, heartbeat, Ending(kind="signal"))
    except lifecycle.PeerCallFailed as failure:
        ending = lifecycle.classify(failure, stop=stop, heartbeat=heartbeat)
        if ending.kind == "signal":
            return lifecycle.stop_interrupted(world, output, heartbeat, ending)
        lifecycle.conclude(world, output, ending)
    heartbeat.stop()
    code = lifecycle.conclude(world, output, Ending(kind="complete"), exit_now=False)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    return code


class _Rounds:
    """What every round of one rank does: agree to go on, test the link to the round's partner, gather."""

    def __init__(
        self,
        config: PairsConfig,
        world: launch.World,
        group: rank.Group,
        heartbeat: Heartbeat,
        stop: lifecycle.StopFlag,
        count: int,
    ) -> None:
        self.config, self.world, self.dist, self.heartbeat, self.stop, self.count = (
            config,
            world,
            group.dist,
            heartbeat,
            stop,
            count,
        )
        torch, device = group.torch, group.device
        self.buffers = Buffers.allocate(torch, config.size_bytes, device)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.host = {p.rank: p.host for p in group.peers}
        # Each message may take the backend's whole timeout: the watchdog is only a backstop.
        self.deadline = config.launch.timeout_s * (4 * (config.iters + config.warmup_iters + 2)) + 30.0
        self.flag = torch.zeros(1, dtype=torch.int32, device=device)

    def run(self, number: int, pairs: list[tuple[int, int]]) -> list[PairRecord] | None:
        """Round ``number``: every rank's records, sorted, on rank 0 (None elsewhere).

        Raises :class:`~fabricscope.launch.lifecycle.Interrupted` when any rank was asked to stop,
        :class:`~fabricscope.launch.lifecycle.PeerCallFailed` when a call with a peer failed.
        """
        me, dist = self.world.rank, self.dist
        self.heartbeat.enter(f"round {number} of {self.count}", self.deadline)
        self.flag.fill_(1 if self.stop.is_set or rank.orphaned() else 0)
        try:
            dist.all_reduce(self.flag, op=dist.ReduceOp.MAX)
        except RuntimeError as exc:
            raise lifecycle.PeerCallFailed(f"the start of round {number}", exc) from None
        if int(self.flag.item()):
            raise lifecycle.Interrupted
        partner = next((b if a == me else a for a, b in pairs if me in (a, b)), None)
        records = [] if partner is None else self._measure(partner, number)
        gathered: list[Any] | None = [None] * self.world.world_size if me == 0 else None
        try:
            dist.gather_object(records, gathered, dst=0)
        except RuntimeError as exc:
            raise lifecycle.PeerCallFailed(f"the end of round {number}", exc) from None
        self.heartbeat.leave()
        if gathered is None:
            return None
        return sorted((r for part in gathered for r in part), key=_order)

    def _measure(self, partner: int, number: int) -> list[PairRecord]:
        timed = measure_pair(
            self.dist,
            self.buffers,
            me=self.world.rank,
            peer=partner,
            iters=self.config.iters,
            warmup=self.config.warmup_iters,
            sync=self.sync,
            stopped=lambda: self.stop.is_set,
        )
        return [
            PairRecord(
                test=test,
                src=src,
                dst=dst,
                src_host=self.host[src],
                dst_host=self.host[dst],
                size_bytes=size,
                time_us=seconds * 1e6,
                algbw_gbps=size / seconds / 1e9 if seconds > 0 else 0.0,
                round=number,
            )
            for src, dst, test, size, seconds in timed
        ]


def _order(record: PairRecord) -> tuple[int, int, str]:
    return record["src"], record["dst"], record["test"]


def main() -> None:
    """Entry point of a spawned rank."""
    rank.spawned_rank_main("pairs", CONFIG_VARIABLE, PairsConfig.from_dict, run_rank)


if __name__ == "__main__":
    main()
