"""Import the output of the C nccl-tests (``all_reduce_perf`` and friends) as a Result.

Pure functions over text: :func:`parse` takes what a log file holds and
returns a Result of kind ``nccl-tests`` whose records have the same fields as
``bench`` and ``predict`` records, so that imported, measured and predicted
runs compare and plot together.

What is read (nccl-tests ``src/util.cu`` ``writeDeviceReport``,
``writeResultHeader``, ``writeBenchmarkLine*``, ``writeResultFooter``):

- the current table (``size count type redop root``, then ``time algbw busbw
  #wrong`` out-of-place and in-place) and the older one (an ``error`` column,
  the largest difference seen, and no ``root``); the column header says which;
  a ``-C`` ``cputime`` column and a ``-S`` timestamp are accepted;
- several collectives in one log (each ``Collective test starting`` or table
  header opens a section; older logs name the program only on the command
  line, else the caller names the op);
- lines prefixed by mpirun ``--tag-output`` (``[1,0]<stdout>:``) or by
  ``srun --label`` (``0: ``); when several processes print a table (a build
  without MPI runs each process alone) the first one's is kept;
- the ``# Using devices`` lines (rank, group, pid, host, device, PCI id, GPU
  name), with or without ``Group``: they become the Result's host metadata;
- a log cut short: the rows before the cut are kept and the Result is
  ``partial``;
- the ``-J`` JSON file (``version``, ``args``, ``env``, ``config`` with
  ``devices``, ``results`` with ``out_of_place``/``in_place``), also when it
  was cut short.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fabricscope.errors import UsageError
from fabricscope.results import CollectiveRecord, Result
from fabricscope.shown import quoted
from fabricscope.table import op_summary
from fabricscope.units import is_digits

__all__ = [
    "KIND",
    "guess_op",
    "op_from_program",
    "parse",
    "parse_device_line",
    "parse_json",
    "parse_text",
    "strip_prefix",
]

KIND = "nccl-tests"

_OPS_BY_LENGTH = (
    "reduce_scatter",
    "all_reduce",
    "all_gather",
    "alltoallv",
    "alltoall",
    "broadcast",
    "sendrecv",
    "hypercube",
    "reduce",
    "gather",
    "scatter",
)
_MPIRUN = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:\s?", re.ASCII)
_SLURM = re.compile(r"^\s*(\d+): ", re.ASCII)
_PROGRAM = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"Collective test concluded:\s*(\S+)")
_VERSION = re.compile(r"nccl-tests version\s+(\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?", re.ASCII)
_DEVICE = re.compile(
    r"Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$",
    re.ASCII,
)
_SETTINGS = re.compile(r"nThread\s+\d+\s+nGpus\s+\d+", re.ASCII)
_SETTING = re.compile(r"([A-Za-z][A-Za-z ]*?):?\s+(\d+)(?:\((factor|bytes)\))?", re.ASCII)
_OUT_OF_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(\w*)", re.ASCII)
_AVG_BUSBW = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)\s*(\w*)")
_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
_TIME_COLUMNS = ("time", "cputime")


def strip_prefix(line: str) -> tuple[str, str]:
    """``(process, text)``: the launcher's tag (``""`` when none) and the line without it."""
    match = _MPIRUN.match(line)
    if match:
        return f"mpi:{match.group(1)}", line[match.end() :]
    match = _SLURM.match(line)
    if match:
        return f"slurm:{match.group(1)}", line[match.end() :]
    return "", line


def op_from_program(program: str) -> str | None:
    """``./build/all_reduce_perf`` or ``all_reduce_perf_mpi`` -> ``all_reduce``."""
    match = _PROGRAM.search(os.path.basename(program))
    return match.group(1) if match else None


def guess_op(name: str) -> str | None:
    """The op a file name mentions (``allreduce-2nodes.log`` -> ``all_reduce``), if any."""
    flat = re.sub(r"[^a-z]", "", os.path.basename(name).lower())
    for op in _OPS_BY_LENGTH:
        if op.replace("_", "") in flat:
            return op
    return None


