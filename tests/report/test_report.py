"""fabricscope report: a self-contained HTML file, checked in a real headless Chromium.

The DOM Chromium builds (``--dump-dom``) must hold every plot and table; the
screenshot it takes must not be blank.  Without Debian's ``chromium`` these
tests skip, unless FABRICSCOPE_REQUIRE_CHROMIUM is set (CI sets it).
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fabricscope.results import Result
from helpers import REPO, run_cli

DATA = REPO / "tests" / "store" / "data"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("FABRICSCOPE_REQUIRE_CHROMIUM"),
    reason="Debian's chromium is not installed (apt-get install chromium); set FABRICSCOPE_REQUIRE_CHROMIUM to fail",
)


def chromium(tmp_path, url, *extra):
    assert CHROMIUM is not None, "FABRICSCOPE_REQUIRE_CHROMIUM is set but chromium is missing"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *extra,
        url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def cli(tmp_path, *args):
    return run_cli([str(a) for a in args], env={"FABRICSCOPE_HOME": str(tmp_path / "home")}, timeout=120)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One Result of every kind the report draws, from the real commands where they run here."""
    folder = tmp_path_factory.mktemp("inputs")
    home = folder / "home"
    env = {"FABRICSCOPE_HOME": str(home)}
    paths = {}
    for name, args in {
        "imported": ["import", "nccl-tests", DATA / "current_all_reduce_h100x8.log", "--json"],
        "other": ["import", "nccl-tests", DATA / "json_all_reduce_2x8.json", "--json"],
        "predicted": ["predict", "--cluster", "dgx-h100-ndr", "--nodes", "1", "-b", "8", "-e", "128M", "--json"],
        "estimate": ["estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--json"],
        "doctor": ["doctor", "--root", REPO / "tests" / "doctor" / "fixtures" / "degraded-ib-8gpu", "--json"],
    }.items():
        paths[name] = folder / f"{name}.json"
        done = run_cli([str(a) for a in [*args, paths[name]]], env=env, timeout=120)
        assert paths[name].exists(), done.stderr
    # pairs and monitor are other commands' Results: their records as those commands write them.
    hosts = ["n1", "n2", "n3", "n4"]
    Result(
        kind="pairs",
        records=[
            {"src": a, "dst": b, "algbw_gbps": 10.0 if "n3" not in (a, b) else 2.5, "time_us": 1.0}
            for a in hosts
            for b in hosts
            if a != b
        ],
    ).save(folder / "pairs.json")
    Result(
        kind="monitor",
        records=[
            {"t_s": t / 2, "kind": "net", "label": label, "rx_gbit_per_s": 5.0 + t % 7, "tx_gbit_per_s": 3.0 + t % 5}
            for t in range(40)
            for label in ("eth0", "ib0")
        ],
    ).save(folder / "monitor.json")
    paths["pairs"] = folder / "pairs.json"
    paths["monitor"] = folder / "monitor.json"
    return paths


def test_report_of_every_kind_in_chromium(tmp_path, inputs):
    out = tmp_path / "report.html"
    base = cli(tmp_path, "baseline", "set", "h100", inputs["imported"])
    assert base.returncode == 0, base.stderr
    done = cli(
        tmp_path,
        "report",
        inputs["other"],
        inputs["estimate"],
        inputs["doctor"],
        inputs["pairs"],
        inputs["monitor"],
        "--baseline",
        "h100",
        "--predict",
        inputs["predicted"],
        "--peak",
        "400Gb/s",
        "--png",
        tmp_path / "png",
        "-o",
        out,
    )
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text), "the report must fetch nothing"
    assert "@import" not in text and "<script" not in text and "<link" not in text

    if CHROMIUM is None and not os.environ.get("FABRICSCOPE_REQUIRE_CHROMIUM"):
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    dom = chromium(tmp_path, out.as_uri(), "--dump-dom").stdout
    figures = dict(re.findall(r'<figure class="plot" id="plot-([^"]+)"[^>]*>(.*?)</figure>', dom, flags=re.S))
    expected_plots = {"busbw-all_reduce", "latency-all_reduce", "step-breakdown", "monitor-" + _slug(inputs["monitor"])}
    expected_plots.add("pairs-" + _slug(inputs["pairs"]))
    assert expected_plots <= set(figures), sorted(figures)
    for name, body in figures.items():
        assert "<svg" in body and "<path" in body, name
    assert "baseline h100" in figures["busbw-all_reduce"] and "theoretical peak 50 GB/s" in figures["busbw-all_reduce"]
    assert "prediction" in figures["busbw-all_reduce"]
    tables = set(re.findall(r'<table data-name="([^"]+)"', dom))
    assert {"runs", "peaks", "estimates", "findings-2"} <= tables, tables
    findings = re.search(r'<table data-name="findings-2">(.*?)</table>', dom, flags=re.S).group(1)
    assert findings.count("<tr>") > 2 and "fail" in findings
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == sorted(f"{name}.png" for name in figures)

    shot = tmp_path / "shot.png"
    chromium(tmp_path, out.as_uri(), f"--screenshot={shot}", "--window-size=1200,3000", "--hide-scrollbars")
    assert_not_blank(shot)


