"""Running fleet mode: spawn local ranks, or act as one rank of a launcher's world."""

from __future__ import annotations

import argparse
import socket
import sys
import traceback
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fabricscope import launch
from fabricscope.doctor.capture import check_capture_target, write_capture
from fabricscope.doctor.diagnosis import diagnose, doctor_result, expand_placeholders, open_root
from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import DoctorIncomplete, Finding, Severity, counts, exit_code, verdict
from fabricscope.doctor.fleet import (
    Difference,
    NodeReport,
    Rendezvous,
    compare,
    failed_report,
    fleet_findings,
    group_reports,
    machine_findings,
    node_facts,
)
from fabricscope.doctor.fleet_pairs import join_fleet_pairs, lead_fleet_pairs
from fabricscope.doctor.invocation import child_argv, print_report
from fabricscope.doctor.probes.node import node_env
from fabricscope.doctor.report import STYLES, make_console, plain, verdict_line
from fabricscope.errors import FabricscopeError, InvalidValue, UsageError
from fabricscope.launch import World
from fabricscope.metadata import collect_env
from fabricscope.results import Result

__all__ = ["probe_rank", "render_fleet", "run_rank", "spawn_fleet"]

MAX_LINES_PER_NODE = 8


def spawn_fleet(args: argparse.Namespace, nproc: int, timeout_s: float) -> int:
    """``--nproc N``: check every rank's inputs here (one clear error), then start the ranks.

    The outputs were checked by the caller (:func:`~fabricscope.doctor.invocation.check_outputs`).
    """
    for rank in range(nproc):
        open_root(expand_placeholders(args.root, rank=rank, local_rank=rank))
    if args.capture:
        _check_capture_template(args.capture)
        for rank in range(nproc):
            check_capture_target(expand_placeholders(args.capture, rank=rank, local_rank=rank))
    from fabricscope.launch.rank import import_torch

    return launch.spawn(
        nproc,
        ["fabricscope.cli", "doctor", *child_argv(args, timeout_s)],
        {},
        grace_s=timeout_s + 30.0,
        warm=lambda: import_torch("doctor's fleet mode"),
        killed_code=DoctorIncomplete.exit_code,
    )


def _check_capture_template(template: str) -> None:
    if "{rank}" not in template:
        raise UsageError(
            f"--capture {template}: in fleet mode every rank captures its own tree; "
            "put {rank} in the path (for example /tmp/capture/{rank})"
        )


def probe_rank(args: argparse.Namespace, world: World, expect: Expectations | None, hostname: str) -> NodeReport:
    """This rank's report; a rank that cannot probe (a missing tree, a crash) reports that instead of raising."""
    root_path = expand_placeholders(args.root, rank=world.rank, local_rank=world.local_rank)
    try:
        root = open_root(root_path)
        capture = None
        if args.capture:
            _check_capture_template(args.capture)
            capture = expand_placeholders(args.capture, rank=world.rank, local_rank=world.local_rank)
            check_capture_target(capture)
        env = node_env(root, live=args.live_env)
        report = diagnose(root, env=env, expect=expect)
        if args.bench and world.local_rank == 0:  # one bench a node, however many ranks run on it
            from fabricscope.doctor.active import bench_findings

            report.findings += bench_findings(report.expect, gpus=len(report.node.gpus), timeout_s=args.timeout)
        if capture:
            write_capture(root, capture, env.variables, report.node.hostname, env.home)
    except FabricscopeError as exc:
        why = exc.as_flag() if isinstance(exc, InvalidValue) else str(exc)
        return failed_report(world.rank, hostname, root_path, why)
    except Exception as exc:  # a bug must not take the fleet report down with it
        traceback.print_exc(file=sys.stderr)
        return failed_report(world.rank, hostname, root_path, f"internal error {type(exc).__name__}: {exc}")
    return NodeReport(
        rank=world.rank,
        hostname=report.node.hostname,
        boot_id=report.node.boot_id,
        shm_device=report.node.host.shm_device,
        host_id=host_id.value if (host_id := report.node.nccl.get("NCCL_HOSTID")) else None,
        root=root_path,
        facts=node_facts(report.node, report.expect),
        findings=report.findings,
    )


