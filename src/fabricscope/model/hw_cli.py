"""``fabricscope hw``: list the catalog and the presets, or show one entry with its sources.

Only the standard library is imported at import time; the catalog is read in ``run``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fabricscope.errors import UsageError, closest
from fabricscope.options import SubParsers
from fabricscope.shown import quoted

__all__ = ["add_parser", "run_hw"]


_HW_KINDS = {
    "gpu": "gpu",
    "gpus": "gpu",
    "nic": "nic",
    "nics": "nic",
    "transport": "transport",
    "transports": "transport",
    "pcie": "pcie",
    "link": "gpulink",
    "links": "gpulink",
    "nvlink": "gpulink",
    "gpulink": "gpulink",
    "storage": "storage",
    "cluster": "cluster",
    "clusters": "cluster",
    "model": "model",
    "models": "model",
    "scenario": "scenario",
    "scenarios": "scenario",
}


def add_parser(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "hw",
        help="list the hardware catalog, cluster and model presets; 'hw show NAME' for one entry",
        description="List and show the hardware catalog (every number with its source) and the presets.",
        epilog="kinds: gpus nics transports pcie links storage clusters models scenarios",
    )
    p.add_argument("words", nargs="*", metavar="KIND | show NAME", help="a kind to list, or 'show' and a name")
    p.set_defaults(func=run_hw)


def run_hw(args: argparse.Namespace) -> int:
    from fabricscope.model import hardware, report

    words = list(args.words)
    if words and words[0] == "show":
        if len(words) != 2:
            raise UsageError("usage: fabricscope hw show NAME (a GPU, NIC, transport, cluster, model... name)")
        _print(_show(words[1]))
        return 0
    if len(words) > 1:
        raise UsageError(f"give one kind to list, or 'show NAME'; got {quoted(' '.join(words))}")
    kinds = sorted(set(_HW_KINDS.values()), key=list(_HW_KINDS.values()).index)
    if words:
        key = words[0].strip().lower()
        if key not in _HW_KINDS:
            raise UsageError(
                f"unknown kind {quoted(words[0])}{closest(key, _HW_KINDS)}: use {', '.join(kinds)} or show NAME"
            )
        kinds = [_HW_KINDS[key]]
    lines: list[str] = []
    for kind in kinds:
        lines += report.listing_lines(kind, _listing(kind, hardware))
        lines.append("")
    _print(lines)
    return 0


def _listing(kind: str, hardware: Any) -> list[tuple[str, str]]:
    if kind == "cluster":
        from fabricscope.model.cluster import presets

        return list(presets().items())
    if kind == "model":
        from fabricscope.model.workload import model_presets

        return [(n, f"{m.kind}, {m.param_count / 1e9:.3g}B parameters") for n, m in model_presets().items()]
    if kind == "scenario":
        from fabricscope.model.planner import scenarios

        return [(n, s.description) for n, s in scenarios().items()]
    return [(name, entry.description) for name, entry in hardware.entries(kind).items()]


def _show(name: str) -> list[str]:
    from fabricscope.model import hardware, report
    from fabricscope.model.cluster import load_cluster, presets
    from fabricscope.model.planner import scenarios
    from fabricscope.model.workload import load_model, model_presets

    key = name.strip().lower()
    for kind in hardware.KINDS:
        table = hardware.entries(kind)
        if key in table:
            return [f"{kind} {key}:", *report.entry_lines(table[key])]
    if key in presets():
        name = key
        cluster = load_cluster(name)
        text = (hardware.catalog_dir() / "clusters" / f"{name}.toml").read_text(encoding="utf-8")
        # Every line above the preset's own text is a comment: `hw show NAME > mine.toml` is a cluster file to edit.
        return [
            f"# cluster {name} (catalog/clusters/{name}.toml):",
            *report.cluster_lines(cluster),
            "",
            text.rstrip(),
        ]
    if key in model_presets():
        return [f"model {key}:", *(f"  {field:<18} {value}" for field, value in load_model(key).shown())]
    if key in scenarios():
        return [f"scenario {key}:", *report.entry_lines(scenarios()[key])]
    every = [n for kind in hardware.KINDS for n in hardware.entries(kind)]
    every += [*presets(), *model_presets(), *scenarios()]
    raise UsageError(
        f"nothing called {quoted(name)} in the catalog{hardware.suggest(name, every)}: "
        "see 'fabricscope hw' for every name"
    )


def _print(lines: list[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")
