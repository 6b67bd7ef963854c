"""``validate``: the shipped measurements within target, per-row errors, optional columns, bad files."""

from __future__ import annotations

import csv
import io
import json

import pytest
from model_helpers import one_error_line

from fabricscope.model.validation import by_group, default_files, match_gpu, match_nic, summary, validate_file

GROUP_MEDIAN_CEILING = {"pcie-node": 15.0}
"""Groups known to miss the 10% median, with the most they may reach: the one kept PCIe row (8 RTX
5090 without peer-to-peer) is 14.5% low; the model has no host-memory term (docs/model.md)."""


@pytest.mark.parametrize("path", default_files(), ids=lambda p: p.name)
def test_shipped_files_meet_the_accuracy_target_in_every_group(path) -> None:
    checks = validate_file(path)
    assert summary(checks)["rows"] >= 9
    for group, stats in by_group(checks, known_off=False).items():
        assert stats["median_abs_error_pct"] <= GROUP_MEDIAN_CEILING.get(group, 10.0), group
        assert stats["worst_abs_error_pct"] <= 25.0, group
    # A row marked as known to be off must really be off: the mark cannot go stale silently.
    for check in checks:
        if check.known_off:
            assert abs(check.error_pct) > 25.0, check.id


def test_shipped_collectives_cover_the_systems_users_ask_about() -> None:
    path = next(p for p in default_files() if p.name == "collectives.csv")
    checks = validate_file(path)
    groups = {c.group for c in checks}
    assert {"nvlink-node", "ib-multinode", "roce-multinode", "tcp", "pcie-node", "shared-nic"} <= groups
    roce_nodes = {int(c.detail.split(" on ")[1].split("x")[0]) for c in checks if c.group == "roce-multinode"}
    assert len(roce_nodes) >= 4  # RoCE at several node counts
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    assert all(row["source"].strip() and row["notes"].strip() for row in rows)


def test_shipped_data_holds_every_shared_row() -> None:
    """The shipped files grow the shared ones: every shared row is there, with the same values."""
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3] / "shared" / "validation"
    if not shared.is_dir():
        pytest.skip("no shared/ checkout beside the repository")
    for path in default_files():
        ours = {row["id"]: row for row in csv.DictReader(path.read_text(encoding="utf-8").splitlines())}
        for row in csv.DictReader((shared / path.name).read_text(encoding="utf-8").splitlines()):
            mine = ours[row["id"]]
            assert {k: mine[k] for k in row} == row, row["id"]


def test_cli_prints_rows_and_writes_records(cli, tmp_path) -> None:
    out = tmp_path / "v.json"
    done = cli("validate", "--json", str(out))
    assert done.code == 0, done.err
    assert "collectives.csv:" in done.out and "training.csv:" in done.out
    assert done.out.count("median |error|") == 2
    data = json.loads(out.read_text())
    assert data["kind"] == "validate"
    assert {"id", "published", "predicted", "error_pct"} <= set(data["records"][0])
    assert len(data["records"]) >= 41
    groups = data["summary"]["groups"]
    assert {"nvlink-node", "tcp", "overall"} <= set(groups)
    assert "error by group (" in done.out
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
        ("c01,nvlink-node,DGX A100,A100-SXM4-80GB", "c01,nvlink-node,DGX A100,Z999", "cannot match GPU 'Z999'"),
    ],
)
def test_bad_values_in_a_validation_file(cli, write, old: str, new: str, fragment: str) -> None:
    shipped = next(p for p in default_files() if p.name == "collectives.csv").read_text(encoding="utf-8")
    assert old in shipped
    path = write("bad.csv", shipped.replace(old, new, 1))
    line = one_error_line(cli("validate", str(path)))
    assert fragment in line
    assert line.count(str(path)) == 1  # the file is named once
