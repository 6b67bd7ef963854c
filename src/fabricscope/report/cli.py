"""``fabricscope report``: one self-contained HTML file with plots and tables for a set of runs.

Parse, call the library, write.  Only the standard library is imported at
import time; matplotlib and the store are imported by :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fabricscope import ops, options
from fabricscope.errors import UsageError
from fabricscope.options import SubParsers

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


def add_parser(subparsers: SubParsers) -> None:
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


def model_prediction(cluster: str, like: Any) -> tuple[Any, float]:
    """The model's prediction of ``like``'s ops and sizes on ``cluster``
    (:func:`fabricscope.model.predict.predict_like`: the prediction ``fabricscope predict`` prints,
    a calibrated cluster's ``[calibration]`` terms included), and the priced cluster's link peak (GB/s)."""
    from fabricscope.model.cluster import load_cluster
    from fabricscope.model.fabric import link_peak_gbps
    from fabricscope.model.predict import predict_like

    prediction = predict_like(load_cluster(cluster), like)
    return prediction.result(), link_peak_gbps(prediction.cluster)


def _legend(found: Any) -> str:
    """What a plot's legend calls a run: its history label where it has one (``run 7 (week48)``), else
    its file name or id."""
    if found.run_id is None:
        return str(found.source)
    from fabricscope.store.history import History

    with History(create=False) as history:
        label = history.entry(found.run_id).label
    return f"{found.source} ({label})" if label else str(found.source)


def run(args: argparse.Namespace) -> int:
    from fabricscope.outputs import check_output_folder, check_outputs
    from fabricscope.store import baselines, runs
    from fabricscope.store.history import History

    inputs = list(args.runs) + ([args.predict] if args.predict else [])
    check_outputs([("-o", args.output)], inputs=inputs)
    if args.png is not None and os.path.lexists(args.png):
        # a folder there now; one to make is made once the inputs are read (a bad input leaves nothing behind),
        # and its files are checked once the report knows its plots
        check_output_folder("--png", args.png, files=[], make=False, what="the PNG files")
    peak = args.peak / 8e9 if args.peak is not None else None
    loaded = []
    for text in args.runs:
        found = runs.resolve(text)
        loaded.append((_legend(found), found.result))
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
            collective = [(name, r) for name, r in loaded if r.kind in runs.COLLECTIVE_KINDS]
            if not collective:
                raise UsageError("--predict draws over bench, nccl-tests or predict runs; none was given")
            like_name, like = collective[0]
            result, model_peak = model_prediction(args.predict, like)
            if not result.records:  # said, not drawn as nothing
                shown = sorted({str(r.get("op")) for r in like.records if isinstance(r, dict)}) or ["no rows"]
                raise UsageError(
                    f"--predict {args.predict}: nothing to price for {like_name} ({', '.join(shown)}): the model "
                    f"prices {', '.join(name for name in ops.COLLECTIVES if ops.get(name).modelled)}"
                )
            prediction = (args.predict, result)
            peak = peak if peak is not None else model_peak
    from fabricscope.outputs import atomic_write_text, say_written
    from fabricscope.report import document

    report = document.build(loaded, baseline=baseline, prediction=prediction, peak_gbps=peak)
    if args.png is not None:
        check_output_folder(
            "--png",
            args.png,
            files=document.png_names(report),
            make=True,
            what="the PNG files",
            inputs=inputs,
            outputs=[("-o", args.output)],
        )
    atomic_write_text(args.output, document.to_html(report))
    say_written(args.output, f"{len(report.plots)} plots, {len(report.tables)} tables")
    if args.png is not None:
        written = document.write_pngs(report, args.png)
        sys.stderr.write(f"wrote {len(written)} PNG files in {args.png}\n")
    return 0
