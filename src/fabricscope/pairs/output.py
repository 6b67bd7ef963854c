"""What rank 0 keeps: the ``pairs`` Result, rewritten after every round, and the final report.

Whatever happens next (a rank dies, Ctrl-C, the disk fills) the pairs of the
rounds already finished are on disk.  A file that cannot be written does not
stop the measurement: it is reported once and the run exits 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TextIO

from fabricscope.launch.heartbeat import Peer, host_record
from fabricscope.launch.outcome import Ending
from fabricscope.outputs import claim_stdout, print_kept
from fabricscope.pair_matrix import PairRecord
from fabricscope.pairs.analysis import analyse
from fabricscope.pairs.config import PairsConfig
from fabricscope.pairs.report import print_report
from fabricscope.results import Result

__all__ = ["Output"]


class Output:
    """Rank 0's view of the run: the Result, its file, and the printed report."""

    def __init__(
        self,
        *,
        config: PairsConfig,
        peers: Sequence[Peer],
        backend: str,
        env: dict[str, Any],
        rounds: int,
        stdout: TextIO | None = None,
    ) -> None:
        self.config = config
        claim_stdout("--json", config.output.json_path)  # a rank 0 that a launcher started did not run the output check
        self.out = stdout or sys.stdout
        self.result = Result(
            kind="pairs",
            config=config.to_dict(),
            env=env,
            host=host_record(peers),
            summary={"rounds_planned": rounds, "rounds_done": 0, "backend": backend},
            status="partial",
        )
        self.write_errors: list[str] = []
        self.stream_errors: list[str] = []
        """Standard output that could not take the report (said at the end, exit 1)."""

    def say(self, text: str) -> None:
        """A line of the printed report."""
        self._print(lambda out: out.write(text + "\n"))

    def _print(self, emit: Callable[[TextIO], object]) -> None:
        """Print on standard output: a reader that went away (| head) leaves the verdict as it is; an output
        that is full (> /dev/full) is said at the end (exit 1), and the run goes on."""
        message = print_kept(self.out, lambda: emit(self.out), "report", self.config.output.json_path, "pair")
        if message is not None and message not in self.stream_errors:
            self.stream_errors.append(message)

    def add_round(self, records: Sequence[PairRecord]) -> None:
        self.result.records.extend(dict(record) for record in records)
        self.result.summary["rounds_done"] += 1
        self.save()

    def save(self, *, final: bool = False) -> None:
        problem = self.result.save_during_run(self.config.output.json_path, final=final)
        if problem and not self.write_errors:
            self.write_errors.append(problem)

    def judged(self, ending: Ending) -> Ending:
        """``ending`` with the records kept and where; what is left when a file fails is the report."""
        return replace(
            ending,
            records=len(self.result.records),
            json_path=self.config.output.json_path,
            shown="the report above holds every pair measured",
            stream_errors=tuple(self.stream_errors),
            without_file="were not written: give --json FILE to keep the pairs of an unfinished run",
        )

    def finish(self, status: str, error: str | None) -> None:
        """Judge the records, print the report when complete, and save the final status."""
        findings = analyse(self.result.records)
        self.result.summary["findings"] = findings.to_dict()
        self.result.status, self.result.error = status, error
        self.save(final=True)
        if self.config.output.save_request() is not None:
            from fabricscope.errors import FabricscopeError
            from fabricscope.store.save import save_result

            try:
                save_result(self.config.output.save_request(), self.result, what=f"the {status} pairs result")
            except FabricscopeError as exc:
                self.write_errors.append(str(exc))
        if status == "complete" and self.result.records:
            self._print(lambda out: print_report(self.result.records, findings, self.config.by, out))
