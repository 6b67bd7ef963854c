"""Mixture-of-experts layers, expert parallelism, context parallelism and the stacks that run a split."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from model_helpers import one_error_line

from fabricscope.errors import UsageError
from fabricscope.model import training
from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import best_split, device_for, estimate, job_of, shape_of
from fabricscope.model.fabric import fabric_of
from fabricscope.model.parallel import ParallelConfig, SplitRequest
from fabricscope.model.splits import splits
from fabricscope.model.stacks import stacks
from fabricscope.model.workload import load_model


def _est(model: str, cluster: str, nodes: int, **split: object) -> object:
    m = load_model(model)
    c = load_cluster(cluster).with_nodes(nodes)
    par = ParallelConfig(**split)  # type: ignore[arg-type]
    return estimate(m, c, par, what_ifs=False)


def test_presets_have_their_published_sizes() -> None:
    mixtral, deepseek = load_model("mixtral-8x7b"), load_model("deepseek-v3")
    # Mixtral paper: 47B parameters (46.7B in config), 13B active; DeepSeek-V3: 671B, 37B active.
    assert mixtral.param_count == pytest.approx(46.7e9, rel=0.01)
    assert mixtral.active_params == pytest.approx(12.9e9, rel=0.01)
    assert deepseek.param_count == pytest.approx(671e9, rel=0.01)
    assert deepseek.active_params == pytest.approx(37e9, rel=0.06)
    assert deepseek.moe_layers == 58
    assert load_model("llama3-405b-128k").seq == 131072
    # Qwen3-235B-A22B: 64 query heads of 128 on a 4096-wide model (head_dim), "235B total, 22B activated".
    qwen = load_model("qwen3-235b-a22b")
    assert qwen.q_width == 8192 and qwen.kv_width == 512
    assert qwen.param_count == pytest.approx(235e9, rel=0.01)
    assert qwen.active_params == pytest.approx(22e9, rel=0.02)


def test_flops_follow_the_active_parameters() -> None:
    est = _est("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=8, zero=1, recompute="full", micro_batch=1)
    model = load_model("mixtral-8x7b")
    tokens = est.batch * model.seq  # type: ignore[attr-defined]
    attention = 3 * 4.0 * model.layers * model.hidden * model.seq * tokens
    expected = 6.0 * (model.layers * model.active_layer_params + model.vocab * model.hidden) * tokens + attention
    assert est.value("model_flops") == pytest.approx(expected)  # type: ignore[attr-defined]
    # A dense model of the same shape with every expert active does 4x the expert work.
    dense = dataclasses.replace(model, top_k=8)
    assert dense.active_params > 3 * model.active_params


def _step(model: str, cluster: str, nodes: int, **split: object) -> training.Step:
    m = load_model(model)
    c = load_cluster(cluster).with_nodes(nodes)
    par = ParallelConfig(**split)  # type: ignore[arg-type]
    from fabricscope.model.estimate import device_for

    return training.step(shape_of(m), job_of(par, m.batch(c.gpus)), device_for(c.gpu, "bf16"), fabric_of(c))


def test_expert_all_to_all_crosses_nvlink_inside_a_node_and_nics_beyond() -> None:
    inside = _step("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=8, zero=1)
    across = _step("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=8, tp=1, zero=1, cp=1)
    assert inside.ep_comm == across.ep_comm > 0
    # ep 8 with tp 8: one member per node, every copy leaves through the NICs.
    spread = _step("mixtral-8x7b", "dgx-h100-ndr", 8, tp=8, dp=8, ep=8, zero=1, sequence_parallel=True)
    per_token_inside = float(inside.ep_comm) / 1.0
    per_token_spread = float(spread.ep_comm) * 8  # tp 8 splits the tokens 8 ways
    assert per_token_spread > 2 * per_token_inside
    none = _step("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=1, zero=1)
    assert none.ep_comm == 0


def test_a_faster_network_shortens_only_cross_node_all_to_alls() -> None:
    m = load_model("deepseek-v3")
    c = load_cluster("dgx-h100-ndr").with_nodes(32)
    from fabricscope.model.estimate import device_for

    par = ParallelConfig(pp=8, dp=32, ep=32, zero=1, recompute="full")
    job, dev, fab = job_of(par, 1024), device_for(c.gpu, "bf16"), fabric_of(c)
    base = training.step(shape_of(m), job, dev, fab)
    wider = dataclasses.replace(fab, nic_gbps=fab.nic_gbps * 2, gpu_pcie_gbps=fab.gpu_pcie_gbps * 2)
    faster = training.step(shape_of(m), job, dev, wider)
    assert float(faster.ep_comm) < 0.75 * float(base.ep_comm)
    # A dispatcher that sends a token once per node (DeepEP) sends fewer copies across than one per
    # expert, and node-limited routing (DeepSeek-V3: at most 4 of the group's 8 nodes) fewer still.
    eight = job_of(ParallelConfig(pp=4, dp=64, ep=64, zero=1, recompute="full"), 1024)
    per_expert = training.step(shape_of(m), eight, dev, fab)
    deduped = dataclasses.replace(eight, node_dedup=1)
    anywhere = training.step(dataclasses.replace(shape_of(m), route_nodes=0), deduped, dev, fab)
    limited = training.step(shape_of(m), deduped, dev, fab)
    assert float(limited.ep_comm) < 0.85 * float(anywhere.ep_comm) < 0.75 * float(per_expert.ep_comm)
    # Load imbalance slows the busiest expert's compute and its all-to-all.
    skewed = training.step(shape_of(m), dataclasses.replace(job, imbalance=1.5), dev, fab)
    assert float(skewed.ep_comm) == pytest.approx(1.5 * float(base.ep_comm), rel=0.05)
    assert float(skewed.compute) > float(base.compute)
    # DualPipe-like overlap hides the all-to-alls behind compute.
    hidden = training.step(shape_of(m), dataclasses.replace(job, ep_overlap=1), dev, fab)
    assert float(hidden.ep_comm) < float(base.ep_comm)
    assert float(hidden.step) < float(base.step)


def test_expert_parallelism_divides_expert_memory() -> None:
    one = _step("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=1, zero=1)
    eight = _step("mixtral-8x7b", "dgx-h100-ndr", 8, dp=64, ep=8, zero=1)
    m = load_model("mixtral-8x7b")
    saved = float(one.memory_bytes) - float(eight.memory_bytes)
    # 16-bit weights and gradients of 7/8 of the experts, and their sharded optimizer state.
    replicated = 4.0 + 12.0 / 64  # ZeRO 1 over 64 data-parallel ranks
    sharded = (4.0 + 12.0 / 8) / 8  # an eighth of the experts, ZeRO 1 over the 8 ranks that hold them
    assert saved == pytest.approx(m.expert_params * (replicated - sharded), rel=0.01)


def test_context_parallelism_splits_attention_and_hides_its_ring() -> None:
    one = _step("llama3-405b-128k", "dgx-h100-ndr", 2048, tp=8, pp=16, dp=128, cp=1, zero=1, recompute="full")
    ring = _step("llama3-405b-128k", "dgx-h100-ndr", 2048, tp=8, pp=16, dp=8, cp=16, zero=1, recompute="full")
    assert float(ring.memory_bytes) < float(one.memory_bytes)
    # Each rank computes the same tokens per step either way: 16x the micro-batches of 1/16 of a sequence.
    assert float(ring.compute) == pytest.approx(float(one.compute), rel=0.02)
    assert float(ring.cp_comm) >= 0.0
    slow = load_cluster("cloud-h100-tcp").with_nodes(2048)
    m = load_model("llama3-405b-128k")
    from fabricscope.model.estimate import device_for

    par = ParallelConfig(tp=8, pp=16, dp=8, cp=16, zero=1, recompute="full")
    over_tcp = training.step(shape_of(m), job_of(par, 128), device_for(slow.gpu, "bf16"), fabric_of(slow))
    assert float(over_tcp.cp_comm) > float(ring.cp_comm)


def test_the_search_finds_context_parallelism_for_long_sequences_only() -> None:
    long = splits(load_model("llama3-405b-128k"), gpus=16384, gpus_per_node=8, request=SplitRequest(tp=8, pp=16))
    assert {c.cp for c in long.configs} >= {1, 2, 4, 8, 16}
    short = splits(load_model("llama-70b"), gpus=64, gpus_per_node=8)
    assert {c.cp for c in short.configs} == {1}
    moe = splits(load_model("mixtral-8x7b"), gpus=64, gpus_per_node=8, request=SplitRequest(tp=1, pp=1))
    assert {c.ep for c in moe.configs} == {1, 2, 4, 8}


def test_every_split_is_run_by_a_named_stack() -> None:
    table = stacks()
    cand = splits(load_model("llama-70b"), gpus=64, gpus_per_node=8)
    assert cand.configs
    for c in cand.configs:
        stack = table[c.stack]
        assert stack.runs(tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, zero=c.zero, interleave=c.interleave, ps_servers=0)
        assert not (c.pp > 1 and c.zero == 3)  # no stack runs ZeRO 3 with a pipeline
    deepspeed = splits(
        load_model("llama-70b"), gpus=64, gpus_per_node=8, request=SplitRequest(framework="deepspeed-pipeline")
    )
    assert {c.stack for c in deepspeed.configs} == {"deepspeed"}
    assert all(c.zero <= 1 and c.interleave == 1 for c in deepspeed.configs if c.pp > 1)
    request = SplitRequest(framework="megatron-core")
    megatron = splits(load_model("llama-70b"), gpus=64, gpus_per_node=8, request=request)
    assert {c.zero for c in megatron.configs} == {0, 1}


def test_llama_70b_over_tcp_no_longer_runs_zero3_with_a_pipeline(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "e.json"
    done = cli("estimate", "--model", "llama-70b", "--cluster", "cloud-h100-tcp", "--nodes", "8", "--json", str(out))
    assert done.code == 0, done.err
    parallel = json.loads(out.read_text())["records"][0]["parallel"]
    assert not (parallel["zero"] >= 2 and parallel["pp"] > 1)
    assert f"stack: {parallel['stack']} runs this split" in done.out
    chosen = best_split(load_model("llama-70b"), load_cluster("cloud-h100-tcp").with_nodes(8))
    assert chosen.stack == parallel["stack"]


def test_moe_estimate_prints_experts_and_the_all_to_all(cli) -> None:  # type: ignore[no-untyped-def]
    done = cli("estimate", "--model", "deepseek-v3", "--cluster", "dgx-h100-ndr", "--nodes", "32", "--ep", "32",
               "--pp", "8", "--recompute", "full", "--global-batch", "1024")  # fmt: skip
    assert done.code == 0, done.err
    assert "experts: 256 routed (top 8) + 1 shared" in done.out
    assert "tokens to at most 4 nodes" in done.out
    assert "expert all-to-all" in done.out
    overlapped = cli("estimate", "--model", "deepseek-v3", "--cluster", "dgx-h100-ndr", "--nodes", "32", "--ep", "32",
                     "--pp", "8", "--recompute", "full", "--global-batch", "1024", "--ep-overlap")  # fmt: skip
    assert "all-to-alls overlapped with compute" in overlapped.out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "mixtral-8x7b", "--ep", "3"], "--ep must divide the model's 8 experts"),
        (["--model", "deepseek-v3", "--ep", "128", "--nodes", "8"], "--ep must divide the 64 GPUs"),
        (["--model", "mixtral-8x7b", "--ep", "4", "--tp", "8", "--dp", "2", "--pp", "4"], "--ep must divide dp x cp"),
        (["--model", "llama-70b", "--ep", "2"], "--ep splits routed experts and llama-70b has none"),
        (["--model", "llama3-405b-128k", "--cp", "3"], "--cp must split the sequence (131072 tokens)"),
        (["--model", "mixtral-8x7b", "--moe-imbalance", "0.5"], "--moe-imbalance"),
        (["--model", "mixtral-8x7b", "--ep", "8", "--etp", "3"], "--etp x ep = 3 x 8 must divide the 64 GPUs"),
        (["--model", "mixtral-8x7b", "--ep", "8", "--etp", "4", "--pp", "8"], "(--pp 8, --ep 8, --etp 4)"),
        # Options that shape experts changed nothing on a dense model: refused, as --ep is.
        (
            ["--model", "llama-70b", "--etp", "2"],
            "--etp shapes the experts of a mixture-of-experts model and llama-70b has",
        ),
        (["--model", "llama-70b", "--moe-imbalance", "1.5"], "--moe-imbalance shapes the experts"),
        (["--model", "llama-70b", "--deepep"], "--deepep shapes the experts"),
        (["--model", "llama-70b", "--ep-overlap"], "--ep-overlap shapes the experts"),
    ],
)
def test_bad_expert_and_context_splits_are_one_error_line(cli, args: list[str], needle: str) -> None:  # type: ignore[no-untyped-def]
    base = ["estimate", "--cluster", "dgx-h100-ndr"]
    if "--nodes" not in args:
        base += ["--nodes", "8"]
    line = one_error_line(cli(*base, *args))
    assert needle in line


def test_top_k_above_the_experts_is_one_error_line(cli, write) -> None:  # type: ignore[no-untyped-def]
    path = write("moe.toml", 'kind = "transformer"\nlayers = 4\nhidden = 512\nheads = 8\nseq = 1024\n'
                 "vocab = 1000\nexperts = 4\ntop_k = 6\nglobal_batch = 8\n")  # fmt: skip
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-h100-ndr", "--nodes", "1"))
    assert "top_k must be from 1 to experts (4)" in line
    dense = write("dense.toml", 'kind = "transformer"\nlayers = 4\nhidden = 512\nheads = 8\nseq = 1024\n'
                  "vocab = 1000\ntop_k = 2\nglobal_batch = 8\n")  # fmt: skip
    assert "experts is 0" in one_error_line(cli("estimate", "--model", str(dense), "--cluster", "dgx-h100-ndr"))


def test_stack_table_names_known_frameworks_with_sources() -> None:
    from fabricscope.model.parallel import FRAMEWORKS

    table = stacks()
    assert {"megatron-core", "deepspeed", "pytorch"} <= set(table)
    for stack in table.values():
        assert stack.source
        for name in stack.frameworks:
            assert name in FRAMEWORKS
    assert table["megatron-core"].zero_with_pp == [0, 1] and 3 not in table["megatron-core"].zero
    assert table["deepspeed"].zero_with_pp == [0, 1]
    assert np.all([s.runs(tp=1, pp=1, cp=1, ep=1, zero=0, interleave=1, ps_servers=0) for s in table.values()
                   if not s.parameter_servers])  # fmt: skip


def test_a_calibrated_all_to_all_prices_the_expert_dispatch(cli, write) -> None:  # type: ignore[no-untyped-def]
    """``calibrate`` on ``bench alltoall`` runs writes [calibration.alltoall]; estimate then prices
    expert dispatch inside a node from those terms, in proportion to 1 / busbw."""
    base = (
        'nodes = 1\ngpus_per_node = 2\ngpu = "h100-sxm"\nintra = "nvswitch"\npcie = "gen5"\n'
        '[network]\nnic = "ib-ndr"\nnics_per_node = 8\ntransport = "rdma-gdr"\n'
    )
    table = "[calibration.alltoall]\nbase_us = 10.0\nintra_hop_us = 5.0\nintra_busbw_gbps = {bw}\npoints = 7\n"
    slow = write("slow.toml", base + table.format(bw=1.0))
    slower = write("slower.toml", base + table.format(bw=0.5))
    plain = write("plain.toml", base)
    split = ["--model", "mixtral-8x7b", "--nodes", "16", "--tp", "1", "--ep", "2", "--pp", "4", "--dp", "8",
             "--zero", "1", "--micro-batch", "1", "--recompute", "full", "--interleave", "1"]  # fmt: skip
    times = {}
    for path in (slow, slower, plain):
        out = path.with_suffix(".json")
        done = cli("estimate", "--cluster", str(path), *split, "--json", str(out))
        assert done.code == 0, done.err
        times[path.stem] = json.loads(out.read_text())["records"][0]["breakdown"]["ep_comm"]
        assert ("all-to-all: calibrated (7 points" in done.out) == (path != plain)
    # Halving the measured busbw doubles the bandwidth part; latency stays.
    assert times["slower"] > 1.9 * times["slow"] - 1e-9
    assert times["slow"] > 10 * times["plain"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("experts = 8\ntop_k = 0\n", "top_k must be from 1 to experts (8)"),
        ("experts = 8\ntop_k = 2\ncapacity_factor = 0.5\n", "capacity_factor must be 0 (dropless) or at least 1"),
        ("experts = 8\ntop_k = 2\ndense_layers = 4\n", "dense_layers must be fewer than layers (4)"),
        ("experts = -8\ntop_k = 2\n", "experts must be from 0 to 65536"),
        ("experts = 8\ntop_k = 2.5\n", "top_k"),
        ("route_nodes = 4\n", "route_nodes is 4 but experts is 0"),
        ("kv_lora_rank = 512\n", "head_dim must be given with kv_lora_rank"),
        ("kv_lora_rank = 512\nhead_dim = 64\nkv_heads = 2\n", "kv_heads is 2 but kv_lora_rank is set"),
        ("rope_dim = 64\n", "rope_dim is 64 but kv_lora_rank is 0"),
        ("kv_lora_rank = 99999999\nhead_dim = 64\n", "kv_lora_rank must be from 0 to"),
    ],
)
def test_bad_expert_and_attention_fields_are_one_error_line(cli, write, extra: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    text = 'kind = "transformer"\nlayers = 4\nhidden = 512\nheads = 8\nseq = 1024\nvocab = 1000\nglobal_batch = 8\n'
    path = write("moe.toml", text + extra)
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-h100-ndr", "--nodes", "1"))
    assert needle in line


def test_the_expert_width_and_shared_experts_set_the_active_parameters() -> None:
    base = load_model("deepseek-v3")
    wider = dataclasses.replace(base, expert_ffn=4096)
    # Eight routed experts and the shared one (whose width follows expert_ffn) per token, every MoE layer.
    routed = 9 * 3 * base.hidden * 2048 * base.moe_layers
    assert wider.active_params - base.active_params == pytest.approx(routed)
    unshared = dataclasses.replace(base, shared_experts=0)
    assert base.active_params - unshared.active_params == pytest.approx(3 * base.hidden * 2048 * base.moe_layers)


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama-70b", "--nodes", "8", "--zero", "3", "--pp", "4"],
        ["--model", "llama3-405b-128k", "--nodes", "2048", "--cp", "16", "--framework", "deepspeed-pipeline"],
        ["--model", "llama-70b", "--nodes", "8", "--interleave", "2", "--framework", "deepspeed-pipeline"],
    ],
)
def test_a_split_no_stack_runs_is_one_error_line_naming_the_rule(cli, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    line = one_error_line(cli("estimate", "--cluster", "dgx-h100-ndr", *args))
    assert "no training stack" in line and "catalog/frameworks.toml" in line


def test_plan_names_the_stack_of_every_frontier_split(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.json"
    done = cli("plan", "--model", "mixtral-8x7b", "--gpus", "64", "--top", "3", "--json", str(out))
    assert done.code == 0, done.err
    table = stacks()
    for record in json.loads(out.read_text())["records"]:
        par = record["parallel"]
        assert par["stack"] in table
        assert f"({par['stack']})" in done.out
        assert table[par["stack"]].runs(tp=par["tp"], pp=par["pp"], cp=par["cp"], ep=par["ep"], zero=par["zero"],
                                        interleave=par["interleave"], ps_servers=0)  # fmt: skip


def test_grouped_gemm_efficiency_follows_deepgemm_table_between_its_points() -> None:
    for tokens, share in training.GROUPED_GEMM_EFFICIENCY:
        assert float(training.grouped_gemm_efficiency(tokens)) == pytest.approx(share)
    # Between two points on log2 of the tokens; outside them, the nearest point's share.
    assert float(training.grouped_gemm_efficiency(2048.0)) == pytest.approx((0.83 + 1.0) / 2)
    assert float(training.grouped_gemm_efficiency(16.0)) == pytest.approx(0.68)
    assert float(training.grouped_gemm_efficiency(1e6)) == pytest.approx(1.0)
    many = training.grouped_gemm_efficiency(np.geomspace(1, 1e5, 50))
    assert np.all(np.diff(many) >= 0)


def test_tokens_per_expert_of_the_qwen3_splits() -> None:
    qwen = shape_of(load_model("qwen3-235b-a22b"))
    # 256 H100, seq 4096, top 8 of 128 experts, TP 2, ETP 1 (Megatron-MoE-ModelZoo's table):
    # EP 32 spreads 32 x 2048 x 8 routed tokens over 128 experts, EP 8 a quarter of that.
    for ep, per_expert in ((32, 4096.0), (8, 1024.0)):
        job = job_of(ParallelConfig(tp=2, pp=8, dp=16, ep=ep, etp=1), 2048)
        assert float(training.expert_tokens(qwen, job, 4096.0)) == pytest.approx(per_expert)
    # Experts split over their own tensor ranks each see all of their tokens.
    job = job_of(ParallelConfig(tp=2, pp=8, dp=16, ep=8, etp=2), 2048)
    assert float(training.expert_tokens(qwen, job, 4096.0)) == pytest.approx(2048.0)


def test_fewer_tokens_per_expert_slow_the_expert_gemms_only() -> None:
    qwen = load_model("qwen3-235b-a22b")
    cluster = "dgx-h100-ndr"
    wide = _est("qwen3-235b-a22b", cluster, 32, tp=2, pp=8, dp=16, ep=32, etp=1)
    narrow = _est("qwen3-235b-a22b", cluster, 32, tp=2, pp=8, dp=16, ep=8, etp=1)
    assert narrow.value("compute") > wide.value("compute")  # type: ignore[attr-defined]
    # With the table's grouped GEMMs as fast as dense ones the two computes are equal.
    flat = ((1.0, 1.0), (2.0, 1.0))
    original = training.GROUPED_GEMM_EFFICIENCY
    try:
        training.GROUPED_GEMM_EFFICIENCY = flat  # type: ignore[misc]
        same = _est("qwen3-235b-a22b", cluster, 32, tp=2, pp=8, dp=16, ep=8, etp=1)
    finally:
        training.GROUPED_GEMM_EFFICIENCY = original  # type: ignore[misc]
    assert same.value("compute") == pytest.approx(wide.value("compute"), rel=1e-9)  # type: ignore[attr-defined]
    assert qwen.experts == 128
    # A dense model has no grouped GEMM: its compute does not depend on the table.
    dense = _est("llama3-8b", cluster, 1, tp=1, pp=1, dp=8)
    try:
        training.GROUPED_GEMM_EFFICIENCY = ((1.0, 0.1), (2.0, 0.1))  # type: ignore[misc]
        slowed = _est("llama3-8b", cluster, 1, tp=1, pp=1, dp=8)
    finally:
        training.GROUPED_GEMM_EFFICIENCY = original  # type: ignore[misc]
    assert slowed.value("compute") == dense.value("compute")  # type: ignore[attr-defined]


def test_estimate_prints_and_records_the_tokens_per_expert(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "qwen.json"
    args = ["--model", "qwen3-235b-a22b", "--cluster", "dgx-h100-ndr", "--nodes", "32"]
    done = cli("estimate", *args, "--tp", "2", "--pp", "8", "--dp", "16", "--ep", "8", "--etp", "1", "--json", str(out))
    assert done.code == 0, done.err
    assert "1,024 tokens per expert per micro-batch: grouped GEMMs at 0.83 of the dense rate" in done.out
    record = json.loads(out.read_text())["records"][0]
    assert record["tokens_per_expert"] == pytest.approx(1024.0)
    dense = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100-ndr", "--nodes", "1")
    assert dense.code == 0 and "tokens per expert" not in dense.out


def test_deepseek_v3_has_its_latent_attention() -> None:
    model = load_model("deepseek-v3")
    # DeepSeek-V3 report 4.2: 128 heads of 128, rotary 64, latents of 512 (keys, values) and 1536 (queries).
    assert model.is_mla and (model.q_width, model.v_width) == (128 * 192, 128 * 128)
    h = 7168
    by_hand = h * 1536 + 1536 * 128 * 192 + h * (512 + 64) + 512 * 128 * 128 * 2 + 128 * 128 * h + 1536 + 512
    assert model.attention_params == by_hand
    # With it the preset holds the report's 671B parameters and 37B active without a tolerance's help.
    assert model.param_count == pytest.approx(671e9, rel=0.002)
    assert model.active_params == pytest.approx(37e9, rel=0.02)
    assert ("kv_lora_rank", "512") in model.shown()


def test_latent_attention_prices_its_wider_heads() -> None:
    mla = load_model("deepseek-v3")
    # The same model read as 128 full heads of hidden / heads = 56: its scores are 192 wide, not 56.
    plain = dataclasses.replace(mla, head_dim=0, rope_dim=0, v_head_dim=0, q_lora_rank=0, kv_lora_rank=0)
    cluster = load_cluster("dgx-h100-ndr").with_nodes(32)
    split = ParallelConfig(tp=1, pp=8, dp=32, ep=32, recompute="full", global_batch=1024)
    wide, narrow = estimate(mla, cluster, split, what_ifs=False), estimate(plain, cluster, split, what_ifs=False)
    assert wide.value("compute") > narrow.value("compute")
    # Model FLOPs: 2 s (q + v) per token and layer for attention, forward.
    tokens = 1024 * mla.seq
    extra = 3.0 * 2.0 * mla.layers * ((24576 + 16384) - 2 * 7168) * mla.seq * tokens
    params = 6.0 * (mla.layers * (mla.active_layer_params - plain.active_layer_params)) * tokens
    assert wide.value("model_flops") - narrow.value("model_flops") == pytest.approx(extra + params, rel=1e-9)


def test_only_the_routed_experts_run_as_a_grouped_gemm() -> None:
    # DeepSeek-V3 has three dense layers and a shared expert: those stay dense GEMMs.
    shape = shape_of(load_model("deepseek-v3"))
    job = job_of(ParallelConfig(tp=1, pp=8, dp=8, ep=8), 64)
    original = training.GROUPED_GEMM_EFFICIENCY
    try:
        training.GROUPED_GEMM_EFFICIENCY = ((1.0, 0.5), (2.0, 0.5))  # type: ignore[misc]
        scale = float(training.grouped_mlp_scale(shape, job, 4096.0))
    finally:
        training.GROUPED_GEMM_EFFICIENCY = original  # type: ignore[misc]
    routed = float(shape.moe_share * shape.routed_ffn)
    width = float(training.mlp_width(shape, job))
    assert scale == pytest.approx(1.0 + routed / width)  # the routed share at half speed, the rest as it was
    assert 1.5 < scale < 2.0


def test_latent_attention_time_follows_its_flops() -> None:
    # One micro-batch per GPU, no recomputation: the compute the MLA widths add over 128 plain heads of
    # 56 is their attention FLOPs at the attention rate (forward and FlashAttention's 2.5x backward),
    # their projections' FLOPs at the matmul rate (forward and twice backward) and the wider keys and
    # values stored, layer by layer.
    mla = load_model("deepseek-v3")
    plain = dataclasses.replace(mla, head_dim=0, rope_dim=0, v_head_dim=0, q_lora_rank=0, kv_lora_rank=0)
    cluster = load_cluster("dgx-h100-ndr").with_nodes(8)
    split = ParallelConfig(tp=1, pp=8, dp=8, ep=8, recompute="none", micro_batch=1, global_batch=8)
    wide, narrow = estimate(mla, cluster, split, what_ifs=False), estimate(plain, cluster, split, what_ifs=False)
    dev = device_for(cluster.gpu, "bf16")
    s, h, layers = mla.seq, mla.hidden, 8  # ceil(61 / 8) layers on the busiest stage
    attention = 0.5 * 2.0 * s * s * ((24576 + 16384) - 2 * 7168) / (dev.peak_flops * dev.attention_eff)
    projections = 2.0 * s * (mla.attention_params - 4 * h * h) / (dev.peak_flops * dev.matmul_eff)
    # Keys and values stored for the backward are wider too: written and read forward and backward.
    stored = 4.0 * s * (mla.kv_width - 7168) * dev.act_bytes / 2.0
    touched = (training.TOUCH_FWD + training.TOUCH_BWD) * stored / dev.hbm_bps
    expected = layers * (attention * (1 + training.FLASH_BWD_FACTOR) + projections * 3 + touched)
    assert wide.value("compute") - narrow.value("compute") == pytest.approx(expected, rel=0.03)


def test_latent_attention_down_projections_run_whole_on_every_tensor_rank() -> None:
    # Megatron-Core builds W^DQ and W^DKV 'duplicated': tensor parallelism does not split them, and each
    # rank feeds them all of the tokens unless sequence parallelism gives it 1/t of them.
    model = load_model("deepseek-v3")
    assert model.whole_attention_params == 7168 * (1536 + 512 + 64)
    cluster = load_cluster("dgx-h100-ndr").with_nodes(8)
    fab, dev = fabric_of(cluster), device_for(cluster.gpu, "bf16")
    shape = shape_of(model)
    for sequence_parallel, share in ((False, 0.5), (True, 0.0)):
        split = ParallelConfig(
            tp=2, pp=8, dp=4, ep=4, recompute="none", micro_batch=1, global_batch=4, sequence_parallel=sequence_parallel
        )
        job = job_of(split, 4)
        whole = training.step(shape, job, dev, fab)
        split_too = training.step(dataclasses.replace(shape, whole_attention_params=0), job, dev, fab)
        # 8 layers on the busiest stage, forward and twice backward: half of those FLOPs more per rank
        # without sequence parallelism, none with it.
        flops = 8 * 3 * 2.0 * model.seq * model.whole_attention_params * share
        extra = flops / (dev.peak_flops * dev.matmul_eff)
        assert float(whole.compute - split_too.compute) == pytest.approx(extra, rel=0.02, abs=1e-9)


def test_the_stack_line_names_frameworks_that_framework_takes(cli) -> None:  # type: ignore[no-untyped-def]
    """What `estimate` offers to --framework is what --framework takes, and its help lists every framework."""
    from fabricscope.model.parallel import FRAMEWORKS

    done = cli("estimate", "--model", "resnet50", "--cluster", "lab-8gpu-100g-nvme")
    [line] = [line for line in done.out.splitlines() if line.startswith("stack: ")]
    assert line.startswith("stack: pytorch runs this split"), line  # a vision model: not an LLM stack's name
    offered = line.split("--framework ")[1].split(" prices")[0].split(" | ")
    assert offered == stacks()["pytorch"].frameworks
    for name in offered:
        again = cli("estimate", "--model", "resnet50", "--cluster", "lab-8gpu-100g-nvme", "--framework", name)
        assert again.code == 0 and f"priced as {name} runs it" in again.out, again.err
    help_text = " ".join(cli("estimate", "--help").out.split()).replace("- ", "-")  # wrapped at a hyphen
    assert all(name in help_text for name in FRAMEWORKS), sorted(n for n in FRAMEWORKS if n not in help_text)


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "runs"),
    [(48, 12, 8, False), (48, 12, 4, True), (64, 4, 8, True), (64, 8, 8, True), (48, 12, 2, True), (48, 3, 8, False)],
)
def test_tensor_parallelism_splits_key_value_groups_as_megatron_core_does(
    heads: int, kv_heads: int, tp: int, runs: bool
) -> None:
    """12 groups over 8 ranks cannot be split (divide() asserts); 4 groups over 8 ranks are, one shared by 2."""
    from fabricscope.model.workload import ModelSpec

    spec = ModelSpec(
        kind="transformer",
        layers=4,
        hidden=heads * 128,
        heads=heads,
        kv_heads=kv_heads,
        seq=2048,
        vocab=32000,
        global_batch=64,
    )
    assert spec.tp_fits_heads(tp) is runs
    if not runs:
        with pytest.raises(UsageError, match="key/value heads"):
            best_split(spec, load_cluster("dgx-h100-ndr").with_nodes(1), SplitRequest(tp=tp))
    chosen = splits(spec, gpus=16, gpus_per_node=8)
    assert all(spec.tp_fits_heads(int(c.tp)) for c in chosen.configs)


def test_an_interleaved_pipeline_runs_a_multiple_of_pp_micro_batches(cli) -> None:  # type: ignore[no-untyped-def]
    """Megatron-Core's interleaved schedule groups micro-batches by pp (7 over 16 stages cannot run, and the
    bubble formula (p-1)/v assumes m >= p): refused when asked for, never chosen."""
    args = ["--nodes", "16", "--global-batch", "7", "--tp", "8", "--pp", "16", "--interleave", "2"]
    line = one_error_line(cli("estimate", "--model", "llama-70b", "--cluster", "dgx-h100-ndr", *args))
    assert "7 micro-batches" in line and "not a multiple of pp 16" in line
    model, cluster = load_model("llama-70b"), load_cluster("dgx-h100-ndr").with_nodes(16)
    chosen = splits(model, gpus=128, gpus_per_node=8, request=SplitRequest(global_batch=7))
    for config in chosen.configs:
        microbatches = 7 // int(config.dp * config.micro_batch)
        assert config.interleave == 1 or (microbatches >= config.pp and microbatches % config.pp == 0)
    assert best_split(model, cluster, SplitRequest(global_batch=7)).interleave == 1


def test_the_stack_line_says_the_gradient_width_that_priced_the_split(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without --framework a Megatron split is priced with bf16 gradients; --framework megatron-core reduces
    them in fp32 (Megatron-LM's default): the line says which, so the two step times are not a surprise."""
    widths = {}
    for framework in ([], ["--framework", "megatron-core"], ["--framework", "nemo"]):
        done = cli("estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--nodes", "2", *framework)
        [line] = [line for line in done.out.splitlines() if line.startswith("stack: megatron-core runs this split")]
        widths[tuple(framework)] = line.split("gradients reduced in ")[1].split("-byte")[0]
        out = tmp_path / "e.json"
        assert cli("estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--nodes", "2", *framework,
                   "--json", str(out)).code == 0  # fmt: skip
        # One number, one path: the JSON carries the width the line says.
        assert f"{json.loads(out.read_text())['records'][0]['grad_wire_bytes']:g}" == widths[tuple(framework)]
    assert widths == {(): "2", ("--framework", "megatron-core"): "4", ("--framework", "nemo"): "2"}
    # Megatron-LM's FP8 recipe adds --grad-reduce-in-bf16 to --bf16: fp8 reduces 2-byte words.
    fp8 = cli(
        "estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--nodes", "2", "--precision", "fp8",
        "--framework", "megatron-core",
    )  # fmt: skip
    [line] = [line for line in fp8.out.splitlines() if line.startswith("stack: megatron-core runs this split")]
    assert "gradients reduced in 2-byte words" in line, line


def test_the_stack_line_of_a_split_without_data_parallelism_reduces_nothing(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = [
        "--model",
        "llama-70b",
        "--cluster",
        "dgx-h100-ndr",
        "--nodes",
        "16",
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        "1",
    ]
    done = cli("estimate", *args)
    [line] = [line for line in done.out.splitlines() if line.startswith("stack: ")]
    assert "no gradient reduction (dp 1)" in line and "-byte words" not in line, line
    out = tmp_path / "e.json"
    assert cli("estimate", *args, "--json", str(out)).code == 0
    assert json.loads(out.read_text())["records"][0]["grad_wire_bytes"] is None
