"""The human report: a table of findings grouped by area, the advice, and a one-line verdict.

Rows that are ``ok`` for many subjects of one check collapse into one row
("8 ports") unless ``verbose``; warnings and failures are always shown one by
one, and their advice follows the table.

Findings quote what files hold (firmware strings, NCCL values, interface
names), so nothing in them is ever read as rich markup (``[/b]`` stays
``[/b]``): every piece of data goes into the report as a :class:`~rich.text.Text`
made by :func:`plain`, which also shows control characters escaped and cuts
very long values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from fabricscope.doctor.findings import AREAS, Finding, Severity, counts, exit_code, verdict, worst
from fabricscope.doctor.table import Cell, Column, draw
from fabricscope.shown import printable

__all__ = [
    "ONE_LINE",
    "STYLES",
    "cell",
    "make_console",
    "one_line",
    "one_line_unknown",
    "plain",
    "render_findings",
    "verdict_line",
]

MAX_SUBJECTS = 6
"""Subjects named in one advice line; the table above lists them all."""
MAX_CELL = 400
"""Characters of one value shown in the report; ``--json`` keeps them all."""
STYLES = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.WARN: "yellow",
    Severity.FAIL: "bold red",
}


def cell(text: str, limit: int = MAX_CELL) -> str:
    """A report cell's text: one safe line, cut after ``limit`` characters (the JSON keeps it whole)."""
    return printable(text, limit, more="; --json has them all")


def plain(text: str, style: str = "") -> Text:
    """Data as a report cell: printable, never parsed as markup."""
    return Text(cell(text), style=style)


