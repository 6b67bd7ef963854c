"""``fabricscope doctor``: is this node, and this fleet, ready for distributed training?

Only the standard library is imported here; the probes, checks and rich are
imported by :func:`run`, and torch only in fleet mode.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING, NoReturn

from fabricscope import options
from fabricscope.doctor.invocation import DEFAULT_TIMEOUT_S
from fabricscope.options import SubParsers
from fabricscope.store.save import add_save_options, check_save_options, save_request, save_result, wants_save

if TYPE_CHECKING:
    from fabricscope.doctor.expect import Expectations

__all__ = ["NPD_PROBLEM", "NPD_UNKNOWN", "add_parser", "run"]

NPD_PROBLEM = 1
"""node-problem-detector's custom-plugin protocol: 0 OK, 1 NonOK (a problem), 2 Unknown."""
NPD_UNKNOWN = 2

_EPILOG = """\
exit status: 0 all ok (info included), 1 warnings, 2 failures; 3 the doctor could not
complete (a report that fails while written, a crash): no verdict. A usage error (a --json
path that cannot be written included) is also 2, with one 'error:' line and no report.
The exit status is the verdict also when stdout closes early (doctor | head -1).

examples:
  fabricscope doctor                                   # this node
  fabricscope doctor --expect fleet.toml --json node.json
  fabricscope doctor --capture /tmp/node-a             # copy what was read, for a bug report
  fabricscope doctor --root /tmp/node-a                # check a captured tree elsewhere
  fabricscope doctor --nproc 2                         # fleet mode with local ranks
  fabricscope doctor --nproc 3 --root 'trees/node{rank}'
  torchrun --nnodes 4 --nproc-per-node 1 ... -m fabricscope doctor --expect fleet.toml
  srun -N 16 --ntasks-per-node 1 fabricscope doctor    # rank 0 prints what differs across nodes
  fabricscope doctor --bench --expect node.toml        # and a short bench held to [bench] busbw floors
  fabricscope doctor --oneline                         # for a Slurm HealthCheckProgram (docs/health-checks.md)
  fabricscope doctor --npd                             # a node-problem-detector custom plugin
"""


