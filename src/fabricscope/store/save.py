"""``--save`` and ``--label``: the two flags every producing command shares, and what they do.

A command adds the flags with :func:`add_save_options` and, once its Result is
final, calls :func:`save_result`.  Only the standard library is imported at
import time, so command-line modules can use this freely.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fabricscope.results import Result

__all__ = ["add_save_options", "check_save_options", "save_result", "wants_save"]


def add_save_options(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument(
        "--save", action="store_true", help="keep the Result in the history ($FABRICSCOPE_HOME; see 'history')"
    )
    parser.add_argument("--label", default=None, metavar="L", help="save with this label (implies --save)")


def wants_save(args: argparse.Namespace | Any) -> bool:
    """Whether ``args`` (parsed flags, or a config with ``save`` and ``label``) asks to save."""
    return bool(getattr(args, "save", False) or getattr(args, "label", None) is not None)


def check_save_options(args: argparse.Namespace) -> None:
    """Refuse a bad --label before any work."""
    if getattr(args, "label", None) is not None:
        from fabricscope.store.history import check_label

        args.label = check_label(args.label)


def save_result(args: argparse.Namespace | Any, result: Result, *, what: str = "the result") -> int | None:
    """Save ``result`` when ``--save``/``--label`` asked for it; returns its history id.

    ``args`` is the parsed flags, or any object with ``save`` and ``label`` (a command's
    config carried to the rank that finishes the Result).
    """
    if not wants_save(args):
        return None
    from fabricscope.store.history import History, HistoryError

    try:
        with History() as history:
            run_id = history.add(result, label=getattr(args, "label", None))
    except HistoryError as exc:
        kept = getattr(args, "json", None) or getattr(args, "json_path", None)
        if kept and kept != "-":  # the measurement is not lost: say where it is
            raise HistoryError(f"{exc}; {what} is kept in {kept}") from None
        raise
    sys.stderr.write(f"saved {what} as run {run_id} in {history.path}\n")
    return run_id
