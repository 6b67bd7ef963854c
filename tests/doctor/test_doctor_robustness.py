"""Nothing a file holds can crash or hang the doctor, and data is never read as terminal markup.

Trees are copies of the fixtures with some files replaced by what a damaged,
hostile or odd node can hold: rich markup (``[/b]``), terminal escapes,
binary data, numbers thousands of digits long, files larger than any sysfs
attribute, a FIFO, a name that is not UTF-8.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, cli, only

from fabricscope.doctor.diagnosis import diagnose, doctor_result, open_root
from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.report import make_console, render_findings, verdict_line

IB0 = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
"""The PCI device behind ib0 (mlx5_0) in healthy-ib-8gpu."""
GPU = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"

NASTY = [
    "[/b]",
    "[bold red]x[/bold red] [link=http://x]y[/link]",
    ":smile: :thumbs_up:",
    "\x1b[31mred\x1b[0m\x07\x08\r",
    "\u202eevil",
    "9" * 5000,
    "-" + "1" * 4400,
    "0x" + "f" * 5000,
    "4: " + "A" * 3000,
    "400 Gb/sec (" + "[" * 100,
    "\x00\x00\x00",
    "",
    " ",
    "NaN",
    "inf",
    "1e999",
    "32.0 GT/s PCIe PCIe",
]


def copy_tree(name: str, dest: Path) -> Path:
    shutil.copytree(FIXTURES / name, dest, symlinks=True)
    return dest


def render(findings: list[Finding], where: str = "h") -> str:
    console = make_console(width=200)
    with console.capture() as captured:
        render_findings(console, findings, title=f"t {where}")
        console.print(verdict_line(findings, where))
    return captured.get()


def test_markup_in_findings_is_shown_as_text() -> None:
    findings = [
        Finding(id="nccl.algo_proto", severity=Severity.FAIL, subject="NCCL_ALGO", observed="NCCL_ALGO=[/x]"),
        Finding(id="rdma.firmware", severity=Severity.WARN, subject="hostA[rank 1]", observed="[bold]28.1[/bold]"),
        Finding(id="nic.mtu", severity=Severity.OK, subject="ib0", observed=":smile: \x1b[31m"),
    ]
    text = render(findings, where="[/b]host")
    assert "NCCL_ALGO=[/x]" in text and "hostA[rank 1]" in text and "[bold]28.1[/bold]" in text
    assert ":smile:" in text and "\\x1b[31m" in text and "\x1b" not in text
    assert "on [/b]host" in text


def test_a_file_holding_markup_cannot_crash_the_report_and_the_json_is_written(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    (tree / IB0 / "net/ib0/mtu").write_text("[/b]\n")
    (tree / IB0 / "infiniband/mlx5_0/fw_ver").write_text("[/x]\x1b[2J\n")
    (tree / "etc/nccl.conf").write_text("NCCL_ALGO=[/x]\nNCCL_DEBUG=[bold]\n")
    out = tmp_path / "m.json"
    result = cli("--root", str(tree), "--json", str(out), "--verbose")
    assert result.returncode == 2, result.stderr  # NCCL_ALGO names no algorithm
    assert "Traceback" not in result.stderr
    assert "unparsable '[/b]'" in result.stdout and "NCCL_ALGO=[/x]" in result.stdout
    assert "\x1b[2J" not in result.stdout and "\\x1b[2J" in result.stdout
    records = json.loads(out.read_text())["records"]
    assert any(r["observed"].startswith("NCCL_ALGO=[/x]") for r in records)


def test_fleet_labels_keep_their_brackets() -> None:
    from fabricscope.doctor.fleet import NodeReport, compare, group_reports
    from fabricscope.doctor.fleet_run import render_fleet

    reports = [
        NodeReport(rank=0, hostname="hostA", root="/", facts={"MTU": "4092"}, findings=[]),
        NodeReport(rank=1, hostname="hostA", root="/", facts={"MTU": "2044"}, findings=[]),
        NodeReport(rank=2, hostname="hostB", root="/", facts={"MTU": "4092"}, findings=[]),
    ]
    nodes = group_reports(reports)
    differences = compare({n.label: n.facts for n in nodes})
    console = make_console(width=200)
    with console.capture() as captured:
        render_fleet(console, nodes, differences, [])
    text = captured.get()
    assert "hostA[rank 1]" in text and "hostA[rank 1]: 2044" in text
    assert "odd one(s) out: hostA[rank 1]" in text


def test_nasty_contents_everywhere_never_crash(tmp_path: Path) -> None:
    """Every file of three trees replaced by nasty payloads: findings, a rendered report and a JSON Result."""
    rng = random.Random(4)
    for name in ("healthy-ib-8gpu", "roce-4gpu", "broken"):
        tree = copy_tree(name, tmp_path / name)
        files = [
            Path(d) / f
            for d, _, fs in os.walk(tree)
            for f in fs
            if not (Path(d) / f).is_symlink() and "manifest.json" not in f
        ]
        for index, path in enumerate(files):
            payload = NASTY[(index + rng.randrange(len(NASTY))) % len(NASTY)]
            path.write_bytes(payload.encode("utf-8", "surrogateescape") + (b"\xff\xfe" if index % 7 == 0 else b""))
        report = diagnose(open_root(str(tree)), env={"NCCL_IB_HCA": "[/b]", "NCCL_IB_GID_INDEX": "9" * 5000})
        assert report.findings
        render(report.findings, where=report.node.hostname)
        text = doctor_result(report.findings, config={}, hostname=report.node.hostname, env={}).to_json()
        assert json.loads(text)["kind"] == "doctor"


def test_huge_binary_and_undecodable_files(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    (tree / IB0 / "net/ib0/mtu").write_bytes(b"4092\n" + b"\x00" * (3 << 20))  # 3 MiB
    (tree / IB0 / "infiniband/mlx5_0/hca_type").write_bytes(os.urandom(4096))
    (tree / "fabricscope-capture/ethtool-S/ens10f0np0").write_text("rx_prio3_pause: " + "9" * 10000 + "\n")
    report = diagnose(open_root(str(tree)), env={})
    problems = {f.subject: f.observed for f in only(report.findings, "probe.read", Severity.WARN)}
    assert problems["sys/class/net/ib0/mtu"].startswith("larger than 1 MiB")
    render(report.findings)


def test_a_fifo_is_reported_not_read(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    (tree / IB0 / "net/ib0/mtu").unlink()
    os.mkfifo(tree / IB0 / "net/ib0/mtu")
    (tree / "etc/nccl.conf").unlink()
    os.mkfifo(tree / "etc/nccl.conf")
    result = cli("--root", str(tree), "--verbose", timeout=30)  # a blocking read would hang here
    assert result.returncode in (1, 2) and "Traceback" not in result.stderr
    out = " ".join(result.stdout.split())
    assert "sys/class/net/ib0/mtu" in out and "a FIFO, not a file: not read" in out


def test_an_interface_name_that_is_not_utf8(tmp_path: Path) -> None:
    tree = copy_tree("vm-virtio", tmp_path / "node")
    net = os.fsencode(tree / "sys/class/net")
    os.symlink(b"eth0", os.path.join(net, b"eth\xff"))
    result = cli("--root", str(tree), "--verbose")
    assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, result.stderr
    assert "eth\\udcff" in result.stdout


def test_old_kernels_unknown_speed_is_unknown_not_garbage(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    (tree / GPU / "current_link_speed").write_text("Unknown speed\n")  # pre-5.7 kernels
    report = diagnose(open_root(str(tree)), env={})
    assert not only(report.findings, "probe.read", Severity.WARN)
    [gpu] = [f for f in only(report.findings, "pcie.link") if f.subject == "GPU 0000:19:00.0"]
    assert (gpu.severity, gpu.observed) == (Severity.INFO, "speed unknown x16")


def test_paths_from_variables_stay_under_the_root(tmp_path: Path) -> None:
    """``..`` in NCCL_CONF_FILE / NCCL_TOPO_FILE never climbs out of the tree: ``/..`` is ``/``, as in a chroot.

    A file outside the tree and one inside it, at the path a chroot would
    reach, hold different settings: only the inside one may be read.
    """
    tree = copy_tree("vm-virtio", tmp_path / "node")
    (tmp_path / "outside.conf").write_text("NCCL_DEBUG=OUTSIDE\n")
    (tmp_path / "outside.xml").write_text("<system/>\n")
    escape = "/../../../../../../../.." + str(tmp_path)
    report = diagnose(open_root(str(tree)), env={"NCCL_CONF_FILE": f"{escape}/outside.conf"})
    assert "NCCL_DEBUG" not in report.node.nccl  # the outside file was not read...
    assert report.node.nccl_conf_unreadable is None or "outside" not in report.node.nccl_conf_unreadable
    inside = tree / str(tmp_path).lstrip("/") / "outside.conf"
    inside.parent.mkdir(parents=True)
    inside.write_text("NCCL_DEBUG=INSIDE\n")
    report = diagnose(open_root(str(tree)), env={"NCCL_CONF_FILE": f"{escape}/outside.conf"})
    assert report.node.nccl["NCCL_DEBUG"].value == "INSIDE"  # ...the one a chroot reaches was
    root = open_root(str(tree))
    report = diagnose(root, env={"NCCL_TOPO_FILE": f"{escape}/outside.xml"})
    assert report.node.topo_file_readable is False  # it exists only outside the tree
    read = root.read_paths()
    assert read and all(not rel.startswith(("/", "..")) and "/../" not in rel for rel in read)
    assert all((tree / rel).resolve().is_relative_to(tree.resolve()) or (tree / rel).is_symlink() for rel in read)


@pytest.mark.parametrize("variable", ["NCCL_CONF_FILE", "NCCL_TOPO_FILE"])
def test_odd_paths_from_variables_are_refused_reads_not_crashes(tmp_path: Path, variable: str) -> None:
    tree = copy_tree("vm-virtio", tmp_path / "node")
    for value, error in (("/etc/\x00x", "BADPATH"), ("/" + "a" * 5000, "ENAMETOOLONG")):
        root = open_root(str(tree))
        report = diagnose(root, env={variable: value})
        assert root.read_errors()[value.lstrip("/")] == error  # tried under the root, refused, recorded
        assert report.findings
        render(report.findings)


def test_an_invalid_mtu_is_its_own_finding_and_left_out_of_the_comparison(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    invalid = {"ib0": "-5", "ib1": "-5", "ib2": "-5", "ib3": "99999999"}  # half the compute NICs: no majority if kept
    for name, text in invalid.items():
        (tree / "sys/class/net" / name / "mtu").write_text(text + "\n")
    report = diagnose(open_root(str(tree)), env={})
    problems = {f.subject: f.observed for f in only(report.findings, "probe.read", Severity.WARN)}
    for name, text in invalid.items():
        assert problems[f"sys/class/net/{name}/mtu"] == f"unparsable '{text}' (expected a whole number from 0 to 65536)"
    mtu = {f.subject.split()[0]: f for f in only(report.findings, "nic.mtu")}
    for name in invalid:
        assert mtu[name].severity is Severity.WARN and mtu[name].observed.startswith("MTU unreadable or invalid")
        assert mtu[name].advice
    assert {name for name, f in mtu.items() if f.severity is Severity.OK} == {"ib4", "ib5", "ib6", "ib7"}
    assert not any("-5" in f.observed or "99999999" in f.observed for f in mtu.values())


@pytest.mark.parametrize("name", ["healthy-ib-8gpu", "roce-4gpu"])
def test_an_unreadable_file_never_makes_a_fail(tmp_path: Path, name: str) -> None:
    """Every file of a tree turned into a folder (EISDIR) or a link to ``/dev/zero``, in groups: what
    cannot be read is "could not read", never a new FAIL that would drain the node (a port whose state
    file was unreadable failed, so did GPUDirect with nvidia_peermem's version unreadable, and a RoCE
    port whose GID file was)."""
    tree = copy_tree(name, tmp_path / name)

    def fails() -> set[tuple[str, str]]:
        findings = diagnose(open_root(str(tree)), env={}).findings
        return {(f.id, f.subject) for f in findings if f.severity is Severity.FAIL}

    before = fails()  # roce-4gpu holds one fault of its own
    assert len(before) == (0 if name == "healthy-ib-8gpu" else 1)
    files = sorted(
        Path(d) / f
        for d, _, fs in os.walk(tree)
        for f in fs
        if not (Path(d) / f).is_symlink() and "manifest.json" not in f
    )
    folders = sorted({path.parent for path in files})
    groups = 40
    # Files spread over groups (neighbours fall in different ones), then whole folders at once (a port's
    # state and phys_state, a NIC's operstate and carrier: each unreadable alone was fine, both were not).
    by_file = [files[start::groups] for start in range(groups)]
    by_folder = [[f for f in files if f.parent in set(folders[start::groups])] for start in range(groups)]
    for group in by_file + by_folder:
        for index, path in enumerate(group):
            path.rename(path.with_name(path.name + ".away"))
            if index % 2:
                path.mkdir()
            else:
                path.symlink_to("/dev/zero")
        try:
            after = fails()
        finally:
            for path in group:
                path.unlink() if path.is_symlink() else path.rmdir()
                path.with_name(path.name + ".away").rename(path)
        assert after <= before, ([str(p.relative_to(tree)) for p in group], after - before)


def test_aer_counters_that_cannot_be_read_are_not_counted_as_zero(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    (tree / GPU / "aer_dev_fatal").unlink()
    (tree / GPU / "aer_dev_fatal").mkdir()
    (tree / GPU / "aer_dev_nonfatal").unlink()
    (tree / GPU / "aer_dev_nonfatal").symlink_to("/dev/zero")  # inside the root: nothing there
    findings = diagnose(open_root(str(tree)), env={}).findings
    [unknown] = only(findings, "pcie.aer", Severity.WARN)
    assert unknown.subject == "GPU 0000:19:00.0"
    assert unknown.observed == "could not read aer_dev_nonfatal, aer_dev_fatal (the others count no errors)"
    [clean] = only(findings, "pcie.aer", Severity.OK)
    assert clean.subject == "47 devices and bridges"  # 48 before: the GPU is not called clean
    (tree / GPU / "aer_dev_correctable").write_text(
        (tree / GPU / "aer_dev_correctable").read_text().replace("TOTAL_ERR_COR 0", "TOTAL_ERR_COR 5")
    )
    [counted] = only(diagnose(open_root(str(tree)), env={}).findings, "pcie.aer", Severity.WARN)
    assert counted.observed.startswith("correctable 5") and counted.observed.endswith(
        "; could not read aer_dev_nonfatal, aer_dev_fatal"
    )


def test_a_nic_whose_state_files_cannot_be_read_is_not_called_down(tmp_path: Path) -> None:
    tree = copy_tree("healthy-ib-8gpu", tmp_path / "node")
    for name in ("operstate", "carrier"):
        (tree / IB0 / "net/ib0" / name).unlink()
        (tree / IB0 / "net/ib0" / name).mkdir()
    findings = diagnose(open_root(str(tree)), env={}).findings
    assert only(findings, "nic.link", Severity.FAIL) == []
    [unknown] = only(findings, "nic.link", Severity.WARN)
    assert unknown.observed == "could not read whether it is up: operstate unreadable, carrier unknown"
