"""``--save`` and ``--label``: the two flags every producing command shares, and what they do.

A command adds the flags with :func:`add_save_options`, turns them into a typed
:class:`~fabricscope.outputs.SaveRequest` (:func:`save_request`, or its
:class:`~fabricscope.outputs.OutputConfig`'s), and, once its Result is final,
calls :func:`save_result`.  Only the standard library is imported at import
time, so command-line modules can use this freely.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from fabricscope.outputs import SaveRequest

if TYPE_CHECKING:
    from fabricscope.results import Result

__all__ = ["SaveRequest", "add_save_options", "check_save_options", "save_request", "save_result", "wants_save"]


def add_save_options(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--save", action="store_true", help="keep the Result in the history ($FABRICSCOPE_HOME; see 'history')"
    )
    parser.add_argument("--label", default=None, metavar="L", help="save with this label (implies --save)")


def wants_save(args: argparse.Namespace) -> bool:
    """Whether the parsed flags ask to save."""
    return bool(getattr(args, "save", False) or getattr(args, "label", None) is not None)


def save_request(args: argparse.Namespace) -> SaveRequest | None:
    """What the parsed flags ask for (the ``--json`` file, if any, is where the Result is also kept), or None."""
    if not wants_save(args):
        return None
    json_path = getattr(args, "json", None)
    return SaveRequest(label=getattr(args, "label", None), kept_in=json_path if isinstance(json_path, str) else None)


def check_save_options(args: argparse.Namespace) -> None:
    """Refuse a bad --label before any work."""
    if getattr(args, "label", None) is not None:
        from fabricscope.store.history import check_label

        args.label = check_label(args.label)


def save_result(request: SaveRequest | None, result: Result, *, what: str = "the result") -> int | None:
    """Save ``result`` when ``request`` asks for it (None: not asked); returns its history id."""
    if request is None:
        return None
    from fabricscope.store.history import History, HistoryError

    try:
        with History() as history:
            run_id = history.add(result, label=request.label)
    except HistoryError as exc:
        if request.kept_in and request.kept_in != "-":  # the measurement is not lost: say where it is
            raise HistoryError(f"{exc}; {what} is kept in {request.kept_in}") from None
        raise
    sys.stderr.write(f"saved {what} as run {run_id} in {history.path}\n")
    return run_id
