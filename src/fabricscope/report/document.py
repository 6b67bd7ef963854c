"""The report: plots and tables for a set of runs, as one self-contained HTML file.

Everything is inline: the plots are ``<svg>`` elements, the style is one
``<style>`` block, there is no script, font, image or link the browser would
fetch.  :func:`build` decides what to show from each Result's kind;
:func:`to_html` and :func:`write_pngs` render it.
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fabricscope import __version__
from fabricscope.report import plots
from fabricscope.results import Result

__all__ = ["Report", "Table", "build", "png_names", "to_html", "write_pngs"]

_COLLECTIVE_KINDS = ("bench", "nccl-tests", "predict")


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass(slots=True)
class Report:
    title: str
    plots: list[plots.Plot] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _hosts(result: Result) -> str:
    host = result.host if isinstance(result.host, dict) else {}
    ranks = host.get("ranks")
    names = [str(r.get("host")) for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else []
    names = list(dict.fromkeys(n for n in names if n and n != "None")) or [str(host.get("hostname") or "-")]
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def _runs_table(runs: Sequence[tuple[str, Result]]) -> Table:
    rows = []
    for label, result in runs:
        host = result.host if isinstance(result.host, dict) else {}
        ranks = host.get("ranks")
        rows.append(
            [
                label,
                result.kind,
                result.created,
                result.status + (f": {result.error}" if result.error else ""),
                _hosts(result),
                str(len(ranks)) if isinstance(ranks, list) and ranks else "-",
            ]
        )
    return Table("runs", "Runs", ["run", "kind", "created", "status", "hosts", "ranks"], rows)


def _peaks_table(series: Sequence[plots.Series]) -> Table | None:
    rows = []
    for s in series:
        best: dict[str, dict[str, Any]] = {}
        for r in s.result.records:
            if not (isinstance(r, dict) and isinstance(r.get("busbw_gbps"), int | float) and "op" in r):
                continue
            if r["op"] not in best or r["busbw_gbps"] > best[r["op"]]["busbw_gbps"]:
                best[r["op"]] = r
        for op, r in best.items():
            rows.append([s.label, s.role, op, f"{r['busbw_gbps']:.2f}", str(r["size_bytes"]), str(r.get("placement"))])
    if not rows:
        return None
    return Table("peaks", "Peak bus bandwidth", ["run", "role", "op", "busbw GB/s", "at size (B)", "placement"], rows)


def _against_prediction_table(run: tuple[str, Result], prediction: tuple[str, Result]) -> Table | None:
    """Per op and size, the run's out-of-place time beside the prediction's (its first datatype)."""
    label, result = run

    def times(records: list[Any]) -> dict[tuple[str, int], float]:
        found: dict[tuple[str, int], float] = {}
        rows = [r for r in records if isinstance(r, dict) and r.get("placement", "out") == "out"]
        dtype = next((r.get("dtype") for r in rows), None)
        for r in rows:
            t = r.get("time_us")
            if r.get("dtype") == dtype and isinstance(t, int | float) and not isinstance(t, bool) and t > 0:
                found.setdefault((str(r.get("op")), int(r.get("size_bytes") or 0)), float(t))
        return found

    measured, predicted = times(result.records), times(prediction[1].records)
    rows = [
        [op, str(size), f"{t:.6g}", f"{predicted[(op, size)]:.6g}", f"{predicted[(op, size)] / t:.3f}"]
        for (op, size), t in measured.items()
        if (op, size) in predicted
    ]
    if not rows:
        return None
    own = "this prediction" if result.kind == "predict" else "measured"  # a prediction against another one
    return Table(
        "against-prediction",
        f"{label} against the prediction {prediction[0]} (out-of-place time)",
        ["op", "size (B)", f"{own} (us)", "predicted (us)", f"predicted / {own}"],
        rows,
    )


def _findings_table(index: int, label: str, result: Result) -> Table:
    rows = []
    for r in result.records:
        if isinstance(r, dict):
            rows.append(
                [
                    str(r.get("severity", "")),
                    str(r.get("node", "")),
                    str(r.get("id", "")),
                    str(r.get("subject", "")),
                    str(r.get("observed", "")),
                    str(r.get("expected", "")),
                    str(r.get("advice", "")),
                ]
            )
    verdict = result.summary.get("verdict") if isinstance(result.summary, dict) else None
    return Table(
        f"findings-{index}",
        f"{label}: doctor findings" + (f" (verdict {verdict})" if verdict else ""),
        ["severity", "node", "check", "subject", "observed", "expected", "advice"],
        rows,
    )


def _estimate_table(runs: Sequence[tuple[str, Result]]) -> Table | None:
    rows = []
    for label, result in runs:
        for r in result.records:
            if isinstance(r, dict) and "step_time_s" in r:
                rows.append(
                    [
                        label,
                        str(r.get("model", "")),
                        str(r.get("cluster", "")),
                        f"{float(r['step_time_s']):.4g}",
                        str(r.get("bottleneck", "")),
                        f"{float(r.get('gpu_utilization') or 0) * 100:.1f}%",
                    ]
                )
    if not rows:
        return None
    return Table("estimates", "Estimates", ["run", "model", "cluster", "step (s)", "bottleneck", "GPU use"], rows)


def _compare_table(index: int, label: str, result: Result) -> Table:
    """The rows a compare result judged regressed or improved (all of them when none was)."""
    rows = [r for r in result.records if isinstance(r, dict)]
    marked = [r for r in rows if r.get("verdict") in ("regressed", "improved")] or rows
    config = result.config if isinstance(result.config, dict) else {}
    summary = result.summary if isinstance(result.summary, dict) else {}
    body = []
    for r in marked:
        p_value = r.get("p_value")
        body.append(
            [
                str(r.get("op", "")),
                str(r.get("size_bytes", "")),
                str(r.get("placement", "")),
                str(r.get("metric", "")),
                _number(r.get("reference")),
                _number(r.get("current")),
                f"{100 * r['change']:+.1f}%" if isinstance(r.get("change"), int | float) else "-",
                f"{p_value:.3g}" if isinstance(p_value, int | float) else "-",
                "fail" if r.get("verdict") == "regressed" else str(r.get("verdict", "")),
            ]
        )
    return Table(
        f"compare-{index}",
        f"{label}: {config.get('current', 'current')} against {config.get('reference', 'reference')} "
        f"(verdict {summary.get('verdict', '-')}; 'fail' marks a regression)",
        ["op", "size (B)", "placement", "metric", "reference", "current", "change", "p-value", "verdict"],
        body,
    )


def _number(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _percent(value: object) -> float | None:
    return 100 * value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mb(value: object) -> float | None:
    return value / 1e6 if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dataload_table(index: int, label: str, result: Result) -> Table:
    """A dataload result's rate against what training needs."""
    summary = result.summary if isinstance(result.summary, dict) else {}
    verdict = summary.get("verdict") if isinstance(summary.get("verdict"), dict) else {}
    rows = [
        ["path", str(summary.get("path", "-"))],
        ["read", f"{_number(summary.get('bytes'))} bytes in {_number(summary.get('seconds'))} s"],
        ["rate", f"{_number(_mb(summary.get('bytes_per_s')))} MB/s, {_number(summary.get('files_per_s'))} files/s"],
    ]
    if verdict:
        rows += [
            ["training needs", f"{_number(_mb(verdict.get('needed_bytes_per_s')))} MB/s"],
            ["measured / needed", _number(verdict.get("ratio"))],
            ["GPUs would wait", f"{_number(_percent(verdict.get('gpu_wait_fraction')))}% of the time"],
            ["verdict", "fail" if verdict.get("starves") else "keeps up"],
        ]
    notes = summary.get("notes")
    rows += [["note", note] for note in (notes if isinstance(notes, list) else []) if isinstance(note, str)]
    return Table(f"dataload-{index}", f"{label}: data loading", ["", "value"], rows)


