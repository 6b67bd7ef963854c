"""``fabricscope monitor``: is the network busy, and healthy, right now?

Only the standard library is imported here; the samplers, rich and
prometheus-client are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from types import FrameType
from typing import Any

from fabricscope import options
from fabricscope.errors import UsageError
from fabricscope.options import SubParsers
from fabricscope.shown import cut
from fabricscope.store.save import add_save_options, check_save_options, wants_save

__all__ = ["add_parser", "run"]

_EPILOG = """\
examples:
  fabricscope monitor                                  # live view until Ctrl-C
  fabricscope monitor --interval 0.5 --duration 60 --json net.json
  fabricscope monitor --json job.json -- torchrun --nproc-per-node 8 train.py
  fabricscope monitor --serve 19400                     # Prometheus exporter on 127.0.0.1:19400
  fabricscope monitor --serve 0.0.0.0:19400 --record node.jsonl
  fabricscope monitor --alert-rules --utilization 85% > fabricscope-rules.yml
  fabricscope monitor --recording-rules > fabricscope-recording.yml
  fabricscope monitor --grafana-dashboard > fabricscope-dashboard.json   # Grafana: Dashboards > Import

With a command after '--' the command's output passes through, the summary and verdict
go to stderr, and the exit status is the command's (127 not found, 126 not executable,
128+N killed by signal N). Ctrl-C reaches the command first. A usage error is exit 2.
"""


def add_parser(subparsers: SubParsers) -> None:
    parser = subparsers.add_parser(
        "monitor",
        help="watch NIC, RDMA, TCP and GPU counters live, around a command, or as a Prometheus exporter",
        description=(
            "Is my training job network-bound right now, and is the network healthy? Samples "
            "/proc/net/dev, TCP counters, RDMA ports, ethtool -S and GPUs, and shows rates as a share of line rate."
        ),
        epilog=_EPILOG,
    )
    parser.add_argument("--root", default="/", metavar="DIR", help="read sysfs/procfs under DIR (default /)")
    parser.add_argument(
        "--interval",
        type=options.seconds(minimum=0.05, maximum=3600),
        default=1.0,
        metavar="S",
        help="seconds between samples, 0.05 to 3600 (1); ms, s, m, h accepted",
    )
    parser.add_argument(
        "--duration",
        type=options.seconds(minimum=0.001, maximum=366 * 86400),
        default=None,
        metavar="S",
        help="stop after S seconds (default: until Ctrl-C, or until the command ends)",
    )
    parser.add_argument(
        "--interfaces",
        default=None,
        metavar="IF,...",
        help="only these network interfaces (default: all but lo and virtual ones: veth, docker, bridges, tunnels)",
    )
    parser.add_argument(
        "--all-interfaces", action="store_true", help="also watch lo and virtual interfaces (veth, docker, br-, ...)"
    )
    parser.add_argument(
        "--link-speed",
        action="append",
        default=None,
        metavar="IF=RATE,...",
        help="line rates for utilization where the kernel reports none (virtio, some VMs): eth0=25G,eth1=100Gb/s "
        "(may be repeated)",
    )
    parser.add_argument("--no-gpu", action="store_true", help="do not sample GPUs through NVML")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the summary and time series as a Result")
    parser.add_argument("--record", default=None, metavar="FILE", help="write JSON lines, flushed every interval")
    parser.add_argument("--serve", default=None, metavar="[HOST:]PORT", help="Prometheus /metrics (host 127.0.0.1)")
    parser.add_argument(
        "--textfile",
        default=None,
        metavar="DIR",
        help="write DIR/fabricscope.prom every interval (atomically) for node_exporter's textfile collector",
    )
    parser.add_argument("--alert-rules", action="store_true", help="print Prometheus alerting rules and exit")
    parser.add_argument(
        "--recording-rules",
        action="store_true",
        help="print Prometheus recording rules (throughput, utilization, errors, congestion) and exit",
    )
    parser.add_argument(
        "--grafana-dashboard",
        action="store_true",
        help="print a Grafana dashboard (JSON) of the recording rules' series and the alerts, and exit",
    )
    add_save_options(parser)
    rules = parser.add_argument_group("alert rules (with --alert-rules)")
    rules.add_argument(
        "--retrans-ratio",
        type=options.number(minimum=1e-9, maximum=0.5),
        default=None,
        metavar="R",
        help="TCP retransmitted/sent segments above which to alert (1e-3)",
    )
    rules.add_argument(
        "--utilization",
        type=options.fraction(minimum=0.01, maximum=1.0),
        default=None,
        metavar="P",
        help="share of line rate, 90%% or 0.9 (90%%)",
    )
    rules.add_argument(
        "--for",
        dest="for_",
        type=options.seconds(minimum=1, maximum=7 * 86400),
        default=None,
        metavar="S",
        help="how long a link stays above it before the alert fires (5m)",
    )
    rules.add_argument(
        "--window",
        type=options.seconds(minimum=1, maximum=7 * 86400),
        default=None,
        metavar="S",
        help="range of the rates and increases (5m)",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="run CMD, watch it, exit with its status"
    )
    parser.set_defaults(func=run)


_RULE_FLAGS = (
    ("--retrans-ratio", "retrans_ratio"),
    ("--utilization", "utilization"),
    ("--for", "for_"),
    ("--window", "window"),
)
"""The alert rules' thresholds (None unless given: the defaults are AlertThresholds')."""


def run(args: argparse.Namespace) -> int:
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if args.alert_rules or args.recording_rules or args.grafana_dashboard:
        return _print_rules(args, command)
    if args.command and not command:
        raise UsageError("nothing after '--': give the command to run and watch")
    given = [flag for flag, dest in _RULE_FLAGS if getattr(args, dest) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} set the thresholds of the rules --alert-rules prints: add --alert-rules")
    if command and command[0].startswith("-") and not args.command[0] == "--":
        raise UsageError(f"unknown option {command[0]!r} (see 'fabricscope monitor --help'); put a command after '--'")
    return _watch(args, command)


def _print_rules(args: argparse.Namespace, command: list[str]) -> int:
    from fabricscope.monitor.rules import AlertThresholds, alert_rules, recording_rules

    asked = [
        flag
        for flag, on in (
            ("--alert-rules", args.alert_rules),
            ("--recording-rules", args.recording_rules),
            ("--grafana-dashboard", args.grafana_dashboard),
        )
        if on
    ]
    if len(asked) > 1:
        raise UsageError(f"{' and '.join(asked)} each print one file: give one of them")
    if command or args.json or args.record or args.serve or args.textfile or wants_save(args):
        raise UsageError(
            f"{asked[0]} only prints the {'dashboard' if args.grafana_dashboard else 'rules'}: it takes no command, "
            "--json, --record, --serve, --textfile or --save"
        )
    if args.recording_rules or args.grafana_dashboard:
        given_thresholds = [flag for flag, dest in _RULE_FLAGS if getattr(args, dest) is not None]
        if given_thresholds:
            raise UsageError(f"{', '.join(given_thresholds)} set the thresholds of --alert-rules, not of {asked[0]}")
        if args.recording_rules:
            sys.stdout.write(recording_rules())
        else:
            import json

            from fabricscope.monitor.dashboard import grafana_dashboard

            sys.stdout.write(json.dumps(grafana_dashboard(), indent=1) + "\n")
        return 0
    given = {"retrans_ratio": args.retrans_ratio, "utilization": args.utilization}
    given.update(for_s=args.for_, window_s=args.window)
    thresholds = AlertThresholds(**{key: value for key, value in given.items() if value is not None})
    sys.stdout.write(alert_rules(thresholds))
    return 0


def _open_root(path: str) -> Any:
    from fabricscope.sysroot import SysRoot

    shown = cut(path, 80)
    if not os.path.isdir(path):
        what = "no such directory" if not os.path.exists(path) else "not a directory"
        raise UsageError(f"--root {shown}: {what}; give / or the top of a captured tree (holding sys/ and proc/)")
    if os.path.realpath(path) != "/" and not any(os.path.isdir(os.path.join(path, d)) for d in ("sys", "proc")):
        raise UsageError(f"--root {shown}: no sys/ or proc/ inside; give / or the top of a captured tree")
    return SysRoot(path)


def _watch(args: argparse.Namespace, command: list[str]) -> int:
    from fabricscope.monitor.session import Monitor, MonitorConfig
    from fabricscope.outputs import check_outputs

    interfaces = (
        tuple(_interface_name("--interfaces", n) for n in args.interfaces.split(",") if n)
        if args.interfaces is not None
        else None
    )
    if interfaces is not None and args.all_interfaces:
        raise UsageError(
            "--interfaces names the interfaces to watch and --all-interfaces watches every one: give one of them"
        )
    if interfaces is not None and not interfaces:
        raise UsageError("--interfaces needs at least one interface name, e.g. eth0,ib0")
    inputs = [args.root] if os.path.realpath(args.root) != "/" else []
    check_outputs([("--json", args.json), ("--record", args.record)], inputs=inputs)
    if args.textfile is not None:
        from fabricscope.monitor.exporter import TEXTFILE_NAME
        from fabricscope.outputs import check_output_folder

        check_output_folder(
            "--textfile",
            args.textfile,
            files=[TEXTFILE_NAME],
            make=False,
            what="node_exporter's textfile collector (its --collector.textfile.directory)",
            inputs=inputs,
            outputs=[("--json", args.json), ("--record", args.record)],
        )
    serve = None
    if args.serve is not None:
        from fabricscope.monitor.exporter import parse_serve

        serve = parse_serve(args.serve)
    check_save_options(args)
    root = _open_root(args.root)
    if command:
        from fabricscope.monitor.command import resolve_command

        resolve_command(command)  # not found (127) or not executable (126) before anything starts
    config = MonitorConfig(
        interval_s=args.interval,
        duration_s=args.duration,
        interfaces=interfaces,
        all_interfaces=args.all_interfaces,
        link_speeds=_link_speeds(args.link_speed),
        gpus=not args.no_gpu,
        keep_records=bool(args.json) or wants_save(args),
    )
    monitor = Monitor(root, config)
    from fabricscope.monitor.output import Outputs

    with Outputs.open(monitor, args, serve=serve, command=command) as out:
        return _run_watch(monitor, out, command)


def _run_watch(monitor: Any, out: Any, command: list[str]) -> int:
    from fabricscope.monitor.command import WatchedCommand
    from fabricscope.monitor.session import run_loop

    stop = threading.Event()
    watched: list[Any] = []
    interrupted: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signum)
        if watched:
            watched[0].forward(signum)
        else:
            stop.set()

    # A closed terminal (SIGHUP) stops the monitor like SIGTERM: the command gets it, what was measured is kept.
    # A monitor started with SIGINT ignored (a background job of a script) keeps it ignored, and so does its
    # command (the shim passes on what it inherits): Ctrl-C was not meant for that job.
    stops = [
        sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(sig) is not signal.SIG_IGN
    ]
    previous = {sig: signal.signal(sig, on_signal) for sig in stops}
    try:
        if command:
            monitor.sample()  # the baseline, before the command starts moving data
            watched.append(WatchedCommand(command))
            out.baseline_taken()
        try:
            run_loop(
                monitor, out.after_sample, stop=stop, command=watched[0] if watched else None, sample_first=not watched
            )
        except Exception:
            # The monitor failed mid-run (a full disk under --record...): stop the command it started, keep
            # what was measured (--json, the recording's summary), then report the failure.
            if watched:
                watched[0].stop()
            with contextlib.suppress(Exception):
                out.finish(interrupted=True, command_status=watched[0].wait() if watched else None)
            raise
        status = exit_code = 0
        if watched:
            exit_code = watched[0].wait()
            status = exit_code
        out.finish(interrupted=bool(interrupted), command_status=status if watched else None)
        return exit_code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")
"""A Linux interface name: at most IFNAMSIZ - 1 = 15 characters."""


def _interface_name(flag: str, text: str) -> str:
    """``text`` as a Linux interface name, or one line saying what one is."""
    from fabricscope.shown import quoted

    name = text.strip()
    if not _INTERFACE_NAME.fullmatch(name):
        raise UsageError(
            f"{flag} {quoted(name, 40)} is not an interface name: Linux's are 1 to 15 letters, "
            "digits, '.', '_', ':', '@' or '-'"
        )
    return name


def _link_speeds(texts: list[str] | None) -> dict[str, float]:
    """``--link-speed eth0=25G,eth1=100Gb/s`` (the flag may be repeated) -> {interface: bits per second}."""
    from fabricscope.shown import quoted
    from fabricscope.units import parse_rate

    speeds: dict[str, float] = {}
    for item in ",".join(texts or ()).split(",") if texts else ():
        name, sign, rate = item.partition("=")
        if not sign or not name.strip() or not rate.strip():
            raise UsageError(f"--link-speed takes IF=RATE items, like eth0=25G or ib0=200Gb/s; got {quoted(item, 40)}")
        name = _interface_name("--link-speed", name)
        if name in speeds:
            raise UsageError(f"--link-speed gives {quoted(name, 40)} two rates: give each interface one")
        speeds[name] = parse_rate(rate.strip(), what=f"--link-speed {quoted(name, 40)}")
        low, high = LINK_SPEED_BPS
        if not low <= speeds[name] <= high:
            raise UsageError(
                f"--link-speed {quoted(name, 40)}={quoted(rate.strip(), 40)} is {speeds[name]:.3g} bit/s: a link "
                "runs from 1 kbit/s (a rate-limited test link) to 3.2 Tbit/s; a unit mistake? (25G is 25 Gbit/s)"
            )
    return speeds


LINK_SPEED_BPS = (1e3, 3.2e12)
"""Link speeds --link-speed takes, bit/s: a token-bucket test link to beyond the fastest NIC (1.6 Tb/s in 2026)."""
