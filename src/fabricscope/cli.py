"""The ``fabricscope`` command line: parse, call the library, print.

Each command lives in a small module with two functions: ``add_parser``
registers its sub-parser, ``run(args) -> int`` does the work.  Command modules
import no heavy library at import time (torch, numpy, rich and pydantic are
imported inside ``run``).  A command line that names a command imports only
the module that registers it (:data:`COMMANDS`), so ``fabricscope doctor`` does
not pay for the typed configs of ``bench`` or ``plan``; ``--help``, no command or
an unknown one registers them all.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from fabricscope import __version__
from fabricscope.errors import FabricscopeError, closest
from fabricscope.shown import printable, quoted

__all__ = ["Parser", "console_main", "main"]

COMMAND_MODULES = (
    "fabricscope.bench.cli",  # measure
    "fabricscope.pairs.cli",
    "fabricscope.dataload.cli",
    "fabricscope.model.cli",  # predict
    "fabricscope.doctor.cli",  # diagnose
    "fabricscope.monitor.cli",  # watch
    "fabricscope.store.cli",  # remember
    "fabricscope.report.cli",
)
"""Modules that each register one or more sub-commands, in help order."""

COMMANDS = {
    "bench": "fabricscope.bench.cli",
    "pairs": "fabricscope.pairs.cli",
    "dataload": "fabricscope.dataload.cli",
    "hw": "fabricscope.model.cli",
    "predict": "fabricscope.model.cli",
    "estimate": "fabricscope.model.cli",
    "plan": "fabricscope.model.cli",
    "calibrate": "fabricscope.model.cli",
    "validate": "fabricscope.model.cli",
    "doctor": "fabricscope.doctor.cli",
    "monitor": "fabricscope.monitor.cli",
    "history": "fabricscope.store.cli",
    "baseline": "fabricscope.store.cli",
    "compare": "fabricscope.store.cli",
    "import": "fabricscope.store.cli",
    "report": "fabricscope.report.cli",
}
"""The module that registers each command (a test holds it to what :data:`COMMAND_MODULES` register)."""


_ARGUMENT = re.compile(r"^argument (?P<flag>[^:\s]+): (?P<rest>.*)$", re.DOTALL)
_NEGATIVE = re.compile(r"^-\.?[0-9]")


class Parser(argparse.ArgumentParser):
    """argparse with the package's error policy (one line, exit 2, no usage dump), and epilogs
    (examples) printed as written, for every command and sub-command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        # "-5%", "-5d", "-1Gb/s" are values (no flag starts with a digit): argparse's own pattern takes only
        # "-5" and "-.5", and left the rest to fail as "expected one argument", without the value's real fault
        self._negative_number_matcher = _NEGATIVE

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own check, worded the same on every Python (3.12.8 stopped quoting the choices), with the
        # nearest choice named as the package's own errors name it, and a long value cut in the middle.
        choices = action.choices
        if choices is not None and value not in choices:
            names = [str(choice) for choice in choices]
            listed = ", ".join(repr(name) for name in names)
            text = str(value)
            raise argparse.ArgumentError(
                action, f"invalid choice: {quoted(text)}{closest(text, names)} (choose from {listed})"
            )

    def error(self, message: str) -> NoReturn:
        # argparse says "argument -n/--iters: must be ..."; say "-n/--iters must be ...".
        match = _ARGUMENT.match(message)
        if match:
            rest = match["rest"]
            message = f"{match['flag']} {rest}" if rest.startswith("must ") else f"{match['flag']}: {rest}"
        sys.stderr.write(f"error: {printable(message)} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def build_parser(argv: Sequence[str] | None = None) -> Parser:
    """The parser of every command, or only of the one that ``argv`` names first (see :data:`COMMANDS`)."""
    parser = Parser(
        prog="fabricscope",
        description=(
            "Measure, predict, diagnose, watch and remember the network of a GPU cluster for distributed training."
        ),
    )
    parser.add_argument("--version", action="version", version=f"fabricscope {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    named = COMMANDS.get(argv[0]) if argv else None
    for name in (named,) if named else COMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every (sub-)command's namespace name its own parser, so that an unknown option
    points to that command's help, not the top level's."""
    parser.set_defaults(_parser=parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _remember_parsers(child)


def _in_flag_terms(exc: FabricscopeError, parser: argparse.ArgumentParser) -> str:
    """A library error about a parameter, reworded with the flag that set it (``gpus`` -> ``--gpus``)."""
    key = getattr(exc, "key", None)
    if key:
        for action in parser._actions:
            if action.dest == key and action.option_strings:
                return f"{action.option_strings[-1]} {exc.reason}"  # type: ignore[attr-defined]
    return str(exc)


def _open_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr ``/dev/null`` (a process started with ``>&-``, as cron and some
    launchers do): nothing then writes to None, and no file opened later takes descriptor 1 or 2 and
    receives what was meant for the terminal."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            os.set_inheritable(fd, True)  # os.open's are not: ranks and commands started from here need it
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors="backslashreplace"))  # noqa: SIM115


def console_main() -> int:
    """The ``fabricscope`` command and ``python -m fabricscope``: :func:`main`, then its exit code stands.

    Python's shutdown (long with torch loaded: a launcher imports it for its ranks) puts the default
    action back for the signals it handled, so a Ctrl-C or SIGTERM in it killed the process (-2) or printed
    a KeyboardInterrupt traceback after the command was done; they are ignored once it is.
    """
    code = main()
    for stop in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(stop, signal.SIG_IGN)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(argv)
    except KeyboardInterrupt:  # while the parser is built or the arguments read, before any work
        sys.stderr.write("interrupted\n")
        return 130


def _run(argv: Sequence[str] | None) -> int:
    _open_standard_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from fabricscope.outputs import release_stdout, silence_stdout, stream_write_failed

    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except FabricscopeError as exc:
        sys.stderr.write(f"error: {printable(_in_flag_terms(exc, getattr(args, '_parser', parser)))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader of our stdout went away (| head): not an error of ours.  Point
        # stdout at /dev/null so that Python's flush at exit does not fail again.
        silence_stdout()
        return 0
    except OSError as exc:
        if not stream_write_failed(exc):
            raise
        silence_stdout()  # > /dev/full, a full disk: said in one line, not a traceback
        with contextlib.suppress(OSError):
            sys.stderr.write(f"error: cannot write the output: {exc.strerror or exc}\n")
        return 1
    finally:
        release_stdout()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
