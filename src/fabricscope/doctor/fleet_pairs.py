"""``doctor --bench`` in fleet mode: a short ``fabricscope pairs`` between the fleet's nodes.

A node's own bench cannot see a bad link between two nodes; Azure's health checks and
operators' runbooks test node pairs for that.  Once rank 0 has every report, it asks the
fleet to run the real ``fabricscope pairs`` (by node where the fleet spans several hosts):
each doctor rank starts one pairs rank, in its own session, with a world of its own (the
fleet's ranks and master address, a port rank 0 chose), so no launcher variable of the
doctor's own world leaks into it.  Rank 0's pairs rank writes the Result; its findings
(links far below the fleet's median, the slowest link) become fleet findings:

- ok: every link within the fleet's spread (the median and the slowest named);
- warn: a link whose robust score marks it slow (:mod:`fabricscope.pairs`' outlier rule);
- fail: a link ten times slower than the median, or a pairs run that did not complete.

Nothing is imported from the ``pairs`` command: its Result file is the contract.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabricscope.doctor.active import own_world_env, run_bounded
from fabricscope.doctor.checks.base import finding
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.fleet import Rendezvous
from fabricscope.launch import World, free_port
from fabricscope.pair_matrix import SLOW_LINK_FACTOR
from fabricscope.shown import printable

__all__ = ["ID", "READS", "TITLE", "join_fleet_pairs", "lead_fleet_pairs", "pairs_findings"]

ID = "fleet.pairs"
TITLE = "Every link between the fleet's nodes carries what the others do (doctor --bench in fleet mode)"
READS = "a short fabricscope pairs across the fleet (by node), against the fleet's own median"
SIZE_BYTES = 64 << 20
"""The bandwidth test's message (pairs' default)."""
ITERS = 5
WARMUP = 2
_KEY = "pairs/plan"
_SKIP = "skip"


def lead_fleet_pairs(link: Rendezvous, world: World, hosts: Sequence[str], silent: int, timeout_s: float) -> Finding:
    """Rank 0: decide, tell the fleet, run its own pairs rank, and judge the Result."""
    if world.world_size < 2:
        return finding(ID, Severity.INFO, "the fleet", "one rank: no link between nodes to test")
    if silent:
        link.share(_KEY, _SKIP)
        return finding(
            ID,
            Severity.WARN,
            "the fleet",
            f"not run: {silent} rank(s) sent no report, and a pairs run would wait for them",
            "every rank reports",
            "bring the silent ranks back (see the fleet findings), then run doctor --bench again",
        )
    nodes = len(set(hosts))
    by = "node" if nodes > 1 else "rank"
    endpoints = nodes if by == "node" else world.world_size
    port = free_port()
    link.share(_KEY, json.dumps({"port": port, "by": by, "endpoints": endpoints}))
    with tempfile.TemporaryDirectory(prefix="fabricscope-doctor-pairs-") as folder:
        out = Path(folder) / "pairs.json"
        code, tail = _run_pairs(world, port, by, endpoints, timeout_s, out)
        return pairs_findings(_read(out), code, tail, by=by)


def join_fleet_pairs(link: Rendezvous, world: World, timeout_s: float) -> None:
    """Every other rank: wait for rank 0's plan and run this rank's part (rank 0 judges; nothing to return)."""
    plan = link.shared(_KEY, timeout_s, "waiting for rank 0's pairs plan")
    if plan is None or plan == _SKIP:
        return
    try:
        values = json.loads(plan)
        port, by, endpoints = int(values["port"]), str(values["by"]), int(values["endpoints"])
    except (ValueError, KeyError, TypeError):
        return
    _run_pairs(world, port, by, max(2, min(endpoints, world.world_size)), timeout_s, None)


def _run_pairs(
    world: World, port: int, by: str, endpoints: int, timeout_s: float, out: Path | None
) -> tuple[int | None, str]:
    env = own_world_env(
        {
            "RANK": str(world.rank),
            "WORLD_SIZE": str(world.world_size),
            "LOCAL_RANK": str(world.local_rank),
            "LOCAL_WORLD_SIZE": str(world.local_world_size),
            "MASTER_ADDR": world.master_addr,
            "MASTER_PORT": str(port),
        }
    )
    argv = [sys.executable, "-m", "fabricscope", "pairs", "--by", by, "--size", str(SIZE_BYTES)]
    argv += ["-n", str(ITERS), "-w", str(WARMUP), "-T", f"{timeout_s:g}"]
    if out is not None:
        argv += ["--json", str(out)]
    rounds = endpoints  # pairs' rounds over its endpoints (nodes or ranks): n - 1, n when n is odd
    # pairs bounds itself (-T per message, a heartbeat per round); this bounds one that cannot.
    return run_bounded(argv, timeout_s * (rounds + 2) + 60, env=env)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def pairs_findings(result: Mapping[str, Any] | None, code: int | None, tail: str, *, by: str) -> Finding:
    """The fleet's finding from a pairs Result (None: it wrote none) and how its rank 0 exited."""
    summary = result.get("summary") if result else None
    findings = summary.get("findings") if isinstance(summary, dict) else None
    if result is None or result.get("status") != "complete" or not isinstance(findings, dict):
        why = "timed out" if code is None else f"exit {code}"
        error = result.get("error") if result else None
        detail = printable(str(error or tail), 200)
        return finding(
            ID,
            Severity.FAIL,
            f"links between the fleet's {'nodes' if by == 'node' else 'ranks'}",
            f"the pairs run did not complete ({why}): {detail}",
            f"every pair of {'nodes' if by == 'node' else 'ranks'} tested",
            "run fabricscope pairs --by node under the same launcher to see which node fails: a node that hangs or "
            "fails here fails training's collectives the same way",
        )
    medians = findings.get("medians") if isinstance(findings.get("medians"), dict) else {}
    median = _number(medians.get("bandwidth")) if medians else None
    given = result.get("records")
    records: list[Any] = given if isinstance(given, list) else []
    links = sum(isinstance(r, dict) and r.get("test") == "bandwidth" for r in records)
    subject = f"{links} links between the fleet's {'nodes' if by == 'node' else 'ranks'}"
    seen = f"median {median:.3g} GB/s" if median is not None else "no bandwidth measured"
    slow = [o for o in findings.get("outliers") or [] if isinstance(o, dict) and o.get("test") == "bandwidth"]
    if not slow:
        slowest = findings.get("slowest") if isinstance(findings.get("slowest"), dict) else None
        value = _number(slowest.get("algbw_gbps")) if slowest else None
        if slowest and value is not None:
            seen += (
                f"; slowest {printable(str(slowest.get('src_host')), 60)} -> "
                f"{printable(str(slowest.get('dst_host')), 60)} {value:.3g} GB/s"
            )
        return finding(ID, Severity.OK, subject, seen, "no link far below the fleet's median")
    broken = False
    named = []
    for outlier in slow[:8]:
        value, middle = _number(outlier.get("value")), _number(outlier.get("median"))
        if value is None or middle is None:
            continue
        broken = broken or value * SLOW_LINK_FACTOR <= middle
        named.append(
            f"{printable(str(outlier.get('src_host')), 60)} -> {printable(str(outlier.get('dst_host')), 60)} "
            f"{value:.3g} GB/s ({value / middle:.0%} of the median)"
            if middle > 0
            else f"{value:.3g} GB/s"
        )
    more = f" and {len(slow) - len(named)} more" if len(slow) > len(named) else ""
    return finding(
        ID,
        Severity.FAIL if broken else Severity.WARN,
        subject,
        f"{seen}; slow: {'; '.join(named)}{more}",
        "no link far below the fleet's median",
        "check the named links' NICs, cables and switch ports (doctor on both ends names port faults); a node in "
        "every slow link is the one to drain",
    )
