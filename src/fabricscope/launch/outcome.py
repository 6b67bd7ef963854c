"""How a run of ranks ends (``bench``, ``pairs``): which status, message and exit code each ending gets.

A pure function of what happened (:class:`Ending`) to what rank 0 records and
says (:class:`Verdict`), so the policy reads as one table and is tested as one:

==================  =============  ==========================================  =====
ending              Result status  stderr                                      exit
==================  =============  ==========================================  =====
complete            complete       (verdict lines, if any)                     0 / 1
signal              interrupted    interrupted (by a signal): N records kept   130
stdout closed (-N0) interrupted    (nothing: nobody reads it)                  0 / 1
peer failed         failed         <culprit>, during <phase>; N records kept   1
run error           failed         <the error>                                 1
==================  =============  ==========================================  =====

"0 / 1": exit 1 when the verdicts found something (bench's wrong elements or an
op's average busbw below ``NCCL_TESTS_MIN_BW``; a result file that could not be
written), else 0.  A closed stdout is not a failure of the run and never
changes its verdict: a bounded sweep (``bench | head -1``) goes on to its end
unread and ends ``complete`` with the same exit code as without the pipe (the
rows are in the ``--json``/``--csv`` files); only an endless one (``-N 0``,
which nothing else ends) stops quietly, ``interrupted``, judged on what it measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Ending", "EndingKind", "Verdict", "decide"]

EndingKind = Literal["complete", "signal", "stdout_closed", "peer_failed", "run_error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """What happened to the run, as rank 0 saw it."""

    kind: EndingKind
    records: int = 0
    """Records measured (and kept) before the end."""
    json_path: str | None = None
    wrong: int = 0
    """Wrong elements summed over ranks and rows."""
    below_minimum: tuple[str, ...] = ()
    """Ops whose average busbw fell below 0.9 x ``NCCL_TESTS_MIN_BW``."""
    min_busbw_gbps: float | None = None
    write_errors: tuple[str, ...] = ()
    """Each failure to write a result file (or to keep it in the history)."""
    stream_errors: tuple[str, ...] = ()
    """Each failure to write standard output (``> /dev/full``), said as it is: the table is what was lost."""
    shown: str = "the table above holds every row measured"
    """What the user still has when a file could not be written: the command's printed output."""
    without_file: str = "are in the table above (no --json file was asked for)"
    """Where the records measured are when the run ends early without a ``--json`` file."""
    reason: str = ""
    """For ``peer_failed`` and ``run_error``: what failed, in one line; for ``signal``, why if known."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What rank 0 records and says for an :class:`Ending`."""

    status: Literal["complete", "failed", "interrupted"]
    error: str | None
    """The Result's ``error`` field."""
    messages: tuple[str, ...] = field(default=())
    """Lines for stderr (``error: ...`` and the like), in order."""
    exit_code: int = 0


def _kept(ending: Ending, what: str) -> str:
    if ending.json_path:
        return f"the {ending.records} records {what} are kept in {ending.json_path}"
    return f"the {ending.records} records {what} {ending.without_file}"


def _verdict_lines(ending: Ending) -> list[str]:
    lines = []
    if ending.below_minimum:
        lines.append(
            f"error: average bus bandwidth of {', '.join(ending.below_minimum)} is below 0.9 x "
            f"NCCL_TESTS_MIN_BW ({ending.min_busbw_gbps:g} GB/s)"
        )
    lines.extend(f"error: {problem}; {ending.shown}" for problem in ending.write_errors)
    lines.extend(f"error: {problem}" for problem in ending.stream_errors)
    if ending.wrong:
        lines.append(f"error: the correctness check found {ending.wrong} wrong element(s); see #wrong above")
    return lines


def decide(ending: Ending) -> Verdict:
    """The status, error, messages and exit code of a run that ended as ``ending`` says."""
    verdicts = _verdict_lines(ending)
    found = 1 if verdicts else 0
    if ending.kind == "complete":
        return Verdict("complete", None, tuple(verdicts), found)
    if ending.kind == "signal":
        why = ending.reason or "interrupted by a signal"
        return Verdict("interrupted", why, (f"interrupted ({why}): {_kept(ending, 'measured so far')}",), 130)
    if ending.kind == "stdout_closed":
        return Verdict("interrupted", "its output was closed", tuple(verdicts), found)
    if ending.kind == "peer_failed":
        message = f"error: {ending.reason}; {_kept(ending, 'measured before')}"
        return Verdict("failed", ending.reason, (message,), 1)
    return Verdict("failed", ending.reason, (f"error: {ending.reason}",), 1)
