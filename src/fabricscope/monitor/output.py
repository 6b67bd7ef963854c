"""Where a run's samples go: the live view or plain lines, the recording, the exporter, and at the end
the summary, the verdict and the ``--json`` Result.

Without a command the view and the summary go to stdout (an exporter whose stdout is not a
terminal, such as a service, prints only its notes until the summary).  With one (``monitor
-- CMD``) stdout belongs to the command: notes and the summary go to stderr
and nothing is drawn while it runs.  ``--json -`` or ``--record -`` hold stdout for their data
(:func:`fabricscope.outputs.claim_stdout`): the view, the summary and the command's output go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from fabricscope.errors import FabricscopeError, RunError, UsageError
from fabricscope.monitor.session import Monitor
from fabricscope.monitor.summary import RETRANS_RATIO
from fabricscope.monitor.view import live_table, plain_lines, summary_lines
from fabricscope.results import Result
from fabricscope.store.save import save_request, save_result, wants_save

__all__ = ["Outputs"]


def _silence_stdout() -> None:
    """The reader of stdout went away (``| head``): point fd 1 at /dev/null so later writes cost nothing."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class Outputs:
    """Everything a run writes, opened before the first sample and closed whatever happens."""

    def __init__(
        self, monitor: Monitor, args: argparse.Namespace, *, serve: tuple[str, int] | None, command: list[str]
    ) -> None:
        self.monitor = monitor
        self.command = command
        self.json_path: str | None = args.json
        self.args = args
        """The flags: ``--save``/``--label`` keep the final Result in the history."""
        self.stream: TextIO = sys.stderr if command else sys.stdout
        self.config: dict[str, Any] = {
            **monitor.config.to_dict(),
            "root": args.root,
            "command": command or None,
            "serve": args.serve,
            "textfile": getattr(args, "textfile", None),
            "record": args.record,
        }
        self.broken = False
        self.exporter: Any = None
        self.textfile: Any = None
        self.recorder: Any = None
        self.record_error: str | None = None
        """Why ``--record`` stopped mid-run (a full disk): said once; the watching goes on."""
        self.textfile_error: str | None = None
        """Why ``--textfile`` stopped mid-run: said once; the watching goes on (as for ``--record``)."""
        self.live: Any = None
        # What can fail at start comes first, nothing written yet: the exporter's port, the textfile folder,
        # then the recording's first line (it creates its file); on a failure what was started is closed.
        try:
            if serve is not None:
                from fabricscope.monitor.exporter import Exporter

                self.exporter = Exporter(*serve)
            if getattr(args, "textfile", None):
                from fabricscope.monitor.exporter import TextfileWriter

                self.textfile = TextfileWriter(args.textfile)
            if args.record:
                from fabricscope.monitor.recording import Recorder

                try:
                    self.recorder = Recorder(args.record, self._result([], {}, "complete"))
                except RunError as exc:  # nothing is watched or started yet: the file is the fault
                    raise UsageError(f"--record: {exc}; nothing was started") from None
        except BaseException:
            self.close()
            raise
        if self.exporter is not None:
            sys.stderr.write(f"fabricscope monitor: serving {self.exporter.url}\n")
            sys.stderr.flush()
        if not command and _is_terminal(sys.stdout):
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(), auto_refresh=False, transient=False)
            self.live.start()

    @classmethod
    @contextlib.contextmanager
    def open(
        cls, monitor: Monitor, args: argparse.Namespace, *, serve: tuple[str, int] | None, command: list[str]
    ) -> Iterator[Outputs]:
        outputs = cls(monitor, args, serve=serve, command=command)
        try:
            yield outputs
        finally:
            outputs.close()

    def baseline_taken(self) -> None:
        """With a command: the first sample is in, so the exporter has something to show."""
        self._export()

    def after_sample(self, records: list[dict[str, Any]]) -> bool:
        """Show and store one interval; False when stdout has gone away (``| head``): time to stop."""
        notes = self.monitor.notes.take()
        self._record(lambda recorder: (recorder.notes(notes), recorder.records(records) if records else None))
        self._export()
        if self.command:
            for note in notes:
                sys.stderr.write(f"fabricscope monitor: note: {note}\n")
            return True
        if self.broken:
            return False
        try:
            if self.live is not None:
                if records:
                    self.live.update(
                        live_table(records, self.monitor.notes.said, retrans_threshold=RETRANS_RATIO), refresh=True
                    )
            else:  # an exporter run as a service logs its notes, not a line per port every interval
                lines = [f"note: {n}" for n in notes] + (plain_lines(records) if self.exporter is None else [])
                if lines:
                    self.stream.write("\n".join(lines) + "\n")
                    self.stream.flush()
        except BrokenPipeError:
            self.broken = True
            _silence_stdout()
            return False
        return True

    def finish(self, *, interrupted: bool, command_status: int | None) -> None:
        """The summary: saved to ``--json`` and the recording, then printed with the verdict."""
        summary = self.monitor.summary.to_dict()
        summary["notes"] = list(self.monitor.notes.said)
        if command_status is not None:
            summary["command_exit_status"] = command_status
        status = "interrupted" if interrupted else "complete"
        problem: FabricscopeError | None = None
        if self.json_path or wants_save(self.args):
            result = self._result(self.monitor.records, summary, status)
            if self.json_path:
                try:
                    result.save(self.json_path)
                except FabricscopeError as exc:
                    problem = RunError(f"--json {self.json_path}: {exc}")
            try:
                save_result(save_request(self.args), result, what="the monitor result")
            except FabricscopeError as exc:
                problem = problem or exc
        self._record(lambda recorder: recorder.finish(summary, status))
        self._stop_live()
        if not self.broken:
            try:
                self.stream.write("\n".join(summary_lines(summary)) + "\n")
                self.stream.flush()
            except BrokenPipeError:
                self.broken = True
                _silence_stdout()
        if problem is not None and command_status is not None:
            # The watched command's status is the exit code; an output that failed is said, not returned.
            sys.stderr.write(f"fabricscope monitor: error: {problem}\n")
            sys.stderr.flush()
        elif problem is not None:
            raise problem
        if command_status is None:
            # No command to speak for: the monitor's own output failed, and its exit code says so.
            if self.record_error is not None:
                raise RunError(f"--record stopped early: {self.record_error}")
            if self.textfile_error is not None:
                raise RunError(f"--textfile stopped early: {self.textfile_error}")

    def _record(self, write: Any) -> None:
        """One write to the recording; a failure (a full disk) stops the recording, not the monitor
        or the command it watches: said once on stderr, and what the file holds stays readable."""
        if self.recorder is None:
            return
        try:
            write(self.recorder)
        except RunError as exc:
            self.recorder = None  # the stream closed itself
            self.record_error = str(exc)
            sys.stderr.write(
                f"fabricscope monitor: error: {exc}; the recording stops here (what it holds stays readable), "
                "the watching goes on\n"
            )
            sys.stderr.flush()

    def close(self) -> None:
        self._stop_live()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        if self.recorder is not None:
            self.recorder.close()

    def _stop_live(self) -> None:
        if self.live is not None:
            with contextlib.suppress(BrokenPipeError, OSError):
                self.live.stop()
            self.live = None

    def _export(self) -> None:
        reading = self.monitor.tracker.reading(self.monitor.last_interval)
        if reading is None:
            return
        if self.exporter is not None:
            self.exporter.update(reading, len(self.monitor.notes.said))
        if self.textfile is not None:
            try:
                self.textfile.update(reading, len(self.monitor.notes.said))
            except FabricscopeError as exc:  # a full disk must not end the watching (or the job)
                self.textfile = None
                self.textfile_error = str(exc)
                sys.stderr.write(f"fabricscope monitor: error: {exc}; --textfile stops here, the watching goes on\n")
                sys.stderr.flush()

    def _result(self, records: list[dict[str, Any]], summary: dict[str, Any], status: str) -> Result:
        from fabricscope.metadata import collect_env

        return Result(
            kind="monitor", config=self.config, records=records, summary=summary, env=collect_env(), status=status
        )


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, AttributeError):
        return False
