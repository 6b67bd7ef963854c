"""The doctor and the monitor read the kernel's files through one set of parsers, so they agree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabricscope.doctor.probes import probe_node
from fabricscope.monitor.samplers import NetDevSampler, RdmaSampler
from fabricscope.monitor.samples import Notes, Port, Snapshot
from fabricscope.sysroot import SysRoot

FIXTURES = Path(__file__).parent / "doctor" / "fixtures"


@pytest.mark.parametrize("tree", ["healthy-ib-8gpu", "degraded-ib-8gpu", "roce-4gpu"])
def test_doctor_and_monitor_read_the_same_rdma_rates_and_states(tree: str) -> None:
    node = probe_node(SysRoot(FIXTURES / tree), env={})
    snap = Snapshot(time_s=0.0, wall_time=0.0)
    RdmaSampler(SysRoot(FIXTURES / tree)).sample(snap, Notes())
    assert node.ports
    for port in node.ports:
        link = snap.links[Port("rdma", port.device, str(port.port))]
        assert link.speed_bps == (None if port.rate_gbps is None else port.rate_gbps * 1e9)
        assert link.state.split("/")[0] == (port.state[1] if port.state else "unknown")


@pytest.mark.parametrize(("text", "mbps"), [("4294967295", None), ("-1", None), ("0", None), ("100000", 100000)])
def test_a_net_speed_means_one_thing_to_both(tmp_path: Path, text: str, mbps: int | None) -> None:
    tree = tmp_path / "root"
    shutil.copytree(FIXTURES / "vm-virtio", tree, symlinks=True)
    nic = next(n for n in probe_node(SysRoot(tree), env={}).nics if not n.virtual)
    (tree / f"sys/class/net/{nic.name}/speed").write_text(text + "\n")
    (tree / "proc/net").mkdir(parents=True, exist_ok=True)
    (tree / "proc/net/dev").write_text(
        "Inter-|   Receive | Transmit\n face |bytes packets\n" + f"{nic.name}: " + " ".join(["1"] * 16) + "\n"
    )
    doctor = next(n for n in probe_node(SysRoot(tree), env={}).nics if n.name == nic.name)
    snap = Snapshot(time_s=0.0, wall_time=0.0)
    NetDevSampler(SysRoot(tree)).sample(snap, Notes())
    assert doctor.speed_mbps == mbps
    assert snap.links[Port("net", nic.name)].speed_bps == (None if mbps is None else mbps * 1e6)


def test_gids_read_as_ipaddress_reads_them() -> None:
    """A GID is all zeros (unused) or link-local (fe80::/10) exactly when Python's ipaddress says so."""
    import ipaddress
    import random

    from fabricscope.kernel_text import gid_is_link_local, gid_is_zero

    pieces = ["0", "0000", "fe80", "FE80", "febf", "fec0", "fe7f", "ffff", "1", "a", "g", "", "12345", " 0"]
    rng = random.Random(7)
    gids = ["fe80:0000:0000:0000:0202:c9ff:fe00:0001\n", "0000:0000:0000:0000:0000:ffff:0a00:0001", "fe80::1", ""]
    gids += [":".join(rng.choice(pieces) for _ in range(rng.choice([7, 8, 8, 9]))) for _ in range(5000)]
    for gid in gids:
        groups = gid.strip().split(":")
        valid = len(groups) == 8 and all(
            1 <= len(g) <= 4 and all(c in "0123456789abcdefABCDEF" for c in g) for g in groups
        )
        address = ipaddress.IPv6Address(":".join(groups)) if valid else None
        assert gid_is_zero(gid) == (address is None or int(address) == 0), gid
        assert gid_is_link_local(gid) == (address is not None and address.is_link_local), gid
