"""Flag converters shared by every command: one grammar, one set of bounds, one message shape.

Each function returns an argparse ``type=`` converter.  A bad value becomes
argparse's own one-line error, naming the flag and what is allowed::

    error: argument -n/--iters: must be a whole number from 1 to 1000000, got '0'

Sizes, rates and durations use the unit grammar of :mod:`fabricscope.units`
(binary K/M/G for sizes, decimal prefixes in bits for rates, ms/s/m/h/d for
durations).  Numbers never overflow: a 400-digit value is refused by its
digit count before any arithmetic.  Only the standard library is imported, so
command modules can use these at import time.

:func:`add_sweep_options` declares nccl-tests' size flags (``-b -e -i -f``) once,
for ``bench`` and ``predict`` alike, and :func:`sweep_steps` reads them back.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from fabricscope.errors import UsageError
from fabricscope.shown import quoted
from fabricscope.units import is_digits

if TYPE_CHECKING:
    from fabricscope.launch.config import LaunchConfig

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What a command's ``add_parser`` adds its sub-command to."""
Flags: TypeAlias = "argparse._ActionsContainer"
"""A parser or one of its argument groups: where flags are added."""

__all__ = [
    "MAX_DIGITS",
    "Flags",
    "SubParsers",
    "SweepSteps",
    "add_iteration_options",
    "add_launch_options",
    "add_sweep_options",
    "choice",
    "fraction",
    "launch_config",
    "number",
    "port",
    "rate",
    "seconds",
    "size",
    "sweep_fields",
    "sweep_steps",
    "whole",
]

MAX_DIGITS = 30
"""Digits a whole-number flag may have; more is a typo, not a count."""


def _converter(name: str, convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """Wrap ``convert`` so that a UsageError or ValueError becomes argparse's error."""

    def run(text: str) -> Any:
        try:
            return convert(text)
        except UsageError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    run.__name__ = name
    return run


def _parse_whole(text: str) -> int | None:
    body = text.strip()
    digits = body.lstrip("+-")
    if not is_digits(digits) or len(digits) > MAX_DIGITS or body.count("-") + body.count("+") > 1:
        return None
    return int(body, 10)


def whole(
    *, minimum: int = 0, maximum: int | None = None, what: str = "a whole number", hint: str = ""
) -> Callable[[str], int]:
    """A whole number in ``[minimum, maximum]`` (decimal digits only); ``hint`` follows the message
    when the value is above the maximum."""
    span = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
    advice = f": {hint}" if hint else ""

    def convert(text: str) -> int:
        value = _parse_whole(text)
        if value is None or value < minimum or (maximum is not None and value > maximum):
            above = value is not None and maximum is not None and value > maximum
            raise UsageError(f"must be {what} {span}, got {quoted(text)}{advice if above else ''}")
        return value

    return _converter("whole number", convert)


def port() -> Callable[[str], int]:
    """A TCP port, 1 to 65535."""
    return whole(minimum=1, maximum=65535, what="a port")


def choice(modes: Mapping[int, str]) -> Callable[[str], int]:
    """One of a few numbered modes (nccl-tests' ``-a 0..3``); the message lists them."""
    listed = ", ".join(f"{key} ({name})" for key, name in modes.items())

    def convert(text: str) -> int:
        value = _parse_whole(text)
        if value is None or value not in modes:
            raise UsageError(f"must be one of {listed}, got {quoted(text)}")
        return value

    return _converter("mode", convert)


def _plain(text: str) -> bool:
    """ASCII without ``_``: ``float`` also reads "٠.٨" and "1_0", which the whole-number options refuse."""
    return text.isascii() and "_" not in text


def number(*, minimum: float, maximum: float, unit: str = "") -> Callable[[str], float]:
    """A finite decimal number in ``[minimum, maximum]``."""
    suffix = f" {unit}" if unit else ""

    def convert(text: str) -> float:
        try:
            value = float(text) if len(text.strip()) <= 64 and _plain(text) else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and minimum <= value <= maximum):
            raise UsageError(f"must be a number from {minimum:g} to {maximum:g}{suffix}, got {quoted(text)}")
        return value

    return _converter("number", convert)


