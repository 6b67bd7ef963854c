"""Google's GPUDirect-TCPX and TCPXO: the transports, their presets, and what predict says about them."""

from __future__ import annotations

import csv

import pytest
from model_helpers import one_error_line

from fabricscope.model.cluster import load_cluster
from fabricscope.model.fabric import fabric_of, transport_extra_us
from fabricscope.model.hardware import Transport, lookup
from fabricscope.model.predict import predict
from fabricscope.model.uncertainty import collective_group, for_collectives
from fabricscope.model.validation import default_files, validate_file
from fabricscope.ops import get as get_op

NIC_GBPS = 200 / 8  # one 200 Gb/s GPU NIC, GB/s


def _busbw(preset: str, op: str, size: int, algo: str = "auto") -> float:
    return predict(load_cluster(preset), {get_op(op).name: [size]}, algo=algo).ops[0].records[0].busbw_gbps


@pytest.mark.parametrize(("preset", "nics"), [("gcp-a3-high", 4), ("gcp-a3-mega", 8)])
def test_large_transfers_run_at_the_transports_share_of_every_nic(preset: str, nics: int) -> None:
    # Payloads go between the NIC and GPU memory (no bounce through the host), so a 2-node ring is the
    # NICs' line rate times Device Memory TCP's 96.6%, whatever the PCIe path of a host copy would allow.
    transport = lookup("transport", load_cluster(preset).spec.network.transport, Transport)
    assert transport.gdr and transport.efficiency == pytest.approx(0.966)
    # (the catalog's 200 Gb/s NIC sits in a PCIe Gen4 x16 slot, 23.9 GB/s, a hair under 96.6% of its line)
    per_nic = float(fabric_of(load_cluster(preset)).nic_gbps)
    assert 0.98 * NIC_GBPS * 0.966 < per_nic <= NIC_GBPS * 0.966
    assert 0.95 * nics * per_nic < _busbw(preset, "all_gather", 4 << 30) <= nics * per_nic


def test_each_network_step_pays_a_tcp_transports_latency() -> None:
    tcp = transport_extra_us(lookup("transport", "tcp-socket", Transport))
    for name in ("gpudirect-tcpx", "gpudirect-tcpxo"):
        assert transport_extra_us(lookup("transport", name, Transport)) == tcp == pytest.approx(28.5)


@pytest.mark.parametrize(
    ("transport", "named"),
    [("gpudirect-tcpx", "GPUDirect-TCPX (A3 High and Edge)"), ("gpudirect-tcpxo", "GPUDirect-TCPXO (A3 Mega)")],
)
def test_they_are_googles_ethernet_nics(cli, write, transport: str, named: str) -> None:  # type: ignore[no-untyped-def]
    text = f'nodes = 2\ngpus_per_node = 8\ngpu = "h100-sxm"\n[network]\nnic = "ib-ndr"\ntransport = "{transport}"\n'
    done = cli("predict", "--cluster", str(write("g.toml", text)), "-b", "1M", "-e", "1M")
    assert done.code == 2 and "Traceback" not in done.err, done.err
    assert f"network.transport = '{transport}' is Google's {named}, whose GPU NICs are 'eth-200g'" in done.err
    assert "use nic = 'eth-200g'" in done.err and len(done.err.strip().splitlines()) == 1
    # Ethernet of another speed is not A3's either: its GPU NICs are 200 Gb/s.
    for nic in ("eth-1g", "eth-400g"):
        other = cli("predict", "--cluster", str(write("s.toml", text.replace('"ib-ndr"', f'"{nic}"'))), "-b", "1M")
        assert other.code == 2 and f"and the cluster's is {nic}" in other.err, other.err


