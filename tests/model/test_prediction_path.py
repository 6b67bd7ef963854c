"""One prediction path: measure -> calibrate -> predict agrees for every op, and every command that
shows a predicted collective (predict, report --predict, validate) draws it from ``model.predict``."""

from __future__ import annotations

import ast
import html
import json
import re
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fabricscope import ops
from fabricscope.model.calibrate import load_runs

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "fabricscope"
LOGS = REPO / "tests" / "store" / "data"
PRICED = [name for name, op in ops.COLLECTIVES.items() if op.modelled]
"""Every op bench measures that predict prices: all but ps."""


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_no_command_builds_predicted_records_another_way() -> None:
    """Only model/predict.py prices collectives into records: a second loop (the report had one,
    which ignored [calibration]) fails here."""
    pricing = {"predict_op", "candidates", "choose"}
    allowed = {SRC / "model" / "predict.py"}
    # Calibrated terms are priced by one function, which predict and the training model's
    # all-to-all call; only it reads the latency terms (calibrate's table, in model/report.py, prints them).
    calibrated_pricing = {SRC / "model" / "predict.py", SRC / "model" / "training.py"}
    reads_terms = {SRC / "model" / "calibrated_cost.py", SRC / "model" / "report.py"}
    record_builders = {SRC / "model" / "predict.py", SRC / "bench" / "runner.py", SRC / "store" / "nccl_tests.py"}
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = _calls(tree)
        if path not in allowed and calls & pricing:
            offenders.append(f"{path.relative_to(SRC)} calls {sorted(calls & pricing)}")
        if path not in calibrated_pricing and "predicted_seconds" in calls:
            offenders.append(f"{path.relative_to(SRC)} calls predicted_seconds")
        terms = {"base_us", "intra_hop_us", "inter_hop_us"}
        if path not in reads_terms and any(isinstance(n, ast.Attribute) and n.attr in terms for n in ast.walk(tree)):
            offenders.append(f"{path.relative_to(SRC)} reads calibrated latency terms")
        if path not in record_builders and "CollectiveRecord" in calls:
            offenders.append(f"{path.relative_to(SRC)} builds CollectiveRecord")
        for node in ast.walk(tree):
            if (
                path not in allowed
                and isinstance(node, ast.keyword)
                and node.arg == "kind"
                and isinstance(node.value, ast.Constant)
                and node.value.value == "predict"
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.value.lineno} makes a predict Result")
    assert not offenders, offenders