def parse_device_line(text: str) -> dict[str, Any] | None:
    """One ``#  Rank  0 Group  0 Pid 1234 on host device  0 [0000:18:00] NVIDIA H100`` line."""
    match = _DEVICE.search(text)
    if not match:
        return None
    rank, group, pid, host, device, bus_id, gpu = match.groups()
    return {
        "rank": int(rank),
        "group": int(group) if group is not None else None,
        "pid": int(pid),
        "host": host,
        "device": int(device),
        "bus_id": bus_id,
        "gpu": gpu,
    }


@dataclass(slots=True)
class _Section:
    """One collective's table in a log."""

    op: str | None
    columns: list[str]
    settings: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    concluded: bool = False
    truncated_row: str | None = None
    unread_rows: list[tuple[int, str]] = field(default_factory=list)
    """Lines inside the table that start like a row (a size, a count, a type) but are not one, with their index
    among the log's lines: left out, and said."""
    rows_read_after: int = -1
    """Index of the last line read as a row (a line the table could not read after it may be a cut one)."""


def _settings(text: str) -> dict[str, Any]:
    """``nThread 1 nGpus 8 minBytes 8 maxBytes ... step: 2(factor) warmup iters: 5 iters: 20 ...``."""
    names = {
        "nThread": "nthreads",
        "nGpus": "ngpus",
        "minBytes": "min_bytes",
        "maxBytes": "max_bytes",
        "warmup iters": "warmup_iters",
        "iters": "iters",
        "agg iters": "agg_iters",
        "validation": "validation",
        "graph": "graph",
    }
    found: dict[str, Any] = {}
    for match in _SETTING.finditer(text):
        name, value, unit = match.group(1).strip(), int(match.group(2)), match.group(3)
        if name == "step":
            found["step_factor" if unit == "factor" else "step_bytes"] = value
        elif name in names:
            found[names[name]] = value
    return found


def _number(text: str) -> float | None:
    """A finite decimal number written in ASCII (``float`` also takes Arabic-Indic and full-width digits)."""
    if not text.isascii():
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def _header_columns(text: str) -> list[str] | None:
    tokens = text.lstrip("#").split()
    if len(tokens) >= 8 and tokens[:2] == ["size", "count"] and "busbw" in tokens:
        return tokens
    return None


@functools.lru_cache(maxsize=64)
def _layout(columns: tuple[str, ...]) -> tuple[tuple[str, ...], int | None, tuple[tuple[str, int, str], ...]]:
    """What a table's header says of every row: its columns (without ``timestamp``), where ``root`` is,
    and each placement's first column with the name of its check column (``#wrong`` or ``error``)."""
    known = tuple(c for c in columns if c not in ("timestamp",))
    starts = [i for i, c in enumerate(known) if c in _TIME_COLUMNS]
    placements = tuple(
        (placement, start, known[start + 3] if start + 3 < len(known) else "#wrong")
        for placement, start in zip(("out", "in"), starts, strict=False)
    )
    return known, known.index("root") if "root" in known else None, placements


