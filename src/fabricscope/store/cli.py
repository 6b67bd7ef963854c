"""Sub-commands that remember: history, baseline, compare, import.

Parse, call the library, print.  Only the standard library is imported at
import time; sqlite3, scipy and the store modules are imported by the handlers.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from fabricscope import options
from fabricscope.errors import FabricscopeError, UsageError
from fabricscope.options import SubParsers
from fabricscope.outputs import check_outputs
from fabricscope.shown import quoted

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from fabricscope.results import Result

__all__ = [
    "LOG_MAX_BYTES",
    "add_parser",
    "parse_since",
    "run_baseline",
    "run_compare",
    "run_history",
    "run_import",
]

LOG_MAX_BYTES = 256 << 20
"""Largest nccl-tests log imported (a log with NCCL_DEBUG=INFO from thousands of ranks stays below)."""


def _print(lines: Sequence[str]) -> None:
    """Print, each line escaped (labels, hosts, ops and headlines come from files and logs: an escape
    sequence in one must not rewrite the terminal); a reader that went away (``| head -1``) ends the
    printing, never the command or its verdict."""
    from fabricscope.shown import printable

    try:
        sys.stdout.write("\n".join(printable(line) for line in lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


# --- history ------------------------------------------------------------------------------

_HISTORY_EPILOG = """\
A RUN is a result file or a history id.  The history lives in $FABRICSCOPE_HOME
(default ~/.local/share/fabricscope); --save on bench, predict, estimate, doctor, monitor and
dataload fills it, and so does 'import nccl-tests --save'.

examples:
  fabricscope history
  fabricscope history --kind bench --host node07 --since 7d
  fabricscope history show 12
  fabricscope history show 12 --json run12.json
  fabricscope history rm 12
