"""What rank 0 shows and keeps: the nccl-tests table on stdout, JSON and CSV files.

The JSON result is rewritten atomically after every row, so whatever happens
next (a rank dies, the disk fills, Ctrl-C) the rows already measured are on
disk.  A file that cannot be written does not stop the measurement: the
problem is reported once, the table on stdout keeps every row, and the run
ends with a non-zero exit.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from fabricscope import __version__, table
from fabricscope.bench.config import AVERAGE_MODES, BenchConfig
from fabricscope.bench.stability import SPIKE_FACTOR, Series
from fabricscope.errors import RunError
from fabricscope.launch.heartbeat import Peer, host_record
from fabricscope.launch.outcome import Ending
from fabricscope.ops import Collective
from fabricscope.outputs import (
    atomic_write_text,
    claim_stdout,
    silence_stream,
    stream_failure,
    stream_write_failed,
    written_through,
)
from fabricscope.results import COLLECTIVE_FIELDS, CollectiveRecord, Result
from fabricscope.table import op_summary

__all__ = ["CSV_FIELDS", "Output", "op_summary"]

_SAVE_EVERY_ROW_UP_TO = 2000
_SAVE_INTERVAL_S = 5.0

_SERIES_KEY = ("op", "dtype", "redop", "size_bytes", "placement")


def _stability_line(key: tuple[Any, ...], series: Series) -> str:
    stats = series.statistics()
    op, dtype, redop, size, placement = key
    cv = f"{stats['cv']:.3f}" if stats["cv"] is not None else "n/a"
    where = "out-of-place" if placement == "out" else "in-place"
    return (
        f"# stability {op} {size} B {dtype} {redop} {where}: {stats['iterations']} iterations, "
        f"p50 {stats['p50_us']:.1f} us, p99 {stats['p99_us']:.1f} us, max {stats['max_us']:.1f} us, cv {cv}, "
        f"{stats['spikes']} spike(s) above {SPIKE_FACTOR:g}x the median"
    )


def _ps_against_all_reduce(records: Sequence[dict[str, Any]]) -> list[str]:
    """Once both ran: ps time over all_reduce time for the same bytes (above 1: the servers' incast costs);
    one line per datatype and reduction, which it names when there are several (-d all, -o all)."""
    ps = {(r["size_bytes"], r["dtype"], r["redop"], r["placement"]): r for r in records if r["op"] == "ps"}
    groups: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in records:
        key = (r["size_bytes"], r["dtype"], r["redop"], r["placement"])
        if r["op"] == "all_reduce" and key in ps and r["placement"] == "out" and r["time_us"] > 0:
            groups.setdefault((r["dtype"], r["redop"]), []).append((r["size_bytes"], ps[key]["time_us"] / r["time_us"]))
    lines = []
    for (dtype, redop), pairs in groups.items():
        named = f" {dtype} {redop}" if len(groups) > 1 else ""
        ratios = "  ".join(f"{size} B: {ratio:.2f}" for size, ratio in pairs)
        lines.append(f"# ps / all_reduce time for the same bytes (out-of-place{named}): {ratios}")
    return lines


CSV_FIELDS = (*COLLECTIVE_FIELDS, "min_us", "p50_us", "p99_us", "max_us", "ranks", "backend")


class Output:
    """Rank 0's view of the run: prints, saves, and keeps the Result up to date."""

    def __init__(
        self,
        *,
        config: BenchConfig,
        peers: Sequence[Peer],
        backend: str,
        launcher: str,
        env: dict[str, Any],
        stdout: TextIO | None = None,
        progress_total: int = 0,
        notes: Sequence[str] = (),
        first_notes: Sequence[str] = (),
        on_stdout_closed: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.peers = list(peers)
        self.backend = backend
        self.launcher = launcher
        for flag, path in config.output.flagged():
            claim_stdout(flag, path)  # a rank 0 that a launcher started did not run the output check
        self.out = stdout or sys.stdout
        self.result = Result(
            kind="bench",
            config=config.to_dict(),
            env=env,
            host=host_record(peers),
            status="partial",
        )
        self._open_op: Collective | None = None
        self._on_stdout_closed = on_stdout_closed
        self.stdout_closed = False
        """The reader of the table went away (``| head``): the run stops like an interrupt."""
        self._saved_at = 0.0
        self.notes = list(notes)
        """Printed in every op's header."""
        self.first_notes = list(first_notes)
        """Printed once, in the first op's header."""
        self.write_errors: list[str] = []
        self.stream_errors: list[str] = []
        """Standard output that could not take the table (said at the end, exit 1)."""
        self.below_minimum: list[str] = []
        """Ops whose average busbw fell below 0.9 x NCCL_TESTS_MIN_BW."""
        self._op_records: list[dict[str, Any]] = []
        self._series: dict[tuple[Any, ...], Series] = {}
        """``--duration``: each row's iterations, by (op, dtype, redop, size, placement)."""
        self._started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None
        self._shared_terminal = False
        if progress_total and sys.stderr.isatty():
            self._shared_terminal = self.out.isatty()
            self._start_progress(progress_total)
        self._save()
        self._csv_streamed = bool(config.output.csv_path) and not written_through(config.output.csv_path or "")
        """A CSV file is written as rows finish (a header now, rows appended); a stream gets it at the end."""
        if self._csv_streamed:
            self._write_csv_text(self._csv_lines([], header=True), replace=True)

    # --- table ------------------------------------------------------------------

    def _print(self, line: str) -> None:
        if self.stdout_closed:
            return
        try:
            if self._progress is not None and self._shared_terminal:
                # Table and bar share one terminal: print above the bar, never through it.
                self._progress.console.print(line, markup=False, highlight=False, crop=False, soft_wrap=True)
            else:
                self.out.write(line + "\n")
        except BrokenPipeError:
            self._stdout_gone()
        except OSError as exc:
            self._stdout_failed(exc)

    def _flush(self) -> None:
        try:
            self.out.flush()
        except BrokenPipeError:
            self._stdout_gone()
        except OSError as exc:
            self._stdout_failed(exc)

    def _stdout_failed(self, exc: OSError) -> None:
        """Standard output cannot take the table (``> /dev/full``, a full disk): said once, the run goes on
        (a --json file keeps every row) and ends with exit 1, as a file that could not be written does."""
        if not stream_write_failed(exc):
            raise exc
        message = stream_failure(exc, "table", self.config.output.json_path, "row")
        if message not in self.stream_errors:
            self.stream_errors.append(message)
            sys.stderr.write(f"warning: {message}; measuring goes on\n")
        self.stdout_closed = True
        silence_stream(self.out)

    def _stdout_gone(self) -> None:
        self.stdout_closed = True
        silence_stream(self.out)  # later writes, and Python's own flush at exit, go nowhere instead of failing
        if self._on_stdout_closed is not None:
            self._on_stdout_closed()

    def start_op(self, op: Collective) -> None:
        self._open_op = op
        cfg = self.config
        step = f"{cfg.step_factor}(factor)" if cfg.step_factor > 1 else f"{cfg.step_bytes}(bytes)"
        torch_version = self.result.env.get("torch", "?")
        self._print(f"# fabricscope version {__version__} torch {torch_version} backend {self.backend}")
        self._print(f"# Collective test starting: {op.program}")
        self._print(
            f"# nThread 1 nGpus 1 minBytes {cfg.min_bytes} maxBytes {cfg.max_bytes} step: {step} "
            f"warmup iters: {cfg.warmup_iters} iters: {cfg.iters} agg iters: {cfg.agg_iters} validation: {cfg.check} "
            f"graph: 0 unalign: {cfg.unalign}"
        )
        for note in [*self.first_notes, *self.notes]:
            self._print(note)
        self.first_notes = []
        self._print(
            f"# {len(self.peers)} ranks launched by {self.launcher}; time = mean of {cfg.iters} iterations"
            + (f" of {cfg.agg_iters} collectives each (per collective)" if cfg.agg_iters > 1 else "")
            + ", "
            f"combined across ranks by {AVERAGE_MODES[cfg.average]} (-a {cfg.average}); GB/s = 1e9 bytes/s"
        )
        if cfg.streams > 1:
            self._print(
                f"# {cfg.streams} streams at once, each on its own process group: time = wall time per call of "
                f"all {cfg.streams}, algbw/busbw = their aggregate; each stream's busbw below its row"
            )
        self._print("#")
        self._print("# Using devices")
        for peer in self.peers:
            self._print(
                "#  Rank %2d Group  0 Pid %6d on %10s device %s" % (peer.rank, peer.pid, peer.host, peer.device)
            )
        for line in table.header_lines():
            self._print(line)
        self._flush()
        self._op_records = []

    def row(self, records: Sequence[CollectiveRecord]) -> None:
        dicts = [r.to_dict() for r in records]
        for row in table.pair_rows(dicts):
            self._print(table.format_row(row, check=self.config.check > 0))
        for record in dicts:
            if record.get("streams"):
                each = "  ".join(f"{s['stream']}: {s['busbw_gbps']:.3g}" for s in record["streams"])
                where = "out-of-place" if record["placement"] == "out" else "in-place"
                self._print(f"#  {where} streams, busbw GB/s each: {each}")
        self._flush()
        if self.config.duration_s is not None:
            # --duration: one record per row, updated with every repeat; the iterations go to its series.
            first = not self._series
            for record in dicts:
                self._keep_in_series(record)
            if first or time.monotonic() - self._saved_at > _SAVE_INTERVAL_S:
                self._save()
        else:
            self._op_records.extend(dicts)
            self.result.records.extend(dicts)
            # Every row reaches the file at once; in very long runs (-N 0) rewriting
            # the whole file each row would cost more than the rows, so then at most
            # every few seconds (finish() always writes the rest).
            if len(self.result.records) < _SAVE_EVERY_ROW_UP_TO or time.monotonic() - self._saved_at > _SAVE_INTERVAL_S:
                self._save()
        if self._csv_streamed:
            self._write_csv_text(self._csv_lines(dicts, header=False), replace=False)
        if self._progress is not None:
            self._progress.advance(self._task)

    def _keep_in_series(self, record: dict[str, Any]) -> None:
        """Add a repeated row's samples to its series and update its one record (``--duration``)."""
        key = tuple(record[k] for k in _SERIES_KEY)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Series()
            self._op_records.append(record)
            self.result.records.append(record)
        series.add(record.pop("samples_us", None) or [], time.monotonic() - self._started)
        stats = series.statistics()
        # Bandwidths scale with 1/time: the row's, moved to the mean over every iteration.
        ratio = record["time_us"] / series.mean_us if series.mean_us > 0 else 1.0
        previous = self._kept_record(key)
        wrong = record.get("wrong")
        if previous is not record and wrong is not None:
            wrong += previous.get("wrong") or 0
        previous.update(
            {k: v for k, v in record.items() if k not in ("min_us",)},
            time_us=series.mean_us,
            algbw_gbps=record["algbw_gbps"] * ratio,
            busbw_gbps=record["busbw_gbps"] * ratio,
            wrong=wrong,
            p50_us=stats["p50_us"],
            p99_us=stats["p99_us"],
            max_us=stats["max_us"],
            cv=stats["cv"],
            iterations=series.iterations,
            spikes=stats["spikes"],
        )
        previous.pop("min_us", None)

    def _kept_record(self, key: tuple[Any, ...]) -> dict[str, Any]:
        return next(r for r in self._op_records if tuple(r[k] for k in _SERIES_KEY) == key)

    def stability(self) -> list[dict[str, Any]]:
        """Every row's series (``--duration``): statistics and the time series, for the Result."""
        return [{**dict(zip(_SERIES_KEY, key, strict=True)), **s.to_dict()} for key, s in self._series.items()]

    def end_op(self, op: Collective, *, stopped: str = "") -> None:
        """The footer and summary of an op; ``stopped`` says why a sweep ended early."""
        self._open_op = None
        records = self._op_records
        if stopped:
            self._print(f"# The sweep stopped here ({stopped}): the lines below cover the rows above")
        for line in table.footer_lines(records, check=self.config.check > 0, min_busbw=self.config.min_busbw_gbps):
            self._print(line)
        minimum = self.config.min_busbw_gbps
        if minimum is not None and table.avg_busbw(records) < 0.9 * minimum:
            self.below_minimum.append(op.name)
        for line in table.summary_lines(records):
            self._print(line)
        for key, series in self._series.items():
            if key[0] == op.name:
                self._print(_stability_line(key, series))
        if op.name in ("ps", "all_reduce"):
            for line in _ps_against_all_reduce(self.result.records):
                self._print(line)
        self._print("#")
        self._print(f"# Collective test concluded: {op.program}")
        self._print("")
        self._flush()
        self.result.summary[op.name] = op_summary(records)

    # --- files --------------------------------------------------------------------

    def judged(self, ending: Ending) -> Ending:
        """``ending`` with the records kept and where, and the ops below ``NCCL_TESTS_MIN_BW``."""
        return replace(
            ending,
            records=len(self.result.records),
            json_path=self.config.output.json_path,
            below_minimum=tuple(self.below_minimum),
            min_busbw_gbps=self.config.min_busbw_gbps,
            stream_errors=tuple(self.stream_errors),
        )

    def finish(self, status: str, error: str | None = None) -> None:
        if self._open_op is not None:
            self.end_op(self._open_op, stopped=status)
        self.result.status = status
        self.result.error = error
        self._save(final=True)
        if self.config.output.csv_path and not self._csv_streamed:
            self._write_csv_text(self._csv_lines(self.result.records, header=True), replace=True)
        if self.config.output.nccl_json_path:
            self._write_nccl_json(self.config.output.nccl_json_path)
        if self.config.output.save_request() is not None:
            self._save_history()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _save(self, *, final: bool = False) -> None:
        self._saved_at = time.monotonic()
        if not self.config.output.json_path:
            return
        if self._series:
            self.result.summary["stability"] = self.stability()
        problem = self.result.save_during_run(self.config.output.json_path, final=final)
        if problem:
            self._write_failed(problem)

    def _save_history(self) -> None:
        from fabricscope.errors import FabricscopeError
        from fabricscope.store.save import save_result

        try:
            save_result(self.config.output.save_request(), self.result, what=f"the {self.result.status} sweep")
        except FabricscopeError as exc:
            self._write_failed(str(exc))

    def _csv_lines(self, records: Sequence[dict[str, Any]], *, header: bool) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if header:
            writer.writeheader()
        for record in records:
            writer.writerow({**record, "ranks": len(self.peers), "backend": self.backend})
        return buffer.getvalue()

    def _write_csv_text(self, text: str, *, replace: bool) -> None:
        """Replace the CSV file (atomically) or append rows to it; a failure is reported, not raised."""
        path = self.config.output.csv_path
        if not path:
            return
        try:
            if replace:
                atomic_write_text(path, text)
            else:
                with open(path, "a", encoding="utf-8", newline="") as handle:
                    handle.write(text)
        except RunError as exc:
            self._write_failed(str(exc))
        except OSError as exc:
            self._write_failed(f"cannot write {path}: {exc.strerror or exc}")

    def _write_nccl_json(self, path: str) -> None:
        """``-J``: the run as nccl-tests' JSON; a failure is reported, not raised."""
        from fabricscope.bench.nccl_json import to_nccl_tests_json

        document = to_nccl_tests_json(self.result, min_busbw_gbps=self.config.min_busbw_gbps)
        try:
            atomic_write_text(path, json.dumps(document, indent=1, allow_nan=False) + "\n")
        except RunError as exc:
            self._write_failed(str(exc))

    def _write_failed(self, message: str) -> None:
        if message not in self.write_errors:
            self.write_errors.append(message)
            sys.stderr.write(f"warning: {message}; measuring goes on and the table on stdout keeps every row\n")

    def _start_progress(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("bench"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        self._task = self._progress.add_task("rows", total=total)
        self._progress.start()
