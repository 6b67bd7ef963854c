"""Helpers of the model tests (imported as ``from model_helpers import ...``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outcome:
    """What one CLI run printed and returned."""

    code: int
    out: str
    err: str


def one_error_line(outcome: Outcome) -> str:
    """The single 'error: ...' line of a refused command (and nothing that looks like a traceback)."""
    assert outcome.code == 2, (outcome.code, outcome.out, outcome.err)
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert len(lines) == 1, outcome.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in outcome.err
    return lines[0]