def _row_records(tokens: list[str], columns: list[str], op: str) -> list[dict[str, Any]] | None:
    """The records of one table row, or None when ``tokens`` is not a whole row of this table."""
    known, root_at, placements = _layout(tuple(columns))
    if len(tokens) < len(known):
        return None
    if not all(is_digits(t) and len(t) <= 20 for t in tokens[:2]) or is_digits(tokens[2][0]):
        return None  # a 64-bit count has at most 20 digits; longer is not a row (nor safe to convert)
    size, count, dtype, redop = int(tokens[0]), int(tokens[1]), tokens[2], tokens[3]
    root = -1
    if root_at is not None:
        root_text = tokens[root_at]
        if not is_digits(root_text.lstrip("-")) or len(root_text) > 12:
            return None
        root = int(root_text)
    records = []
    for placement, start, column in placements:
        fields = tokens[start : start + 4]
        time_us, algbw, busbw = (_number(t) for t in fields[:3])
        if time_us is None or algbw is None or busbw is None:
            if all(t == "N/A" for t in fields[:3]) or "N/A" in fields[:1]:
                continue  # a placement the op does not have
            return None
        if min(time_us, algbw, busbw) < 0:
            return None  # no time or bandwidth is negative
        check = fields[3] if len(fields) > 3 else "N/A"
        record = CollectiveRecord(
            op=op,
            size_bytes=size,
            count=count,
            dtype=dtype,
            redop=redop,
            root=root,
            placement=placement,
            time_us=time_us,
            algbw_gbps=algbw,
            busbw_gbps=busbw,
            wrong=None,
        ).to_dict()
        if column == "error":  # the older format: the largest difference (%6.0e), nan where the check failed so
            value = _number(check)
            if value is not None and value >= 0:
                record["max_error"] = value
        elif check != "N/A":
            # nccl-tests prints the count with %g: 16,777,216 wrong elements read 1.67772e+07 (the rows that
            # matter most); a count that is no whole number from 0 to 2**63 (1e308, -5, a word) is no row
            wrong = _number(check)
            if wrong is None or not 0 <= wrong < 2**63 or not wrong.is_integer():
                return None
            record["wrong"] = int(wrong)
        records.append(record)
    return records


def _row_like(tokens: list[str]) -> bool:
    """Whether a line that is not a row of the table starts like one: a whole number (the size), something
    in the count's place, and a word in the type's (``float``, ``bfloat16``); an NCCL line stamped with epoch
    seconds, or the rest of a row another process's output cut in two, does not."""
    return len(tokens) >= 3 and is_digits(tokens[0]) and tokens[2][:1].isalpha()


def _unread_problem(section: _Section) -> str:
    """What the rows of a table that could not be read were: how many, and the first one with why."""
    text = section.unread_rows[0][1]
    known = _layout(tuple(section.columns))[0]
    tokens = text.split()
    if len(tokens) < len(known):
        why = f"{len(tokens)} fields where the header has {len(known)} columns"
    elif not all(is_digits(t) and len(t) <= 20 for t in tokens[:2]):
        why = "size and count must be whole numbers of at most 20 digits"
    else:
        why = "a root, time, bandwidth or count of wrong elements that is not a number (or is negative)"
    count = len(section.unread_rows)
    rows = "1 table row could not be read and was" if count == 1 else f"{count} table rows could not be read and were"
    return f"{section.op}: {rows} left out (the first: {why}: {quoted(text)})"


def _select_process(lines: Iterable[str]) -> tuple[list[str], list[str]]:
    """Lines of the one process whose table is kept; notes about the others."""
    tagged = [strip_prefix(line) for line in lines]
    printers = []
    for tag, text in tagged:
        if _header_columns(text) and tag not in printers:
            printers.append(tag)
    if len(printers) <= 1:
        keep = printers[0] if printers else None
        chosen = [text for tag, text in tagged if keep is None or tag in (keep, "")]
        return chosen, []
    keep = printers[0]
    notes = [
        f"{len(printers) - 1} other process(es) printed their own table and were left out "
        "(each process of a build without MPI runs alone)"
    ]
    return [text for tag, text in tagged if tag in (keep, "")], notes


Progress = Callable[[int, int], None]
"""Told ``(lines read, lines in all)`` as a long log is read."""
PROGRESS_EVERY = 20_000
"""Lines between two calls of a :data:`Progress` hook."""