class _ReportConsole(Console):
    """rich's Console, but a closed stdout (``doctor | head``) is the BrokenPipeError the command
    line already handles (quietly, exit 0), not rich's own ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def make_console(width: int | None = None, *, stderr: bool = False) -> Console:
    """A console for stdout (or stderr, when stdout carries the JSON of ``--json -``): 120 columns when not a
    terminal (unless COLUMNS says), so piped reports stay readable.

    Markup and emoji codes are off: the report prints data, never markup.
    """
    console = _ReportConsole(highlight=False, soft_wrap=False, markup=False, emoji=False, stderr=stderr)
    if width is not None:
        console.width = width
    elif not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 120
    return console


@dataclass(frozen=True, slots=True)
class _Row:
    severity: Severity
    id: str
    subject: str
    observed: str
    expected: str


def _collapse(findings: Sequence[Finding], verbose: bool) -> list[_Row]:
    rows: list[_Row] = []
    index = 0
    while index < len(findings):
        first = findings[index]
        end = index + 1
        if not verbose and first.severity is Severity.OK:
            while end < len(findings) and findings[end].id == first.id and findings[end].severity is Severity.OK:
                end += 1
        group = findings[index:end]
        if len(group) == 1:
            rows.append(_Row(first.severity, first.id, first.subject, first.observed, first.expected))
        else:
            observed = {f.observed for f in group}
            expected = {f.expected for f in group}
            rows.append(
                _Row(
                    Severity.OK,
                    first.id,
                    f"{len(group)}: {group[0].subject} … {group[-1].subject}",
                    observed.pop() if len(observed) == 1 else f"ok on all {len(group)}",
                    expected.pop() if len(expected) == 1 else "",
                )
            )
        index = end
    return rows


def _by_area(findings: Sequence[Finding]) -> list[tuple[str, list[Finding]]]:
    order = {area: i for i, area in enumerate(AREAS)}
    by_area: dict[str, list[Finding]] = {}
    for finding in findings:
        by_area.setdefault(finding.area, []).append(finding)
    return sorted(by_area.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))


_COLUMNS = (
    Column("area", fold=False, style="bold"),
    Column("", fold=False),
    Column("check", fold=False),
    Column("subject", fold=True),
    Column("observed", fold=True),
    Column("expected", fold=True),
)


def render_findings(console: Console, findings: Sequence[Finding], *, title: str, verbose: bool = False) -> None:
    """The table grouped by area, then the advice for every warning and failure."""
    sections = [
        [
            (
                Cell(area if i == 0 else ""),
                Cell(row.severity.label, STYLES[row.severity]),
                Cell(row.id.split(".", 1)[1] if "." in row.id else row.id),
                Cell(cell(row.subject)),
                Cell(cell(row.observed)),
                Cell(cell(row.expected)),
            )
            for i, row in enumerate(_collapse(items, verbose))
        ]
        for area, items in _by_area(findings)
    ]
    console.print(plain(title, "italic"))
    console.print(draw(_COLUMNS, sections, console.width), no_wrap=True, overflow="ignore", crop=False)
    _render_advice(console, findings)


def _render_advice(console: Console, findings: Sequence[Finding]) -> None:
    grouped: dict[tuple[Severity, str, str], list[str]] = {}
    for finding in sorted(findings, key=lambda f: -f.severity):
        if finding.severity >= Severity.WARN and finding.advice:
            grouped.setdefault((finding.severity, finding.id, finding.advice), []).append(finding.subject)
    if not grouped:
        return
    console.print(Text("advice:", style="bold"))
    for (severity, check, advice), subjects in grouped.items():
        shown = ", ".join(subjects[:MAX_SUBJECTS])
        if len(subjects) > MAX_SUBJECTS:
            shown += f" and {len(subjects) - MAX_SUBJECTS} more"
        line = Text("  ")
        line.append(f"{severity.label:<4}", style=STYLES[severity])
        line.append(cell(f" {check} [{shown}]: "), style="bold")
        line.append(cell(advice))
        console.print(line)


def verdict_line(findings: Sequence[Finding], where: str) -> Text:
    """``verdict: FAIL (exit 2) on gpu-a01: 3 fail, 2 warn, 40 ok, 5 info``."""
    severity = worst(findings)
    tally = counts(findings)
    summary = ", ".join(f"{tally[s.label]} {s.label}" for s in reversed(Severity) if tally[s.label])
    word = verdict(findings).upper()  # the same word --json writes, in capitals
    line = Text("verdict: ", style="bold")
    line.append(f"{word} (exit {exit_code(findings)})", style=STYLES[severity] if word != "OK" else "bold green")
    line.append(cell(f" on {where}: {summary or 'no findings'}"))
    return line


ONE_LINE = 80
"""Longest ``--oneline`` summary: a Slurm drain reason, a node-problem-detector message (NPD keeps 80)."""


def one_line(findings: Sequence[Finding], where: str, limit: int = ONE_LINE) -> str:
    """The verdict and the worst finding on one line, for ``scontrol ... reason=`` and NPD.

    ``FAIL (9 fail, 5 warn) pcie.aer GPU 0000:4c:00.0: nonfatal 1`` (the counts
    first, so that a cut line keeps them);
    ``OK (151 ok, 4 info) on gpu-node-01``.  Printable ASCII only (double
    quotes become single ones, so a shell's ``reason="..."`` holds it), at most ``limit`` characters.
    """
    severity = worst(findings)
    tally = counts(findings)
    if severity < Severity.WARN:
        text = f"OK ({tally[Severity.OK.label]} ok, {tally[Severity.INFO.label]} info) on {where}"
    else:
        top = max(findings, key=lambda f: f.severity)  # the first of the worst, in report order
        tallied = ", ".join(f"{tally[s.label]} {s.label}" for s in (Severity.FAIL, Severity.WARN) if tally[s.label])
        text = f"{top.severity.label.upper()} ({tallied}) {top.id} {top.subject}: {top.observed}"
    return _plugin_line(text, limit)


def one_line_unknown(why: str, limit: int = ONE_LINE) -> str:
    """``UNKNOWN: <why>``: the one line when the doctor could not complete (no verdict)."""
    return _plugin_line(f"UNKNOWN: {why}", limit)


def _plugin_line(text: str, limit: int) -> str:
    """Printable ASCII, single quotes only, at most ``limit`` characters: what a drain reason or NPD holds."""
    text = printable(text).encode("ascii", "replace").decode().replace('"', "'")
    return text if len(text) <= limit else text[: limit - 3] + "..."
