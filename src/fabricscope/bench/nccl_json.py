"""``bench -J FILE``: the run in the JSON layout nccl-tests' own ``-J`` writes.

Tools built around nccl-tests' JSON (its ``results`` rows with ``out_of_place`` and
``in_place`` parts, ``average_bus_bandwidth``, ``config.devices``) read a fabricscope
run as they read nccl-tests'; ``fabricscope import nccl-tests`` reads it back.  One
file holds every op of the run; each row names its op in ``experiment_name``
(``all_reduce_perf``), as a multi-test nccl-tests file does.  The layout is nccl-tests'
``src/util.cu`` JSON writer of 2025 (nccl-tests 2.17): ``version``, ``start_time``,
``args``, ``env``, ``nccl_version``, ``config`` (with ``devices``), ``results``,
``out_of_bounds``, ``average_bus_bandwidth``, ``end_time``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fabricscope import __version__
from fabricscope.results import Result
from fabricscope.table import op_summary, pair_rows

__all__ = ["to_nccl_tests_json"]


def _part(record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "time": record.get("time_us"),
        "alg_bw": record.get("algbw_gbps"),
        "bus_bw": record.get("busbw_gbps"),
        "nwrong": record.get("wrong") if record.get("wrong") is not None else "N/A",
    }


def to_nccl_tests_json(result: Result, *, min_busbw_gbps: float | None = None) -> dict[str, Any]:
    """nccl-tests' ``-J`` document for a bench Result (its rows, devices, average and verdicts)."""
    rows: list[dict[str, Any]] = []
    # One entry per printed row: -N cycles are rows of their own, as nccl-tests writes every cycle.
    for row in pair_rows(r for r in result.records if isinstance(r, dict) and "op" in r):
        first = row.out or row.inp
        assert first is not None  # a row holds at least the record that made it
        entry: dict[str, Any] = {
            "experiment_name": f"{first['op']}_perf",
            "size": row.size_bytes,
            "count": row.count,
            "type": row.dtype,
            "redop": row.redop,
            "root": -1 if row.root is None else row.root,
        }
        for record, name in ((row.out, "out_of_place"), (row.inp, "in_place")):
            if record is None:
                continue
            entry[name] = _part(record)
            samples = record.get("samples_us")
            if isinstance(samples, list):
                entry["actual_iterations"] = len(samples)
        rows.append(entry)
    host = result.host if isinstance(result.host, dict) else {}
    found = host.get("ranks")
    ranks: list[Any] = found if isinstance(found, list) else []
    devices = [
        {
            "rank": r.get("rank"),
            "group": 0,
            "pid": r.get("pid"),
            "hostname": r.get("host"),
            "device": r.get("device"),
        }
        for r in ranks
        if isinstance(r, dict)
    ]
    records = [r for r in result.records if isinstance(r, dict)]
    average = op_summary(records)["avg_busbw_gbps"] if records else 0.0
    wrong = sum(int(r.get("wrong") or 0) for r in records)
    env = result.env if isinstance(result.env, dict) else {}
    given = env.get("variables")
    config = result.config if isinstance(result.config, dict) else {}
    variables: dict[str, Any] = given if isinstance(given, dict) else {}
    return {
        "version": f"fabricscope {__version__}",
        "start_time": result.created,
        "args": [str(a) for a in result.config.get("argv", [])],
        "env": [f"{k}={v}" for k, v in variables.items()],
        "nccl_version": env.get("nccl", ""),
        "config": {
            # nccl-tests' keys (src/util.cu), in its order; its booleans are the strings "true"/"false".
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": config.get("min_bytes"),
            "maximum_bytes": config.get("max_bytes"),
            **(
                {"step_factor": config.get("step_factor")}
                if (config.get("step_factor") or 1) > 1
                else {"step_bytes": config.get("step_bytes")}
            ),
            "warmup_iters": config.get("warmup_iters"),
            "iterations": config.get("iters"),
            "aggregated_iterations": config.get("agg_iters", 1),
            "validation": config.get("check"),
            "graph": 0,
            "blocking_collectives": "true" if config.get("blocking") else "false",
            "per_iter_timing": "false",
            "per_iter_skip": 0,
            "parallel_init": "false",
            "backend": env.get("backend"),
            "nranks": len(ranks),
            "devices": devices,
        },
        "results": rows,
        "out_of_bounds": {"count": wrong, "okay": wrong == 0},
        "average_bus_bandwidth": {
            "bandwidth": average,
            "okay": min_busbw_gbps is None or average >= 0.9 * min_busbw_gbps,
        },
        "end_time": datetime.now(UTC).isoformat(timespec="seconds"),
    }
