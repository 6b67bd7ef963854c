"""Baselines: a name for a run in the history ("h100-ndr-after-fw-upgrade").

A baseline always points at a run in the history: setting one from a result
file saves that file's Result first, so the baseline outlives the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from fabricscope.errors import UsageError
from fabricscope.results import Result
from fabricscope.shown import quoted
from fabricscope.store.history import History
from fabricscope.store.runs import Run

__all__ = ["NAME_PATTERN", "Baseline", "check_name", "get", "listing", "remove", "set_baseline"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Names: letters, digits, '.', '_' and '-', starting with a letter or digit, up to 64 characters."""


@dataclass(frozen=True, slots=True)
class Baseline:
    name: str
    run_id: int
    set_at: str
    kind: str
    headline: str


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise UsageError(
            f"baseline name {quoted(name, 80)} is not allowed: use up to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def set_baseline(history: History, name: str, run: Run) -> int:
    """Make ``name`` point at ``run`` (saved first when it came from a file the history does not already
    hold); returns the run id."""
    check_name(name)
    run_id = run.run_id if run.run_id is not None else history.find(run.result)
    if run_id is None:
        run_id = history.add(run.result, label=f"baseline {name}")
    now = datetime.now(UTC).isoformat(timespec="seconds")
    with history.transaction() as conn:
        conn.execute(
            "INSERT INTO baselines (name, run_id, set_at) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET run_id = excluded.run_id, set_at = excluded.set_at",
            (name, run_id, now),
        )
    return run_id


def listing(history: History) -> list[Baseline]:
    rows = history.query(
        "SELECT b.name, b.run_id, b.set_at, r.kind, r.headline FROM baselines b JOIN runs r ON r.id = b.run_id "
        "ORDER BY b.name"
    )
    return [Baseline(name=r[0], run_id=r[1], set_at=r[2], kind=r[3], headline=r[4]) for r in rows]


def _run_id(history: History, name: str) -> int:
    check_name(name)
    rows = history.query("SELECT run_id FROM baselines WHERE name = ?", (name,))
    if not rows:
        known = [b.name for b in listing(history)]
        hint = f"; baselines: {', '.join(known)}" if known else "; none is set (fabricscope baseline set NAME RUN)"
        raise UsageError(f"no baseline named {name!r}{hint}")
    return int(rows[0][0])


def get(history: History, name: str) -> Run:
    run_id = _run_id(history, name)
    result: Result = history.get(run_id)
    return Run(result=result, source=f"baseline {name} (run {run_id})", run_id=run_id)


def remove(history: History, name: str) -> None:
    """Forget the name; the run stays in the history."""
    _run_id(history, name)
    with history.transaction() as conn:
        conn.execute("DELETE FROM baselines WHERE name = ?", (name,))