def parse_text(text: str, *, source: str = "<log>", op: str | None = None, progress: Progress | None = None) -> Result:
    """A Result from the text output of nccl-tests (see the module docstring)."""
    lines, notes = _select_process(text.splitlines())
    sections: list[_Section] = []
    ranks: dict[int, dict[str, Any]] = {}
    env: dict[str, Any] = {"source": "nccl-tests"}
    errors: list[str] = []
    pending_op: str | None = None
    settings: dict[str, Any] = {}
    last_nonblank = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for index, raw in enumerate(lines):
        if progress is not None and index % PROGRESS_EVERY == 0:
            progress(index, len(lines))
        line = raw.strip()
        if not line:
            continue
        body = line.lstrip("#").strip()
        if match := _STARTING.search(body):
            pending_op = op_from_program(match.group(1)) or match.group(1)
            continue
        if match := _CONCLUDED.search(body):
            if sections:
                sections[-1].concluded = True
            continue
        if match := _VERSION.search(body):
            env["nccl_tests_version"] = match.group(1)
            if match.group(3):
                env["nccl_version_code"] = int(match.group(3))
            continue
        if _SETTINGS.search(body):
            settings = _settings(body)
            continue
        if device := parse_device_line(body):
            ranks.setdefault(device["rank"], device)
            continue
        if columns := _header_columns(line):
            sections.append(_Section(op=pending_op, columns=columns, settings=dict(settings)))
            pending_op = None
            continue
        if match := _OUT_OF_BOUNDS.search(body):
            if sections:
                sections[-1].out_of_bounds = int(match.group(1))
            continue
        if match := _AVG_BUSBW.search(body):
            if sections:
                sections[-1].avg_busbw = _number(match.group(1))
            continue
        if match := _ERROR.match(line):
            errors.append(match.group(1))
            continue
        if not line.startswith("#") and sections and sections[-1].avg_busbw is None:
            section = sections[-1]
            tokens = line.split()
            rows = _row_records(tokens, section.columns, section.op or "?")
            if rows is not None:
                section.records.extend(rows)
                section.rows_read_after = index
                continue
            if is_digits(tokens[0]) and index == last_nonblank:
                section.truncated_row = line
                continue
            if _row_like(tokens):
                section.unread_rows.append((index, line))
                continue
        if not line.startswith("#") and (match := _PROGRAM.search(line)):
            pending_op = match.group(1)  # a command line echoed before the output
    if not sections or (not any(s.records for s in sections) and not ranks):
        raise UsageError(
            f"{source}: not nccl-tests output (no '# size count type redop ... busbw' table header was found)"
        )
    return _result(sections, ranks, env, errors, notes, source=source, op=op)


def _name_ops(sections: list[_Section], *, source: str, op: str | None) -> None:
    fallback = op or guess_op(source)
    for section in sections:
        if section.op is None:
            if fallback is None:
                raise UsageError(
                    f"{source}: the log does not say which collective it measured "
                    "(no 'Collective test starting' or *_perf line): name it with --op"
                )
            section.op = fallback
        for record in section.records:
            record["op"] = section.op


def _result(
    sections: list[_Section],
    ranks: Mapping[int, dict[str, Any]],
    env: dict[str, Any],
    errors: list[str],
    notes: list[str],
    *,
    source: str,
    op: str | None,
) -> Result:
    _name_ops(sections, source=source, op=op)
    problems = []
    for section in sections:
        cut_at = section.unread_rows[-1] if section.unread_rows else None
        if (
            section.truncated_row is None
            and section.avg_busbw is None
            and cut_at
            and cut_at[0] > section.rows_read_after
        ):
            # the last row-like line of a table without its footer, after every row read: the log was cut
            # there (a launcher's message about the killed job may follow it)
            section.truncated_row = section.unread_rows.pop()[1]
        if section.truncated_row is not None:
            problems.append(f"{section.op}: the log ends inside a row ({quoted(section.truncated_row)})")
        elif section.avg_busbw is None:
            problems.append(f"{section.op}: the log ends before the table's footer")
        if section.unread_rows:
            problems.append(_unread_problem(section))
    records = [r for s in sections for r in s.records]
    summary: dict[str, Any] = {}
    for section in sections:
        entry = summary.setdefault(str(section.op), {})
        entry.update(op_summary([r for r in records if r["op"] == section.op]))
        if section.avg_busbw is not None:
            entry["nccl_tests_avg_busbw_gbps"] = section.avg_busbw
        if section.out_of_bounds is not None:
            entry["out_of_bounds"] = section.out_of_bounds
    if notes:
        summary["notes"] = notes
    ordered = [ranks[r] for r in sorted(ranks)]
    host: dict[str, Any] = {"hostname": ordered[0]["host"] if ordered else ""}
    if ordered:
        host["ranks"] = ordered
        host["hosts"] = list(dict.fromkeys(r["host"] for r in ordered))
        host["gpus"] = sorted({r["gpu"] for r in ordered if r.get("gpu")})
    config = {
        "source": "nccl-tests",
        "file": source,
        "ops": list(dict.fromkeys(str(s.op) for s in sections)),
        "tests": [{"op": s.op, **s.settings} for s in sections],
    }
    error = "; ".join([*problems, *errors]) or None
    return Result(
        kind=KIND,
        config=config,
        records=records,
        summary=summary,
        host=host,
        env=env,
        status="partial" if problems else "complete",
        error=error,
    )


