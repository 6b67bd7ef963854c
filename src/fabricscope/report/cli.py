"""``fabricscope report``: one self-contained HTML file with plots and tables for a set of runs.

Parse, call the library, write.  Only the standard library is imported at
import time; matplotlib and the store are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fabricscope import options

__all__ = ["add_parser", "model_prediction", "run"]

_EPILOG = """\
What is drawn follows each run's kind: busbw against size (log axis) and small-message latency
for bench, nccl-tests and predict results, with the baseline, the model's prediction and the
link's theoretical peak overlaid; the step-time breakdown for estimate results; the pairwise
heatmap for results with src/dst records; traffic over time for monitor results; the findings
table for doctor results.  The file holds everything (SVG inline): it opens offline.

examples:
  fabricscope report 12 13 -o week48.html
  fabricscope report bench.json --baseline h100-ndr --predict dgx-h100-ndr -o report.html
  fabricscope report bench.json --peak 400Gb/s --png plots/ -o report.html
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="an HTML report with plots of runs, a baseline and a prediction",
        description="Write one self-contained HTML file (plots inlined as SVG) for the runs given.",
        epilog=_EPILOG,
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="history ids or result files")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    parser.add_argument("--baseline", default=None, metavar="NAME", help="overlay this baseline")
    parser.add_argument(
        "--predict",
        default=None,
        metavar="CLUSTER",
        help="overlay the model's prediction for this cluster preset or TOML file (or a predict RUN)",
    )
    parser.add_argument(
        "--peak", default=None, type=options.rate(), metavar="RATE", help="the link's theoretical peak: 400Gb/s, 50GB/s"
    )
    parser.add_argument("--png", default=None, metavar="DIR", help="also write each plot as DIR/<name>.png")
    parser.set_defaults(func=run)


def _usage(message: str) -> Exception:
    from fabricscope.errors import UsageError

    return UsageError(message)


def model_prediction(cluster: str, like: Any) -> tuple[Any, float]:
    """The model's prediction of ``like``'s ops and sizes on ``cluster``, and its link peak (GB/s).

    The one place where the report uses the model's library: ``predict_op`` per op,
    on the cluster resized to ``like``'s rank count when it divides into nodes.
    """
    from fabricscope import ops
    from fabricscope.model.cluster import load_cluster
    from fabricscope.model.fabric import fabric_of
    from fabricscope.model.predict import predict_op
    from fabricscope.results import Result

    spec = load_cluster(cluster)
    ranks = like.host.get("ranks") if isinstance(like.host, dict) else None
    if isinstance(ranks, list) and ranks and len(ranks) % spec.gpus_per_node == 0:
        spec = spec.with_nodes(max(1, len(ranks) // spec.gpus_per_node))
    fab = fabric_of(spec)
    records: list[dict[str, Any]] = []
    rows = [r for r in like.records if isinstance(r, dict) and "op" in r and "size_bytes" in r]
    for name in dict.fromkeys(str(r["op"]) for r in rows):
        if name not in ops.COLLECTIVES:
            continue
        mine = [r for r in rows if r["op"] == name]
        prediction = predict_op(
            ops.get(name),
            fab,
            sizes=sorted({int(r["size_bytes"]) for r in mine}),
            dtypes=[str(mine[0].get("dtype", "float"))],
            redops=[str(mine[0].get("redop", "sum"))] if mine[0].get("redop") not in (None, "none") else ["sum"],
            root=max(0, int(mine[0].get("root", 0))),
            gpus_per_node=spec.gpus_per_node,
            nodes=spec.nodes,
        )
        records.extend(r.to_dict() for r in prediction.records)
    inside = float(fab.intra_gbps)
    peak = inside if spec.nodes == 1 else min(inside, float(fab.node_net_gbps) / spec.gpus_per_node)
    result = Result(kind="predict", config={"cluster": spec.name, "nodes": spec.nodes}, records=records)
    return result, peak


def run(args: argparse.Namespace) -> int:
    from fabricscope.results import check_output_path
    from fabricscope.store import baselines, runs
    from fabricscope.store.history import History

    inputs = list(args.runs) + ([args.predict] if args.predict else [])
    runs.check_outputs([("-o", args.output)], inputs)
    if args.png is not None:
        if os.path.lexists(args.png) and not os.path.isdir(args.png):
            raise _usage(f"--png {args.png} exists and is not a folder: give a folder for the PNG files")
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.png))):
            raise _usage(f"--png {args.png}: its parent folder does not exist")
        if os.path.isdir(args.png):
            check_output_path("--png", os.path.join(args.png, "plot.png"))
    peak = args.peak / 8e9 if args.peak is not None else None
    loaded = []
    for text in args.runs:
        found = runs.resolve(text)
        loaded.append((found.source, found.result))
    baseline = None
    if args.baseline is not None:
        with History(create=False) as history:
            chosen = baselines.get(history, args.baseline)
        baseline = (args.baseline, chosen.result)
    prediction = None
    if args.predict is not None:
        if args.predict.endswith(".json") or runs.parse_run_id(args.predict) is not None:
            found = runs.resolve(args.predict, kinds=["predict"], what="--predict")
            prediction = (found.source, found.result)
        else:
            collective = [r for _, r in loaded if r.kind in runs.COLLECTIVE_KINDS]
            if not collective:
                raise _usage("--predict draws over bench, nccl-tests or predict runs; none was given")
            result, model_peak = model_prediction(args.predict, collective[0])
            prediction = (args.predict, result)
            peak = peak if peak is not None else model_peak
    from fabricscope.report import document
    from fabricscope.results import atomic_write_text

    report = document.build(loaded, baseline=baseline, prediction=prediction, peak_gbps=peak)
    atomic_write_text(args.output, document.to_html(report))
    sys.stderr.write(f"wrote {args.output}: {len(report.plots)} plots, {len(report.tables)} tables\n")
    if args.png is not None:
        written = document.write_pngs(report, args.png)
        sys.stderr.write(f"wrote {len(written)} PNG files in {args.png}\n")
    return 0
