"""``doctor --bench``: a short real bench on this node, held to ``--expect``'s ``[bench] busbw`` floors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, cli

from fabricscope.doctor.expect import load_expectations
from fabricscope.errors import ConfigError
from helpers import MARK, marked


def _expect(tmp_path: Path, floors: str, nproc: int = 2) -> str:
    path = tmp_path / "node.toml"
    path.write_text(f"[bench]\nnproc = {nproc}\niters = 5\nbusbw = [{floors}]\n")
    return str(path)


def _no_bench_left() -> bool:
    done = subprocess.run(["pgrep", "-f", "fabricscope-doctor-bench-"], capture_output=True, text=True, check=False)
    return done.stdout.strip() == ""


def test_each_floor_is_one_finding_met_or_failed(tmp_path: Path) -> None:
    floors = (
        '{ op = "allreduce", size = "1M", min = "0.0001GB/s" }, { op = "all_gather", size = "64K", min = "900GB/s" }'
    )
    out = tmp_path / "node.json"
    done = cli("--bench", "--expect", _expect(tmp_path, floors), "--json", str(out), timeout=300)
    assert done.returncode == 2, done.stderr
    records = [r for r in json.loads(out.read_text())["records"] if r["id"] == "bench.busbw"]
    assert [(r["subject"], r["severity"]) for r in records] == [
        ("all_reduce 1M x 2 ranks", "ok"),
        ("all_gather 64K x 2 ranks", "fail"),
    ]
    assert records[1]["observed"].endswith("of the floor") and records[1]["expected"] == ">= 900 GB/s busbw"
    assert "fail bench.busbw [all_gather 64K x 2 ranks]" in done.stdout
    assert _no_bench_left()


def test_without_floors_it_measures_all_reduce_and_reports_it(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text("[bench]\nnproc = 2\niters = 1\n")
    out = tmp_path / "node.json"
    done = cli("--bench", "--expect", str(path), "--json", str(out), timeout=300)
    [record] = [r for r in json.loads(out.read_text())["records"] if r["id"] == "bench.busbw"]
    assert record["severity"] == "info" and record["subject"] == "all_reduce 64M x 2 ranks"
    assert "GB/s busbw" in record["observed"]
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr


def test_a_bench_that_cannot_measure_is_a_failure_that_says_why(tmp_path: Path) -> None:
    floors = '{ op = "all_reduce", size = "16G", min = "1GB/s" }'  # two ranks of 16 GiB do not fit this machine
    out = tmp_path / "node.json"
    done = cli("--bench", "--expect", _expect(tmp_path, floors), "--json", str(out), "-T", "30", timeout=300)
    assert done.returncode == 2, done.stderr
    [record] = [r for r in json.loads(out.read_text())["records"] if r["id"] == "bench.busbw"]
    assert record["severity"] == "fail" and record["observed"].startswith("the bench did not measure (exit ")
    assert _no_bench_left()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--root", str(FIXTURES / "healthy-ib-8gpu")], "--bench measures this node (and in fleet mode"),
    ],
)
def test_bench_where_it_cannot_measure_this_node_is_refused(args: list[str], message: str) -> None:
    done = cli("--bench", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().startswith(f"error: {message}")


@pytest.mark.parametrize(
    ("floors", "message"),
    [
        ('{ op = "allreduc", size = "1M", min = "1GB/s" }', "bench.busbw unknown op 'allreduc' (did you mean"),
        ('{ op = "ps", size = "1M", min = "1GB/s" }', "op 'ps' has no busbw"),
        ('{ op = "all_reduce", size = "1M", min = "150" }', "bench.busbw min must be a rate"),
        ('{ op = "all_reduce", size = "64", min = "1GB/s" }', "bench.busbw size needs a binary suffix"),
        ('{ op = "all_reduce", size = "1M", min = "1PB/s" }', "at most 100TB/s"),
        ('{ op = "all_reduce", size = "1M", min = "1GB/s" }', "bench.nproc 1 holds a busbw floor that no run can meet"),
    ],
)
def test_bad_floors_are_one_line_naming_the_key(tmp_path: Path, floors: str, message: str) -> None:
    nproc = 1 if "bench.nproc" in message else 2
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_expectations(_expect(tmp_path, floors, nproc=nproc))


def test_in_fleet_mode_a_real_pairs_run_tests_the_links_between_ranks(tmp_path: Path) -> None:
    """Issue 22: ``doctor --bench`` in fleet mode also runs ``fabricscope pairs`` across the fleet and
    holds every link to the fleet's median; each node runs its own bench once (its lowest local rank)."""
    out = tmp_path / "fleet.json"
    floors = '{ op = "all_reduce", size = "64K", min = "0.0001GB/s" }'
    mark = {MARK: str(tmp_path)}  # what is left of this run, not of a pairs test another worker runs
    done = cli(
        "--bench", "--nproc", "3", "--expect", _expect(tmp_path, floors), "--json", str(out), env=mark, timeout=600
    )  # fmt: skip
    assert "Traceback" not in done.stderr and out.exists(), (done.returncode, done.stdout[-2000:], done.stderr)
    records = json.loads(out.read_text())["records"]
    [pairs] = [r for r in records if r["id"] == "fleet.pairs"]
    # three ranks on one host: pairs by rank, three pairs, both directions
    assert pairs["subject"] == "6 links between the fleet's ranks", pairs
    assert pairs["severity"] in ("ok", "warn") and pairs["observed"].startswith("median "), pairs
    assert len([r for r in records if r["id"] == "bench.busbw"]) == 1  # one node, one bench
    assert "fleet.pairs" in done.stdout
    assert _no_bench_left()
    assert marked(str(tmp_path)) == []


