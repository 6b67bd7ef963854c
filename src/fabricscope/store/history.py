"""The history: every saved Result in one SQLite database under ``$FABRICSCOPE_HOME``.

One file, ``history.sqlite``, in write-ahead-log mode so that readers never
wait for a writer, with a busy timeout and one ``BEGIN IMMEDIATE``
transaction per change so that many processes saving at once (the ranks of a
fleet, parallel jobs) all land.  The whole Result document is kept, with the
columns ``history`` lists and filters on beside it.

A database that is not SQLite, or is damaged, gives one :class:`HistoryError`
and is never written: nothing here deletes or recreates an existing file.

Schema history (bump ``SCHEMA_VERSION`` and add a line when it changes)::

    1 - runs (id, saved, created, kind, label, status, hosts, ranks, headline,
        document) and baselines (name, run_id, set_at).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fabricscope.errors import ResultFormatError, RunError, UsageError
from fabricscope.results import Result, loads
from fabricscope.shown import quoted

__all__ = [
    "DATABASE_NAME",
    "HOME_VARIABLE",
    "SCHEMA_VERSION",
    "Entry",
    "History",
    "HistoryError",
    "check_label",
    "database_path",
    "headline",
    "home",
]

HOME_VARIABLE = "FABRICSCOPE_HOME"
DATABASE_NAME = "history.sqlite"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
"""How long a save waits for other writers before giving up."""

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    saved TEXT NOT NULL,
    created TEXT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT,
    status TEXT NOT NULL,
    hosts TEXT NOT NULL,
    ranks INTEGER,
    headline TEXT NOT NULL,
    document TEXT NOT NULL
);
CREATE INDEX runs_kind ON runs (kind);
CREATE INDEX runs_label ON runs (label);
CREATE TABLE baselines (
    name TEXT PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs (id),
    set_at TEXT NOT NULL
);
"""


class HistoryError(RunError):
    """The history database cannot be used (damaged, foreign, from a newer fabricscope, busy)."""


def home() -> Path:
    """``$FABRICSCOPE_HOME``, else ``$XDG_DATA_HOME/fabricscope``, else ``~/.local/share/fabricscope``."""
    given = os.environ.get(HOME_VARIABLE)
    if given:
        return Path(given)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "fabricscope"


def database_path() -> Path:
    return home() / DATABASE_NAME


def check_label(label: str) -> str:
    """A label as kept: 1 to 200 printable characters."""
    text = label.strip()
    if not text or len(text) > 200 or not text.isprintable():
        raise UsageError(f"a label must be 1 to 200 printable characters, got {quoted(label)}")
    return text


@dataclass(frozen=True, slots=True)
class Entry:
    """One saved run as ``history`` lists it."""

    id: int
    saved: str
    created: str
    kind: str
    label: str | None
    status: str
    hosts: tuple[str, ...]
    ranks: int | None
    headline: str

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hosts": list(self.hosts)}


_COLUMNS = "id, saved, created, kind, label, status, hosts, ranks, headline"


def _entry(row: tuple[Any, ...]) -> Entry:
    hosts = tuple(h for h in str(row[6]).split("\n") if h)
    return Entry(
        id=row[0],
        saved=row[1],
        created=row[2],
        kind=row[3],
        label=row[4],
        status=row[5],
        hosts=hosts,
        ranks=row[7],
        headline=row[8],
    )


def _why_not_writable(path: Path) -> str:
    """Why a history cannot be written, in the user's words: read-only file system, full disk, permission."""
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return "it is read-only here"
    if fs.f_flag & os.ST_RDONLY:
        return "its file system is read-only"
    if fs.f_bavail == 0:
        return "its disk is full"
    if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
        return "no permission to write it or its folder"
    return "it is read-only here"


