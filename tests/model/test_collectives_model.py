"""The collective cost model: the physics it must show, and one code path for scalars and arrays."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fabricscope.model import collective_cost as coll
from fabricscope.model.cluster import Cluster, ClusterSpec, load_cluster, resolve
from fabricscope.model.fabric import fabric_of
from fabricscope.model.hardware import Transport, lookup


def net(cluster: Cluster, **changes: object) -> Cluster:
    spec = dataclasses.replace(cluster.spec, network=dataclasses.replace(cluster.spec.network, **changes))
    return resolve(spec, name="variant", source="variant")


def best(cluster: Cluster, nbytes: float, algo: str | None = None) -> tuple[float, str]:
    fab = fabric_of(cluster)
    seconds, labels = coll.choose(
        coll.all_reduce(fab, nbytes, float(cluster.gpus_per_node), float(cluster.nodes)), algo
    )
    return float(seconds), labels[0]


def busbw(cluster: Cluster, nbytes: float, algo: str | None = None) -> float:
    seconds, _ = best(cluster, nbytes, algo)
    p = cluster.gpus
    return 2 * (p - 1) / p * nbytes / seconds / 1e9


def test_ring_is_its_slowest_hop() -> None:
    one = load_cluster("dgx-a100-hdr").with_nodes(1)
    two = one.with_nodes(2)
    assert busbw(one, 8 << 30) == pytest.approx(12 * 20.0, rel=0.01)  # 12 NVLinks x NCCL's 20 GB/s
    assert busbw(two, 8 << 30, "ring") == pytest.approx(8 * 25 * 0.96, rel=0.01)  # 8 NICs x 200G x RDMA
    fewer = net(two, nics_per_node=2)
    assert busbw(fewer, 8 << 30, "ring") == pytest.approx(2 * 25 * 0.96, rel=0.01)


def test_pcie_slot_caps_a_fast_nic() -> None:
    a100 = load_cluster("dgx-a100-hdr").with_nodes(2)
    ndr_in_gen4 = net(a100, nic="ib-ndr", nics_per_node=1)
    assert busbw(ndr_in_gen4, 8 << 30, "ring") == pytest.approx(31.5 * 0.76, rel=0.01)


def test_tcp_reaches_far_less_of_line_rate_than_rdma() -> None:
    v100 = load_cluster("v100-100gbe-tcp")
    tcp = busbw(v100, 1 << 30, "ring")
    rdma = busbw(net(v100, transport="rdma-gdr").with_nodes(2), 1 << 30, "ring")  # RoCE, before scale losses
    assert tcp < 0.5 * 12.5 < 0.9 * 12.5 < rdma


def test_sockets_fill_a_bare_metal_nic_and_not_a_cloud_vms() -> None:
    sockets = lookup("transport", "tcp-socket", Transport)
    # Bare metal: the TCP payload of a full MTU-1500 frame (1500 - 20 IP - 20 TCP - 12 timestamps)
    # over what it takes on the wire (+ 14 Ethernet header, 4 FCS, 8 preamble, 12 gap).
    assert sockets.efficiency == pytest.approx(1448 / 1538, abs=0.005)
    assert sockets.virtualized_efficiency < 0.6 * sockets.efficiency
    ten = net(load_cluster("v100-100gbe-tcp"), nic="eth-10g").with_nodes(8)
    cloud = net(ten, virtualized=True)
    assert float(fabric_of(ten).nic_gbps) == pytest.approx(sockets.efficiency * 10 / 8)
    assert float(fabric_of(cloud).nic_gbps) == pytest.approx(sockets.virtualized_efficiency * 10 / 8)
    # A ring across 8 nodes of one NIC each runs at that NIC: the 8 x 4 RTX 2080 Ti row, 1.17 GB/s.
    assert busbw(ten, 512 << 20, "ring") == pytest.approx(sockets.efficiency * 10 / 8, rel=0.03)
    assert busbw(cloud, 512 << 20, "ring") < 0.6 * busbw(ten, 512 << 20, "ring")
    # A 100 GbE NIC meets the socket threads' host-copy ceiling either way.
    hundred = load_cluster("v100-100gbe-tcp")
    for cluster in (hundred, net(hundred, virtualized=True)):
        assert float(fabric_of(cluster).nic_gbps) == pytest.approx(sockets.host_ceiling_gbps)
    # RDMA on a cloud NIC is not the socket transport's problem.
    rdma = net(ten, transport="rdma-gdr")
    assert float(fabric_of(net(rdma, virtualized=True)).nic_gbps) == float(fabric_of(rdma).nic_gbps)


def test_a_clouds_per_flow_cap_holds_each_tcp_connection() -> None:
    # AWS: one TCP flow gets 10 Gb/s inside a cluster placement group; NCCL 2.3 opens one connection
    # per ring and builds one ring per NIC, so a 25 GbE virtual NIC carries 10 Gb/s of frames.
    sockets = lookup("transport", "tcp-socket", Transport)
    aws = net(load_cluster("v100-100gbe-tcp"), nic="eth-25g", virtualized=True).with_nodes(4)
    one = net(aws, flow_gbps=10.0, flows=1)
    assert float(fabric_of(aws).nic_gbps) == pytest.approx(sockets.virtualized_efficiency * 25 / 8)
    assert float(fabric_of(one).nic_gbps) == pytest.approx(sockets.efficiency * 10 / 8)
    assert busbw(one, 512 << 20, "ring") < busbw(aws, 512 << 20, "ring")
    # Enough connections and the NIC is the limit again; RDMA is not a TCP flow.
    assert float(fabric_of(net(aws, flow_gbps=10.0, flows=4)).nic_gbps) == float(fabric_of(aws).nic_gbps)
    rdma = net(aws, transport="rdma-gdr", virtualized=False)
    assert float(fabric_of(net(rdma, flow_gbps=10.0)).nic_gbps) == float(fabric_of(rdma).nic_gbps)


def test_flow_cap_keys_out_of_range_are_one_line(cli, write) -> None:  # type: ignore[no-untyped-def]
    for key, value, allowed in (
        ("flows", "0", "from 1 to 1024"),
        ("flow_gbps", "-1", "0 (no cap) or from 0.001"),
        ("flow_gbps", "1e-300", "0 (no cap) or from 0.001"),
    ):
        path = write(
            "c.toml",
            'nodes = 2\ngpu = "v100-sxm2-32gb"\n[network]\nnic = "eth-25g"\ntransport = "tcp-socket"\n'
            f"{key} = {value}\n",
        )
        done = cli("predict", "--cluster", str(path), "all_reduce")
        assert done.code == 2 and "Traceback" not in done.err, done.err
        assert key in done.err and allowed in done.err, done.err


def test_small_messages_pay_latency_and_tcp_pays_more() -> None:
    rdma = load_cluster("dgx-h100-ndr").with_nodes(4)
    tcp = net(rdma, nic="eth-400g", transport="tcp-socket")
    small_rdma, _ = best(rdma, 8)
    small_tcp, _ = best(tcp, 8)
    assert 10e-6 < small_rdma < 60e-6
    assert small_tcp > 3 * small_rdma
    # A 1 GiB all-reduce is bandwidth-bound: latency is a rounding error.
    big, label = best(rdma, 1 << 30)
    assert label.endswith("Simple")
    assert big > 100 * small_rdma


def test_protocol_follows_size() -> None:
    two = load_cluster("dgx-a100-hdr").with_nodes(2)
    assert best(two, 8)[1].endswith("/LL")
    assert best(two, 8 << 30)[1].endswith("/Simple")


def test_a_classic_tree_stays_under_the_wire_on_two_multi_gpu_nodes() -> None:
    # nccl-tests issues 169 and 175: 2-node A100 runs reach about the wire (100 and 86 of 96),
    # not the twice-the-wire a tree moving each byte once would give.
    two = load_cluster("dgx-a100-hdr").with_nodes(2)
    eight = two.with_nodes(8)
    wire = 8 * 25 * 0.96
    assert busbw(two, 8 << 30, "tree") < wire
    assert busbw(eight, 8 << 30, "tree") < wire
    # One rank per node: the 2-node tree is an exchange, each byte crosses once each way.
    single = net(two, nics_per_node=1)
    single = resolve(dataclasses.replace(single.spec, gpus_per_node=1), name="one", source="one")
    assert busbw(single, 8 << 30, "tree") == pytest.approx(25 * 0.96 * 0.92, rel=0.02)


def test_one_gpu_drives_no_more_network_than_its_pcie_link() -> None:
    # nccl-tests issue 232: one H100 per node behind four 400G NICs reaches ~50 GB/s, not 192.
    four = net(load_cluster("dgx-h100-ndr").with_nodes(2), nics_per_node=4)
    one = resolve(dataclasses.replace(four.spec, gpus_per_node=1), name="one", source="one")
    assert busbw(one, 16 << 30, "ring") == pytest.approx(63.0 * 0.76, rel=0.02)


def test_roce_loses_bandwidth_as_nodes_are_added_and_infiniband_does_not() -> None:
    ib = net(load_cluster("dgx-a100-hdr"), nic="ib-edr")
    roce = net(ib, nic="eth-100g")
    ib_bw = [busbw(ib.with_nodes(n), 8 << 30, "ring") for n in (3, 6, 12)]
    roce_bw = [busbw(roce.with_nodes(n), 8 << 30, "ring") for n in (3, 6, 12)]
    assert max(ib_bw) / min(ib_bw) < 1.01
    assert roce_bw[0] > roce_bw[1] > roce_bw[2]
    # nccl-tests issue 169: 70 GB/s on 3 nodes, 40 on 6 (8x 100G RoCE).
    assert roce_bw[0] == pytest.approx(70, rel=0.1) and roce_bw[1] == pytest.approx(40, rel=0.2)


def test_efa_pays_its_own_latency_per_step_and_sprays_instead_of_hashing() -> None:
    # AWS's plugin prices an 8-byte RDMA write between two p5 nodes at 20 us (transports.toml efa), against
    # 1.5 us for InfiniBand verbs: every network step of an EFA collective costs 18.5 us more.
    ib = net(load_cluster("dgx-h100-ndr").with_nodes(2), nic="eth-100g", nics_per_node=32)
    efa = net(ib, transport="efa")
    fab_ib, fab_efa = fabric_of(ib), fabric_of(efa)
    assert float(fab_efa.net_extra_us) - float(fab_ib.net_extra_us) == pytest.approx(18.5)
    assert best(efa, 64 << 10)[0] > best(ib, 64 << 10)[0] + 2 * 18e-6  # a tree crosses the network twice
    # SRD spreads each flow over many paths: unlike RoCE, no bandwidth lost to hashing as nodes are added.
    efa_bw = [busbw(efa.with_nodes(n), 8 << 30, "ring") for n in (3, 6, 12)]
    roce_bw = [busbw(ib.with_nodes(n), 8 << 30, "ring") for n in (3, 6, 12)]
    assert max(efa_bw) / min(efa_bw) < 1.03 and roce_bw[0] > roce_bw[2] * 1.5  # (2%: more steps, each 20 us)


def test_efa_is_an_ethernet_adapter_and_has_no_sharp(cli, write) -> None:  # type: ignore[no-untyped-def]
    base = 'nodes = 2\ngpus_per_node = 8\ngpu = "h100-sxm"\n[network]\ntransport = "efa"\n'
    for extra, said in (
        ('nic = "ib-ndr"\n', "network.transport = 'efa' is AWS's Elastic Fabric Adapter, an Ethernet NIC"),
        ('nic = "eth-1g"\n', "network.transport = 'efa' needs an RDMA-capable NIC and eth-1g is not"),
        ('nic = "eth-400g"\nsharp = true\n', "network.sharp = true needs an InfiniBand NIC and an RDMA transport"),
    ):
        done = cli("predict", "all_reduce", "--cluster", str(write("efa.toml", base + extra)), "-b", "1M", "-e", "1M")
        assert done.code == 2 and said in done.err and "Traceback" not in done.err, done.err


def test_nvls_beats_ring_on_h100_and_is_absent_on_a100() -> None:
    h100 = load_cluster("dgx-h100-ndr").with_nodes(1)
    assert busbw(h100, 8 << 30) > busbw(h100, 8 << 30, "ring") * 1.2
    assert best(h100, 8 << 30)[1] == "nvls/Simple"
    a100 = load_cluster("dgx-a100-hdr").with_nodes(1)
    seconds, _ = best(a100, 8 << 30, "nvls")
    assert seconds == np.inf


def test_sharp_halves_the_network_traffic() -> None:
    # Two NICs per node: the network, not NVLink, bounds the ring; SHARP sends each byte once.
    base = net(load_cluster("dgx-a100-hdr").with_nodes(16), nics_per_node=2)
    sharp = net(base, sharp=True)
    ring = busbw(base, 8 << 30, "ring")
    assert busbw(sharp, 8 << 30, "sharp") == pytest.approx(2 * 0.85 * ring, rel=0.05)
    assert best(base, 8 << 30, "sharp")[0] == np.inf


def test_oversubscription_hurts_traffic_that_leaves_the_leaf() -> None:
    base = net(load_cluster("dgx-a100-hdr").with_nodes(64), topology="fat-tree")
    over = net(base, oversubscription=4.0)
    # 64 nodes of 8 NICs span many 40-port leaves: rings, trees and all-to-all all cross the
    # uplinks, so all of them slow down.
    assert best(over, 1 << 30, "ring")[0] > 1.5 * best(base, 1 << 30, "ring")[0]
    assert best(over, 1 << 30, "tree")[0] > 1.5 * best(base, 1 << 30, "tree")[0]
    a2a = [
        coll.fastest(coll.point_to_point(fabric_of(c), 1 << 30, 8.0, 64.0, pattern="alltoall")) for c in (base, over)
    ]
    assert float(a2a[1]) > 1.5 * float(a2a[0])
    # Four nodes fit under one leaf: nothing leaves it, nothing slows down.
    small, small_over = base.with_nodes(4), over.with_nodes(4)
    assert best(small_over, 1 << 30, "ring")[0] == pytest.approx(best(small, 1 << 30, "ring")[0], rel=1e-9)


def test_arrays_and_scalars_take_the_same_path() -> None:
    cluster = load_cluster("dgx-h100-ndr").with_nodes(8)
    fab = fabric_of(cluster)
    sizes = np.array([8.0, 4096.0, 1 << 20, 1 << 30])
    ppn = np.array([[1.0], [2.0], [8.0]])
    together = coll.fastest(coll.all_reduce(fab, sizes, ppn, 8.0))
    assert together.shape == (3, 4)
    for i, g in enumerate(ppn[:, 0]):
        for j, size in enumerate(sizes):
            alone = coll.fastest(coll.all_reduce(fab, float(size), float(g), 8.0))
            assert float(alone) == together[i, j]


def test_fastest_is_nccls_choice_among_the_candidates() -> None:
    fab = fabric_of(load_cluster("dgx-h100-ndr").with_nodes(4))
    found = list(coll.all_reduce(fab, 1e6, 8.0, 4.0, include_hier=True))
    assert {c[0] for c in found} == {"ring", "tree", "hier", "nvls", "nvlstree", "sharp"}
    nccl = [c for c in found if c[0] != "hier"]  # NCCL's tuner has no two-level algorithm
    chosen = min(nccl, key=lambda c: float(c[2]) + c[3])  # ranked with the tuner's penalties
    assert float(coll.fastest(iter(found))) == float(chosen[2])


def label(cluster: Cluster, op: str, nbytes: float, algo: str | None = None) -> tuple[float, str]:
    fab = fabric_of(cluster)
    found = coll.candidates(op, fab, float(nbytes), float(cluster.gpus_per_node), float(cluster.nodes))
    seconds, labels = coll.choose(found, algo)
    return float(seconds), labels[0]


def test_small_messages_on_one_h100_node_run_ring_ll_as_nccl_picks() -> None:
    # NCCL's tuner charges NVLS 25 us of NVLink latency, so 8 bytes run ring/LL (6.6 + 14 x 0.6 us).
    h100 = load_cluster("dgx-h100-ndr").with_nodes(1)
    seconds, chosen = label(h100, "all_reduce", 8)
    assert chosen == "ring/LL"
    assert seconds == pytest.approx(15.0e-6, rel=0.01)
    # Forced, NVLS itself takes two NVLink hops (NVIDIA/nccl issue 1259: 6 us on 2 H100).
    two = resolve(dataclasses.replace(h100.spec, gpus_per_node=2), name="two", source="two")
    forced, chosen = label(two, "all_reduce", 8, "nvls")
    assert chosen == "nvls/Simple" and forced == pytest.approx(6.8e-6, rel=1e-3)
    # Large messages still go to NVLS, the fastest by far.
    assert label(h100, "all_reduce", 8 << 30)[1] == "nvls/Simple"


def test_nvls_tree_across_nodes_stays_below_one_node() -> None:
    one = load_cluster("dgx-h100-ndr").with_nodes(1)
    two, four = one.with_nodes(2), one.with_nodes(4)
    single = busbw(one, 8 << 30)
    assert single == pytest.approx(480, rel=0.05)  # nccl-tests issue 212
    # Without SHARP two nodes run an NVLS tree, capped per NIC channel at NCCL's 57.7 GB/s
    # (8 x 57.7 = 462), less the 3.4 us each of its 512 pipeline steps per channel costs:
    # NVIDIA/nccl issue 1221 measured 430 on 8x400G RoCE.
    assert label(two, "all_reduce", 8 << 30)[1] == "nvlstree/Simple"
    assert 430 * 0.97 < busbw(two, 8 << 30) < 8 * 57.7
    assert busbw(two, 8 << 30) < single
    # Beyond two nodes the cap is 45.5 per channel and the ring wins (issue 1221: 320 either way).
    assert busbw(four, 8 << 30) < 8 * 48 and label(four, "all_reduce", 8 << 30)[1] == "ring/Simple"


def test_large_all_gather_at_scale_runs_simple() -> None:
    # LL128 saves 10 us per network step, but NCCL caps it at 36.7 GB/s per channel (one per
    # NIC) on Hopper: 8 x 36.7 = 294 against 384 for Simple, which wins at 1 GiB.
    sixteen = load_cluster("dgx-h100-ndr").with_nodes(16)
    assert label(sixteen, "all_gather", 1 << 30)[1] == "ring/Simple"
    assert label(sixteen, "all_gather", 64 << 10)[1] in ("ring/LL", "ring/LL128")
    simple, _ = label(sixteen, "all_gather", 1 << 30, "ring")
    fab = fabric_of(sixteen)
    ll128 = next(c for c in coll.ring_like(fab, float(1 << 30), 8.0, 16.0) if c[1] == "LL128")
    assert float(ll128[2]) > simple


def test_a_collective_of_nothing_costs_nothing() -> None:
    h100 = load_cluster("dgx-h100-ndr")
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall", "sendrecv"):
        assert label(h100, op, 0)[0] == 0.0


def test_without_gpudirect_every_byte_is_staged_through_host_memory() -> None:
    gdr = load_cluster("dgx-h100-ndr").with_nodes(2)
    staged = net(gdr, transport="rdma")
    # 400G NDR behind a Gen5 x16 slot: the staged copy crosses the uplink twice each way.
    assert float(fabric_of(staged).nic_gbps) == pytest.approx(63.0 * 0.76 / 2, rel=0.01)
    assert float(fabric_of(gdr).nic_gbps) == pytest.approx(50.0 * 0.96, rel=0.01)
    assert busbw(staged, 1 << 30, "ring") < 0.6 * busbw(gdr, 1 << 30, "ring")
    assert best(staged, 8)[0] > best(gdr, 8)[0]  # and pays a copy's latency
    # A 25G NIC is slower than half its slot: GPUDirect changes only the latency there.
    slow = net(gdr, nic="eth-25g", nics_per_node=1)
    assert float(fabric_of(net(slow, transport="rdma")).nic_gbps) == float(fabric_of(slow).nic_gbps)


def test_a_group_on_a_full_mesh_uses_only_the_links_between_its_members() -> None:
    # MI300X: seven Infinity Fabric links, one per peer (AMD's RCCL/xGMI blog: ~48 GB/s usable each).
    eight = resolve(ClusterSpec(gpu="mi300x", gpus_per_node=8), name="m8", source="m8")
    two = eight.with_gpus_per_node(2)
    assert busbw(two, 1 << 30, "ring") == pytest.approx(48.0, rel=0.01)
    assert busbw(eight, 1 << 30, "ring") == pytest.approx(7 * 48.0, rel=0.02)
    # On an NVSwitch every link reaches the switch, whatever the group.
    h100 = load_cluster("dgx-h100-ndr").with_nodes(1)
    assert busbw(h100.with_gpus_per_node(2), 1 << 30, "ring") == pytest.approx(busbw(h100, 1 << 30, "ring"), rel=0.02)


def test_gpus_without_peer_to_peer_share_host_memory() -> None:
    # RTX 5090 on a Gen5 host: every byte crosses the GPU's PCIe link and takes its turn at the host
    # memory all staged GPUs share (NVIDIA/nccl issue 1639: 28 GB/s on 8 GPUs, 35 on 4 of them).
    eight = resolve(ClusterSpec(gpu="rtx-5090", gpus_per_node=8), name="g8", source="g8")
    link, host = 63.0 * 0.76, 2 * 8 * 4.8 * 8
    assert busbw(eight, 8 << 30, "ring") == pytest.approx(1 / (1 / link + 8 / host), rel=0.01)
    four = busbw(eight.with_gpus_per_node(4), 8 << 30, "ring")
    assert four == pytest.approx(1 / (1 / link + 4 / host), rel=0.01)
    # A group of 4 on the 8-GPU node competes with 3 other flows, not 7: the same as a 4-GPU node.
    fab = fabric_of(eight)
    assert float(coll.intra_bw(fab, 4.0)) == pytest.approx(four, rel=0.01)
    assert float(coll.intra_bw(fab, 8.0)) == pytest.approx(float(fab.intra_gbps))
    # GPUs with peer-to-peer (L40S) talk over the slot: no host memory term, whatever the group.
    l40s = resolve(ClusterSpec(gpu="l40s", gpus_per_node=8), name="l8", source="l8")
    assert float(fabric_of(l40s).host_gbps) == float("inf")
    assert busbw(l40s, 8 << 30, "ring") == pytest.approx(31.5 * 0.76, rel=0.01)


def test_every_pcie_generation_names_its_host_memory() -> None:
    from fabricscope.errors import InvalidValue
    from fabricscope.model import hardware
    from fabricscope.model.hardware import PCIe

    # channels x GT/s x 8 bytes x 2 sockets, as the catalog's source line says
    expected = {"gen3": 6 * 2.933, "gen4": 8 * 3.2, "gen5": 8 * 4.8, "gen6": 12 * 6.4}
    for name, per_socket in expected.items():
        entry = hardware.lookup("pcie", name, PCIe)
        assert entry.host_memory_gbps == pytest.approx(per_socket * 8 * 2, rel=1e-3), name
        assert "channels" in entry.host_memory_source and "per socket" in entry.host_memory_source
    # A host of unknown memory bandwidth keeps the old rule: each byte crosses the slot twice.
    eight = resolve(ClusterSpec(gpu="rtx-5090", gpus_per_node=8), name="g8", source="g8")
    unknown = dataclasses.replace(eight, pcie=dataclasses.replace(eight.pcie, host_memory_gbps=0.0))
    assert float(fabric_of(unknown).intra_gbps) == pytest.approx(63.0 * 0.76 / 2, rel=0.01)
    with pytest.raises(InvalidValue, match="host_memory_gbps must be 0"):
        dataclasses.replace(eight.pcie, host_memory_gbps=-1.0)


def test_one_rank_is_the_copy_nccl_makes_and_nothing_in_place() -> None:
    """One rank runs no algorithm (NCCL's ncclLaunchOneRank): out of place a device-to-device copy (each byte
    read and written once through the GPU's memory), in place nothing, except a floating-point average (a
    multiply kernel over the buffer); send/receive ops copy to self in place too.  It was 0 us, labelled
    with an algorithm (tree/LL, nvlstree/Simple) that one GPU cannot run."""
    from fabricscope.model.predict import predict
    from fabricscope.model.uncertainty import ONE_RANK, for_collectives

    one = load_cluster("dgx-h100-ndr").with_nodes(1).with_gpus_per_node(1)
    size = 8 << 20
    hbm = one.gpu.hbm_tbps * 1e12
    got = predict(one, {"all_reduce": [size], "all_gather": [size], "alltoall": [size]}, redops=["sum", "avg"],
                  dtypes=["float", "int32"])  # fmt: skip
    rows = {(r.op, r.dtype, r.redop, r.placement): r for p in got.ops for r in p.records}
    copy_us = 2 * size / hbm * 1e6
    for dtype in ("float", "int32"):
        out = rows["all_reduce", dtype, "sum", "out"]
        assert out.time_us == pytest.approx(copy_us) and out.algorithm == "local copy"
        assert out.busbw_gbps == 0.0 and out.algbw_gbps == pytest.approx(size / 1e9 / (copy_us * 1e-6))
        assert rows["all_reduce", dtype, "sum", "in"].time_us == 0.0
        assert rows["all_reduce", dtype, "sum", "in"].algorithm.startswith("nothing")
    assert rows["all_reduce", "float", "avg", "in"].time_us == pytest.approx(copy_us)  # ncclDevPreMulSum
    assert rows["all_reduce", "int32", "avg", "in"].time_us == 0.0  # ncclDevSumPostDiv: no kernel on one rank
    assert rows["all_gather", "float", "none", "out"].time_us == pytest.approx(copy_us)
    assert rows["alltoall", "float", "none", "in"].time_us == pytest.approx(copy_us)
    assert ONE_RANK in for_collectives(one).warnings
    assert ONE_RANK not in for_collectives(one.with_gpus_per_node(2)).warnings
