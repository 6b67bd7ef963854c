"""Point-to-point ops post every receive before every send (real gloo ranks).

gloo sends a receive's notice on the pair's one TCP connection; a send waits for the peer's notice, so a
notice posted after the rank's own send waits behind that send's bytes and the two directions of a pair
take turns (measured in a 2-rank netns at 50 Mbit/s: sendrecv of 4 MiB 1.38 s send-first, 0.87 s
receives-first, 0.67 s the link).  No timing is asserted here: the order each rank hands to
``batch_isend_irecv`` is recorded while the real exchange runs, and the outputs are checked.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fabricscope.launch import free_port
from helpers import cli_env

RANK_SCRIPT = r"""
import json, sys
import torch
import torch.distributed as dist
from fabricscope import ops
from fabricscope.dtypes import DTYPES

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


class Spy:
    # The real torch.distributed; batch_isend_irecv records the order it is handed, then runs it.
    def __init__(self):
        self.batches = []

    def __getattr__(self, name):
        return getattr(dist, name)

    def batch_isend_irecv(self, p2p_ops):
        self.batches.append(["recv" if p.op is dist.irecv else "send" for p in p2p_ops])
        return dist.batch_isend_irecv(p2p_ops)


found = {}
for name in ("sendrecv", "alltoall", "hypercube", "ps"):
    coll = ops.get(name)
    dtype = DTYPES["float"]
    layout = coll.layout(4096, dtype.size, world)
    send = torch.empty(layout.send_count, dtype=torch.float32)
    recv = torch.empty(layout.recv_count, dtype=torch.float32)
    ctx = ops.Context(rank=rank, nranks=world, root=-1, dtype=dtype, redop="sum", reduce_op=dist.ReduceOp.SUM,
                      avg_divisor=0, device=torch.device("cpu"), servers=2)
    spy = Spy()
    call = coll.build(torch, spy, layout, send, recv, ctx, False)
    call.load(7)
    call.step()
    idx = torch.arange(call.output.numel())
    right = bool(torch.equal(call.output, call.expected(7, idx).to(call.output.dtype)))
    found[name] = {"batches": spy.batches, "right": right}
dist.destroy_process_group()
with open(out, "w") as f:
    json.dump(found, f)
"""


@pytest.fixture(scope="module")
def posted(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, object]]]:
    folder = tmp_path_factory.mktemp("p2p")
    script = folder / "rank.py"
    script.write_text(RANK_SCRIPT)
    world, port = 4, free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(world), str(port), str(folder / f"{rank}.json")],
            env=cli_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    try:
        errors = [proc.communicate(timeout=240)[1] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(proc.returncode == 0 for proc in procs), errors
    return [json.loads((folder / f"{rank}.json").read_text()) for rank in range(world)]


@pytest.mark.parametrize("name", ["sendrecv", "alltoall", "hypercube", "ps"])
def test_every_receive_is_posted_before_any_send(posted: list[dict[str, dict[str, object]]], name: str) -> None:
    for rank, found in enumerate(posted):
        batches = found[name]["batches"]
        assert batches, f"rank {rank}: {name} ran no point-to-point batch"
        for batch in batches:  # type: ignore[attr-defined]
            assert batch == sorted(batch, key=lambda kind: kind != "recv"), f"rank {rank} {name}: {batch}"
        assert found[name]["right"], f"rank {rank}: {name} output is wrong"


def test_alltoall_on_gloo_sends_to_every_peer_once(posted: list[dict[str, dict[str, object]]]) -> None:
    # nccl-tests' alltoall: one send and one receive per peer, grouped (the own part is a local copy).
    for found in posted:
        (batch,) = found["alltoall"]["batches"]  # type: ignore[misc]
        assert batch == ["recv"] * 3 + ["send"] * 3


def test_the_order_is_the_ops_own(posted: list[dict[str, dict[str, object]]]) -> None:
    # ps: servers (ranks 0 and 1) receive a shard from every other rank while sending theirs; workers only send.
    push = [found["ps"]["batches"][0] for found in posted]  # type: ignore[index]
    assert push[0] == ["recv"] * 3 + ["send"] * 1
    assert push[2] == ["send"] * 2