class History:
    """The history database at ``path`` (default :func:`database_path`).

    With ``create=False`` a missing database reads as an empty history and
    nothing is created: listing or resolving never leaves a file behind.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True) -> None:
        self.path = Path(path) if path is not None else database_path()
        self._conn: sqlite3.Connection | None = None
        self.read_only: str | None = None
        """Why the history was opened for reading only (its file system is read-only or full), or None."""
        if not self._check_file(create):
            return
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._prepare()
        except sqlite3.Error as exc:
            self.close()
            if not self._open_read_only(exc):
                raise self._error(exc) from None
        except BaseException:
            self.close()
            raise

    def _open_read_only(self, failure: sqlite3.Error) -> bool:
        """After ``failure`` to open for writing, open for reading only (a read-only file system or mount,
        no write permission, a full disk): listing and showing still work; a write says why it cannot.

        ``immutable=1`` is the last resort for a file system where even SQLite's shared-memory index cannot
        be made: it reads the file as it is, which is the whole history once every writer has closed it.
        """
        if self.path.exists() and os.access(self.path, os.R_OK) and "not a database" not in str(failure):
            for options in ("mode=ro", "mode=ro&immutable=1"):
                uri = f"file:{quote(str(self.path.resolve()))}?{options}"
                try:
                    self._conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
                    self._prepare()
                    self.read_only = f"{_why_not_writable(self.path)} ({failure})"
                    return True
                except sqlite3.Error:
                    self.close()
        return False

    # --- opening --------------------------------------------------------------------

    def _check_file(self, create: bool) -> bool:
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            if not create:
                return False
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryError(
                    f"cannot create the history folder {self.path.parent} ({exc.strerror or exc}); "
                    f"set {HOME_VARIABLE} to a writable folder"
                ) from None
            return True
        except OSError as exc:
            raise HistoryError(f"cannot use the history {self.path} ({exc.strerror or exc})") from None
        if not stat.S_ISREG(mode):
            raise HistoryError(f"the history {self.path} is not a regular file; move it away or set {HOME_VARIABLE}")
        return True

    def _prepare(self) -> None:
        conn = self._db()
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(
                f"the history {self.path} has schema {version}, newer than this fabricscope reads "
                f"({SCHEMA_VERSION}): upgrade fabricscope"
            )
        if version == SCHEMA_VERSION:
            conn.execute("PRAGMA foreign_keys = ON")
            return
        # A foreign database is refused before anything (journal mode included) is changed in it;
        # version and tables are read in one snapshot, so a schema another process is creating
        # right now is seen whole or not at all.
        conn.execute("BEGIN")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.execute("COMMIT")
        if version == 0 and tables:
            raise HistoryError(f"{self.path} is an SQLite database but not a fabricscope history; it was left as is")
        conn.execute("PRAGMA journal_mode = WAL")
        with self.transaction():
            # Judged under the write lock, in one snapshot: another process may have created the
            # schema since the version above was read (8 processes saving into a new history at once).
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version == 0 and not tables:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise HistoryError(
                    f"{self.path} is an SQLite database but not a fabricscope history; it was left as is"
                )
        conn.execute("PRAGMA foreign_keys = ON")

    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    def _error(self, exc: sqlite3.Error) -> HistoryError:
        text = str(exc)
        if "not a database" in text or "malformed" in text or "disk image" in text:
            return HistoryError(
                f"the history {self.path} is damaged or not a database ({text}); it was left untouched: "
                f"move it away (a new one is created) or set {HOME_VARIABLE}"
            )
        if "locked" in text or "busy" in text:
            return HistoryError(f"the history {self.path} stayed busy for {BUSY_TIMEOUT_S:g} s ({text}); try again")
        if self.read_only is not None or "readonly" in text or "read-only" in text:
            why = self.read_only or f"{_why_not_writable(self.path)} ({text})"
            return HistoryError(f"the history {self.path} cannot be written: {why}; nothing was saved")
        if "full" in text or "disk I/O" in text:
            return HistoryError(
                f"the history {self.path} cannot be written: its disk is full ({text}); nothing was saved"
            )
        return HistoryError(f"the history {self.path} cannot be used ({text})")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def exists(self) -> bool:
        return self._conn is not None

    # --- transactions -----------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``BEGIN IMMEDIATE``) so that writers queue, not fail."""
        conn = self._db()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read; an absent history has none."""
        if self._conn is None:
            return []
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    # --- runs ---------------------------------------------------------------------------

    def add(self, result: Result, *, label: str | None = None) -> int:
        """Save ``result``; returns its id."""
        document = result.to_json()
        summary = describe(result)
        saved = datetime.now(UTC).isoformat(timespec="seconds")
        with self.transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO runs (saved, created, kind, label, status, hosts, ranks, headline, document) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    saved,
                    result.created or saved,
                    result.kind,
                    check_label(label) if label is not None else None,
                    result.status,
                    "\n".join(summary["hosts"]),
                    summary["ranks"],
                    summary["headline"],
                    document,
                ),
            )
            run_id = cursor.lastrowid
        assert run_id is not None
        return int(run_id)

    def find(self, result: Result) -> int | None:
        """The id of a saved run that is ``result`` (the same document), or None: a file that came from
        the history (``--json`` beside ``--save``, or ``history show --json``) is not saved twice."""
        rows = self.query(
            "SELECT id FROM runs WHERE kind = ? AND created = ? AND document = ? ORDER BY id LIMIT 1",
            (result.kind, result.created, result.to_json()),
        )
        return int(rows[0][0]) if rows else None

    def entries(
        self,
        *,
        kind: str | None = None,
        label: str | None = None,
        host: str | None = None,
        since: datetime | None = None,
    ) -> list[Entry]:
        """Saved runs, oldest first, filtered as asked (``since`` compares the run's creation time)."""
        where, params = [], []
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        if label is not None:
            where.append("label = ?")
            params.append(label)
        rows = self.query(
            f"SELECT {_COLUMNS} FROM runs {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY id",
            tuple(params),
        )
        found = [_entry(row) for row in rows]
        if host is not None:
            found = [e for e in found if host in e.hosts]
        if since is not None:
            found = [e for e in found if _instant(e.created) >= since]
        return found

    def entry(self, run_id: int) -> Entry:
        rows = self.query(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise self._missing(run_id)
        return _entry(rows[0])

    def get(self, run_id: int) -> Result:
        rows = self.query("SELECT document FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise self._missing(run_id)
        document = rows[0][0]
        if not isinstance(document, str):
            raise ResultFormatError(f"history run {run_id}: the stored document is corrupt (not text)")
        # the guards of a result file (nesting depth, numbers of thousands of digits) hold for a stored one too
        return loads(document, source=f"history run {run_id}")

    def remove(self, run_id: int) -> None:
        if self._conn is None:  # no history yet: nothing to remove (and nothing to open)
            raise self._missing(run_id)
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise self._missing(run_id)
            names = [r[0] for r in conn.execute("SELECT name FROM baselines WHERE run_id = ?", (run_id,))]
            if names:
                raise UsageError(
                    f"run {run_id} is the baseline {', '.join(names)}: "
                    f"remove it first with 'fabricscope baseline rm {names[0]}'"
                )
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    def _missing(self, run_id: int) -> UsageError:
        if self._conn is None:
            return UsageError(f"no run {run_id} in the history: nothing is saved yet ({self.path})")
        return UsageError(f"no run {run_id} in the history (see 'fabricscope history')")


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def describe(result: Result) -> dict[str, Any]:
    """The hosts, rank count and headline figure ``history`` shows for a Result."""
    host = result.host if isinstance(result.host, dict) else {}
    ranks = host.get("ranks")
    hosts: list[str] = []
    if isinstance(ranks, list):
        hosts = [str(r.get("host")) for r in ranks if isinstance(r, dict) and r.get("host")]
    if not hosts and isinstance(host.get("hostname"), str) and host["hostname"]:
        hosts = [host["hostname"]]
    count = len(ranks) if isinstance(ranks, list) and ranks else None
    return {"hosts": list(dict.fromkeys(hosts)), "ranks": count, "headline": headline(result)}


def headline(result: Result) -> str:
    """One figure that says what a run found: peak busbw, step time, verdict..."""
    busbw: dict[str, float] = {}
    for record in result.records:
        if isinstance(record, dict) and isinstance(record.get("busbw_gbps"), int | float) and "op" in record:
            op = str(record["op"])
            busbw[op] = max(busbw.get(op, 0.0), float(record["busbw_gbps"]))
    if busbw:
        op, peak = next(iter(busbw.items()))
        more = f" (+{len(busbw) - 1} ops)" if len(busbw) > 1 else ""
        return f"{op} peak busbw {peak:.2f} GB/s{more}"
    summary = result.summary if isinstance(result.summary, dict) else {}
    if isinstance(summary.get("step_time_s"), int | float):
        return f"step {summary['step_time_s']:.3g} s, bottleneck {summary.get('bottleneck', '?')}"
    if isinstance(summary.get("bytes_per_s"), int | float):  # dataload
        return f"read {summary['bytes_per_s'] / 1e9:.3g} GB/s"
    for key in ("verdict", "status"):
        if isinstance(summary.get(key), str):
            return f"{key} {summary[key]}"
    return f"{len(result.records)} records"
