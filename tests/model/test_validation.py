"""``validate``: the shipped measurements within target, per-row errors, optional columns, bad files."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from model_helpers import one_error_line

from fabricscope.model.validation import by_group, default_files, match_gpu, match_nic, summary, validate_file

GROUP_MEDIAN_CEILING = {
    "memory": 8.0,
    "mid-size": 15.0,
    "nvlink-domain": 12.0,
}
"""Groups whose kept rows are held to another median than 10% (memory's and mid-size's targets are 8% and
15%).  mid-size: see docs/model.md, "Mid-size collectives".  nvlink-domain (GB200 NVL72
racks, g01-g11): NVLink 5's measured ring reaches 839 GB/s where the model credits NCCL's own 40.1 GB/s per
link (722), so the largest sizes are 10-17% slow: median 11.6%.  pipeline-engine meets 10% since BigScience's
topology benchmarks of DeepSpeed's engine joined it (t70-t167); its production runs of 2021-22 other than
BLOOM (MT-NLG 530B, GPT-NeoX-20B, GLM-130B) are still 10-22% fast (training.csv notes)."""
GROUP_WORST_CEILING: dict[str, float] = {}
"""Groups whose kept rows may miss the 25% worst (none now)."""
OVERALL_CEILING: dict[str, tuple[float, float]] = {}
"""Files whose overall figures may miss 10% / 25% (none now)."""


@pytest.mark.parametrize("path", default_files(), ids=lambda p: p.name)
def test_shipped_files_meet_the_accuracy_target_in_every_group(path) -> None:
    checks = validate_file(path)
    assert summary(checks)["rows"] >= 9
    for group, stats in by_group(checks, known_off=False).items():
        median, worst = OVERALL_CEILING.get(path.name, (10.0, 25.0)) if group == "overall" else (10.0, 25.0)
        assert stats["median_abs_error_pct"] <= GROUP_MEDIAN_CEILING.get(group, median), group
        assert stats["worst_abs_error_pct"] <= GROUP_WORST_CEILING.get(group, worst), group
    # A row marked as known to be off must really be off: the mark cannot go stale silently.
    for check in checks:
        if check.known_off:
            assert abs(check.error_pct) > 25.0, check.id


GROUPS_WITH_ROWS_LEFT_OFF = {"nvlink-node", "roce-multinode", "mid-size", "nvlink-domain", "gpudirect-tcp"}
"""Collective groups that hold rows the model is known to miss (notes: ``stays off:``): n05 (H100 PCIe
on NVLink bridges), n15, n16 (RoCE platforms below their wire in their own threads), n21 (2 MiB on
RoCE), g12-g17 (20 GB200 NVL72 racks: NCCL's algorithm there), k01, k12-k14 (16 MiB and less on
GPUDirect-TCPXO) and k05-k11 (GPUDirect-TCPX: the host's ceiling). Every other group meets the issue's
target counting every row, which the test below enforces."""


def test_collective_groups_meet_the_target_counting_every_row() -> None:
    path = next(p for p in default_files() if p.name == "collectives.csv")
    checks = validate_file(path)
    groups = by_group(checks, known_off=True)
    for group, stats in groups.items():
        if group in GROUPS_WITH_ROWS_LEFT_OFF or group == "overall":
            continue
        assert stats["median_abs_error_pct"] <= 10.0, group
        assert stats["worst_abs_error_pct"] <= 25.0, group
    # A group named above must still hold a row that is off, or it belongs with the others.
    for group in GROUPS_WITH_ROWS_LEFT_OFF:
        assert any(c.known_off for c in checks if c.group == group), group
    assert {"pcie-node", "tcp", "ib-multinode", "shared-nic"} <= set(groups)
    # The tcp group holds bare-metal and cloud rows: the socket share must be right on both.
    tcp = [c for c in checks if c.group == "tcp"]
    assert {"n17", "n18", "n25", "n26"} <= {c.id for c in tcp}


def test_shipped_collectives_cover_the_systems_users_ask_about() -> None:
    path = next(p for p in default_files() if p.name == "collectives.csv")
    checks = validate_file(path)
    groups = {c.group for c in checks}
    assert {"nvlink-node", "ib-multinode", "roce-multinode", "tcp", "pcie-node", "shared-nic"} <= groups
    roce_nodes = {int(c.detail.split(" on ")[1].split("x")[0]) for c in checks if c.group == "roce-multinode"}
    assert len(roce_nodes) >= 4  # RoCE at several node counts
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    assert all(row["source"].strip() and row["notes"].strip() for row in rows)


# The published measurements the project started from (id -> value), kept here so that the
# package's shipped copy is checked in any clone, with or without the data set it came from.
PUBLISHED = {
    "c01": "232.54", "c02": "192.0", "c03": "12.2", "c04": "48.0", "c05": "480.0",
    "c06": "5.0", "c07": "6.0", "c08": "47.5", "c09": "24.0",
    "t01": "137", "t02": "142", "t03": "138", "t04": "148", "t05": "163",
    "t06": "1.42", "t07": "1.10", "t08": "18.13", "t09": "13.75",
}  # fmt: skip


def test_the_installed_package_ships_the_published_rows() -> None:
    """What ``validate`` reads by default is package data (importlib.resources), holding every row."""
    values = {}
    for path in default_files():
        assert "fabricscope" in str(path) and path.is_file()
        values.update(
            {row["id"]: row["value"] for row in csv.DictReader(path.read_text(encoding="utf-8").splitlines())}
        )
    assert {key: values.get(key) for key in PUBLISHED} == PUBLISHED


def test_cli_prints_rows_and_writes_records(cli, tmp_path) -> None:
    out = tmp_path / "v.json"
    done = cli("validate", "--json", str(out))
    assert done.code == 0, done.err
    assert "collectives.csv:" in done.out and "training.csv:" in done.out
    assert done.out.count("median |error|") == len(default_files())
    data = json.loads(out.read_text())
    assert data["kind"] == "validate"
    assert {"id", "published", "predicted", "error_pct"} <= set(data["records"][0])
    assert len(data["records"]) >= 41
    groups = data["summary"]["groups"]
    assert {"nvlink-node", "tcp", "overall"} <= set(groups)
    assert "error by group (" in done.out
    training = [r for r in data["records"] if r["file"] == "training.csv"]
    kept = [abs(r["error_pct"]) for r in training if not r["known_off"]]
    assert max(kept) <= 25 and data["summary"]["training.csv"]["rows"] == len(training)
    assert {r["group"] for r in training} == {"megatron-ptd", "zero-fsdp", "pipeline-engine", "vision-dp"}


def rewrite(path, **columns: str) -> str:
    """The shared rows of ``path`` (t01-t09) with ``columns`` set on every one."""
    rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))[:9]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*rows[0], *(c for c in columns if c not in rows[0])])
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
    stack = {c.id: c.predicted for c in validate_file(write("fw.csv", rewrite(training, framework="megatron-core")))}
    assert stack["t06"] < base["t06"]  # Megatron-Core's FlashAttention, unless a column says otherwise


def test_a_nic_written_virtualized_is_a_cloud_vms(write) -> None:
    collectives = next(p for p in default_files() if p.name == "collectives.csv")
    rows = {row["id"]: row for row in csv.DictReader(collectives.read_text(encoding="utf-8").splitlines())}
    assert "virtualized" in rows["n17"]["nic"] and "virtualized" not in rows["n25"]["nic"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows["n25"]))
    writer.writeheader()
    writer.writerow(rows["n25"])
    writer.writerow({**rows["n25"], "id": "vm", "nic": "10G Ethernet virtualized (a cloud VM)"})
    bare, cloud = validate_file(write("vm.csv", buffer.getvalue()))
    assert abs(bare.error_pct) <= 5.0  # 8 bare-metal nodes x 4 RTX 2080 Ti over 10 GbE sockets
    assert cloud.predicted == pytest.approx(bare.predicted * 0.55 / 0.94, rel=0.02)


def test_bad_validation_files(cli, write) -> None:
    line = one_error_line(cli("validate", str(write("x.csv", "a,b\n1,2\n"))))
    assert "not a validation file: missing columns" in line
    training = next(p for p in default_files() if p.name == "training.csv")
    broken = training.read_text(encoding="utf-8").replace(
        "t03,megatron-ptd,Narayanan et al. SC21 Table 1,A100-SXM4-80GB,8,8",
        "t03,megatron-ptd,Narayanan et al. SC21 Table 1,A100-SXM4-80GB,8,eight",
    )
    line = one_error_line(cli("validate", str(write("bad.csv", broken))))
    assert "line 4" in line and "t03" in line
    line = one_error_line(cli("validate", "/no/such.csv"))
    assert "no such validation CSV" in line


def test_names_as_papers_write_them() -> None:
    assert match_gpu("A100-SXM4-80GB") == "a100-sxm-80gb"
    assert match_gpu("A100-SXM4-40GB") == "a100-sxm-40gb"
    assert match_gpu("H100-SXM5-80GB") == "h100-sxm"
    assert match_gpu("GeForce RTX 2080 Ti") == "rtx-2080-ti"
    assert match_gpu("V100-SXM2") == "v100-sxm2-32gb"
    # A family is a word of the name: GB200 is not a B200, an H20 not an H200.
    assert match_gpu("GB200") == "gb200"
    assert match_gpu("NVIDIA B200") == "b200"
    assert match_gpu("H20") == "h20"
    assert match_gpu("H200") == "h200-sxm"
    assert match_nic("200G HDR InfiniBand") == "ib-hdr"
    assert match_nic("100G Ethernet") == "eth-100g"
    assert match_nic("400G NDR InfiniBand") == "ib-ndr"


COLLECTIVES, MEGATRON = "collectives.csv", "training-megatron-core.csv"


@pytest.mark.parametrize(
    ("name", "old", "new", "fragment"),
    [
        (COLLECTIVES, ",busbw_GBps,480.0,", ",busbw_GBps,0,", "value = '0' must be a positive number"),
        (COLLECTIVES, ",busbw_GBps,480.0,", ",busbw_GBps,nan,", "value = 'nan' must be a finite number"),
        (COLLECTIVES, ",busbw_GBps,480.0,", ",busbw_GBps,inf,", "value = 'inf' must be a finite number"),
        (COLLECTIVES, ",busbw_GBps,480.0,", ",busbw_GBps,-5,", "value = '-5' must be a positive number"),
        (
            COLLECTIVES,
            ",nvlstree,8,latency_us,",
            ",nvlstree,0,latency_us,",
            "size_bytes = '0' must be a positive number",
        ),
        (
            COLLECTIVES,
            "A100-SXM4-80GB,8,1,NVSwitch",
            "A100-SXM4-80GB,8,0,NVSwitch",
            "nodes = '0' must be a positive number",
        ),
        (
            COLLECTIVES,
            "c01,nvlink-node,DGX A100,A100-SXM4-80GB",
            "c01,nvlink-node,DGX A100,Z999",
            "cannot match GPU 'Z999'",
        ),
        # A yes/no column holding anything but true/false (yes/no, 1/0) names the column, not a silent false.
        (
            MEGATRON,
            ",true,true\n",
            ",maybe,true\n",
            "tp_comm_overlap = 'maybe' is not a yes/no value: use true or false",
        ),
        (MEGATRON, ",true,true\n", ",true,\u00b2\n", "pp_comm_overlap = '\u00b2' is not a yes/no value"),
    ],
)
def test_bad_values_in_a_validation_file(cli, write, name: str, old: str, new: str, fragment: str) -> None:
    shipped = next(p for p in default_files() if p.name == name).read_text(encoding="utf-8")
    assert old in shipped
    path = write("bad.csv", shipped.replace(old, new, 1))
    line = one_error_line(cli("validate", str(path)))
    assert fragment in line
    assert line.count(str(path)) == 1  # the file is named once


def test_megatrons_count_is_a_transformers(cli, write) -> None:
    shipped = next(p for p in default_files() if p.name == "training-megatron-core.csv").read_text(encoding="utf-8")
    row = next(csv.DictReader(io.StringIO(shipped)))
    blank = ("layers", "hidden", "heads", "kv_heads", "ffn", "seq_len", "vocab")
    row.update({key: "" for key in blank}, model="resnet50", tp="1", pp="1", cp="1", dp="64", interleave="1")
    row.update(recompute="none", metric="megatron_tflops_per_gpu")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(row), lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    line = one_error_line(cli("validate", str(write("vision.csv", out.getvalue()))))
    assert "megatron_tflops_per_gpu applies to transformer rows" in line


def test_a_row_run_with_nvls_disabled_is_priced_without_it(tmp_path: Path) -> None:
    """``NCCL_NVLS_ENABLE=0`` in a row's algorithm: NCCL chooses among the rest, and so does the model."""
    path = next(p for p in default_files() if p.name == "collectives.csv")
    header, *rows = path.read_text(encoding="utf-8").splitlines(keepends=True)
    g05 = next(r for r in rows if r.startswith("g05,"))
    assert "NCCL_NVLS_ENABLE=0" in g05
    (tmp_path / "off.csv").write_text(header + g05, encoding="utf-8")
    (tmp_path / "on.csv").write_text(header + g05.replace("NCCL_NVLS_ENABLE=0", "NCCL_NVLS_ENABLE=1"), encoding="utf-8")
    [off] = validate_file(tmp_path / "off.csv")
    [on] = validate_file(tmp_path / "on.csv")
    assert off.detail.endswith("ring/Simple") and on.detail.endswith("nvls/Simple")
    assert on.predicted > 1.3 * off.predicted  # NVLink SHARP reduces in the switch