@pytest.fixture(scope="module")
def every_op(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank gloo bench of every op, 64 KiB to 2 MiB."""
    out = tmp_path_factory.mktemp("bench") / "all.json"
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "bench", "all", "--nproc", "2", "-b", "64K", "-e", "2M",
         "-n", "5", "-w", "1", "-c", "0", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _measured(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per op, (size column, the time calibrate fits: p50 where the record has it) of each record."""
    found: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        found.setdefault(r["op"], []).append((r["size_bytes"], r.get("p50_us") or r["time_us"]))
    return found


def _round_trip(cli: Any, measured: Path, tmp_path: Path, nodes: int, gpus_per_node: int) -> dict[str, float]:
    """Calibrate ``measured``, predict its own shape and sizes; per op, (median |error| of the
    prediction against the measured points) minus (the fit error calibrate printed)."""
    cal = tmp_path / "cal.toml"
    done = cli("calibrate", str(measured), "-o", str(cal))
    assert done.code == 0, done.err
    printed = {
        line.split()[0]: float(line.split()[-1].rstrip("%"))
        for line in done.out.splitlines()[1:]
        if line.strip() and not line.startswith("#")
    }
    written = tomllib.loads(cal.read_text(encoding="utf-8"))
    assert (written["nodes"], written["gpus_per_node"]) == (nodes, gpus_per_node)
    points = _measured(json.loads(measured.read_text())["records"])
    gaps = {}
    for op, terms in written["calibration"].items():
        sizes = sorted({size for size, _ in points[op]})
        pred = tmp_path / f"{op}.json"
        done = cli("predict", op, "--cluster", str(cal), "-b", str(sizes[0]), "-e", str(sizes[-1]), "--json", str(pred))
        assert done.code == 0, done.err
        predicted = {r["size_bytes"]: r["time_us"] for r in json.loads(pred.read_text())["records"]}
        assert set(predicted) >= set(sizes), (op, sorted(predicted), sizes)  # the same size column
        error = 100 * statistics.median(abs(predicted[size] / t - 1) for size, t in points[op])
        assert printed[op] == pytest.approx(terms["residual_pct"], abs=0.051)
        gaps[op] = error - terms["residual_pct"]
    return gaps


def test_every_op_bench_measures_round_trips_within_the_printed_fit_error(cli, every_op, tmp_path) -> None:
    gaps = _round_trip(cli, every_op, tmp_path, 1, 2)
    assert sorted(gaps) == sorted(PRICED)
    for op, gap in gaps.items():
        # The same function on the same bytes: the prediction's error is the printed one, to rounding.
        assert abs(gap) < 1e-3, (op, gap)


def test_calibrate_reads_the_bytes_algbw_counts_not_the_per_rank_count(every_op) -> None:
    records = json.loads(every_op.read_text())["records"]
    for run in load_runs([str(every_op)]):
        sizes = sorted({r["size_bytes"] for r in records if r["op"] == run.op})
        # S of algbw is the size column for every op predict prices (nccl-tests: count x n for the
        # gathering ops); hypercube's counts the (n-1) blocks a rank receives, as its binary does.
        expected = sorted({ops.get(run.op).algbw_bytes(size, 4, run.ranks) for size in sizes})
        assert sorted(set(run.moved.tolist())) == expected, run.op
        if ops.get(run.op).modelled:
            assert expected == sizes, run.op
        counts = {r["count"] for r in records if r["op"] == run.op}
        if run.op in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
            assert max(counts) * 4 * 2 == max(sizes), run.op  # count is per rank: half the array here


def test_ps_is_left_out_with_a_note_and_refused_alone(cli, every_op, tmp_path) -> None:
    done = cli("calibrate", str(every_op), "-o", str(tmp_path / "c.toml"))
    assert done.code == 0 and "ps left out: predict has no cost model for it" in done.err
    assert "ps" not in tomllib.loads((tmp_path / "c.toml").read_text())["calibration"]
    data = json.loads(every_op.read_text())
    data["records"] = [r for r in data["records"] if r["op"] == "ps"]
    only = tmp_path / "ps.json"
    only.write_text(json.dumps(data))
    done = cli("calibrate", str(only), "-o", str(tmp_path / "p.toml"))
    assert done.code == 2 and "ps has no cost model in predict" in done.err and "Traceback" not in done.err
    assert not (tmp_path / "p.toml").exists()


@pytest.mark.parametrize(
    ("log", "nodes", "gpus_per_node"),
    [("multi_collective_2x4_a100.log", 2, 4), ("slurm_labelled_alltoall_4x8.log", 4, 8)],
)
def test_an_imported_log_round_trips_too(cli, tmp_path, log, nodes, gpus_per_node) -> None:
    imported = tmp_path / "imported.json"
    done = cli("import", "nccl-tests", str(LOGS / log), "--json", str(imported))
    assert done.code == 0, done.err
    for run in load_runs([str(imported)]):  # the size column, whatever the op
        records = json.loads(imported.read_text())["records"]
        assert sorted(set(run.moved.tolist())) == sorted({r["size_bytes"] for r in records if r["op"] == run.op})
    gaps = _round_trip(cli, imported, tmp_path, nodes, gpus_per_node)
    assert gaps and all(abs(gap) < 1e-3 for gap in gaps.values()), gaps


def _against_table(page: str) -> dict[tuple[str, int], float]:
    """(op, size) -> predicted microseconds, from the report's 'against the prediction' table."""
    table = re.search(r'<table data-name="against-prediction">(.*?)</table>', page, flags=re.S)
    assert table is not None, "the report has no table of the run against the prediction"
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), flags=re.S):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        if cells:
            found[(cells[0], int(cells[1]))] = float(cells[3])
    return found


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibrated-file", "catalog-preset"])
def test_report_predict_shows_what_predict_prints(cli, every_op, tmp_path, calibrated) -> None:
    cluster = "lab-8gpu-100g-nvme"
    if calibrated:
        cluster = str(tmp_path / "cal.toml")
        assert cli("calibrate", str(every_op), "-o", cluster).code == 0
    page = tmp_path / "r.html"
    done = cli("report", str(every_op), "--predict", cluster, "-o", str(page))
    assert done.code == 0, done.err
    shown = _against_table(page.read_text(encoding="utf-8"))
    pred = tmp_path / "p.json"
    done = cli(
        "predict", *PRICED, "--cluster", cluster, "--nodes", "1", "--gpus-per-node", "2",
        "-b", "64K", "-e", "2M", "--json", str(pred),
    )  # fmt: skip
    assert done.code == 0, done.err
    printed = {
        (r["op"], r["size_bytes"]): r["time_us"]
        for r in json.loads(pred.read_text())["records"]
        if r["placement"] == "out"
    }
    assert {op for op, _ in shown} == set(PRICED)
    for key, time_us in shown.items():
        assert time_us == pytest.approx(printed[key], rel=1e-5), key