"""


def _add_history(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "history",
        help="list saved runs; show or remove one",
        description="List the runs kept in the history (id, time, kind, label, hosts, ranks, headline figure).",
        epilog=_HISTORY_EPILOG,
    )
    p.add_argument("--kind", default=None, help="only runs of this kind (bench, nccl-tests, predict, doctor...)")
    p.add_argument("--label", default=None, help="only runs with this label")
    p.add_argument("--host", default=None, help="only runs that ran on this host")
    p.add_argument("--since", default=None, help="only runs created since: 2026-11-30, 2026-11-30T12:00, 36h, 7d")
    p.add_argument("--json", default=None, metavar="FILE", help="write the list as JSON")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    show = actions.add_parser("show", help="a saved run: metadata, summary and table", description="Show one run.")
    show.add_argument("run", metavar="RUN", help="history id or result file")
    show.add_argument("--json", dest="show_json", default=None, metavar="FILE", help="write the run's Result")
    rm = actions.add_parser("rm", help="remove a run from the history", description="Remove a run from the history.")
    rm.add_argument("run", metavar="RUN", help="history id")
    p.set_defaults(func=run_history, action=None)


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """``2026-11-30``, ``2026-11-30T12:00`` (UTC unless a zone is given), or an age: ``36h``, ``7d``, ``90m``."""
    from fabricscope.units import OutOfRange, parse_duration

    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value) if len(value) <= 40 else None
    except ValueError:
        parsed = None
    if parsed is not None:
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    moment = now or datetime.now(UTC)
    try:
        return moment - timedelta(seconds=parse_duration(value, what="--since"))
    except (OverflowError, ValueError, OutOfRange):
        raise UsageError(f"--since {quoted(text)} reaches back before year 1") from None
    except FabricscopeError:
        raise UsageError(
            f"--since {quoted(text)} is neither a date (2026-11-30, 2026-11-30T12:00) nor an age (36h, 7d)"
        ) from None


def run_history(args: argparse.Namespace) -> int:
    if args.action == "show":
        return _history_show(args)
    if args.action == "rm":
        return _history_rm(args)
    import json

    from fabricscope.outputs import atomic_write_text
    from fabricscope.store.history import History

    since = parse_since(args.since) if args.since is not None else None
    check_outputs([("--json", args.json)], inputs=[])
    with History(create=False) as history:
        entries = history.entries(kind=args.kind, label=args.label, host=args.host, since=since)
    if args.json:
        atomic_write_text(args.json, json.dumps([e.to_dict() for e in entries], indent=1) + "\n")
    if not entries:
        _print([f"# no saved runs match (history: {history.path})"])
        return 0
    rows = [["id", "created", "kind", "label", "hosts", "ranks", "headline"]]
    for e in entries:
        hosts = ",".join(e.hosts[:3]) + (f",+{len(e.hosts) - 3}" if len(e.hosts) > 3 else "")
        status = "" if e.status == "complete" else f" [{e.status}]"
        rows.append(
            [str(e.id), e.created, e.kind, e.label or "-", hosts or "-", str(e.ranks or "-"), e.headline + status]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [c.rjust(w) if i in (0, 5) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append(("# " if index == 0 else "  ") + "  ".join(cells).rstrip())
    _print(lines)
    return 0


def _history_show(args: argparse.Namespace) -> int:
    from fabricscope import table
    from fabricscope.outputs import say_written
    from fabricscope.store import runs
    from fabricscope.store.history import describe

    check_outputs([("--json", args.show_json)], inputs=[args.run])
    run = runs.resolve(args.run)
    result = run.result
    facts = describe(result)
    lines = [
        f"# {run.source}: {result.kind}, created {result.created}, status {result.status}",
        f"# hosts: {', '.join(facts['hosts']) or '-'}; ranks: {facts['ranks'] or '-'}",
        f"# {facts['headline']}",
    ]
    if result.error:
        lines.append(f"# error: {result.error}")
    gpus = result.host.get("gpus") if isinstance(result.host, dict) else None
    if gpus:
        lines.append(f"# GPUs: {', '.join(map(str, gpus))}")
    collective = [r for r in result.records if isinstance(r, dict) and "busbw_gbps" in r and "placement" in r]
    for op in dict.fromkeys(str(r.get("op")) for r in collective):
        mine = [r for r in collective if r.get("op") == op]
        lines.append(f"# {op}")
        lines.extend(table.header_lines()[1:])
        check = any(r.get("wrong") is not None for r in mine)
        lines.extend(table.format_row(row, check=check) for row in table.pair_rows(mine))
        printed = result.summary.get(op) if isinstance(result.summary, dict) else None
        average = printed.get("nccl_tests_avg_busbw_gbps") if isinstance(printed, dict) else None
        average = average if isinstance(average, int | float) and not isinstance(average, bool) else None
        lines.extend(table.footer_lines(mine, check=check, average=average))
    if result.kind == "pairs":
        lines.extend(_pairs_lines(result))
    if not collective:
        import json

        lines.append("# summary:")
        lines.extend("  " + line for line in json.dumps(result.summary, indent=1, default=str).splitlines())
    _print(lines)
    if args.show_json:
        result.save(args.show_json)
        say_written(args.show_json)
    return 0


def _pairs_lines(result: Result) -> list[str]:
    """A pairs run's matrices and findings, as ``pairs`` printed them (its well-formed records only)."""
    import io

    from fabricscope.pair_matrix import well_formed
    from fabricscope.pairs.analysis import analyse
    from fabricscope.pairs.report import print_report

    shown = well_formed(result.records)
    lines = []
    if shown:
        by = result.config.get("by") if isinstance(result.config, dict) else None
        out = io.StringIO()
        print_report(shown, analyse(shown), by if by in ("rank", "node") else "rank", out)
        lines = out.getvalue().rstrip("\n").splitlines()
    if len(shown) < len(result.records):
        lines.append(
            f"# {len(result.records) - len(shown)} record(s) not shown: not pairs records, or malformed ones (a test, "
            "whole-number ranks and size, host names, finite time and bandwidth)"
        )
    return lines


def _history_rm(args: argparse.Namespace) -> int:
    from fabricscope.store import runs
    from fabricscope.store.history import History

    run_id = runs.parse_run_id(args.run)
    if run_id is None:
        raise UsageError(
            f"history rm takes a history id (a number 'fabricscope history' lists), got {quoted(args.run)}"
        )
    with History(create=False) as history:
        history.remove(run_id)
    sys.stderr.write(f"removed run {run_id}\n")
    return 0


# --- baseline -------------------------------------------------------------------------------