def test_predictions_carry_the_errors_of_rows_measured_on_the_same_transport() -> None:
    high, mega = load_cluster("gcp-a3-high"), load_cluster("gcp-a3-mega")
    assert collective_group(high) == collective_group(mega) == "gpudirect-tcp"
    rows = [c for c in validate_file(_collectives()) if c.group == "gpudirect-tcp"]
    tcpx = [c for c in rows if c.description.endswith("GPUDirect-TCPX")]
    tcpxo = [c for c in rows if c.description.endswith("GPUDirect-TCPXO")]
    assert len(tcpx) == 7 and len(tcpxo) == 9
    sure_high, sure_mega = for_collectives(high), for_collectives(mega)
    assert sure_high.rows == len(tcpx) and sure_mega.rows == len(tcpxo)
    assert sure_high.median_abs_error_pct > 25 and sure_high.median_abs_error_pct > 2 * sure_mega.median_abs_error_pct
    assert any("lacks the host's ceiling" in w and "fabricscope calibrate" in w for w in sure_high.warnings)
    said = "on GPUDirect-TCPXO the model prices each network step at a TCP transport's 30 us"
    assert any(said in w for w in sure_mega.warnings)
    # The share it names is the one it prices: Device Memory TCP's, within the NIC's PCIe slot.
    per_nic = float(fabric_of(high).nic_gbps) / NIC_GBPS
    assert any(f"prices {per_nic:.1%} of each NIC's line rate" in w for w in sure_high.warnings)
    assert not any("GPUDirect-TCPXO" in w for w in sure_high.warnings)
    assert not any("GPUDirect-TCPX " in w or "host's ceiling" in w for w in sure_mega.warnings)
    assert not any("GPUDirect" in w for w in for_collectives(load_cluster("cloud-h100-tcp")).warnings)
    # One node moves nothing over the network: no word about its transport.
    for one in (high.with_nodes(1), mega.with_nodes(1)):
        assert not any("GPUDirect" in w for w in for_collectives(one).warnings)


@pytest.mark.parametrize(
    ("written", "transport"),
    [
        ("tcpx", "gpudirect-tcpx"),
        ("GPUDirect-TCPX", "gpudirect-tcpx"),
        ("tcpxo", "gpudirect-tcpxo"),
        ("TCPXO (plugin 1.0.15)", "gpudirect-tcpxo"),
    ],
)
def test_a_validation_row_may_name_them_as_users_do(written: str, transport: str) -> None:
    from fabricscope.model.validation import _transport

    assert _transport(written, "eth-200g") == transport


def _collectives():  # type: ignore[no-untyped-def]
    return next(p for p in default_files() if p.name == "collectives.csv")


def test_the_preset_predicts_what_validate_prices_for_the_published_rows() -> None:
    # One number, one path: a row's hardware columns and the preset describe the same VMs.
    rows = {r["id"]: r for r in csv.DictReader(_collectives().read_text(encoding="utf-8").splitlines())}
    checks = {c.id: c for c in validate_file(_collectives())}
    for row_id, preset in (("k04", "gcp-a3-mega"), ("k08", "gcp-a3-high"), ("k11", "gcp-a3-high")):
        row = rows[row_id]
        algo = "ring" if row["algorithm"].startswith("ring") else "auto"  # k11's run forced NCCL_ALGO=Ring
        predicted = _busbw(preset, row["collective"], int(row["size_bytes"]), algo)
        assert predicted == pytest.approx(checks[row_id].predicted, rel=1e-9)


def test_the_tcpxo_rows_are_priced_within_the_target_and_the_tcpx_rows_say_what_is_missing() -> None:
    rows = [c for c in validate_file(_collectives()) if c.group == "gpudirect-tcp"]
    kept = [abs(c.error_pct) for c in rows if not c.known_off]
    assert kept and max(kept) <= 25
    for check in rows:
        if check.description.endswith("GPUDirect-TCPX"):
            assert check.known_off and check.error_pct > 25  # the model is faster: it lacks the host's ceiling


def test_a_row_names_its_transport_as_a_whole_word() -> None:
    from fabricscope.model.uncertainty import _measured_on, _Row

    def row(system: str) -> _Row:
        return _Row("x", "gpudirect-tcp", "h100-sxm", 2, 1.0, system)

    assert _measured_on(row("2 VMs, GPUDirect-TCPX"), "gpudirect-tcpx")
    assert not _measured_on(row("2 VMs, GPUDirect-TCPXO"), "gpudirect-tcpx")
    assert not _measured_on(row("2 VMs, not-GPUDirect-TCPX"), "gpudirect-tcpx")
    assert _measured_on(row("2 VMs (4x 100 Gb/s EFA each)"), "efa")
    assert not _measured_on(row("2 VMs, EFAv2"), "efa")


def test_a_transport_that_is_only_a_comment_is_refused(cli, write) -> None:  # type: ignore[no-untyped-def]
    lines = _collectives().read_text(encoding="utf-8").splitlines()
    header, k02 = lines[0], next(line for line in lines if line.startswith("k02,"))
    bad = write("c.csv", header + "\n" + k02.replace(",gpudirect-tcpxo,", ",(tcpxo),") + "\n")
    line = one_error_line(cli("validate", str(bad)))
    assert "row k02" in line and "transport = '(tcpxo)' is only a comment" in line