def add_parser(subparsers: SubParsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check NICs, RDMA ports, PCIe links, GPU-NIC affinity, GPUDirect and NCCL settings",
        description=(
            "Find the misconfigurations that make a fast network slow, on this node or across a fleet. "
            "Reads sysfs and procfs under one root directory."
        ),
        epilog=_EPILOG,
    )
    parser.add_argument("--root", default="/", metavar="DIR", help="read sysfs/procfs under DIR (default /)")
    parser.add_argument("--expect", default=None, metavar="FILE", help="TOML of what each node should have")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the findings as a Result")
    parser.add_argument("--capture", default=None, metavar="DIR", help="copy the files read into DIR")
    add_save_options(parser)
    parser.add_argument(
        "--live-env",
        action="store_true",
        help="with --root: check this shell's NCCL_* variables, not the ones the capture recorded",
    )
    options.add_launch_options(
        parser,
        nproc_help="fleet mode: spawn N local ranks",
        timeout_default=DEFAULT_TIMEOUT_S,
        timeout_help="fleet mode: time to wait for every rank; with --bench: time each bench may take",
        backend=False,
        rendezvous=False,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="one row per finding, ok ones included")
    parser.add_argument(
        "--bench",
        action="store_true",
        help="also run a short bench on this node and hold it to --expect's [bench] busbw floors (timeout -T); in "
        "fleet mode also a short pairs between the nodes, held to the fleet's median",
    )
    parser.add_argument(
        "--oneline",
        action="store_true",
        help="print only the verdict and the worst finding on one line (a Slurm drain reason); same exit status",
    )
    parser.add_argument(
        "--npd",
        action="store_true",
        help="Kubernetes node-problem-detector custom plugin: --oneline, exit 0 ok or warnings, 1 failures, "
        "2 unknown (the doctor could not complete)",
    )
    parser.add_argument("--list", action="store_true", help="list the checks and what each reads, then exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The command: a verdict (0, 1, 2), a usage error (2, raised), or 3 when the doctor could not complete."""
    from fabricscope.doctor.findings import DoctorIncomplete
    from fabricscope.doctor.report import one_line_unknown
    from fabricscope.errors import FabricscopeError, UsageError

    try:
        return _run(args)
    except DoctorIncomplete as exc:
        if not (getattr(args, "npd", False) or getattr(args, "oneline", False)):
            raise
        with contextlib.suppress(OSError):
            print(one_line_unknown(str(exc)), flush=True)  # the one line is all a plugin runner reads
        sys.stderr.write(f"error: {exc}\n")
        return NPD_UNKNOWN if args.npd else exc.exit_code
    except UsageError:
        raise
    except FabricscopeError as exc:
        if isinstance(exc, DoctorIncomplete):
            raise
        raise DoctorIncomplete(str(exc)) from None
    except BrokenPipeError:  # the reader went away before the report: no verdict to keep
        raise
    except OSError as exc:
        from fabricscope.outputs import stream_write_failed

        if not stream_write_failed(exc):
            raise
        raise DoctorIncomplete(f"cannot write the report: {exc.strerror or exc}; no verdict") from None
    except Exception as exc:  # a bug: show where, and say there is no verdict
        traceback.print_exc(file=sys.stderr)
        raise DoctorIncomplete(
            f"fabricscope doctor could not complete ({type(exc).__name__}: {exc}); no verdict. "
            "This is a bug: please report it with the traceback above"
        ) from None


def _run(args: argparse.Namespace) -> int:
    from fabricscope import launch
    from fabricscope.doctor.expect import load_expectations
    from fabricscope.doctor.findings import DoctorIncomplete
    from fabricscope.doctor.invocation import check_outputs
    from fabricscope.errors import UsageError

    if args.list:
        return _list_checks()
    nproc: int | None = args.nproc
    timeout_s: float = args.timeout
    if args.expect is not None and not args.expect.strip():
        raise UsageError("--expect needs a file name, got an empty one")
    expect = load_expectations(args.expect) if args.expect is not None else None
    world = launch.detect()
    check_save_options(args)
    fleet = (world is not None and world.world_size > 1) or (nproc or 0) > 1
    if args.bench and os.path.realpath(args.root) != "/":
        raise UsageError(
            "--bench measures this node (and in fleet mode the links between nodes), not a --root tree: drop --root"
        )
    if args.oneline and args.npd:
        raise UsageError(
            "--npd is --oneline with node-problem-detector's exit codes (0 ok, 1 problem, 2 unknown): give one of them"
        )
    if fleet and (args.oneline or args.npd):
        flag = "--npd" if args.npd else "--oneline"
        raise UsageError(f"{flag} checks this node, as a health check runs on each node: drop {flag} for fleet mode")
    if wants_save(args) and ((world is not None and world.world_size > 1) or (nproc or 0) > 1):
        raise UsageError("--save keeps single-node doctor results; fleet mode does not save yet: drop --save")
    if world is not None and world.world_size > 1:
        from fabricscope.doctor.fleet_run import run_rank

        if nproc is not None and world.rank == 0:
            sys.stderr.write(f"warning: --nproc is ignored: {world.launcher} started {world.world_size} ranks\n")
        check_outputs(args, [world.rank])
        try:
            code = run_rank(args, world, expect, timeout_s)
        except DoctorIncomplete as exc:  # a store that never answers may hold a thread for good: leave at once
            sys.stderr.write(f"error: {exc}\n")
            _leave(exc.exit_code)
        _leave(code)
    if nproc is not None and nproc > 1:
        from fabricscope.doctor.fleet_run import spawn_fleet

        check_outputs(args, range(nproc))
        return spawn_fleet(args, nproc, timeout_s)
    check_outputs(args, [0])
    return _run_single(args, expect)


def _run_single(args: argparse.Namespace, expect: Expectations | None) -> int:
    from fabricscope.doctor.capture import check_capture_target, write_capture
    from fabricscope.doctor.diagnosis import diagnose, doctor_result, expand_placeholders, open_root
    from fabricscope.doctor.findings import DoctorIncomplete
    from fabricscope.doctor.fleet import node_facts
    from fabricscope.doctor.invocation import print_report
    from fabricscope.doctor.probes.node import node_env
    from fabricscope.doctor.report import make_console, one_line, render_findings, verdict_line
    from fabricscope.errors import FabricscopeError
    from fabricscope.metadata import collect_env

    root_path = expand_placeholders(args.root, rank=0, local_rank=0)
    root = open_root(root_path)
    capture = expand_placeholders(args.capture, rank=0, local_rank=0) if args.capture else None
    if capture:
        check_capture_target(capture)
    env = node_env(root, live=args.live_env)
    report = diagnose(root, env=env, expect=expect)
    node = report.node
    if args.bench:
        from fabricscope.doctor.active import bench_findings

        report.findings += bench_findings(report.expect, gpus=len(node.gpus), timeout_s=args.timeout)
    if capture:
        written = write_capture(root, capture, env.variables, node.hostname, env.home)
        sys.stderr.write(f"captured {written} files into {capture} (read it back with --root {capture})\n")
    problem = None
    if args.json or wants_save(args):  # before the report, so that nothing in rendering can cost the JSON
        result = doctor_result(
            report.findings,
            config={"root": root_path, "expect": expect.to_dict() if expect else None},
            hostname=node.hostname,
            env=collect_env(nccl_settings={k: v.value for k, v in node.nccl.items()}),
            summary={
                "facts": node_facts(node, report.expect),
                "nvml": node.nvml,
                "environment": node.env_source,
            },
        )
        try:
            if args.json:
                result.save(args.json)
            save_result(save_request(args), result, what="the findings")
        except FabricscopeError as exc:
            problem = DoctorIncomplete(f"--json {args.json}: {exc}; no verdict" if args.json else f"{exc}; no verdict")
    console = make_console()  # with --json - stdout is the JSON's: sys.stdout is stderr (claim_stdout)

    def render() -> None:
        render_findings(
            console,
            report.findings,
            title=f"fabricscope doctor: {node.hostname} (root {node.root}; NCCL variables from {node.env_source})",
            verbose=args.verbose,
        )
        console.print(verdict_line(report.findings, node.hostname))

    if args.oneline or args.npd:
        if problem is None:  # else the one line is UNKNOWN (run)
            print_report(lambda: print(one_line(report.findings, node.hostname)))
    else:
        print_report(render)  # a closed stdout (| head -1) keeps the verdict below
    if problem is not None:
        raise problem
    if args.npd:
        return NPD_PROBLEM if report.exit_code == 2 else 0
    return report.exit_code


def _leave(code: int) -> NoReturn:
    """A rank of a fleet that is done: exit at once, without Python's (and torch's) teardown.

    Under torchrun rank 0 exits with the fleet's verdict after the others; a
    launcher that sees it exit 1 or 2 ends the ranks still running and reports
    them as failed too, so they must not linger.  A rank whose store never
    answered has a thread blocked in it for good, which teardown could wait on.
    """
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def _list_checks() -> int:
    from fabricscope.doctor import active, fleet, fleet_pairs
    from fabricscope.doctor.checks import CHECKS

    listed = [(check.id, check.title, check.reads) for check in CHECKS]
    listed.append((active.ID, active.TITLE, active.READS))
    listed.append((fleet_pairs.ID, fleet_pairs.TITLE, fleet_pairs.READS))
    listed.extend(fleet.FLEET_CHECKS)
    for check_id, title, reads in listed:
        sys.stdout.write(f"{check_id:<20} {title}\n{'':<20} reads: {reads}\n")
    return 0
