"""A pairs result in the report: the bandwidth and the latency matrix, each the one ``pairs`` printed."""

import math
import re

import pytest

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


def test_a_compare_of_two_datatypes_draws_one_line_per_placement() -> None:
    # compare rows of float and half at the same sizes: each line is one datatype's, one point per size
    # (mixed, the line zigzagged between the two at every size); a busbw 1% lower is drawn 1% worse.
    from fabricscope.report import plots
    from fabricscope.results import Result

    fixed = dict(op="all_reduce", redop="sum", placement="out", metric="busbw_gbps", verdict="within tolerance")
    rows = [
        dict(fixed, size_bytes=s, dtype=d, change=c)
        for s in (1 << 20, 1 << 22)
        for d, c in (("float", -0.01), ("half", 0.5))
    ]
    (drawn,) = plots.compare_plots("c", Result(kind="compare", config={"tolerance": 0.05}, records=rows))
    [line] = [ln for ln in drawn.figure.axes[0].get_lines() if ln.get_label() == "out-of-place"]
    assert list(line.get_xdata()) == [1 << 20, 1 << 22] and list(line.get_ydata()) == [1.0, 1.0]


def test_compare_and_dataload_results_of_the_wrong_types_are_drawn_from_what_is_right() -> None:
    # Result files are user files: a pass that is text, notes that are a number, a list as a datatype,
    # a change of 1e308 must not crash the report (both did before), only leave those values out.
    from fabricscope.report import document
    from fabricscope.results import Result

    dataload = Result(
        kind="dataload",
        records=[{"pass": "x", "bytes_per_s": 5e8}, {"pass": [1], "bytes_per_s": True}, {"bytes_per_s": 1e308}],
        summary={
            "notes": 5,
            "bytes_per_s": "fast",
            "verdict": {"needed_bytes_per_s": "lots", "gpu_wait_fraction": "x"},
        },
    )
    compare = Result(
        kind="compare",
        config={"tolerance": "5%", "reference": ["x"]},
        records=[
            {"op": 7, "size_bytes": 10**18, "change": "bad", "metric": 5, "placement": None},
            {
                "op": "all_reduce",
                "size_bytes": 1024,
                "change": 0.5,
                "metric": "time_us",
                "placement": "out",
                "verdict": "regressed",
                "p_value": "x",
                "dtype": ["f"],
            },
        ],
    )
    report = document.build([("d", dataload), ("c", compare)])
    page = document.to_html(report)
    assert {p.name for p in report.plots} == {"dataload-d", "compare-c-all_reduce"}
    assert "fail" in page and "<svg" in page


@pytest.mark.parametrize(("test", "slow"), [("bandwidth", 0.001), ("latency", 9999.0)])
def test_past_max_cells_a_cell_is_the_worst_link_of_its_block(monkeypatch, test, slow) -> None:
    # 4,000 ranks are drawn at about a thousand pixels a side: averaging would hide one slow link, so
    # each cell is a block of ranks and shows its worst link (lowest bandwidth, highest latency).
    from fabricscope.report import plots
    from fabricscope.results import Result

    monkeypatch.setattr(plots, "MAX_CELLS", 4)
    n, bad = 10, (7, 2)
    key = "algbw_gbps" if test == "bandwidth" else "time_us"
    records = [
        {"test": test, "src": a, "dst": b, key: slow if (a, b) == bad else 5.0, "size_bytes": 8}
        for a in range(n)
        for b in range(n)
        if a != b
    ]
    (drawn,) = plots.heatmap_plots("big", Result(kind="pairs", records=records))
    axes = drawn.figure.axes[0]
    image = axes.get_images()[0].get_array().filled(math.nan)
    assert image.shape == (4, 4)  # blocks of 3 ranks: 0-2, 3-5, 6-8, 9
    assert float(image[2][0]) == slow  # the block of sources 6-8 and destinations 0-2 holds 7 -> 2
    others = [
        float(v) for i, row in enumerate(image.tolist()) for j, v in enumerate(row) if (i, j) not in ((2, 0), (3, 3))
    ]
    assert all(v == 5.0 for v in others)  # diagonal blocks hold real links too (0 -> 1 and the like)
    assert math.isnan(float(image[3][3]))  # rank 9 alone: no link of its own to show
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0", "3", "6", "9"]
    assert "worst of 3 x 3 ranks" in axes.get_xlabel()
