"""The samplers over a fixture sequence: rates, wraps, resets, saturation, ports that come and go, bad files."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path

import pytest
from monitor_helpers import FIXTURES, SEQUENCE, Sequence

from fabricscope.monitor.deltas import counter_delta
from fabricscope.monitor.samplers import NetDevSampler, RdmaSampler, TcpSampler, default_samplers, take_snapshot
from fabricscope.monitor.samples import Counter, Notes, Port, Snapshot
from fabricscope.sysroot import MANIFEST, SysRoot


def tree_snapshot(path: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(path))
            out[rel] = f"-> {os.readlink(full)}" if full.is_symlink() else ("" if full.is_dir() else full.read_text())
    return out


def test_committed_sequence_matches_the_builder(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("monitor_build_fixtures", FIXTURES / "build_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["monitor_build_fixtures"] = module
    spec.loader.exec_module(module)
    module.build(tmp_path)
    assert tree_snapshot(tmp_path / "roce-sequence") == tree_snapshot(SEQUENCE), "rerun build_fixtures.py"


def by_label(records: list[dict[str, object]], t_s: float) -> dict[str, dict[str, object]]:
    return {str(r["label"]): r for r in records if r["t_s"] == t_s}


def test_rates_through_a_64_bit_wrap_and_the_rdma_unit_of_four_bytes() -> None:
    first = by_label(Sequence().run(), 1.0)
    rdma = first["mlx5_0/1"]
    assert rdma["tx_bytes"] == (1_000_000 + 5_249_000_000) * 4  # through 2**64, in 4-byte words
    assert rdma["tx_gbit_per_s"] == pytest.approx(168.0, rel=1e-3)
    assert rdma["utilization"] == pytest.approx(0.84, rel=1e-3)
    assert rdma["errors"] == {"symbol_error": 2}
    assert rdma["congestion"] == {"hw:np_cnp_sent": 80, "hw:rp_cnp_handled": 40, "port_xmit_wait": 5000}
    nic = first["ens1f0np0"]
    assert nic["rx_gbit_per_s"] == pytest.approx(100.0) and nic["utilization"] == pytest.approx(0.5)
    assert nic["congestion"] == {"ethtool:rx_prio3_pause": 40}  # from the capture's ethtool -S
    assert first["eth1"]["rx_bytes"] == (1 << 32) - 4_294_967_000 + 1_000  # a 32-bit /proc/net/dev wraps
    assert first["tcp"]["retrans_ratio"] == pytest.approx(2.5e-3)


def test_reset_saturation_state_and_ports_that_come_and_go_are_each_said_once() -> None:
    sequence = Sequence()
    second = by_label(sequence.run(), 2.0)
    rdma = second["mlx5_0/1"]
    assert rdma["rx_bytes"] == 1_000 * 4  # went back: a reset, counted from zero
    assert rdma["link_up"] is False and rdma["link_state"] == "DOWN/Disabled"
    assert rdma["errors"] == {"link_downed": 1}
    assert "ib1" not in second and second["ib2"]["rx_bytes"] is None  # new: no rate before its second sample
    said = sequence.notes.said
    for fragment in (
        "eth1 rx_bytes wrapped",
        "mlx5_0/1 port_xmit_data wrapped",
        "mlx5_0/1 port_rcv_data went back (a reset)",
        "mlx5_0/1 link_downed is at its 8-bit maximum",
        "ib1 vanished",
        "ib2 appeared",
        "out_of_sequence: 'not-a-number' is not a counter",
    ):
        assert sum(fragment in note for note in said) == 1, (fragment, said)
    # The saturated counter and the garbage file are still there at every sample: nothing more is said.
    count = len(said)
    for _ in range(3):
        snap = take_snapshot(default_samplers(SysRoot(SEQUENCE / "t2")), sequence.notes)
        sequence.tracker.update(snap)
    assert len(sequence.notes.said) == count


def test_summary_and_verdict_of_the_sequence() -> None:
    sequence = Sequence()
    sequence.run()
    summary = sequence.summary.to_dict()
    assert summary["bound"] == "network-bound"
    assert summary["verdict"].startswith(
        "mlx5_0/1 (200 Gb/s) ran at 84% of line rate on average, at 80% or more for 100% of the time: "
        "this job is network-bound"
    )
    assert "unhealthy" in summary["verdict"] and "TCP retransmission ratio 0.12%" in summary["verdict"]
    assert "mlx5_0/1 down for 1 s" in summary["verdict"]
    rdma = next(p for p in summary["ports"] if p["label"] == "mlx5_0/1")
    assert rdma["errors"] == {"link_downed": 1, "symbol_error": 2}
    assert rdma["tx_bytes"] == 2 * 21_000_000_000
    from fabricscope.monitor.view import summary_lines

    header, row = next((a, b) for a, b in itertools.pairwise(summary_lines(summary)) if "moved rx+tx" in a)
    moved = (rdma["rx_bytes"] + rdma["tx_bytes"]) / 1e9  # the column sums both directions, as it says
    assert row.split()[0] == "mlx5_0/1" and f"{moved:.3f} GB" in row, (header, row)


def test_unreadable_counters_are_notes_not_crashes(tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "t"
    shutil.copytree(SEQUENCE / "t0", tree, symlinks=True)
    counters = tree / "sys/devices/pci0000:00/0000:00:02.0/0000:17:00.0/infiniband/mlx5_0/ports/1/counters"
    (counters / "symbol_error").unlink()
    (counters / "symbol_error").mkdir()  # EISDIR
    (counters / "port_rcv_errors").unlink()
    os.mkfifo(counters / "port_rcv_errors")  # would block a plain reader forever
    (tree / MANIFEST).parent.mkdir(parents=True, exist_ok=True)
    (tree / MANIFEST).write_text('{"errors": {"proc/net/snmp": "EACCES"}}')
    (tree / "proc/net/dev").write_bytes(b"\xff\xfe not text")
    notes = Notes()
    snap = Snapshot(time_s=0.0, wall_time=0.0)
    root = SysRoot(tree)
    for sampler in (RdmaSampler(root), TcpSampler(root), NetDevSampler(root)):
        sampler.sample(snap, notes)
    port = Port("rdma", "mlx5_0", "1")
    assert snap.counters[(port, Counter("port_xmit_data"))] == (1 << 64) - 1_000_000
    assert (port, Counter("symbol_error")) not in snap.counters
    assert (port, Counter("port_rcv_errors")) not in snap.counters
    text = "\n".join(notes.said)
    assert "symbol_error: unreadable" in text and "port_rcv_errors: unreadable" in text
    assert "proc/net/snmp: unreadable (Permission denied)" in text
    assert "proc/net/dev: unreadable (not text" in text


@pytest.mark.parametrize(
    ("before", "after", "delta", "event"),
    [
        (10, 25, 15, None),
        ((1 << 32) - 10, 5, 15, "wrap"),
        ((1 << 64) - 10, 5, 15, "wrap"),
        (1_000_000, 10, 10, "reset"),
        ((1 << 32) - 10, (1 << 31), 1 << 31, "reset"),  # not near zero: a reset, not a wrap
        (7, 7, 0, None),
    ],
)
def test_counter_delta(before: int, after: int, delta: int, event: str | None) -> None:
    assert counter_delta(before, after) == (delta, event)


def test_notes_stop_growing_past_their_cap() -> None:
    from fabricscope.monitor.samples import MAX_NOTES

    notes = Notes()
    for i in range(MAX_NOTES * 3):
        notes.once(f"veth{i}", f"veth{i} appeared")
    assert len(notes.said) == MAX_NOTES + 1
    assert notes.said[-1] == f"more than {MAX_NOTES} notes: the rest are left out"


def test_a_vanished_port_leaves_the_running_totals() -> None:
    sequence = Sequence()
    sequence.run()
    ports = {port.device for port, _ in sequence.tracker.totals}
    assert "ib1" not in ports and "ib2" in ports and "ens1f0np0" in ports
