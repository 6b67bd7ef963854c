"""The figures docs/model.md shows, read from the document and computed here by the model's code.

Each test parses the number the document prints and checks it against what the
model computes now, so a model change that moves a figure fails until the
document is updated (and a document edit that mistypes one fails too):

* 70B parameters of bf16 gradients (2 bytes each) at 1 Gb/s and at 200 Gb/s;
* ResNet-50 in an 8-GPU lab that reads ImageNet over 1 GbE from hard disks, and the same server on NVMe;
* TCP's tens of microseconds per message against RDMA's one or two, and what 100 ns buys.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from fabricscope.model import collective_cost as coll
from fabricscope.model.cluster import Cluster, load_cluster, resolve
from fabricscope.model.estimate import best_split, estimate
from fabricscope.model.fabric import fabric_of
from fabricscope.model.parallel import SplitRequest
from fabricscope.model.workload import load_model

MODEL_DOC = Path(__file__).resolve().parents[2] / "docs" / "model.md"


def documented(pattern: str) -> float:
    """The number the document prints where ``pattern`` (a regex with one group) matches."""
    match = re.search(pattern, MODEL_DOC.read_text(encoding="utf-8"))
    assert match, f"docs/model.md no longer says {pattern!r}"
    return float(match.group(1).replace(",", ""))


PARAMS_70B = 70e9
BYTES_PER_PARAM = 2  # bf16 gradients on the wire


def variant(cluster: Cluster, storage: dict[str, object] | None = None, **net: object) -> Cluster:
    spec = dataclasses.replace(cluster.spec, network=dataclasses.replace(cluster.spec.network, **net))
    if storage:
        spec = dataclasses.replace(spec, storage=dataclasses.replace(spec.storage, **storage))
    return resolve(spec, name="variant", source="variant")


def all_reduce_s(cluster: Cluster, nbytes: float) -> float:
    fab = fabric_of(cluster)
    return float(coll.fastest(coll.all_reduce(fab, nbytes, float(cluster.gpus_per_node), float(cluster.nodes))))


def test_70b_gradients_at_1g_and_200g() -> None:
    payload = PARAMS_70B * BYTES_PER_PARAM
    assert payload == 140e9
    at_1g = payload * 8 / 1e9
    at_200g = payload * 8 / 200e9
    assert (at_1g, at_200g) == pytest.approx((1120.0, 5.6))
    assert at_1g / at_200g == pytest.approx(200.0)
    # The model: a ring all-reduce over 128 GPUs moves 2(n-1)/n of it through each node's one
    # NIC, at what each transport delivers (NCCL's sockets 94% of a bare-metal 1 Gb/s NIC, RDMA 96%
    # of 200 Gb/s).
    base = load_cluster("dgx-a100-hdr").with_nodes(16)
    slow = all_reduce_s(variant(base, nic="eth-1g", nics_per_node=1, transport="tcp-socket"), payload)
    fast = all_reduce_s(variant(base, nic="ib-hdr", nics_per_node=1, transport="rdma-gdr"), payload)
    assert slow == pytest.approx(2 * 127 / 128 * payload / (0.94 * 0.125e9), rel=0.01)
    assert fast == pytest.approx(2 * 127 / 128 * payload / (0.96 * 25e9), rel=0.01)
    assert slow / fast == pytest.approx(200 * 0.96 / 0.94, rel=0.01)
    assert round(slow) == documented(r"\(0\.94 x 0\.125e9\) = ([\d,]+) s")
    assert round(fast, 1) == documented(r"\(0\.96 x 25e9\) = ([\d.]+) s")
    assert round(slow / fast) == documented(r"a ratio of (\d+)")


def test_resnet50_lab_is_starved_by_its_data() -> None:
    model = load_model("resnet50")
    lab = load_cluster("lab-8gpu-1gbe-hdd")
    result = estimate(model, lab, best_split(model, lab))
    assert result.bottleneck == "data_stall"
    assert result.gpu_utilization < 0.10
    assert result.data.limit == "storage media"  # four disks seeking for 110 KB files
    row = r"\| preset: 8x RTX 4090 bf16, 4 HDDs over 1 GbE, nothing cached \| "
    assert round(result.samples_per_s / result.gpu_utilization) == documented(row + r"([\d,]+) \|")
    assert round(result.samples_per_s) == documented(row + r"[\d,]+ \| \d+ \(disks\) \| ([\d,]+) \|")
    fast = load_cluster("lab-8gpu-100g-nvme")
    good = estimate(model, fast, best_split(model, fast))
    assert good.bottleneck == "compute" and good.gpu_utilization > 0.95
    # NVIDIA's 8 V100 FP32 reference is 2,855 img/s; the same server with V100s demands as much.
    v100 = variant(lab, storage={"devices": 12})
    v100 = resolve(dataclasses.replace(v100.spec, gpu="v100-sxm2-32gb"), name="v100-lab", source="v100-lab")
    slow = estimate(model, v100, best_split(model, v100, SplitRequest(precision="fp32")))
    demand = slow.samples_per_s / slow.gpu_utilization
    assert demand == pytest.approx(2855, rel=0.1)


@pytest.mark.parametrize(
    ("change", "low", "high"), [({"cached_fraction": 0.9}, 0.35, 0.5), ({"devices": 12}, 0.08, 0.15)]
)
def test_what_gives_forty_percent(change: dict[str, object], low: float, high: float) -> None:
    model = load_model("resnet50")
    lab = variant(load_cluster("lab-8gpu-1gbe-hdd"), storage=change)
    assert low < estimate(model, lab, best_split(model, lab)).gpu_utilization < high


def test_tcp_small_messages_cost_tens_of_microseconds() -> None:
    rdma = load_cluster("dgx-h100-ndr").with_nodes(4)
    tcp = variant(rdma, nic="eth-400g", transport="tcp-socket")
    t_rdma, t_tcp = all_reduce_s(rdma, 8), all_reduce_s(tcp, 8)
    # Each of the 2*log2(4) tree steps between nodes pays ~28.5 us more over sockets.
    assert t_tcp - t_rdma == pytest.approx(2 * 2 * 28.5e-6, rel=0.15)
    assert t_tcp > 3 * t_rdma


def test_100ns_less_latency() -> None:
    rdma = load_cluster("dgx-h100-ndr").with_nodes(16)
    slower = variant(rdma, extra_latency_us=0.1)
    small = all_reduce_s(slower, 8) / all_reduce_s(rdma, 8) - 1
    big = all_reduce_s(slower, 1 << 30) / all_reduce_s(rdma, 1 << 30) - 1
    assert 0.005 < small < 0.03  # about 1.4%: 8 network hops of ~7 us each
    assert big < 1e-3
    tcp = variant(rdma, nic="eth-400g", transport="tcp-socket")
    tcp_slower = variant(tcp, extra_latency_us=0.1)
    assert all_reduce_s(tcp_slower, 8) / all_reduce_s(tcp, 8) - 1 < 0.005  # 100 ns of 30 us
    model = load_model("llama-70b")
    result = estimate(model, rdma, best_split(model, rdma))
    assert abs(result.sensitivities["100 ns less network latency"]) < 0.01  # percent of a training step


def test_the_documented_error_by_group_is_what_validate_prints_now(cli) -> None:  # type: ignore[no-untyped-def]
    # docs/model.md section 2 shows validate's per-group table; a row added or a model change that moves a
    # group's figure fails here until the document shows the new table.
    done = cli("validate")
    assert done.code == 0, done.err
    printed = done.out[done.out.index("error by group (") :].rstrip("\n")
    text = MODEL_DOC.read_text(encoding="utf-8")
    start = text.index("error by group (")
    assert text[start : text.index("```", start)].rstrip("\n") == printed