def fraction(*, minimum: float = 0.0, maximum: float = 1.0) -> Callable[[str], float]:
    """A share, written ``90%`` or ``0.9``; returned as a fraction (0.9)."""

    def convert(text: str) -> float:
        body = text.strip()
        percent = body.endswith("%")
        number = body[:-1] if percent else body
        try:
            value = float(number) / (100.0 if percent else 1.0) if len(body) <= 64 and _plain(number) else math.nan
        except ValueError:
            value = math.nan
        if not percent and math.isfinite(value) and value > 1.0 and maximum > 1.0:
            # A bare 5 is 500%: far more often a percent without its sign.
            raise UsageError(f"a bare number is a share (0.05 = 5%): write {number}% for {number} percent")
        if not (math.isfinite(value) and minimum <= value <= maximum):
            raise UsageError(
                f"must be a share from {minimum * 100:g}% to {maximum * 100:g}% "
                f"(written 5% or 0.05), got {quoted(text)}"
            )
        return value

    return _converter("share", convert)


def size(*, minimum: int = 0, maximum: int | None = None) -> Callable[[str], int]:
    """Bytes with binary K/M/G/T suffixes, as nccl-tests (``64K`` = 65536)."""
    from fabricscope.units import MAX_SIZE, format_size, parse_size

    top = MAX_SIZE if maximum is None else maximum

    def convert(text: str) -> int:
        value = parse_size(text)
        if not minimum <= value <= top:
            raise UsageError(f"must be a size from {format_size(minimum)} to {format_size(top)}, got {quoted(text)}")
        return value

    return _converter("size", convert)


def seconds(*, minimum: float, maximum: float) -> Callable[[str], float]:
    """A duration (``30``, ``500ms``, ``2m``, ``1h``) in ``[minimum, maximum]`` seconds."""
    from fabricscope.units import parse_duration

    def convert(text: str) -> float:
        try:
            value = parse_duration(text)
        except UsageError:
            value = -1.0
            if not _looks_like_number(text):
                raise
        if not minimum <= value <= maximum:
            raise UsageError(
                f"must be a duration from {_duration(minimum)} to {_duration(maximum)} "
                f"(seconds, or with ms, s, m, h, d), got {quoted(text)}"
            )
        return value

    return _converter("duration", convert)


def _looks_like_number(text: str) -> bool:
    try:
        float(text.strip().rstrip("smhdSMHD"))
    except ValueError:
        return False
    return True


