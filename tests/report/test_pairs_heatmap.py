"""A pairs result in the report: the bandwidth and the latency matrix, each the one ``pairs`` printed."""

import math
import re

from fabricscope.report import document, plots
from fabricscope.results import Result, load
from helpers import run_cli


def _printed(stdout: str) -> dict[str, dict[tuple[int, int], str]]:
    """test -> (src, dst) -> the cell's text, from the matrices ``pairs`` printed."""
    found: dict[str, dict[tuple[int, int], str]] = {}
    current = None
    columns: list[int] = []
    for line in stdout.splitlines():
        head = re.match(r"(bandwidth|latency): ", line)
        if head:
            current, columns = head.group(1), []
            found[current] = {}
            continue
        cells = [c.strip() for c in line.strip("│┃ ").split("│" if "│" in line else "┃")]
        if current and line.startswith("┃") and cells[0].startswith("from"):
            columns = [int(c) for c in cells[1:]]
        elif current and line.startswith("│") and columns:
            for dst, text in zip(columns, cells[1:], strict=True):
                if text != "-":
                    found[current][(int(cells[0]), dst)] = text.rstrip("*")
    return found


def test_the_heatmaps_show_the_matrices_pairs_printed(tmp_path) -> None:
    out = tmp_path / "p.json"
    done = run_cli(["pairs", "--nproc", "3", "--size", "256K", "-n", "3", "--json", str(out)], timeout=300)
    assert done.returncode == 0, done.stderr
    printed = _printed(done.stdout)
    assert set(printed) == {"bandwidth", "latency"} and all(len(cells) == 6 for cells in printed.values())
    result = load(str(out))
    drawn = {p.name: p for p in plots.heatmap_plots("p", result)}
    assert set(drawn) == {"pairs-p", "pairs-p-latency"}
    for name, test, fmt in (("pairs-p", "bandwidth", "{:.3g}"), ("pairs-p-latency", "latency", "{:.1f}")):
        grid = drawn[name].figure.axes[0].images[0].get_array().filled(math.nan)
        for (src, dst), text in printed[test].items():
            assert fmt.format(float(grid[src][dst])) == text, (test, src, dst)
        assert all(math.isnan(float(grid[i][i])) for i in range(3))
    # The 8-byte latency records are not drawn as bandwidth: the brightest bandwidth cell is a
    # 256 KiB transfer's rate, far above 8 B / latency.
    bandwidth = drawn["pairs-p"].figure.axes[0].images[0].get_array().filled(math.nan)
    assert max(v for row in bandwidth.tolist() for v in row if v == v) > 1e-3
    # And the whole report draws both.
    report = document.build([("p", result)])
    assert {"pairs-p", "pairs-p-latency"} <= {p.name for p in report.plots}


def test_records_without_a_test_field_are_a_bandwidth_matrix() -> None:
    records = [{"src": a, "dst": b, "algbw_gbps": 1.0 + a + b, "time_us": 5.0} for a in range(2) for b in range(2)]
    drawn = plots.heatmap_plots("x", Result(kind="pairs", records=records))
    assert [p.name for p in drawn] == ["pairs-x"]


def test_a_large_pairs_matrix_labels_at_most_max_ticks_ranks() -> None:
    # 600 ranks: every rank's label on both axes made the heatmap unreadable and most of the report's
    # time; every k-th rank is labelled instead, the matrix itself keeps every cell.
    from fabricscope.report import plots
    from fabricscope.results import Result

    n = 600
    records = [
        {"src": f"r{a}", "dst": f"r{b}", "algbw_gbps": 1.0 + a, "time_us": 5.0, "size_bytes": 1 << 20}
        for a in range(n)
        for b in range(n)
        if a != b
    ]
    (drawn,) = plots.heatmap_plots("big", Result(kind="pairs", records=records))
    axes = drawn.figure.axes[0]
    assert 1 < len(axes.get_xticks()) <= plots.MAX_TICKS and len(axes.get_yticks()) <= plots.MAX_TICKS
    image = axes.get_images()[0].get_array()
    assert image.shape == (n, n) and float(image.max()) == float(n) and float(image.min()) == 1.0
