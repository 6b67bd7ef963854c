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
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from fabricscope import __version__
from fabricscope.bench import table
from fabricscope.bench.collectives import Collective
from fabricscope.bench.config import AVERAGE_MODES, BenchConfig
from fabricscope.bench.faults import Peer
from fabricscope.errors import RunError
from fabricscope.results import COLLECTIVE_FIELDS, CollectiveRecord, Result, atomic_write_text

__all__ = ["CSV_FIELDS", "Output"]

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
    ) -> None:
        self.config = config
        self.peers = list(peers)
        self.backend = backend
        self.launcher = launcher
        self.out = stdout or sys.stdout
        self.result = Result(
            kind="bench",
            config=config.to_dict(),
            env=env,
            host={
                "hostname": peers[0].host if peers else "",
                "ranks": [{"rank": p.rank, "host": p.host, "pid": p.pid, "device": p.device} for p in peers],
            },
            status="partial",
        )
        self.write_errors: list[str] = []
        self._op_records: list[dict[str, Any]] = []
        self._progress: Any = None
        self._task: Any = None
        if progress_total and sys.stderr.isatty():
            self._start_progress(progress_total)
        self._save()

    # --- table ------------------------------------------------------------------

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")

    def start_op(self, op: Collective) -> None:
        cfg = self.config
        step = f"{cfg.step_factor}(factor)" if cfg.step_factor > 1 else f"{cfg.step_bytes}(bytes)"
        torch_version = self.result.env.get("torch", "?")
        self._print(f"# fabricscope version {__version__} torch {torch_version} backend {self.backend}")
        self._print(f"# Collective test starting: {op.program}")
        self._print(
            f"# nThread 1 nGpus 1 minBytes {cfg.min_bytes} maxBytes {cfg.max_bytes} step: {step} "
            f"warmup iters: {cfg.warmup_iters} iters: {cfg.iters} agg iters: 1 validation: {cfg.check} "
            "graph: 0 unalign: 0"
        )
        self._print(
            f"# {len(self.peers)} ranks launched by {self.launcher}; time = mean of {cfg.iters} iterations, "
            f"combined across ranks by {AVERAGE_MODES[cfg.average]} (-a {cfg.average}); GB/s = 1e9 bytes/s"
        )
        self._print("#")
        self._print("# Using devices")
        for peer in self.peers:
            self._print(
                "#  Rank %2d Group  0 Pid %6d on %10s device %s" % (peer.rank, peer.pid, peer.host, peer.device)
            )
        for line in table.header_lines():
            self._print(line)
        self.out.flush()
        self._op_records = []

    def row(self, records: Sequence[CollectiveRecord]) -> None:
        dicts = [r.to_dict() for r in records]
        self._op_records.extend(dicts)
        self.result.records.extend(dicts)
        for row in table.pair_rows(dicts):
            self._print(table.format_row(row, check=self.config.check > 0))
        self.out.flush()
        self._save()
        if self._progress is not None:
            self._progress.advance(self._task)

    def end_op(self, op: Collective) -> None:
        records = self._op_records
        for line in table.footer_lines(records, check=self.config.check > 0):
            self._print(line)
        for line in table.summary_lines(records):
            self._print(line)
        self._print("#")
        self._print(f"# Collective test concluded: {op.program}")
        self._print("")
        self.out.flush()
        self.result.summary[op.name] = op_summary(records)

    # --- files --------------------------------------------------------------------

    def finish(self, status: str, error: str | None = None) -> None:
        self.result.status = status
        self.result.error = error
        self._save()
        self._write_csv()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _save(self) -> None:
        if not self.config.json_path:
            return
        try:
            self.result.save(self.config.json_path)
        except RunError as exc:
            self._write_failed(str(exc))

    def _write_csv(self) -> None:
        if not self.config.csv_path:
            return
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for record in self.result.records:
            writer.writerow({**record, "ranks": len(self.peers), "backend": self.backend})
        try:
            atomic_write_text(self.config.csv_path, buffer.getvalue())
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


def op_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-op summary kept in the Result: the footer's numbers and fabricscope's own."""
    if not records:
        return {}
    peak = max(records, key=lambda r: float(r["busbw_gbps"]))
    wrong = [r["wrong"] for r in records if r.get("wrong") is not None]
    best: dict[int, float] = {}
    for r in records:
        best[int(r["size_bytes"])] = max(best.get(int(r["size_bytes"]), 0.0), float(r["busbw_gbps"]))
    peak_bw = float(peak["busbw_gbps"])
    half = min((s for s, bw in best.items() if peak_bw > 0 and bw >= peak_bw / 2), default=None)
    return {
        "avg_busbw_gbps": table.avg_busbw(records),
        "peak_busbw_gbps": peak_bw,
        "peak_size_bytes": int(peak["size_bytes"]),
        "half_peak_size_bytes": half,
        "wrong": sum(wrong) if wrong else (None if not wrong else 0),
        "rows": len({(r["size_bytes"], r["dtype"], r["redop"]) for r in records}),
    }