def test_calibrate_says_when_the_file_takes_another_shape_than_its_base(cli, every_op, tmp_path) -> None:
    done = cli("calibrate", str(every_op), "--cluster", "dgx-h100-ndr", "-o", str(tmp_path / "c.toml"))
    assert done.code == 0, done.err
    assert "the cluster written is 1 node(s) x 2 GPU(s), the shape measured, not dgx-h100-ndr's" in done.err


def test_report_predict_prices_a_datatype_the_model_has_no_size_for_as_float(cli, every_op, tmp_path) -> None:
    # nccl-tests' uint32, f8e4m3...: before, a KeyError traceback.
    data = json.loads(every_op.read_text())
    for record in data["records"]:
        record["dtype"] = "uint32"
    odd = tmp_path / "u32.json"
    odd.write_text(json.dumps(data))
    done = cli("report", str(odd), "--predict", "dgx-h100-ndr", "-o", str(tmp_path / "r.html"))
    assert done.code == 0 and "Traceback" not in done.err, done.err
    assert _against_table((tmp_path / "r.html").read_text(encoding="utf-8"))


def test_a_prediction_reported_against_a_prediction_is_not_called_measured(cli, tmp_path) -> None:
    pred, page = tmp_path / "p.json", tmp_path / "r.html"
    args = ["all_reduce", "--cluster", "dgx-h100-ndr", "--nodes", "2", "-b", "1M", "-e", "4M", "--json", str(pred)]
    assert cli("predict", *args).code == 0
    done = cli("report", str(pred), "--predict", "dgx-h100-ndr", "-o", str(page))
    assert done.code == 0, done.err
    table = re.search(r'<table data-name="against-prediction">(.*?)</table>', page.read_text(encoding="utf-8"), re.S)
    assert table is not None
    header = [html.unescape(c) for c in re.findall(r"<th[^>]*>(.*?)</th>", table.group(1), flags=re.S)]
    assert header[2:] == ["this prediction (us)", "predicted (us)", "predicted / this prediction"], header
    assert set(_against_table(page.read_text(encoding="utf-8"))) == {
        ("all_reduce", 1 << 20),
        ("all_reduce", 2 << 20),
        ("all_reduce", 4 << 20),
    }