def _pairs_result(outlier_value: float | None) -> dict[str, object]:
    records = [
        {"test": "bandwidth", "src": a, "dst": b, "src_host": f"n{a}", "dst_host": f"n{b}", "algbw_gbps": 40.0}
        for a in range(3)
        for b in range(3)
        if a != b
    ]
    outliers = []
    if outlier_value is not None:
        outliers = [
            {"test": "bandwidth", "src": 2, "dst": 0, "src_host": "n2", "dst_host": "n0", "value": outlier_value,
             "median": 40.0, "score": -9.1}
        ]  # fmt: skip
    findings = {"medians": {"bandwidth": 40.0}, "outliers": outliers, "slowest": records[-1]}
    return {"status": "complete", "records": records, "summary": {"findings": findings}}


@pytest.mark.parametrize(
    ("value", "severity", "phrase"),
    [
        (None, "ok", "slowest n2 -> n1 40 GB/s"),
        (20.0, "warn", "n2 -> n0 20 GB/s (50% of the median)"),
        (2.0, "fail", "n2 -> n0 2 GB/s (5% of the median)"),
    ],
)
def test_the_fleet_finding_names_the_slow_link(value: float | None, severity: str, phrase: str) -> None:
    from fabricscope.doctor.fleet_pairs import pairs_findings

    found = pairs_findings(_pairs_result(value), 0, "", by="node")
    assert (found.severity.label, found.subject) == (severity, "6 links between the fleet's nodes")
    assert phrase in found.observed and found.observed.startswith("median 40 GB/s")


def test_a_pairs_run_that_wrote_nothing_is_a_failure_that_says_why() -> None:
    from fabricscope.doctor.fleet_pairs import pairs_findings

    found = pairs_findings(None, 1, "error: rank 2 (pid 7 on n2) stopped responding", by="node")
    assert found.severity.label == "fail" and found.subject == "links between the fleet's nodes"
    assert pairs_findings(None, 1, "", by="rank").subject == "links between the fleet's ranks"
    assert found.observed == "the pairs run did not complete (exit 1): error: rank 2 (pid 7 on n2) stopped responding"
    killed = pairs_findings({"status": "failed", "error": "rank 1 died"}, None, "", by="node")
    assert killed.observed == "the pairs run did not complete (timed out): rank 1 died"