def _add_baseline(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "baseline",
        help="name a run as the reference to compare against",
        description="Set, list and remove baselines: names for runs in the history.",
        epilog="examples:\n  fabricscope baseline set h100-ndr 12\n  fabricscope baseline set lab-a result.json\n"
        "  fabricscope baseline list\n  fabricscope baseline rm lab-a",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    set_ = actions.add_parser("set", help="point NAME at RUN (a result file is saved into the history)")
    set_.add_argument("name", metavar="NAME")
    set_.add_argument("run", metavar="RUN", help="history id or result file")
    actions.add_parser("list", help="list the baselines")
    rm = actions.add_parser("rm", help="forget a baseline (its run stays in the history)")
    rm.add_argument("name", metavar="NAME")
    p.set_defaults(func=run_baseline, action=None)


def run_baseline(args: argparse.Namespace) -> int:
    from fabricscope.store import baselines, runs
    from fabricscope.store.history import History

    if args.action == "set":
        baselines.check_name(args.name)
        run = runs.resolve(args.run, kinds=runs.COLLECTIVE_KINDS)
        with History() as history:
            run_id = baselines.set_baseline(history, args.name, run)
        sys.stderr.write(f"baseline {args.name} is run {run_id}\n")
        return 0
    if args.action == "rm":
        with History(create=False) as history:
            baselines.remove(history, args.name)
        sys.stderr.write(f"removed baseline {args.name}\n")
        return 0
    with History(create=False) as history:
        found = baselines.listing(history)
    if not found:
        _print(["# no baselines (fabricscope baseline set NAME RUN)"])
        return 0
    width = max(len(b.name) for b in found)
    _print(
        [f"# {'name'.ljust(width)}  run  set at                     kind        headline"]
        + [f"  {b.name.ljust(width)}  {b.run_id:>3}  {b.set_at:<25}  {b.kind:<10}  {b.headline}" for b in found]
    )
    return 0


# --- compare ----------------------------------------------------------------------------------

_COMPARE_EPILOG = """\
Per op and size: the change in busbw (time for sizes up to 64K).  With raw samples on both
sides (bench), a difference within noise is "not significant" (Mann-Whitney U, scipy); without
(imported logs, predictions) values are held against the tolerance.

exit status: 1 when a row regressed beyond the tolerance, 0 otherwise, 2 on a usage error.

examples:
  fabricscope compare today.json --baseline h100-ndr
  fabricscope compare 14 --against 12 --tolerance 3%
  fabricscope compare bench.json --against prediction.json --markdown ticket.md
"""


def _add_compare(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="a run against a baseline, another run or a prediction: regressions per op and size",
        description="Compare a run with a reference, row by row; exit 1 on a regression beyond the tolerance.",
        epilog=_COMPARE_EPILOG,
    )
    p.add_argument("run", metavar="RUN", help="history id or result file (bench, nccl-tests or predict)")
    ref = p.add_mutually_exclusive_group()
    ref.add_argument("--baseline", default=None, metavar="NAME", help="compare against this baseline")
    ref.add_argument("--against", default=None, metavar="RUN", help="compare against this run or prediction")
    p.add_argument(
        "--tolerance",
        default=0.05,
        type=options.fraction(maximum=10.0),
        help="change allowed before a row counts: 5%% or 0.05 (default 5%%)",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="write the comparison as a Result (kind compare)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="write the comparison as Markdown for a ticket")
    p.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from fabricscope.outputs import atomic_write_text
    from fabricscope.store import baselines, compare, runs
    from fabricscope.store.history import History

    if args.baseline is None and args.against is None:
        raise UsageError("compare needs a reference: --baseline NAME or --against RUN")
    inputs = [args.run] + ([args.against] if args.against else [])
    check_outputs([("--json", args.json), ("--markdown", args.markdown)], inputs=inputs)
    current = runs.resolve(args.run, kinds=runs.COLLECTIVE_KINDS)
    if args.baseline is not None:
        with History(create=False) as history:
            reference = baselines.get(history, args.baseline)
    else:
        reference = runs.resolve(args.against, kinds=runs.COLLECTIVE_KINDS, what="--against")
    comparison = compare.compare(
        current.result,
        reference.result,
        tolerance=args.tolerance,
        current_name=current.source,
        reference_name=reference.source,
    )
    if not comparison.rows:
        # A CI gate must not pass on two sweeps that share nothing (another op, datatype or size range).
        raise UsageError(
            f"{current.source} and {reference.source} share no op, size, datatype and placement: "
            "nothing to compare (measure the same sweep, or compare against a matching run)"
        )
    _print(compare.text_lines(comparison))
    if args.json:
        comparison.to_result().save(args.json)
    if args.markdown:
        atomic_write_text(args.markdown, "\n".join(compare.markdown_lines(comparison)) + "\n")
    return comparison.exit_code


# --- import --------------------------------------------------------------------------------------

_IMPORT_EPILOG = """\
Reads the text output of the C nccl-tests (current and older formats, several collectives per
log, mpirun --tag-output and srun --label prefixes, logs cut short) and their -J JSON files.

examples:
  fabricscope import nccl-tests all_reduce.log
  fabricscope import nccl-tests node*.log --save --label before-upgrade
  fabricscope import nccl-tests run.json --json run-result.json
  fabricscope import nccl-tests old.txt --op all_gather   # a log that does not name its collective
"""


def _add_import(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "import",
        help="read other tools' output as Results (nccl-tests)",
        description="Import other tools' output as fabricscope Results.",
        epilog=_IMPORT_EPILOG,
    )
    tools = p.add_subparsers(dest="tool", metavar="TOOL")
    nccl = tools.add_parser(
        "nccl-tests",
        help="text or -J JSON output of the C nccl-tests",
        description="Import nccl-tests logs.",
        epilog=_IMPORT_EPILOG,
    )
    nccl.add_argument("files", nargs="+", metavar="FILE")
    nccl.add_argument("--op", default=None, help="the collective, for logs that do not name it")
    nccl.add_argument("--json", default=None, metavar="FILE", help="write the Result (one FILE only)")
    from fabricscope.store.save import add_save_options

    add_save_options(nccl)
    p.set_defaults(func=run_import, tool=None)


def run_import(args: argparse.Namespace) -> int:
    from fabricscope.errors import closest
    from fabricscope.ops import COLLECTIVES
    from fabricscope.store.history import describe
    from fabricscope.store.save import check_save_options, save_request, save_result
    from fabricscope.userfiles import read_text

    if args.tool is None:
        raise UsageError("import needs a tool: fabricscope import nccl-tests FILE...")
    check_save_options(args)
    if args.json and len(args.files) > 1:
        raise UsageError("--json takes one imported FILE; import several with --save, or one at a time")
    check_outputs([("--json", args.json)], inputs=args.files)
    op = None
    if args.op is not None:
        op = args.op.strip().lower()
        names = list(COLLECTIVES)
        if op not in names:
            raise UsageError(f"unknown --op {quoted(args.op, 40)}{closest(op, names)}: use one of {', '.join(names)}")
    # Every file is read before anything is saved: one bad file saves none.
    texts = [(path, read_text(path, what="nccl-tests log", max_bytes=LOG_MAX_BYTES)) for path in args.files]
    with _Progress(sum(text.count("\n") for _, text in texts)) as progress:
        checked = [(path, _readable(text, path, op, progress)) for path, text in texts]
    results = [(path, result) for path, (result, _) in checked]
    lines = []
    for path, result in results:
        facts = describe(result)
        rows = len(result.records)
        lines.append(
            f"# {path}: {', '.join(result.config['ops'])}; {rows} records; ranks {facts['ranks'] or '?'} "
            f"on {', '.join(facts['hosts']) or '?'}; {facts['headline']}"
        )
        if result.status != "complete":
            lines.append(f"#   {result.status}: {result.error}")
        lines.extend(f"#   note: {note}" for note in result.summary.get("notes", []))
    _print(lines)
    if args.json:
        result, text = checked[0][1]
        result.save(args.json, text=text)  # the text just read back, not a second serialization
    for path, result in results:
        save_result(save_request(args), result, what=path)
    return 0


class _Progress:
    """A bar on a terminal's stderr while a long import reads and checks its logs (nothing elsewhere,
    nothing for a short one): the lines read, then the Result being written out and read back."""

    LONG = 50_000
    """Lines from which an import shows its progress: a log of this size takes seconds (5.5 s on a 2-core
    development VM, where 120,000 lines take 13)."""

    def __init__(self, lines: int) -> None:
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.done = 0
        if lines < self.LONG or not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("import {task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} lines"),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        self.task = self.bar.add_task("reading", total=lines)

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def read(self, index: int, total: int) -> None:
        """One log's reading is at line ``index`` of ``total``."""
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, description="reading", completed=self.done + index)

    def checking(self, lines: int) -> None:
        """One log of ``lines`` lines is read; its Result is being written out and read back."""
        self.done += lines
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, description="checking", completed=self.done)


def _readable(log: str, path: str, op: str | None, progress: _Progress) -> tuple[Result, str]:
    """The Result of one log as every command will read it, and its file's text.

    The parsed Result is written out and read back through the loader every command uses: a log
    value fabricscope cannot keep (a 20-digit size, ``1e308`` wrong elements) is refused here, not
    written for ``history``, ``compare`` and ``report`` to refuse later.  The parsed records are let
    go before the text is read back, so the two copies of 300,000 rows are never held at once.
    """
    from fabricscope.errors import ResultFormatError
    from fabricscope.results import loads
    from fabricscope.shown import cut
    from fabricscope.store import nccl_tests

    text = nccl_tests.parse(log, source=path, op=op, progress=progress.read).to_json()
    progress.checking(log.count("\n"))
    try:
        return loads(text, source=cut(path)), text
    except (ResultFormatError, ValueError) as exc:
        raise UsageError(f"{exc}; that value comes from the log, which fabricscope cannot keep as it is") from None


def add_parser(subparsers: SubParsers) -> None:
    _add_history(subparsers)
    _add_baseline(subparsers)
    _add_compare(subparsers)
    _add_import(subparsers)
