"""The training-step model: FLOP counts, bubble, overlap, ZeRO, parameter servers, one code path."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fabricscope.model import collective_cost as coll
from fabricscope.model import training
from fabricscope.model.cluster import Cluster, load_cluster, resolve
from fabricscope.model.estimate import best_split, device_for, estimate, job_of, shape_of
from fabricscope.model.fabric import fabric_of
from fabricscope.model.parallel import ParallelConfig
from fabricscope.model.splits import splits
from fabricscope.model.workload import load_model


def megatron_72(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. 3, without recomputation."""
    return 72 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * layers * hidden))


def test_model_flops_are_megatrons_formula() -> None:
    model = load_model("megatron-175b")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(8)
    result = estimate(model, cluster, ParallelConfig(tp=8, pp=8, dp=1, global_batch=64), what_ifs=False)
    flops = megatron_72(64, 2048, 96, 12288, 51200)
    assert result.value("model_flops") == pytest.approx(flops, rel=0.002)
    full = estimate(model, cluster, ParallelConfig(tp=8, pp=8, dp=1, global_batch=64, recompute="full"), what_ifs=False)
    assert full.value("hardware_flops") / full.value("model_flops") == pytest.approx(4 / 3, rel=0.01)


def test_bubble_is_p_minus_1_over_v_microbatches() -> None:
    model = load_model("megatron-175b")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(8)
    plain = estimate(model, cluster, ParallelConfig(tp=8, pp=8, dp=1, global_batch=64), what_ifs=False)
    inter = estimate(model, cluster, ParallelConfig(tp=8, pp=8, dp=1, global_batch=64, interleave=3), what_ifs=False)
    per_mb = (plain.value("compute") + plain.value("tp_comm") + plain.value("pp_comm")) / 64
    assert plain.value("bubble") == pytest.approx(7 * per_mb, rel=1e-6)
    assert inter.value("bubble") == pytest.approx(plain.value("bubble") / 3, rel=0.05)


def test_recomputation_trades_time_for_memory() -> None:
    model = load_model("megatron-22b")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(1)
    none = estimate(model, cluster, ParallelConfig(tp=8, global_batch=4, sequence_parallel=True), what_ifs=False)
    full = estimate(
        model, cluster, ParallelConfig(tp=8, global_batch=4, recompute="full", sequence_parallel=True), what_ifs=False
    )
    sel = estimate(
        model,
        cluster,
        ParallelConfig(tp=8, global_batch=4, recompute="selective", sequence_parallel=True),
        what_ifs=False,
    )
    assert none.step_s < sel.step_s < full.step_s
    assert full.value("memory_bytes") < sel.value("memory_bytes") < none.value("memory_bytes")
    assert full.value("recompute") == pytest.approx(full.value("compute") / 3, rel=0.1)


def test_overlap_hides_gradient_reduction() -> None:
    model = load_model("llama-7b")
    cluster = load_cluster("cloud-h100-tcp").with_nodes(8)
    kwargs = dict(tp=1, pp=1, dp=64, global_batch=256, micro_batch=4)
    after = estimate(model, cluster, ParallelConfig(**kwargs, dp_overlap=False), what_ifs=False)
    during = estimate(model, cluster, ParallelConfig(**kwargs), what_ifs=False)
    assert after.value("dp_comm") == pytest.approx(after.value("dp_comm_total"))
    assert during.value("dp_comm") < after.value("dp_comm")
    assert during.step_s < after.step_s


