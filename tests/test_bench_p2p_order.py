"""Point-to-point ops post every receive before every send (real gloo ranks).

gloo sends a receive's notice on the pair's one TCP connection; a send waits for the peer's notice, so a
notice posted after the rank's own send waits behind that send's bytes and the two directions of a pair
take turns (measured in a 2-rank netns at 50 Mbit/s: sendrecv of 4 MiB 1.38 s send-first, 0.87 s
receives-first, 0.67 s the link).  No timing is asserted here: each send and receive a rank posts,
batched or direct, is recorded in order while the real exchange runs, and the outputs are checked.
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
import torch.distributed.distributed_c10d as c10d
from fabricscope import ops
from fabricscope.dtypes import DTYPES

rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
posted = []


def spy(kind, real):
    # The real call, recorded when it is posted: batched (P2POp accepts only c10d's own isend/irecv,
    # patched here too) or direct.
    def call(*args, **kwargs):
        posted.append(kind)
        return real(*args, **kwargs)
    return call


for name, kind in (("isend", "send"), ("irecv", "recv"), ("send", "send"), ("recv", "recv")):
    wrapped = spy(kind, getattr(c10d, name))
    setattr(c10d, name, wrapped)
    setattr(dist, name, wrapped)

found = {}
for name in ("sendrecv", "alltoall", "hypercube", "ps"):
    coll = ops.get(name)
    dtype = DTYPES["float"]
    layout = coll.layout(4096, dtype.size, world)
    send = torch.empty(layout.send_count, dtype=torch.float32)
    recv = torch.empty(layout.recv_count, dtype=torch.float32)
    ctx = ops.Context(rank=rank, nranks=world, root=-1, dtype=dtype, redop="sum", reduce_op=dist.ReduceOp.SUM,
                      avg_divisor=0, device=torch.device("cpu"), servers=2)
    call = coll.build(torch, dist, layout, send, recv, ctx, False)
    call.load(7)
    posted.clear()
    call.step()
    idx = torch.arange(call.output.numel())
    right = bool(torch.equal(call.output, call.expected(7, idx).to(call.output.dtype)))
    found[name] = {"posted": list(posted), "right": right}
dist.destroy_process_group()
with open(out, "w") as f:
    json.dump(found, f)
"""


@pytest.fixture(scope="module", params=[2, 4], ids=["2 ranks", "4 ranks"])
def posted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, dict[str, object]]]:
    folder = tmp_path_factory.mktemp("p2p")
    script = folder / "rank.py"
    script.write_text(RANK_SCRIPT)
    world, port = request.param, free_port()
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
    # One call of the op, every send and receive in the order the rank posted it (batched or not).
    for rank, found in enumerate(posted):
        order = found[name]["posted"]
        assert order, f"rank {rank}: {name} posted no send or receive"
        phases = "".join("r" if kind == "recv" else "s" for kind in order)  # type: ignore[attr-defined]
        # Rounds, each with its receives first: ps two (push, then pull), hypercube one per doubling.
        rounds = {"ps": 2, "hypercube": len(posted).bit_length() - 1}.get(name, 1)
        assert phases.count("sr") <= rounds - 1, f"rank {rank} {name}: a receive posted after a send: {order}"
        assert found[name]["right"], f"rank {rank}: {name} output is wrong"


def test_alltoall_on_gloo_sends_to_every_peer_once(posted: list[dict[str, dict[str, object]]]) -> None:
    # nccl-tests' alltoall: one send and one receive per peer (the own part is a local copy).
    n = len(posted)
    for found in posted:
        assert found["alltoall"]["posted"] == ["recv"] * (n - 1) + ["send"] * (n - 1)


def test_ps_rounds_post_receives_first(posted: list[dict[str, dict[str, object]]]) -> None:
    # Servers (ranks 0 and 1) take a shard from every other rank, then send the reduced shard back;
    # a worker sends its shards, then receives the reduced ones.
    n = len(posted)
    assert posted[0]["ps"]["posted"] == ["recv"] * (n - 1) + ["send"] + ["recv"] + ["send"] * (n - 1)
    if n > 2:
        assert posted[2]["ps"]["posted"] == ["send"] * 2 + ["recv"] * 2
