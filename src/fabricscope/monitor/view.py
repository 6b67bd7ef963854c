"""What people read: the live table (rich), plain lines when stdout is not a terminal, and the summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["live_table", "plain_lines", "summary_lines"]

_PROBLEM = "bold red"


def _gbit(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _events(counts: dict[str, int]) -> str:
    return " ".join(f"+{v} {k}" for k, v in sorted(counts.items()))


def _active(record: dict[str, Any]) -> bool:
    moving = bool(record.get("rx_bytes") or record.get("tx_bytes"))
    return moving or bool(record.get("errors")) or (record.get("link_up") is False and record.get("kind") == "rdma")


def plain_lines(records: list[dict[str, Any]]) -> list[str]:
    """One line per port that moved data or had a problem in the interval, one for TCP, one per GPU."""
    lines = []
    for r in records:
        stamp = datetime.fromisoformat(r["time"]).strftime("%H:%M:%S")
        kind = r.get("kind")
        if kind in ("net", "rdma") and _active(r):
            text = (
                f"{stamp} {r['label']:<14} rx {_gbit(r['rx_gbit_per_s'])} Gb/s  tx {_gbit(r['tx_gbit_per_s'])} Gb/s"
                f"  line rate {_share(r['utilization'])}"
            )
            extra = _events({**r.get("errors", {}), **r.get("congestion", {})})
            if r.get("link_up") is False:
                extra = f"link {r.get('link_state')} {extra}".strip()
            lines.append(f"{text}  {extra}".rstrip())
        elif kind == "tcp" and r.get("out_segs"):
            ratio = r.get("retrans_ratio")
            lines.append(
                f"{stamp} {'tcp':<14} {r['out_segs']} segments sent, {r['retrans_segs']} retransmitted"
                f" (ratio {ratio:.2e})"
                if ratio is not None
                else f"{stamp} tcp"
            )
        elif kind == "gpu" and r.get("utilization_pct") is not None:
            lines.append(f"{stamp} {r['label']:<14} utilization {r['utilization_pct']:.0f}%")
    return lines


def live_table(records: list[dict[str, Any]], notes: list[str], *, retrans_threshold: float) -> Any:
    """A rich renderable: one row per interface and RDMA port, TCP and GPUs below, problems in red."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="fabricscope monitor", expand=False)
    for column, justify in (
        ("port", "left"),
        ("link", "left"),
        ("rx Gb/s", "right"),
        ("tx Gb/s", "right"),
        ("line rate", "right"),
        ("errors / congestion", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in records:
        if r.get("kind") not in ("net", "rdma"):
            continue
        speed = r.get("link_speed_gbit_per_s")
        link = f"{r.get('link_state') or '?'} {speed:g}G" if speed else str(r.get("link_state") or "?")
        errors = r.get("errors") or {}
        util = r.get("utilization")
        style = _PROBLEM if errors or r.get("link_up") is False else ("yellow" if util and util >= 0.9 else "")
        table.add_row(
            r["label"],
            link,
            _gbit(r.get("rx_gbit_per_s")),
            _gbit(r.get("tx_gbit_per_s")),
            _share(util),
            _events({**errors, **(r.get("congestion") or {})}),
            style=style,
        )
    parts: list[Any] = [table]
    for r in records:
        if r.get("kind") == "tcp":
            ratio = r.get("retrans_ratio")
            text = f"TCP: {r.get('out_segs', 0)} segments sent, {r.get('retrans_segs', 0)} retransmitted"
            if ratio is not None:
                text += f" (ratio {ratio:.2e})"
            parts.append(Text(text, style=_PROBLEM if ratio and ratio > retrans_threshold else ""))
        elif r.get("kind") == "gpu" and r.get("utilization_pct") is not None:
            parts.append(Text(f"{r['label']}: utilization {r['utilization_pct']:.0f}%"))
    parts += [Text(f"note: {n}", style="dim") for n in notes[-5:]]
    return Group(*parts)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The end-of-run summary: a line per port that moved data or had problems, TCP, GPUs and the verdict."""
    lines = [f"fabricscope monitor: {summary['intervals']} intervals over {summary['seconds']:g} s"]
    header = (
        f"  {'port':<14} {'rx mean':>10} {'tx mean':>10} {'rx peak':>10} {'tx peak':>10} {'line rate':>14}"
        f" {'moved rx+tx':>12}  problems"
    )
    rows = []
    for p in summary["ports"]:
        if not (p["rx_bytes"] or p["tx_bytes"] or p["errors"] or p["down_seconds"]):
            continue
        share = "-"
        if p["utilization_mean"] is not None:
            share = f"{p['utilization_mean']:.0%}/{(p['utilization_peak'] or 0):.0%} of {p['link_speed_gbit_per_s']:g}G"
        moved = (p["rx_bytes"] + p["tx_bytes"]) / 1e9
        problems = _events(p["errors"])
        if p["down_seconds"]:
            problems = f"down {p['down_seconds']:g} s {problems}".strip()
        rows.append(
            f"  {p['label']:<14} {p['rx_gbit_per_s_mean']:>10.3f} {p['tx_gbit_per_s_mean']:>10.3f}"
            f" {p['rx_gbit_per_s_peak']:>10.3f} {p['tx_gbit_per_s_peak']:>10.3f} {share:>14} {moved:>9.3f} GB"
            f"  {problems}".rstrip()
        )
    if rows:
        lines += ["  (Gb/s; line rate: mean/peak share)", header, *rows]
    else:
        lines.append("  no interface moved data")
    tcp = summary["tcp"]
    if tcp["out_segs"]:
        ratio = tcp["retrans_ratio"]
        lines.append(
            f"  tcp: {tcp['out_segs']} segments sent, {tcp['retrans_segs']} retransmitted"
            f" (ratio {ratio:.2e}), {tcp['timeouts']} timeouts"
        )
    for label, gpu in summary["gpus"].items():
        lines.append(
            f"  {label}: utilization {gpu['utilization_pct_mean']:.0f}% mean, {gpu['utilization_pct_peak']:.0f}% peak"
        )
    lines.append(f"verdict: {summary['verdict']}")
    return lines