def _duration(value: float) -> str:
    for unit, scale in (("days", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if value >= scale and value % scale == 0:
            return f"{value / scale:g} {unit}"
    return f"{value:g} s" if value >= 1 else f"{value * 1000:g} ms"


def rate() -> Callable[[str], float]:
    """A link rate with its decimal prefix (``100G``, ``400Gb/s``, ``50GB/s``), in bits per second."""
    from fabricscope.units import parse_rate

    return _converter("rate", parse_rate)


# --- nccl-tests' size sweep, declared once -------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepSteps:
    """The sweep the size flags describe: ``-b``, ``-e``, and how to step (``-i`` or ``-f``)."""

    min_bytes: int
    max_bytes: int
    step_bytes: int
    """Increment used when ``step_factor`` is 1."""
    step_factor: int


MAX_STEP_FACTOR = 1 << 20


def add_sweep_options(
    parser: Flags, *, data: Flags | None = None, min_default: str = "8", max_default: str = "32M"
) -> None:
    """Declare ``-b -e -i -f`` and (in ``data``, else in ``parser``) ``-d -o -r`` with nccl-tests' meanings;
    either may be an argument group.  :func:`sweep_fields` reads them back."""
    from fabricscope.launch.world import MAX_WORLD

    parser.add_argument(
        "-b", "--minbytes", type=size(), default=min_default, help=f"first size (default {min_default})"
    )
    parser.add_argument("-e", "--maxbytes", type=size(), default=max_default, help=f"last size (default {max_default})")
    parser.add_argument(
        "-i",
        "--stepbytes",
        type=size(),
        default=None,
        help="increment when -f is 1 (default 1M); -i alone means -f 1",
    )
    parser.add_argument(
        "-f",
        "--stepfactor",
        type=whole(minimum=1, maximum=MAX_STEP_FACTOR),
        default=None,
        help="multiply the size by this (default 2; 1 uses -i)",
    )
    data = parser if data is None else data
    data.add_argument("-d", "--datatype", default="float", help="datatype or all (default float)")
    data.add_argument(
        "-o", "--op", dest="redop", default="sum", help="reduction: sum prod min max avg or all (default sum)"
    )
    data.add_argument(
        "-r",
        "--root",
        type=whole(minimum=0, maximum=MAX_WORLD),
        default="0",
        help="root rank of broadcast/reduce/gather/scatter (default 0)",
    )


def sweep_steps(args: argparse.Namespace) -> SweepSteps:
    """Read the size flags back; as nccl-tests, ``-i`` alone means a fixed increment (``-f 1``)."""
    factor = args.stepfactor if args.stepfactor is not None else (1 if args.stepbytes is not None else 2)
    step = args.stepbytes if args.stepbytes is not None else 1 << 20
    return SweepSteps(args.minbytes, args.maxbytes, step, factor)


def sweep_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~fabricscope.sweep.SweepConfig` fields that ``-b -e -i -f -d -o -r`` give (bench and predict)."""
    from fabricscope.dtypes import parse_dtypes, parse_redops

    steps = sweep_steps(args)
    return {
        "min_bytes": steps.min_bytes,
        "max_bytes": steps.max_bytes,
        "step_bytes": steps.step_bytes,
        "step_factor": steps.step_factor,
        "dtypes": [d.name for d in parse_dtypes(args.datatype)],
        "redops": parse_redops(args.redop),
        "root": args.root,
    }


def add_iteration_options(
    parser: Flags, *, maximum: int, iters_help: str, warmup_help: str, warmup_default: int, iters_default: int = 20
) -> None:
    """Declare ``-n/--iters`` and ``-w/--warmup_iters`` with nccl-tests' names: timed and untimed repetitions."""
    counts = (("-n", "--iters", 1, iters_default, iters_help), ("-w", "--warmup_iters", 0, warmup_default, warmup_help))
    for short, long, lowest, default, text in counts:
        parser.add_argument(
            short,
            long,
            type=whole(minimum=lowest, maximum=maximum),
            default=str(default),
            help=f"{text} (default {default})",
        )


# --- the launch flags of every multi-process command (bench, pairs, doctor's fleet) --------------


def add_launch_options(
    parser: Flags,
    *,
    nproc_help: str,
    timeout_default: float,
    timeout_help: str,
    min_ranks: int = 1,
    nproc_default: str | None = None,
    backend: bool = True,
    rendezvous: bool = True,
) -> None:
    """``--nproc``, ``--timeout`` and (where the command forms its own world) ``--backend``,
    ``--master-addr`` and ``--master-port``, with one set of bounds and words."""
    from fabricscope.launch.world import MAX_LOCAL_RANKS, MAX_TIMEOUT_S, MIN_TIMEOUT_S

    parser.add_argument(
        "--nproc",
        type=whole(
            minimum=min_ranks,
            maximum=MAX_LOCAL_RANKS,
            hint="for more ranks, start them on several nodes with torchrun, mpirun or srun",
        ),
        default=nproc_default,
        metavar="N",
        help=f"{nproc_help} (at most {MAX_LOCAL_RANKS})",
    )
    if backend:
        parser.add_argument(
            "--backend", default="auto", choices=("auto", "gloo", "nccl"), help="auto (NCCL on CUDA, else gloo)"
        )
    parser.add_argument(
        "-T",
        "--timeout",
        type=seconds(minimum=MIN_TIMEOUT_S, maximum=MAX_TIMEOUT_S),
        default=f"{timeout_default:g}",
        metavar="S",
        help=f"{timeout_help}: seconds, or with ms/s/m/h (default {timeout_default:g}; 1 s to 7 days)",
    )
    if rendezvous:
        parser.add_argument(
            "--master-addr", default=None, help="rendezvous host (default MASTER_ADDR or the launcher's)"
        )
        parser.add_argument(
            "--master-port", type=port(), default=None, help="rendezvous port (default MASTER_PORT or derived)"
        )


def launch_config(args: argparse.Namespace, *, default_nproc: Callable[[], int] | None = None) -> LaunchConfig:
    """The :class:`~fabricscope.launch.config.LaunchConfig` that :func:`add_launch_options` (with the
    backend and rendezvous flags) describes; ``nproc`` is ``default_nproc()`` when not given."""
    from fabricscope.launch.config import LaunchConfig

    nproc = args.nproc if args.nproc is not None or default_nproc is None else default_nproc()
    return LaunchConfig(
        nproc=nproc,
        backend=args.backend,
        timeout_s=args.timeout,
        master_addr=args.master_addr,
        master_port=args.master_port,
    )