def run_rank(
    args: argparse.Namespace,
    world: World,
    expect: Expectations | None,
    timeout_s: float,
    rendezvous: Rendezvous | None = None,
) -> int:
    """Probe this rank's node, send the report to rank 0; rank 0 prints the fleet and returns its exit code.

    Other ranks return 0 once rank 0 has the fleet report out, also when they
    could not probe (rank 0 reports that): the fleet's verdict is rank 0's.
    A rank that cannot reach the rendezvous store, or whose rank 0 never
    gets the report out (stopped, hung, dead), raises
    :class:`DoctorIncomplete` (exit 3): the launcher then ends the others.
    """
    hostname = socket.gethostname()
    link = rendezvous or Rendezvous.connect(world, timeout_s)
    link.announce(hostname)
    mine = probe_rank(args, world, expect, hostname)
    link.send(mine.to_json())
    if world.rank != 0:
        if args.bench:
            # Rank 0 shares its plan once its own bench is done (-T and 30 s at most) and it has gathered
            # the reports (2 x -T at most).
            join_fleet_pairs(link, world, 3 * timeout_s + 60)
        link.await_rank0(timeout_s)
        return 0
    texts, missing = link.gather(timeout_s)
    reports = [NodeReport.from_json(t) for t in texts]
    nodes = group_reports(reports)
    probed = [n for n in nodes if not n.failed]
    differences = compare({n.label: n.facts for n in probed})
    fleet = fleet_findings(differences, missing, timeout_s) + machine_findings(reports)
    if args.bench:
        fleet.append(lead_fleet_pairs(link, world, [r.hostname for r in reports], len(missing), timeout_s))
    everything = [f for n in nodes for f in n.findings] + fleet
    problem = None
    if args.json:
        try:
            _fleet_result(args, world, expect, nodes, differences, fleet, missing, hostname).save(args.json)
        except FabricscopeError as exc:
            problem = DoctorIncomplete(f"--json {args.json}: {exc}")
    console = make_console()  # with --json - stdout is the JSON's: sys.stdout is stderr (claim_stdout)
    print_report(lambda: render_fleet(console, nodes, differences, fleet))  # a closed stdout keeps the verdict
    link.finish([rank for rank in range(world.world_size) if rank not in missing])
    if problem is not None:
        raise problem
    return exit_code(everything)


def _fleet_result(
    args: argparse.Namespace,
    world: World,
    expect: Expectations | None,
    nodes: Sequence[NodeReport],
    differences: Sequence[Difference],
    fleet: Sequence[Finding],
    missing: dict[int, str | None],
    hostname: str,
) -> Result:
    findings = [f for n in nodes for f in n.findings] + list(fleet)
    labels = [n.label for n in nodes for _ in n.findings] + ["fleet"] * len(fleet)
    return doctor_result(
        findings,
        config={"root": args.root, "expect": expect.to_dict() if expect else None, "world_size": world.world_size},
        hostname=hostname,
        env=collect_env(launcher=world.launcher, world_size=world.world_size),
        summary={
            "nodes": [
                {
                    "node": n.label,
                    "ranks": n.ranks,
                    "root": n.root,
                    "probed": not n.failed,
                    "verdict": verdict(n.findings),
                    "facts": n.facts,
                }
                for n in nodes
            ],
            "differences": [d.to_dict() for d in differences],
            "missing_ranks": [{"rank": rank, "host": host} for rank, host in sorted(missing.items())],
        },
        node_labels=labels,
    )


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
        word = verdict(node.findings)
        tally = counts(node.findings)
        problems = sorted((f for f in node.findings if f.severity >= Severity.WARN), key=lambda f: -f.severity)
        lines = [f"{f.severity.label} {f.id} {f.subject}: {f.observed}" for f in problems[:MAX_LINES_PER_NODE]]
        if len(problems) > MAX_LINES_PER_NODE:
            lines.append(f"... {len(problems) - MAX_LINES_PER_NODE} more (--json has them all)")
        table.add_row(
            plain(node.label),
            _ranks(node.ranks),
            Text(word, style=STYLES[Severity.parse(word)]),
            f"{tally['fail']} / {tally['warn']}",
            _lines(lines) if lines else "-",
        )
    console.print(table)
    if differences:
        diff_table = Table(title="values that differ across nodes", title_justify="left")
        diff_table.add_column("value", no_wrap=True)
        diff_table.add_column("most nodes", overflow="fold")
        diff_table.add_column("odd node(s) out", overflow="fold")
        for diff in differences:
            common = f"{diff.common} ({diff.common_nodes} of {diff.total})" if diff.common else "no majority"
            odd = _lines([f"{node}: {value}" for node, value in diff.odd.items()])
            diff_table.add_row(plain(diff.fact), plain(common), odd)
        console.print(diff_table)
    else:
        probed = sum(1 for n in nodes if not n.failed)
        unprobed = f" ({len(nodes) - probed} could not be probed)" if probed < len(nodes) else ""
        agree = f"all {probed} nodes agree on every compared value" if probed > 1 else "one node: nothing to compare"
        console.print(f"{agree} across nodes{unprobed}" if probed <= 1 else f"{agree}{unprobed}")
    for item in fleet:
        if item.id == "fleet.report":
            console.print(plain(f"fail {item.subject}: {item.observed}", style=STYLES[Severity.FAIL]))
        elif item.id != "fleet.consistency":  # its values are the table above; the pairs of doctor --bench and
            # the ranks of one machine NCCL would not connect inside it are said in full, advice included
            line = f"{item.severity.label} {item.id} [{item.subject}]: {item.observed}"
            console.print(plain(line, style=STYLES[item.severity]))
            if item.advice:
                console.print(plain(f"  -> {item.advice}"))
    everything = [f for n in nodes for f in n.findings] + list(fleet)
    odd_nodes = sorted({node for d in differences if d.common is not None for node in d.odd})
    where = _nodes(len(nodes)) + (f", odd one(s) out: {', '.join(odd_nodes)}" if odd_nodes else "")
    console.print(verdict_line(everything, where))


def _lines(lines: Sequence[str]) -> Text:
    return Text("\n").join(plain(line) for line in lines)


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _ranks(ranks: Sequence[int]) -> str:
    ordered = sorted(ranks)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"{ordered[0]}-{ordered[-1]}"
    return ",".join(str(r) for r in ordered)