def _slug(path):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(path)).strip("-")[:80]


def assert_not_blank(png: Path):
    import matplotlib.image

    pixels = matplotlib.image.imread(str(png))
    rgb = pixels[..., :3]
    coloured = (rgb < 0.9).any(axis=-1).mean()
    assert coloured > 0.02, f"screenshot {png} is blank ({coloured:.2%} non-white pixels)"
    hues = (abs(rgb[..., 0] - rgb[..., 2]) > 0.2).mean()
    assert hues > 0.001, "no coloured plot lines in the screenshot"


@needs_chromium
def test_a_single_run_report_renders(tmp_path, inputs):
    out = tmp_path / "one.html"
    assert cli(tmp_path, "report", inputs["imported"], "-o", out).returncode == 0
    dom = chromium(tmp_path, out.as_uri(), "--dump-dom").stdout
    assert 'id="plot-busbw-all_reduce"' in dom and 'data-name="runs"' in dom


def test_bad_output_and_input_are_one_line_exit_2(tmp_path, inputs):
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    cases = [
        (("report", inputs["imported"], "-o", tmp_path), "is a folder"),
        (("report", inputs["imported"], "-o", inputs["imported"]), "is also an input"),
        (("report", inputs["imported"], "-o", fifo), "no process is reading"),
        (("report", "someday", "-o", tmp_path / "r.html"), "neither a result file nor a history id"),
        (("report", tmp_path / ("x" * 5000), "-o", tmp_path / "r.html"), "file name too long"),
        (("report", inputs["imported"], "--png", inputs["imported"], "-o", tmp_path / "r.html"), "not a folder"),
        (("report", inputs["imported"], "--peak", "fast", "-o", tmp_path / "r.html"), "--peak: invalid rate"),
        (("report", inputs["imported"], "--predict", inputs["estimate"], "-o", tmp_path / "r.html"), "'estimate'"),
        (("report", inputs["imported"], "--baseline", "none", "-o", tmp_path / "r.html"), "no baseline named"),
    ]
    unpriced = tmp_path / "unpriced.json"  # a run whose op the model does not price: said, not drawn as nothing
    data = json.loads(Path(inputs["predicted"]).read_text())
    for record in data["records"]:
        record["op"] = "hypercube"
    unpriced.write_text(json.dumps(data))
    new_folder = tmp_path / "plots" / "new"
    cases += [
        (
            ("report", unpriced, "--predict", "dgx-h100-ndr", "-o", tmp_path / "r.html"),
            "nothing to price for",
        ),  # a folder to make is made once the inputs are read: a bad input leaves none behind
        (("report", "missing.json", "--png", new_folder, "-o", tmp_path / "r.html"), "no such result file"),
        (
            ("report", inputs["imported"], "--predict", "no-such", "--png", new_folder, "-o", tmp_path / "r.html"),
            "no-such",
        ),
    ]
    for args, pattern in cases:
        done = cli(tmp_path, *args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and pattern in done.stderr, (args, done.stderr)
    assert not (tmp_path / "r.html").exists()
    assert not (tmp_path / "home").exists()
    assert not (tmp_path / "plots").exists()


def test_png_files_are_checked_one_by_one_before_anything_is_written(tmp_path, inputs):
    """The --png folder's own files: a link there to an input, or a FIFO, under a plot's name is refused before
    the report or any PNG is written (the input survives); other files beside them, the report included, are
    not in the way, also on a second run."""
    source = tmp_path / "run.json"
    source.write_bytes(Path(inputs["imported"]).read_bytes())
    before = source.read_bytes()
    linked, fifo, shared = tmp_path / "linked", tmp_path / "fifo", tmp_path / "shared"
    for folder in (linked, fifo, shared):
        folder.mkdir()
    (linked / "busbw-all_reduce.png").symlink_to(source)
    os.mkfifo(fifo / "busbw-all_reduce.png")
    for folder, pattern in ((linked, "is also an input of this command"), (fifo, "no process is reading")):
        done = cli(tmp_path, "report", source, "--png", folder, "-o", tmp_path / "r.html")
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and pattern in done.stderr, done.stderr
        assert not (tmp_path / "r.html").exists()
    assert source.read_bytes() == before
    for _ in range(2):
        done = cli(tmp_path, "report", source, "--png", shared, "-o", shared / "report.html")
        assert done.returncode == 0, done.stderr
    assert (shared / "busbw-all_reduce.png").read_bytes().startswith(b"\x89PNG")


def test_the_blank_check_can_fail(tmp_path):
    import matplotlib.image
    import numpy

    white = tmp_path / "white.png"
    matplotlib.image.imsave(str(white), numpy.ones((50, 80, 3)))
    with pytest.raises(AssertionError, match="blank"):
        assert_not_blank(white)


def _sweep(path, slow_from: int) -> None:
    """A bench-like all_reduce result, 8 samples per size; sizes from ``slow_from`` up take twice as long."""
    records = []
    for size in (1 << k for k in range(10, 27, 2)):
        base = 10.0 + size / 2e4
        time = base * (2.0 if size >= slow_from else 1.0)
        samples = [time * (1 + 0.01 * (i % 3)) for i in range(8)]
        busbw = size / (sum(samples) / len(samples)) / 1e3 * 2 * 7 / 8
        records.append(
            {
                "op": "all_reduce",
                "size_bytes": size,
                "count": size // 4,
                "dtype": "float",
                "redop": "sum",
                "root": -1,
                "placement": "out",
                "time_us": sum(samples) / len(samples),
                "algbw_gbps": busbw * 8 / 14,
                "busbw_gbps": busbw,
                "wrong": 0,
                "samples_us": samples,
            }
        )
    Result(kind="bench", records=records).save(path)


@needs_chromium
def test_compare_and_dataload_results_are_drawn(tmp_path):
    # A comparison that found regressions (sizes from 4 MiB up twice as slow) and a real dataload run
    # that starves against its need: each gets its plot and its table, regressions marked.
    reference, current = tmp_path / "ref.json", tmp_path / "cur.json"
    _sweep(reference, 1 << 40)
    _sweep(current, 4 << 20)
    compared = tmp_path / "compare.json"
    done = cli(tmp_path, "compare", current, "--against", reference, "--json", compared)
    assert done.returncode == 1 and compared.exists(), done.stderr
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(4 << 20))
    loaded = tmp_path / "dataload.json"
    done = cli(tmp_path, "dataload", data, "--need", "100000", "--sample-size", "1M", "--json", loaded)
    assert loaded.exists(), done.stderr
    out = tmp_path / "report.html"
    done = cli(tmp_path, "report", compared, loaded, "-o", out)
    assert done.returncode == 0, done.stderr
    dom = chromium(tmp_path, out.as_uri(), "--dump-dom").stdout
    figures = dict(re.findall(r'<figure class="plot" id="plot-([^"]+)"[^>]*>(.*?)</figure>', dom, flags=re.S))
    assert "compare-" + _slug(compared) + "-all_reduce" in figures, sorted(figures)
    assert "dataload-" + _slug(loaded) in figures, sorted(figures)
    drawn = figures["compare-" + _slug(compared) + "-all_reduce"]
    assert "regressed (out)" in drawn and "within tolerance" in drawn
    assert "training needs" in figures["dataload-" + _slug(loaded)]
    table = re.search(r'<table data-name="compare-0">(.*?)</table>', dom, flags=re.S).group(1)
    regressed = [row for row in table.split("<tr>") if 'class="fail"' in row]
    assert {int(re.search(r"<td>(\d+)</td>", row).group(1)) for row in regressed} == {1 << 22, 1 << 24, 1 << 26}
    dataload = re.search(r'<table data-name="dataload-1">(.*?)</table>', dom, flags=re.S).group(1)
    assert "training needs" in dataload and 'class="fail"' in dataload
    shot = tmp_path / "shot.png"
    chromium(tmp_path, out.as_uri(), f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars")
    assert_not_blank(shot)


def test_a_baseline_or_prediction_of_one_small_size_is_drawn_as_a_point():
    """A sweep from 64K has one point on the small-message plot: the run's, the baseline's and the
    prediction's are each drawn with a marker (a one-point line with no marker draws nothing)."""
    from fabricscope.report import plots

    def one(time_us: float) -> Result:
        record = {"op": "all_reduce", "size_bytes": 65536, "placement": "out", "time_us": time_us, "busbw_gbps": 1.0}
        return Result(kind="bench", records=[record, {**record, "size_bytes": 1 << 20}])

    series = [
        plots.Series("run", one(300.0)),
        plots.Series("base", one(3000.0), role="baseline"),
        plots.Series("model", one(250.0), role="prediction"),
    ]
    [latency] = plots.latency_plots(series)
    lines = latency.figure.axes[0].get_lines()
    assert [line.get_marker() for line in lines] == ["o", "o", "o"]
    assert [float(line.get_ydata()[0]) for line in lines] == [300.0, 3000.0, 250.0]