def test_zero_shards_memory_and_zero3_moves_more() -> None:
    model = load_model("llama-7b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(4)
    steps = {
        z: estimate(model, cluster, ParallelConfig(dp=32, zero=z, global_batch=256), what_ifs=False) for z in (0, 1, 3)
    }
    memory = [steps[z].value("memory_bytes") for z in (0, 1, 3)]
    assert memory[0] > memory[1] > memory[2]
    assert steps[3].value("dp_comm_total") > 1.4 * steps[0].value("dp_comm_total")


def test_parameter_server_matches_byteps_formula() -> None:
    model = load_model("llama-7b")
    base = load_cluster("v100-100gbe-tcp")
    spec = dataclasses.replace(base.spec, network=dataclasses.replace(base.spec.network, transport="rdma-gdr"))
    cluster = resolve(spec, name="ps", source="ps")
    fab = fabric_of(cluster)
    for servers in (1, 4, 16):
        par = ParallelConfig(dp=32, global_batch=256, ps_servers=servers, dp_overlap=False, precision="fp16")
        result = estimate(model, cluster, par, what_ifs=False)
        grads = model.param_count * 2
        n = cluster.nodes
        bandwidth = float(fab.nic_gbps) * 1e9
        intra = 2 * 7 / 8 * grads / (float(fab.intra_gbps) * 1e9)
        byteps = max(grads / bandwidth, n * grads / (servers * bandwidth))  # BytePS, non-colocated
        assert result.value("dp_comm") == pytest.approx(intra + byteps, rel=1e-6)


def test_more_bandwidth_is_never_slower() -> None:
    model = load_model("gpt3-175b")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(32)
    par = best_split(model, cluster)
    fab = fabric_of(cluster)
    shape, job = shape_of(model), job_of(par, model.batch(cluster.gpus))
    dev = device_for(cluster.gpu, "bf16")
    factors = np.array([[0.25], [0.5], [1.0], [2.0], [4.0]])
    steps = training.step(shape, job, dev, dataclasses.replace(fab, nic_gbps=fab.nic_gbps * factors)).step
    assert np.all(np.diff(np.ravel(steps)) <= 1e-12)


def test_one_code_path_for_a_sweep_and_a_single_estimate() -> None:
    model = load_model("llama-70b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(16)
    cand = splits(model, gpus=cluster.gpus, gpus_per_node=8)
    fab = fabric_of(cluster)
    dev = device_for(cluster.gpu, "bf16")
    swept = training.step(shape_of(model), cand.job, dev, fab)
    rng = np.random.default_rng(1)
    for index in rng.choice(len(cand), size=25, replace=False):
        alone = training.step(shape_of(model), job_of(cand.configs[index], cand.batch), dev, fab)
        for field in ("step", "compute", "dp_comm", "tp_comm", "bubble", "memory_bytes"):
            assert float(np.ravel(getattr(swept, field))[index]) == pytest.approx(
                float(getattr(alone, field)), rel=1e-12
            )


def test_breakdown_adds_up_to_the_step() -> None:
    model = load_model("llama-70b")
    cluster = load_cluster("cloud-h100-tcp").with_nodes(8)
    result = estimate(model, cluster, best_split(model, cluster))
    record = result.record()
    assert sum(record["breakdown"].values()) == pytest.approx(record["step_time_s"], rel=1e-9)
    assert 0 < record["gpu_utilization"] <= 1
    assert record["tokens_per_s"] == pytest.approx(record["samples_per_s"] * model.seq)


def one_slow_nic(nodes: int) -> Cluster:
    base = load_cluster("dgx-h100-ndr").with_nodes(nodes)
    network = dataclasses.replace(base.spec.network, nic="eth-10g", nics_per_node=1)
    return resolve(dataclasses.replace(base.spec, network=network), name="slow", source="slow")


def test_a_step_is_never_shorter_than_its_network_time() -> None:
    # The reviewer's case: ZeRO-3 with 32 micro-batches over one 10 GbE NIC per node.  Forward
    # gathers hide behind forwards, backward gathers and reduce-scatters (one after another on
    # the NIC) behind backwards, each compute once.
    model = load_model("llama-7b")
    slow = one_slow_nic(4)
    par = ParallelConfig(dp=32, zero=3, micro_batch=32, recompute="full", global_batch=1024)
    result = estimate(model, slow, par, what_ifs=False)
    assert result.value("dp_comm_total") > 30.0
    assert result.step_s >= result.value("dp_comm_total")
    # The same for every split of a sweep over a slow and a fast network.
    for cluster in (slow, load_cluster("dgx-h100-ndr").with_nodes(4)):
        cand = splits(model, gpus=32, gpus_per_node=8)
        swept = training.step(shape_of(model), cand.job, device_for(cluster.gpu, "bf16"), fabric_of(cluster))
        assert np.all(np.asarray(swept.step) >= np.asarray(swept.dp_comm_total))


def test_overlap_hides_each_collective_behind_its_own_compute() -> None:
    # 4 units of 1 s of communication beside 8 s of compute: each waits for its 2 s part,
    # only the last one shows.  Beside 2 s: the network is the step, 4 s, of which 2 s hide.
    assert training._beside(4.0, 1.0, 8.0) == pytest.approx(1.0)
    assert training._beside(4.0, 1.0, 2.0) + 2.0 == pytest.approx(4.0 + 0.5)
    assert training._beside(4.0, 0.0, 8.0) == 0.0


def test_zero3_pays_a_latency_per_layer_collective() -> None:
    # 512 DGX H100 nodes, dp 1024 (two ranks per node): every one of llama-7b's 32 layers is
    # gathered twice and reduce-scattered once per micro-batch, each a ring over 512 nodes.
    model = load_model("llama-7b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(512)
    par = ParallelConfig(tp=4, dp=1024, zero=3, global_batch=1024, sequence_parallel=True)
    result = estimate(model, cluster, par, what_ifs=False)
    fab = fabric_of(cluster)
    share = float(fab.node_net_gbps) * 2 / 8
    one = float(coll.fastest(coll.ring_like(fab, 1024.0, 2.0, 512.0, node_net=share)))  # latency alone
    assert one > 1e-3  # hundreds of network steps
    assert result.value("dp_comm_total") > 96 * one
    assert result.step_s > result.value("dp_comm_total") > 0.3
    assert result.bottleneck == "dp_comm"


def test_405b_on_16k_h100_is_far_from_full_utilization() -> None:
    # Llama 3 reports 38-43% MFU on 16K H100; a model that hides everything says ~90%.
    model = load_model("llama-405b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(2048)
    result = estimate(model, cluster, best_split(model, cluster), what_ifs=False)
    assert result.gpu_utilization < 0.7
    assert 0.15 < result.mfu < 0.45


def test_flash_attention_needs_ampere_or_newer() -> None:
    model = load_model("llama-7b")
    v100 = load_cluster("v100-100gbe-tcp").with_nodes(1)
    par = ParallelConfig(tp=8, global_batch=64, precision="fp16")
    assert device_for(v100.gpu, "fp16").flash == 0.0
    assert device_for(load_cluster("dgx-a100-hdr").gpu, "bf16").flash == 1.0
    volta = estimate(model, v100, par, what_ifs=False)
    # Without FlashAttention the s x s scores are materialized: memory and time both grow.
    spec = dataclasses.replace(model, flash_attention=False)
    assert volta.value("memory_bytes") == pytest.approx(estimate(spec, v100, par, what_ifs=False).value("memory_bytes"))
    assert volta.mfu < 0.5


@pytest.mark.parametrize(
    ("precision", "framework", "sharded"),
    [
        ("bf16", None, 12.0),  # mixed precision: fp32 master weight, m and v
        ("fp32", None, 8.0),  # fp32 weights are the master copy: m and v only
        ("tf32", None, 8.0),
        ("bf16", "pytorch-ddp", 8.0),  # automatic mixed precision keeps fp32 weights and gradients
    ],
)
def test_zero_shards_the_optimizer_state_the_precision_keeps(precision: str, framework: str | None, sharded: float):
    """ZeRO 1 saves (1 - 1/d) of the optimizer state over ZeRO 0, ZeRO 2 (1 - 1/d) of the gradients more:
    12 and 2 bytes a parameter in mixed precision, 8 and 4 where the weights are fp32 (ZeRO paper, 3.1).
    fp32 training was priced with mixed precision's 12 and 2 (+23.6 GB wrong for llama-7b at ZeRO 1)."""
    model = load_model("llama-7b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(1)
    base = {"dp": 8, "tp": 1, "pp": 1, "global_batch": 64, "micro_batch": 1, "recompute": "full"}
    memory = {}
    for zero in (0, 1, 2):
        par = ParallelConfig(zero=zero, precision=precision, **base)
        if framework is not None:
            par = dataclasses.replace(par, fp32_gradients=True)
        memory[zero] = estimate(model, cluster, par, what_ifs=False).value("memory_bytes")
    params = shape_of(model).params
    assert memory[0] - memory[1] == pytest.approx(params * sharded * (1 - 1 / 8), rel=1e-9)
    assert memory[1] - memory[2] == pytest.approx(params * (16 - sharded) / 2 * (1 - 1 / 8), rel=1e-9)


def test_megatron_keeps_fp32_gradients_in_bf16_and_nemo_s_recipes_do_not() -> None:
    """Megatron-LM in bf16 accumulates and reduces gradients in fp32 (its distributed optimizer's table:
    'bf16 param, fp32 grads: 6 + 12/d'); NeMo's performance recipes set grad_reduce_in_fp32 = False."""
    from fabricscope.model.parallel import FRAMEWORKS, stack_settings

    model = load_model("llama-7b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(2)
    base = ParallelConfig(dp=16, tp=1, pp=1, zero=1, global_batch=64, micro_batch=1, recompute="full")
    steps = {
        name: estimate(model, cluster, dataclasses.replace(base, **stack_settings(FRAMEWORKS[name])), what_ifs=False)
        for name in ("megatron-core", "nemo")
    }
    params = shape_of(model).params
    memory = {name: step.value("memory_bytes") for name, step in steps.items()}
    assert memory["megatron-core"] - memory["nemo"] == pytest.approx(2.0 * params, rel=1e-9)  # 4-byte gradients
    assert steps["megatron-core"].value("dp_comm_total") > steps["nemo"].value("dp_comm_total")
