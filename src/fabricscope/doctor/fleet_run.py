"""Running fleet mode: spawn local ranks, or act as one rank of a launcher's world."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fabricscope.bench import launch
from fabricscope.bench.launch import World
from fabricscope.doctor.capture import check_capture_target, write_capture
from fabricscope.doctor.diagnosis import diagnose, doctor_result, expand_placeholders, open_root
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Finding, Severity, counts, exit_code, worst
from fabricscope.doctor.fleet import (
    Difference,
    NodeReport,
    compare,
    exchange,
    fleet_findings,
    group_reports,
    node_facts,
)
from fabricscope.doctor.probe import node_env
from fabricscope.doctor.report import STYLES, make_console, verdict_line
from fabricscope.errors import UsageError
from fabricscope.metadata import collect_env

__all__ = ["render_fleet", "run_rank", "spawn_fleet"]

MAX_LINES_PER_NODE = 8


def spawn_fleet(args: argparse.Namespace, nproc: int, timeout_s: float) -> int:
    """``--nproc N``: check every rank's inputs here (one clear error), then start the ranks."""
    from fabricscope.doctor.command import child_argv

    for rank in range(nproc):
        open_root(expand_placeholders(args.root, rank=rank, local_rank=rank))
    if args.capture:
        _check_capture_template(args.capture)
        for rank in range(nproc):
            check_capture_target(expand_placeholders(args.capture, rank=rank, local_rank=rank))
    return launch.spawn(nproc, ["fabricscope", "doctor", *child_argv(args, timeout_s)], {}, grace_s=timeout_s + 30.0)


def _check_capture_template(template: str) -> None:
    if "{rank}" not in template:
        raise UsageError(
            f"--capture {template}: in fleet mode every rank captures its own tree; "
            "put {rank} in the path (for example /tmp/capture/{rank})"
        )


def run_rank(args: argparse.Namespace, world: World, expect: Expectations | None, timeout_s: float) -> int:
    """Probe this rank's node, send the report to rank 0; rank 0 prints the fleet and returns its exit code.

    Other ranks return 0: the fleet's verdict is rank 0's, so a launcher does
    not report a rank "failed" for a finding on its node.
    """
    root_path = expand_placeholders(args.root, rank=world.rank, local_rank=world.local_rank)
    root = open_root(root_path)
    capture = None
    if args.capture:
        _check_capture_template(args.capture)
        capture = expand_placeholders(args.capture, rank=world.rank, local_rank=world.local_rank)
        check_capture_target(capture)
    env = node_env(root)
    report = diagnose(root, env=env, expect=expect)
    if capture:
        write_capture(root, capture, env, report.node.hostname)
    mine = NodeReport(
        rank=world.rank,
        hostname=report.node.hostname,
        root=root_path,
        facts=node_facts(report.node, report.expect),
        findings=report.findings,
    )
    gathered = exchange(world, mine.to_json(), timeout_s)
    if gathered is None:
        return 0
    texts, missing = gathered
    nodes = group_reports([NodeReport.from_json(t) for t in texts])
    differences = compare({n.label: n.facts for n in nodes})
    fleet = fleet_findings(differences, missing, timeout_s)
    console = make_console()
    render_fleet(console, nodes, differences, fleet)
    if args.json:
        findings = [f for n in nodes for f in n.findings] + fleet
        labels = [n.label for n in nodes for _ in n.findings] + ["fleet"] * len(fleet)
        doctor_result(
            findings,
            config={
                "root": args.root,
                "expect": expect.to_dict() if expect else None,
                "world_size": world.world_size,
            },
            hostname=report.node.hostname,
            env=collect_env(launcher=world.launcher, world_size=world.world_size),
            summary={
                "nodes": [
                    {
                        "node": n.label,
                        "ranks": n.ranks,
                        "root": n.root,
                        "verdict": worst(n.findings).label,
                        "facts": n.facts,
                    }
                    for n in nodes
                ],
                "differences": [d.to_dict() for d in differences],
                "missing_ranks": list(missing),
            },
            node_labels=labels,
        ).save(args.json)
    return exit_code([f for n in nodes for f in n.findings] + fleet)


def render_fleet(
    console: Console, nodes: Sequence[NodeReport], differences: Sequence[Difference], fleet: Sequence[Finding]
) -> None:
    """Per-node verdicts with their problems, the values that differ, and the fleet's verdict."""
    table = Table(title=f"fabricscope doctor: {_nodes(len(nodes))}", title_justify="left")
    table.add_column("node", no_wrap=True)
    table.add_column("ranks", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("fail / warn", no_wrap=True)
    table.add_column("problems", overflow="fold")
    for node in nodes:
        severity = worst(node.findings)
        tally = counts(node.findings)
        problems = [f for f in node.findings if f.severity >= Severity.WARN]
        problems.sort(key=lambda f: -f.severity)
        lines = [f"{f.severity.label} {f.id} {f.subject}: {f.observed}" for f in problems[:MAX_LINES_PER_NODE]]
        if len(problems) > MAX_LINES_PER_NODE:
            lines.append(f"... {len(problems) - MAX_LINES_PER_NODE} more (--json has them all)")
        table.add_row(
            node.label,
            _ranks(node.ranks),
            Text("ok", style=STYLES[Severity.OK])
            if severity <= Severity.INFO
            else Text(severity.label, style=STYLES[severity]),
            f"{tally['fail']} / {tally['warn']}",
            "\n".join(lines) or "-",
        )
    console.print(table)
    if differences:
        diff_table = Table(title="values that differ across nodes", title_justify="left")
        diff_table.add_column("value", no_wrap=True)
        diff_table.add_column("most nodes", overflow="fold")
        diff_table.add_column("odd node(s) out", overflow="fold")
        for diff in differences:
            common = f"{diff.common} ({diff.common_nodes} of {diff.total})" if diff.common else "no majority"
            odd = "\n".join(f"{node}: {value}" for node, value in diff.odd.items())
            diff_table.add_row(diff.fact, common, odd)
        console.print(diff_table)
    else:
        agree = f"all {len(nodes)} nodes agree on every compared value"
        console.print(agree if len(nodes) > 1 else "one node: nothing to compare across nodes")
    for item in fleet:
        if item.id == "fleet.report":
            console.print(Text(f"fail {item.subject}: {item.observed}", style=STYLES[Severity.FAIL]))
    everything = [f for n in nodes for f in n.findings] + list(fleet)
    odd_nodes = sorted({node for d in differences if d.common is not None for node in d.odd})
    where = _nodes(len(nodes)) + (f", odd one(s) out: {', '.join(odd_nodes)}" if odd_nodes else "")
    console.print(verdict_line(everything, where))


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _ranks(ranks: Sequence[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(r) for r in ordered)