# --- -J JSON ---------------------------------------------------------------------------------------


def _json_number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _number(str(value))
    if isinstance(value, str):
        return _number(value)
    return None


def _recover(text: str) -> dict[str, Any]:
    """What a -J file cut short (the run died) still holds: its settings and finished rows."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    for key in ("args", "env", "nccl_version", "config"):
        match = re.search(rf'"{key}"\s*:\s*', text)
        if match:
            with contextlib.suppress(ValueError, RecursionError):
                found[key] = decoder.raw_decode(text, match.end())[0]
    match = re.search(r'"results"\s*:\s*\[', text)
    results: list[Any] = []
    if match:
        position = match.end()
        while True:
            while position < len(text) and text[position] in " \t\r\n,":
                position += 1
            try:
                item, position = decoder.raw_decode(text, position)
            except (ValueError, RecursionError):
                break
            results.append(item)
    found["results"] = results
    return found


def parse_json(text: str, *, source: str = "<json>", op: str | None = None) -> Result:
    """A Result from the ``-J`` JSON file of nccl-tests (a cut-short file gives a partial Result)."""
    complete = True
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        data = _recover(text)
        complete = False
    except ValueError:  # an integer of thousands of digits
        raise UsageError(f"{source}: not nccl-tests -J output (a number too long to read)") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("results"), list)
        or (complete and "config" not in data and "nccl_version" not in data)
        or (not complete and "config" not in data and not data["results"])
    ):
        raise UsageError(f"{source}: not nccl-tests -J output (expected an object with 'config' and 'results')")
    args: list[Any] = data["args"] if isinstance(data.get("args"), list) else []
    name = op or (op_from_program(str(args[0])) if args else None) or guess_op(source)
    config: dict[str, Any] = data["config"] if isinstance(data.get("config"), dict) else {}
    records: list[dict[str, Any]] = []
    unread: dict[int, str] = {}
    """Why each result that could not be read was left out (the first reason), by its position."""
    for position, row in enumerate(data["results"]):
        if not isinstance(row, dict):
            unread[position] = f"results[{position}] is not an object"
            continue
        experiment = row.get("experiment_name")
        row_op = name or (op_from_program(str(experiment)) if experiment else None)
        if row_op is None:
            raise UsageError(f"{source}: the file does not say which collective it measured: name it with --op")
        for placement, key in (("out", "out_of_place"), ("in", "in_place")):
            part = row.get(key)
            if not isinstance(part, dict):
                continue
            time_us = _json_number(part.get("time", part.get("cpu_time")))
            algbw, busbw = _json_number(part.get("alg_bw")), _json_number(part.get("bus_bw"))
            if time_us is None or algbw is None or busbw is None or min(time_us, algbw, busbw) < 0:
                unread.setdefault(position, f"results[{position}].{key}: a time or bandwidth that is not a number >= 0")
                continue
            wrong = _json_number(part.get("nwrong"))
            if wrong is not None and wrong < 0:
                unread.setdefault(position, f"results[{position}].{key}: a negative count of wrong elements")
                continue
            if len(str(row.get("size"))) > 20 or len(str(row.get("count"))) > 20:
                unread.setdefault(position, f"results[{position}]: a size or count of more than 20 digits")
                continue
            try:
                record = CollectiveRecord(
                    op=row_op,
                    size_bytes=int(row["size"]),
                    count=int(row["count"]),
                    dtype=str(row["type"]),
                    redop=str(row["redop"]),
                    root=int(str(row.get("root", "-1")).strip() or -1),
                    placement=placement,
                    time_us=time_us,
                    algbw_gbps=algbw,
                    busbw_gbps=busbw,
                    wrong=None if wrong is None else int(wrong),
                )
            except (KeyError, TypeError, ValueError, OverflowError):  # int(1e400) overflows
                raise UsageError(
                    f"{source}: a result row needs a whole-number size and count, a type and a redop: {row!r:.120}"
                ) from None
            records.append(record.to_dict())
    devices: list[Any] = config["devices"] if isinstance(config.get("devices"), list) else []
    ranks = [
        {
            "rank": d.get("rank"),
            "group": d.get("group"),
            "pid": d.get("pid"),
            "host": d.get("hostname"),
            "device": d.get("device"),
            "bus_id": d.get("device_hex"),
            "gpu": d.get("device_info"),
        }
        for d in devices
        if isinstance(d, dict)
    ]
    host: dict[str, Any] = {"hostname": ranks[0]["host"] if ranks else ""}
    if ranks:
        host["ranks"] = ranks
        host["hosts"] = list(dict.fromkeys(str(r["host"]) for r in ranks))
        host["gpus"] = sorted({str(r["gpu"]) for r in ranks if r.get("gpu")})
    environment: list[Any] = data["env"] if isinstance(data.get("env"), list) else []
    nccl_env = {
        name: value
        for name, sep, value in (str(e).partition("=") for e in environment)
        if sep and name.startswith("NCCL_")
    }
    ops = list(dict.fromkeys(r["op"] for r in records)) or ([name] if name else [])
    summary: dict[str, Any] = {o: op_summary([r for r in records if r["op"] == o]) for o in ops}
    average = data.get("average_bus_bandwidth")
    if isinstance(average, dict) and len(ops) == 1:
        summary[ops[0]]["nccl_tests_avg_busbw_gbps"] = _json_number(average.get("bandwidth"))
    finished = complete and "end_time" in data
    problems = [] if finished else ["the JSON file ends before the run finished (no end_time)"]
    if unread:
        rows = (
            "1 result could not be read and was"
            if len(unread) == 1
            else f"{len(unread)} results could not be read and were"
        )
        problems.append(f"{rows} left out (the first: {next(iter(unread.values()))})")
    settings = {k: v for k, v in config.items() if k != "devices"}
    return Result(
        kind=KIND,
        config={
            "source": "nccl-tests -J",
            "file": source,
            "ops": ops,
            "args": args,
            "tests": [settings],
            # The writer's local time, without a zone: kept as written, never taken as UTC.
            "start_time_local": data.get("start_time"),
            "end_time_local": data.get("end_time"),
        },
        records=records,
        summary=summary,
        host=host,
        env={"source": "nccl-tests", "nccl_version_code": data.get("nccl_version"), "nccl_env": nccl_env},
        status="partial" if problems else "complete",
        error="; ".join(problems) or None,
    )


def parse(text: str, *, source: str = "<input>", op: str | None = None, progress: Progress | None = None) -> Result:
    """Text or ``-J`` JSON output, told apart by the first character (``progress`` hears how far a text
    log's reading is)."""
    if text.lstrip().startswith("{"):
        result = parse_json(text, source=source, op=op)
    else:
        result = parse_text(text, source=source, op=op, progress=progress)
    if not result.records:
        why = f" ({result.error})" if result.error else ""
        raise UsageError(
            f"{source}: nccl-tests output without one row measured{why}: nothing to import (leave this file out)"
        )
    return result
