"""A RUN, as every command takes one: a result file, or the id of a run in the history.

:func:`resolve` is the one place that decides which: an existing path is a
file (so a result file named ``12`` is still a file), a whole number is a
history id (``12`` or ``#12``), anything else is one clear error.  Reading a
run never creates or changes the history.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass

from fabricscope import results
from fabricscope.errors import ResultFormatError, UsageError
from fabricscope.results import Result
from fabricscope.shown import quoted
from fabricscope.store.history import History
from fabricscope.units import is_digits

__all__ = ["COLLECTIVE_KINDS", "Run", "load_result_file", "parse_run_id", "resolve"]

COLLECTIVE_KINDS = ("bench", "nccl-tests", "predict")
"""Kinds whose records are collective rows (the same fields measured, imported or predicted)."""


@dataclass(frozen=True, slots=True)
class Run:
    """A resolved RUN: its Result, and where it came from."""

    result: Result
    source: str
    """What to call it in messages: the file name or ``run 12``."""
    run_id: int | None = None
    """Its history id, when it came from the history."""
    path: str | None = None
    """Its file, when it came from one."""


def parse_run_id(text: str) -> int | None:
    """``12`` or ``#12`` -> 12; anything else -> None."""
    digits = text.strip().removeprefix("#")
    if is_digits(digits) and len(digits) <= 18:
        return int(digits)
    return None


def load_result_file(path: str) -> Result:
    """A Result from a file, read safely (:func:`fabricscope.results.load`: regular files only, size cap)."""
    try:
        return results.load(path)
    except ResultFormatError as exc:
        if "invalid JSON at line 1, column 1" in str(exc):
            raise ResultFormatError(
                f"{exc}; a log of the C nccl-tests? import it first: fabricscope import nccl-tests FILE --save"
            ) from None
        raise


def resolve(
    text: str,
    *,
    history: History | None = None,
    kinds: Collection[str] | None = None,
    what: str = "RUN",
) -> Run:
    """The Run ``text`` names; ``kinds`` limits what this command accepts."""
    if os.path.lexists(text) or os.sep in text or text.endswith(".json"):
        run = Run(result=load_result_file(text), source=text, path=text)
    else:
        run_id = parse_run_id(text)
        if run_id is None:
            raise UsageError(
                f"{what} {quoted(text, 80)} is neither a result file nor a history id "
                "(ids are the numbers 'fabricscope history' lists)"
            )
        store = history if history is not None else History(create=False)
        try:
            run = Run(result=store.get(run_id), source=f"run {run_id}", run_id=run_id)
        finally:
            if history is None:
                store.close()
    if kinds is not None and run.result.kind not in kinds:
        raise UsageError(
            f"{what} {run.source} is a {run.result.kind!r} result; this needs {' or '.join(repr(k) for k in kinds)}"
        )
    return run