def build(
    runs: Sequence[tuple[str, Result]],
    *,
    baseline: tuple[str, Result] | None = None,
    prediction: tuple[str, Result] | None = None,
    peak_gbps: float | None = None,
) -> Report:
    """What to show for ``runs`` (label, Result), with a baseline and a prediction overlaid on the collective plots."""
    report = Report(title="fabricscope report: " + ", ".join(label for label, _ in runs))
    report.tables.append(_runs_table(runs))
    series = [plots.Series(label, result) for label, result in runs if result.kind in _COLLECTIVE_KINDS]
    if series:
        if baseline is not None:
            series.append(plots.Series(f"baseline {baseline[0]}", baseline[1], role="baseline"))
        if prediction is not None:
            series.append(plots.Series(f"prediction {prediction[0]}", prediction[1], role="prediction"))
        report.plots.extend(plots.busbw_plots(series, peak_gbps=peak_gbps))
        report.plots.extend(plots.latency_plots(series))
        peaks = _peaks_table(series)
        if peaks is not None:
            report.tables.append(peaks)
        if prediction is not None:
            measured = next((run for run in runs if run[1].kind in _COLLECTIVE_KINDS), None)
            against = _against_prediction_table(measured, prediction) if measured is not None else None
            if against is not None:
                report.tables.append(against)
    elif baseline is not None or prediction is not None:
        report.notes.append("the baseline and prediction are drawn over collective runs; none was given")
    estimates = [(label, result) for label, result in runs if result.kind == "estimate"]
    breakdown = plots.breakdown_plot(estimates)
    if breakdown is not None:
        report.plots.append(breakdown)
    table = _estimate_table(estimates)
    if table is not None:
        report.tables.append(table)
    for index, (label, result) in enumerate(runs):
        if result.kind == "doctor":
            report.tables.append(_findings_table(index, label, result))
        if result.kind == "compare":
            report.plots.extend(plots.compare_plots(label, result))
            report.tables.append(_compare_table(index, label, result))
        if result.kind == "dataload":
            drawn = plots.dataload_plot(label, result)
            if drawn is not None:
                report.plots.append(drawn)
            report.tables.append(_dataload_table(index, label, result))
        report.plots.extend(plots.heatmap_plots(label, result))
        if result.kind == "monitor":
            series_plot = plots.timeseries_plot(label, result)
            if series_plot is not None:
                report.plots.append(series_plot)
    return report


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; background: #fff; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f3f7; }
td.fail { background: #fbe3e3; } td.warn { background: #fdf3d8; }
figure.plot { margin: 1em 0 2em; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { font-weight: 600; margin-bottom: 0.3em; }
footer { margin-top: 3em; font-size: 0.8em; color: #666; }
"""


def _table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows:
        cells = []
        for cell in row:
            css = f' class="{cell}"' if cell in ("fail", "warn") else ""
            cells.append(f"<td{css}>{html.escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<section class="table" id="table-{html.escape(table.name)}"><h2>{html.escape(table.title)}</h2>'
        f'<table data-name="{html.escape(table.name)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def to_html(report: Report) -> str:
    """The whole report as one HTML document with nothing to fetch."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(report.title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
    ]
    parts.extend(f'<p class="note">{html.escape(note)}</p>' for note in report.notes)
    if report.tables:
        parts.append(_table_html(report.tables[0]))
    for plot in report.plots:
        parts.append(
            f'<figure class="plot" id="plot-{html.escape(plot.name)}" data-name="{html.escape(plot.name)}">'
            f"<figcaption>{html.escape(plot.title)}</figcaption>{plots.svg_of(plot.figure)}</figure>"
        )
    parts.extend(_table_html(table) for table in report.tables[1:])
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    parts.append(
        f"<footer>fabricscope {html.escape(__version__)}, {stamp}. GB/s = 1e9 bytes per second; busbw as nccl-tests "
        "defines it.</footer></body></html>"
    )
    return "\n".join(parts) + "\n"


def png_names(report: Report) -> list[str]:
    """The file names :func:`write_pngs` gives the report's plots."""
    return [f"{plot.name}.png" for plot in report.plots]


def write_pngs(report: Report, folder: str) -> list[str]:
    """Each plot as ``folder/<name>.png``, each written whole or not at all; returns the paths."""
    from fabricscope.outputs import atomic_write_bytes

    os.makedirs(folder, exist_ok=True)
    written = []
    for plot, name in zip(report.plots, png_names(report), strict=True):
        path = os.path.join(folder, name)
        image = io.BytesIO()
        plot.figure.savefig(image, format="png", dpi=110, bbox_inches="tight")
        atomic_write_bytes(path, image.getvalue())
        written.append(path)
    return written
