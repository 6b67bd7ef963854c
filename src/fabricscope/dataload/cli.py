"""``fabricscope dataload``: read throughput of a file or data set, and whether it starves the GPUs.

Only the standard library is imported here; the reader and rich are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from fabricscope.errors import RunError, UsageError
from fabricscope.store.save import add_save_options, check_save_options, save_request, save_result

if TYPE_CHECKING:
    from fabricscope.dataload.dataset import DataSet
    from fabricscope.dataload.reader import Measurement, ReadConfig
    from fabricscope.dataload.verdict import Need, Verdict
    from fabricscope.options import SubParsers

__all__ = ["add_parser", "run"]

_EPILOG = """\
exit status: 0 read (and, with --need, storage keeps up); 1 it would starve the GPUs, or reads
failed mid-run (what was read is kept); 2 a usage error; 130 interrupted by Ctrl-C, 143 stopped by
SIGTERM or SIGHUP (what was read is kept, reported and written to --json).

examples:
  fabricscope dataload /data/shard-000.tar                     # one pass, 1 worker, 1M blocks
  fabricscope dataload /data/imagenet/train --workers 8 --random --drop-cache
  fabricscope dataload /data/big.bin --direct --block-size 4M --workers 4 --duration 30
  fabricscope dataload /data/train --need 2400 --sample-size 110K --json load.json
