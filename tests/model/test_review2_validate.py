"""Review 2 (defects 3, 11, 13): `validate` reads a row's virtual NIC and transport only from what
it says, counts each file once, and its JSON carries the figures its text prints."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from model_helpers import one_error_line

from fabricscope.model.validation import default_files

COLLECTIVES = next(p for p in default_files() if Path(str(p)).name == "collectives.csv")


def _rows(*ids: str, **changes: str) -> str:
    """The shipped collectives rows ``ids``, as a CSV without the ``virtualized`` column unless
    ``changes`` set it, with ``changes`` applied to every row."""
    rows = [
        r for r in csv.DictReader(Path(str(COLLECTIVES)).read_text(encoding="utf-8").splitlines()) if r["id"] in ids
    ]
    columns = [c for c in rows[0] if c != "virtualized" or "virtualized" in changes]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, **changes})
    return out.getvalue()


def _error(cli, path: Path) -> float:
    done = cli("validate", str(path))
    assert done.code == 0, done.err
    line = next(x for x in done.out.splitlines() if x.strip().startswith(("n25", "n17", "c02")))
    return float(line.split("%")[0].split()[-1])


@pytest.mark.parametrize(
    ("nic", "virtual"),
    [
        ("10G Ethernet", False),
        ("10G Ethernet (bare metal, not virtualized)", False),
        ("10G Ethernet non-virtualized", False),
        ("10G Ethernet virtualized (a cloud VM)", True),
    ],
)
def test_the_nic_text_marks_a_virtual_nic_only_without_a_negation(cli, write, nic: str, virtual: bool) -> None:
    error = _error(cli, write("n.csv", _rows("n25", nic=nic)))
    assert (error < -30) is virtual, error  # a virtual NIC's share is 0.55 of bare metal's 0.94


def test_the_virtualized_column_decides(cli, write) -> None:
    assert _error(cli, write("a.csv", _rows("n25", virtualized="true"))) < -30
    assert abs(_error(cli, write("b.csv", _rows("n25", nic="10G Ethernet virtualized", virtualized="false")))) < 5
    line = one_error_line(cli("validate", str(write("c.csv", _rows("n25", virtualized="maybe")))))
    assert "row n25" in line and "virtualized = 'maybe' must be true or false" in line


def test_shipped_virtual_rows_carry_the_column() -> None:
    rows = list(csv.DictReader(Path(str(COLLECTIVES)).read_text(encoding="utf-8").splitlines()))
    assert (
        {r["id"] for r in rows if r["virtualized"] == "true"}
        == {r["id"] for r in rows if "virtualized" in r["nic"]}
        == {"n17", "n18", *(f"k{i:02d}" for i in range(1, 17))}  # cloud VMs: Azure, AWS, GCP's A3
    )


@pytest.mark.parametrize("text", ["foo", "tcp-sockt", "ib-rdmaa", "rdma gdr please"])
def test_an_unknown_transport_is_refused_in_one_line(cli, write, text: str) -> None:
    path = write("t.csv", _rows("c02", transport=text))
    line = one_error_line(cli("validate", str(path)))
    assert str(path) in line and "row c02" in line and f"transport = {text!r} is not a known transport" in line
    assert "rdma-gdr" in line and "tcp-socket" in line


@pytest.mark.parametrize(("text", "error"), [("", -0.4), ("ib-rdma-gdr", -0.4), ("RoCE-GDR", -0.4)])
def test_known_transports_parse(cli, write, text: str, error: float) -> None:
    assert _error(cli, write("t.csv", _rows("c02", transport=text))) == error


def test_a_file_named_twice_is_refused(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("v1.csv").write_text(_rows("n17"), encoding="utf-8")
    line = one_error_line(cli("validate", "v1.csv", "v1.csv"))
    assert "validation CSV 'v1.csv' is named twice" in line
    line = one_error_line(cli("validate", "v1.csv", f"{tmp_path}/v1.csv"))
    assert "named twice (as 'v1.csv' and" in line
    assert cli("validate", "v1.csv").code == 0


def test_json_groups_carry_the_kept_figures(cli, tmp_path) -> None:
    out = tmp_path / "v.json"
    done = cli("validate", "--json", str(out))
    assert done.code == 0, done.err
    groups = json.loads(out.read_text())["summary"]["groups"]
    printed = {}
    for line in done.out.split("error by group")[1].splitlines()[2:]:
        name, *cells = line.split()
        printed[name] = cells
    assert set(printed) == set(groups)
    for name, stats in groups.items():
        cells = printed[name]
        assert int(cells[3]) == stats["kept_rows"]
        if stats["kept_rows"]:
            assert cells[4] == f"{stats['kept_median_abs_error_pct']:.1f}%"
            assert cells[5] == f"{stats['kept_worst_abs_error_pct']:.1f}%"
    assert groups["overall"]["kept_rows"] < groups["overall"]["rows"]
