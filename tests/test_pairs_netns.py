"""A real slow link: ranks in network namespaces joined by veth pairs, one of them rate-limited with tc.

Each of four namespaces gets a veth pair to every other namespace (a full
mesh), its host address on one of its veths (its "home"), and a /32 route
per peer over the veth to that peer, so every pair of ranks talks over its
own link (the kernel answers ARP for any of its addresses on any interface).  One link is
slowed both ways with a token bucket filter (``tc qdisc ... tbf``; netem is
not available everywhere).  One ``fabricscope pairs`` rank runs per
namespace, in its own UTS namespace so each has its own host name, joined by
plain RANK/WORLD_SIZE/MASTER_ADDR variables (the ``env`` launcher) and gloo
bound to the namespace's address (``GLOO_SOCKET_IFNAME`` names the home veth).  Everything is torn
down afterwards, also when the test fails.  Skipped, with the reason, where
namespaces cannot be created (not root, no ``ip``/``tc``/``unshare``).
"""

import contextlib
import os
import secrets
import shutil
import subprocess
import sys

import pytest

from fabricscope.results import load
from helpers import cli_env, skip_or_fail

pytestmark = pytest.mark.multiprocess

RANKS = 4
SLOW = (1, 2)
RATE = "30mbit"
PORT = 29617


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _cannot_create_namespaces():
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"fsprobe{secrets.token_hex(3)}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"cannot create a network namespace: {done.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    done = _ip("link", "add", f"{probe}a", "type", "veth", "peer", "name", f"{probe}b", check=False)
    if done.returncode != 0:
        return f"cannot create a veth pair: {done.stderr.strip()}"
    _ip("link", "del", f"{probe}a", check=False)
    return None


def _address(i):
    return f"10.77.0.{i + 1}"


def _veth(token, i, j):
    """Namespace i's end of the link to namespace j."""
    return f"v{token}{i}{j}"


def _home(token, i):
    """The veth that carries namespace i's address (gloo binds to it)."""
    return _veth(token, i, (i + 1) % RANKS)


@contextlib.contextmanager
def mesh(token):
    """Namespaces ``fs<token>n<i>`` in a full veth mesh; link SLOW rate-limited; removed on exit."""
    names = [f"fs{token}n{i}" for i in range(RANKS)]
    try:
        for name in names:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        for i in range(RANKS):
            for j in range(i + 1, RANKS):
                a, b = _veth(token, i, j), _veth(token, j, i)
                _ip("link", "add", a, "netns", names[i], "type", "veth", "peer", "name", b, "netns", names[j])
                _ip("-n", names[i], "link", "set", a, "up")
                _ip("-n", names[j], "link", "set", b, "up")
        for i, name in enumerate(names):
            _ip("-n", name, "addr", "add", f"{_address(i)}/32", "dev", _home(token, i))
        for i in range(RANKS):
            for j in range(i + 1, RANKS):
                for ns, dev, me, peer in ((names[i], _veth(token, i, j), i, j), (names[j], _veth(token, j, i), j, i)):
                    _ip("-n", ns, "route", "add", f"{_address(peer)}/32", "dev", dev, "src", _address(me))
                    if {i, j} == set(SLOW):
                        subprocess.run(
                            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                             "rate", RATE, "burst", "32kb", "latency", "400ms"],
                            check=True, capture_output=True, timeout=30,
                        )  # fmt: skip
        yield names
    finally:
        for name in names:
            _ip("netns", "del", name, check=False)


@pytest.mark.parametrize("by", ["rank", "node"])
def test_pairs_names_the_rate_limited_link(tmp_path, by):
    reason = _cannot_create_namespaces()
    if reason:
        skip_or_fail(reason)
    token = secrets.token_hex(2)
    out = tmp_path / "netns.json"
    # By node, namespaces 1 and 2 hold a second rank each (ranks 4 and 5): only the
    # lowest rank of each host tests its node's links; the others wait each round.
    homes = list(range(RANKS)) + ([1, 2] if by == "node" else [])
    procs = []
    with mesh(token) as names:
        for i, ns in enumerate(homes):
            env = cli_env(
                {
                    "RANK": str(i),
                    "WORLD_SIZE": str(len(homes)),
                    "MASTER_ADDR": _address(0),
                    "MASTER_PORT": str(PORT),
                    "GLOO_SOCKET_IFNAME": _home(token, ns),
                }
            )
            script = (
                f"hostname fsnode{ns} && exec {sys.executable} -m fabricscope pairs --size 1M -n 5 -w 1 -T 30 --by {by}"
            )
            args = ["ip", "netns", "exec", names[ns], "unshare", "--uts", "sh", "-c", script]
            if i == 0:
                args[-1] += f" --json {out}"
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            done = [p.communicate(timeout=240) for p in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    # Torn down: no namespace and no veth of this test is left.
    assert not any(token in line for line in _ip("netns", "list").stdout.splitlines())
    assert f"v{token}" not in _ip("link", "show").stdout
    assert [p.returncode for p in procs] == [0] * len(homes), [d[1] for d in done]
    stdout = done[0][0]
    result = load(out)
    assert result.env["launcher"] == "env"
    assert {r["src_host"] for r in result.records} == {f"fsnode{i}" for i in range(RANKS)}
    findings = result.summary["findings"]
    slowest = findings["slowest"]
    assert {slowest["src"], slowest["dst"]} == set(SLOW), stdout
    flagged = {(o["src"], o["dst"]) for o in findings["outliers"] if o["test"] == "bandwidth"}
    assert {(1, 2), (2, 1)} <= flagged, stdout
    assert set(findings["nodes"]) <= {"fsnode1", "fsnode2"} and findings["nodes"], stdout
    assert {(r["src"], r["dst"]) for r in result.records} == {
        (i, j) for i in range(RANKS) for j in range(RANKS) if i != j
    }
    ends = ("fsnode1 -> fsnode2", "fsnode2 -> fsnode1")
    if by == "rank":
        ends = ("rank 1 (fsnode1) -> rank 2 (fsnode2)", "rank 2 (fsnode2) -> rank 1 (fsnode1)")
    assert any(f"slowest link: {link}" in stdout for link in ends), stdout
    assert "node most often involved: fsnode" in stdout