"""

PASSES_PRINTED = 3
"""Pass lines printed: the first two, then the rest added together."""


def add_parser(subparsers: SubParsers) -> None:
    from fabricscope import options

    # The bounds live with the reader and the verdict (both import only the standard library).
    from fabricscope.dataload.reader import (
        MAX_BLOCK_SIZE,
        MAX_DURATION_S,
        MAX_WORKERS,
        MIN_BLOCK_SIZE,
        MIN_DURATION_S,
    )
    from fabricscope.dataload.verdict import MAX_SAMPLE_SIZE, MAX_SAMPLES_PER_S, MIN_SAMPLES_PER_S

    parser = subparsers.add_parser(
        "dataload",
        help="read throughput of a file or data set directory, and whether it would starve the GPUs",
        description=(
            "Read a file or every regular file under a directory, as a training input pipeline would, "
            "and report the rate actually read (page-cache effects and O_DIRECT stated). Given the "
            "training's need, say whether storage keeps up and by how much."
        ),
        epilog=_EPILOG,
    )
    parser.add_argument("path", metavar="PATH", help="a regular file, or a directory of data files")
    parser.add_argument(
        "--workers",
        type=options.whole(minimum=1, maximum=MAX_WORKERS),
        default=1,
        metavar="K",
        help=f"threads reading at once, each its own part (1 to {MAX_WORKERS}; default 1)",
    )
    parser.add_argument(
        "--block-size",
        type=options.size(minimum=MIN_BLOCK_SIZE, maximum=MAX_BLOCK_SIZE),
        default=1 << 20,
        metavar="S",
        help="bytes per read, K/M/G binary (512 to 256M; default 1M; a multiple of 4K with --direct)",
    )
    parser.add_argument("--random", action="store_true", help="shuffle files and blocks (each block read once)")
    parser.add_argument("--direct", action="store_true", help="bypass the page cache (O_DIRECT)")
    parser.add_argument(
        "--drop-cache",
        action="store_true",
        help="drop the files' cached pages (posix_fadvise DONTNEED) before each pass",
    )
    parser.add_argument(
        "--duration",
        type=options.seconds(minimum=MIN_DURATION_S, maximum=MAX_DURATION_S),
        default=None,
        metavar="S",
        help="repeat passes for S seconds (0.1 s to 7 days); default: one pass",
    )
    parser.add_argument(
        "--need",
        type=options.number(minimum=MIN_SAMPLES_PER_S, maximum=MAX_SAMPLES_PER_S, unit="samples/s"),
        default=None,
        metavar="SAMPLES_PER_S",
        help="samples per second training consumes, over all the GPUs this storage feeds",
    )
    parser.add_argument(
        "--sample-size",
        type=options.size(minimum=1, maximum=MAX_SAMPLE_SIZE),
        default=None,
        metavar="BYTES",
        help="bytes read from storage per sample (with --need)",
    )
    parser.add_argument(
        "--seed", type=options.whole(minimum=0, maximum=2**32 - 1), default=None, metavar="N", help="seed of --random"
    )
    parser.add_argument("--json", default=None, metavar="FILE", help="write the measurement as a Result (- stdout)")
    add_save_options(parser)
    parser.set_defaults(func=run)


def _config(args: argparse.Namespace) -> ReadConfig:
    from fabricscope.dataload.reader import ReadConfig

    # Each flag is checked alone by its converter; what depends on two (buffers, alignment) by ReadConfig.
    return ReadConfig(
        workers=args.workers,
        block_size=args.block_size,
        random=args.random,
        direct=args.direct,
        duration_s=args.duration,
        drop_cache=args.drop_cache,
        seed=args.seed,
    )


def _need(args: argparse.Namespace) -> Need | None:
    from fabricscope.dataload.verdict import Need

    if args.need is None and args.sample_size is None:
        return None
    if args.need is None or args.sample_size is None:
        given, missing = ("--need", "--sample-size") if args.sample_size is None else ("--sample-size", "--need")
        raise UsageError(f"{given} needs {missing} too: the need is SAMPLES_PER_S x BYTES per sample")
    return Need(samples_per_s=args.need, sample_size=args.sample_size)


def run(args: argparse.Namespace) -> int:
    from fabricscope.dataload.dataset import scan
    from fabricscope.dataload.pagecache import available_memory
    from fabricscope.dataload.report import notes, to_result
    from fabricscope.dataload.verdict import judge
    from fabricscope.outputs import check_output_path
    from fabricscope.units import format_size

    config = _config(args)
    need = _need(args)
    if args.json is not None:
        check_output_path("--json", args.json, inputs=[args.path])
    check_save_options(args)
    dataset = scan(args.path)
    _log(
        f"reading {args.path}: {len(dataset.files)} file(s), {dataset.total_bytes} B; "
        f"{config.workers} worker(s), {format_size(config.block_size)} blocks, "
        f"{'random' if config.random else 'sequential'}, {'direct' if config.direct else 'buffered'}"
    )
    if dataset.skipped:
        skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(dataset.skipped.items()))
        _log(f"note: skipped what is not a regular file: {skipped}")
    stopped_by: list[int] = []
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        """Ctrl-C, a scheduler's limit or kill, a closed session: stop the reads, keep what was read."""
        stopped_by.append(signum)
        stop.set()

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in stops}
    try:
        measurement = _measure(dataset, config, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if measurement.fallback_files:
        _log(
            f"note: the file system refused O_DIRECT ({measurement.fallback_reason}); "
            "read through the page cache instead"
        )
    verdict = judge(measurement.bytes_per_s, need) if need is not None and measurement.seconds > 0 else None
    lines = notes(measurement, memory_available=available_memory())
    result = to_result(measurement, need=need, verdict=verdict, lines=lines)
    from fabricscope.outputs import print_kept

    full = print_kept(sys.stdout, lambda: _print(measurement, lines, verdict), "report", args.json, "pass")
    if args.json:  # after the report: --json /dev/stdout is appended to it
        result.save(args.json)
    save_result(save_request(args), result, what="the measurement")
    if full is not None:  # said after the measurement is kept (it was lost with the report)
        raise RunError(full)
    if measurement.interrupted:
        return 128 + (stopped_by[0] if stopped_by else signal.SIGINT)
    if measurement.error_count or (verdict is not None and verdict.starves):
        return 1
    return 0


def _log(line: str) -> None:
    """One line on stderr; a file name cannot send control characters to the terminal."""
    from fabricscope.shown import printable

    sys.stderr.write(printable(line) + "\n")


def _measure(dataset: DataSet, config: ReadConfig, stop: threading.Event) -> Measurement:
    from fabricscope.dataload.reader import read_dataset

    total = dataset.total_bytes if config.duration_s is None else None
    if not sys.stderr.isatty():
        return read_dataset(dataset, config, stop=stop)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeElapsedColumn, TransferSpeedColumn

    with Progress(
        "{task.description}",
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("reading", total=total)
        return read_dataset(dataset, config, progress=lambda done: bar.update(task, completed=done), stop=stop)


def _rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 1e9:.3f} GB/s ({bytes_per_s / (1 << 20):.1f} MiB/s)"


def _print(measurement: Measurement, lines: list[str], verdict: Verdict | None) -> None:
    config = measurement.config
    from fabricscope.dataload.report import group_passes
    from fabricscope.units import format_size

    # A direct read bypasses the cache: what it held before says nothing about the figure.
    show_cache = not config.direct or measurement.fallback_files > 0
    mode = ", ".join(
        [
            f"{config.workers} worker(s)",
            f"{format_size(config.block_size)} blocks",
            "random" if config.random else "sequential",
            "direct" if config.direct else "buffered",
        ]
    )
    out = [f"# dataload {measurement.dataset.path} ({mode}); GB/s = 1e9 bytes/s"]
    for one in group_passes(measurement.passes, PASSES_PRINTED):
        fraction = one.cached_fraction_before
        cached = "" if fraction is None or not show_cache else f", {100 * fraction:.0f}% cached before"
        said = [f"{one.failed_reads} read(s) failed"] if one.failed_reads else []
        if one.stopped:
            said.append("stopped mid-pass" if one.count == 1 else "the last stopped mid-pass")
        state = f" ({'; '.join(said)})" if said else ""
        name = f"pass {one.first}" if one.count == 1 else f"passes {one.first}-{one.first + one.count - 1}"
        out.append(
            f"{name}: {one.bytes} B, {one.files} file(s) in {one.seconds:.3f} s = "
            f"{_rate(one.bytes_per_s)}{cached}{state}"
        )
    seconds = measurement.seconds
    files_per_s = measurement.files / seconds if seconds > 0 else 0.0
    out.append(
        f"total: {measurement.bytes} B, {measurement.files} file(s) in {seconds:.3f} s = "
        f"{_rate(measurement.bytes_per_s)}, {files_per_s:.1f} files/s"
    )
    out.extend(f"note: {line}" for line in lines)
    if verdict is not None:
        out.append(_verdict_line(verdict))
    from fabricscope.shown import printable

    try:
        sys.stdout.write("".join(printable(line) + "\n" for line in out))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (| head -1): the verdict's exit code stands.  Point stdout
        # at /dev/null so that the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _verdict_line(verdict: Verdict) -> str:
    need = f"need {verdict.needed_bytes_per_s / 1e9:.3f} GB/s"
    if verdict.starves:
        return (
            f"verdict: STARVES the GPUs: {need}, storage delivers {100 * verdict.ratio:.0f}% of it "
            f"({verdict.samples_per_s:.1f} samples/s); the GPUs would wait {100 * verdict.gpu_wait_fraction:.0f}% "
            "of the time"
        )
    return (
        f"verdict: keeps up: {need}, storage delivers {verdict.ratio:.2f}x it "
        f"({verdict.samples_per_s:.1f} samples/s, {100 * verdict.headroom_fraction:.0f}% headroom)"
    )
