"""``validate``: the shipped measurements within target, per-row errors, optional columns, bad files."""

from __future__ import annotations

import csv
import io
import json

import pytest
from model_helpers import one_error_line

from fabricscope.model.validation import default_files, match_gpu, match_nic, summary, validate_file


@pytest.mark.parametrize("path", default_files(), ids=lambda p: p.name)
def test_shipped_files_meet_the_accuracy_target(path) -> None:
    checks = validate_file(path)
    stats = summary(checks)
    assert stats["rows"] >= 9
    assert stats["median_abs_error_pct"] <= 10.0
    assert stats["worst_abs_error_pct"] <= 25.0


def test_shipped_data_is_the_shared_data() -> None:
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / "shared" / "validation"
    if not shared.is_dir():
        pytest.skip("no shared/ checkout beside the repository")
    for path in default_files():
        assert path.read_text(encoding="utf-8") == (shared / path.name).read_text(encoding="utf-8")


def test_cli_prints_rows_and_writes_records(cli, tmp_path) -> None:
    out = tmp_path / "v.json"
    done = cli("validate", "--json", str(out))
    assert done.code == 0, done.err
    assert "collectives.csv:" in done.out and "training.csv:" in done.out
    assert done.out.count("median |error|") == 2
    data = json.loads(out.read_text())
    assert data["kind"] == "validate"
    assert {"id", "published", "predicted", "error_pct"} <= set(data["records"][0])
    assert len(data["records"]) == 18
    assert data["summary"]["training.csv"]["worst_abs_error_pct"] <= 25


def rewrite(path, **columns: str) -> str:
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*rows[0], *columns])
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, **columns})
    return buffer.getvalue()


def test_optional_columns_are_used(write) -> None:
    training = next(p for p in default_files() if p.name == "training.csv")
    base = {c.id: c.predicted for c in validate_file(training)}
    bigger = {c.id: c.predicted for c in validate_file(write("mb.csv", rewrite(training, micro_batch="2")))}
    flash = {c.id: c.predicted for c in validate_file(write("fa.csv", rewrite(training, flash_attention="true")))}
    assert bigger["t08"] != base["t08"]
    assert flash["t06"] < base["t06"]  # iteration time: FlashAttention is faster


def test_bad_validation_files(cli, write) -> None:
    line = one_error_line(cli("validate", str(write("x.csv", "a,b\n1,2\n"))))
    assert "not a validation file: missing columns" in line
    training = next(p for p in default_files() if p.name == "training.csv")
    broken = training.read_text(encoding="utf-8").replace(
        "t03,Narayanan et al. SC21 Table 1,A100-SXM4-80GB,8,8",
        "t03,Narayanan et al. SC21 Table 1,A100-SXM4-80GB,8,eight",
    )
    line = one_error_line(cli("validate", str(write("bad.csv", broken))))
    assert "line 4" in line and "t03" in line
    line = one_error_line(cli("validate", "/no/such.csv"))
    assert "no such validation CSV" in line


def test_names_as_papers_write_them() -> None:
    assert match_gpu("A100-SXM4-80GB") == "a100-sxm-80gb"
    assert match_gpu("A100-SXM4-40GB") == "a100-sxm-40gb"
    assert match_gpu("H100-SXM5-80GB") == "h100-sxm"
    assert match_gpu("V100-SXM2") == "v100-sxm2-32gb"
    assert match_nic("200G HDR InfiniBand") == "ib-hdr"
    assert match_nic("100G Ethernet") == "eth-100g"
    assert match_nic("400G NDR InfiniBand") == "ib-ndr"


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        (",busbw_GBps,480.0,", ",busbw_GBps,0,", "value = '0' must be a positive number"),
        (",busbw_GBps,480.0,", ",busbw_GBps,nan,", "value = 'nan' must be a positive number"),
        (",busbw_GBps,480.0,", ",busbw_GBps,inf,", "value = 'inf' must be a positive number"),
        (",busbw_GBps,480.0,", ",busbw_GBps,-5,", "value = '-5' must be a positive number"),
        (",nvlstree,8,latency_us,", ",nvlstree,0,latency_us,", "size_bytes = '0' must be a positive number"),
        ("A100-SXM4-80GB,8,1,NVSwitch", "A100-SXM4-80GB,8,0,NVSwitch", "nodes = '0' must be a positive number"),
        ("c01,DGX A100,A100-SXM4-80GB", "c01,DGX A100,Z999", "cannot match GPU 'Z999'"),
    ],
)
def test_bad_values_in_a_validation_file(cli, write, old: str, new: str, fragment: str) -> None:
    shipped = next(p for p in default_files() if p.name == "collectives.csv").read_text(encoding="utf-8")
    assert old in shipped
    path = write("bad.csv", shipped.replace(old, new, 1))
    line = one_error_line(cli("validate", str(path)))
    assert fragment in line
    assert line.count(str(path)) == 1  # the file is named once
