"""Framework effects are named parameters: each changes the step the way its mechanism says."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fabricscope.model import training
from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import device_for, estimate, job_of, shape_of
from fabricscope.model.parallel import FRAMEWORKS, ParallelConfig, stack_settings
from fabricscope.model.workload import load_model


def _step(model_name: str, cluster_name: str, nodes: int, **knobs: object) -> training.Step:
    model = load_model(model_name)
    cluster = load_cluster(cluster_name).with_nodes(nodes)
    return estimate(model, cluster, ParallelConfig(**knobs), what_ifs=False).step  # type: ignore[arg-type]


def test_a_stack_that_sends_whole_outputs_from_every_tensor_rank_sends_more() -> None:
    # Megatron's scatter/gather (and DeepSpeed's PartitionedTensor) send 1/t per rank; a stack that
    # sends all of it sends t times more bytes on the same links (the latency part is the same).
    split = dict(tp=8, pp=35, dp=8, recompute="full", global_batch=1920)
    megatron = _step("megatron-530b", "dgx-a100-hdr", 280, **split)
    engine = _step("megatron-530b", "dgx-a100-hdr", 280, pp_scatter_gather=False, **split)
    assert 4 < float(engine.pp_comm) / float(megatron.pp_comm) <= 8
    assert float(engine.compute) == pytest.approx(float(megatron.compute))


def test_pipeline_instructions_one_after_the_other_take_twice_the_transfers() -> None:
    # DeepSpeed's TrainSchedule (v0.5.4): RecvActivation then SendGrad, SendActivation then RecvGrad,
    # each finished before the next: four transfer times per micro-batch where Megatron's batched
    # send-and-receive takes two.  Nothing else of the step changes but the bubble it paces.
    split = dict(tp=8, pp=35, dp=8, recompute="full", global_batch=1920)
    batched = _step("megatron-530b", "dgx-a100-hdr", 280, **split)
    serial = _step("megatron-530b", "dgx-a100-hdr", 280, p2p_batched=False, **split)
    assert float(serial.pp_comm) == pytest.approx(2 * float(batched.pp_comm))
    assert float(serial.compute) == pytest.approx(float(batched.compute))
    micro = 1920 / 8
    per_mb = (float(serial.pp_comm) - float(batched.pp_comm)) / micro
    assert float(serial.bubble) - float(batched.bubble) == pytest.approx(34 * per_mb)
    assert FRAMEWORKS["deepspeed-pipeline"].p2p_batched is False and FRAMEWORKS["megatron-core"].p2p_batched


def test_zero3_regathers_for_recomputation_only_when_the_stack_does() -> None:
    split = dict(dp=64, zero=3, recompute="full", micro_batch=1, global_batch=64, dp_overlap=False)
    fsdp = _step("llama-7b", "dgx-a100-hdr", 8, **split)
    deepspeed = _step("llama-7b", "dgx-a100-hdr", 8, regather_on_recompute=True, **split)
    assert float(deepspeed.dp_comm_total) > float(fsdp.dp_comm_total)
    # Without recomputation there is nothing to gather again.
    plain = dict(split, recompute="none")
    assert float(_step("llama-7b", "dgx-a100-hdr", 8, **plain).dp_comm_total) == pytest.approx(
        float(_step("llama-7b", "dgx-a100-hdr", 8, regather_on_recompute=True, **plain).dp_comm_total)
    )


def test_list_collectives_cost_a_copy_kernel_per_rank() -> None:
    # Per micro-batch ZeRO 3 runs 3 collectives per unit (two gathers, one reduce-scatter); with the
    # list API each also runs dp copy kernels.
    split = dict(dp=256, zero=3, micro_batch=1, global_batch=256, recompute="none", dp_overlap=False)
    base = _step("llama-7b", "dgx-a100-hdr", 32, **split)
    copies = _step("llama-7b", "dgx-a100-hdr", 32, rank_copies=True, **split)
    units = 32
    expected = units * 3 * 256 * training.KERNEL_OVERHEAD_S
    assert float(copies.dp_comm_total) - float(base.dp_comm_total) == pytest.approx(expected, rel=1e-9)


def test_one_gather_per_weight_matrix_pays_more_latency() -> None:
    split = dict(dp=256, zero=3, micro_batch=1, global_batch=256, recompute="none", dp_overlap=False)
    layer = _step("llama-7b", "dgx-a100-hdr", 32, **split)
    matrices = _step("llama-7b", "dgx-a100-hdr", 32, unit_tensors=4, **split)
    assert float(matrices.dp_comm_total) > float(layer.dp_comm_total)


def test_horovod_reduces_once_per_cycle_of_the_backward() -> None:
    model = load_model("resnet50")
    cluster = load_cluster("v100-100gbe-tcp").with_nodes(2)
    horovod = FRAMEWORKS["horovod"]
    par = ParallelConfig(dp=16, micro_batch=64, global_batch=1024, precision="fp16")
    hvd = dataclasses.replace(par, bucket_mb=horovod.bucket_mb, cycle_ms=horovod.cycle_ms)
    job = job_of(hvd, 1024)
    step = estimate(model, cluster, hvd, what_ifs=False).step
    backward = 2.0 / 3.0 * float(step.compute)
    device_units = training._units(shape_of(model), job, device_for(cluster.gpu, "fp16"), backward)
    assert float(device_units) == np.ceil(backward / 5e-3) > 1
    # One fused buffer without the cycle: the whole reduction waits for the end of the backward.
    one_buffer = dataclasses.replace(hvd, cycle_ms=0.0)
    assert float(estimate(model, cluster, one_buffer, what_ifs=False).step.dp_comm) > float(step.dp_comm)


@pytest.mark.parametrize(
    ("layers", "pp", "v", "busiest"),
    [(126, 16, 1, 8), (126, 16, 8, 8), (105, 35, 1, 3), (70, 12, 1, 6), (32, 3, 1, 11), (128, 64, 1, 2)],
)
def test_the_busiest_stage_sets_the_pace(layers: int, pp: int, v: int, busiest: int) -> None:
    shape = training.Shape(transformer=True, layers=layers)
    assert training.stage_layers(shape, training.Job(pp=pp, interleave=v)) == busiest


def test_estimate_prices_a_named_stack(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    common = ["estimate", "--model", "megatron-530b", "--cluster", "dgx-a100-hdr", "--nodes", "280", "--tp", "8"]
    common += ["--pp", "35", "--recompute", "full", "--global-batch", "1920", "--micro-batch", "1"]
    common += ["--interleave", "1", "--zero", "1"]
    out = {}
    for name in ("megatron-core", "deepspeed-pipeline"):
        path = tmp_path / f"{name}.json"
        done = cli(*common, "--framework", name, "--json", str(path))
        assert done.code == 0, done.err
        out[name] = json.loads(path.read_text())["records"][0]
    engine, core = out["deepspeed-pipeline"], out["megatron-core"]
    # Both send 1/t of a stage output per tensor-parallel rank; DeepSpeed's sends and receives one
    # after the other (twice the transfer time) and reduces its gradients after the flush.
    assert engine["parallel"]["pp_scatter_gather"] is True and core["parallel"]["pp_scatter_gather"] is True
    assert engine["parallel"]["p2p_batched"] is False and core["parallel"]["p2p_batched"] is True
    assert engine["breakdown"]["pp_comm"] == pytest.approx(2 * core["breakdown"]["pp_comm"])
    assert engine["step_time_s"] > core["step_time_s"]


def test_an_unknown_stack_is_one_error_line(cli) -> None:  # type: ignore[no-untyped-def]
    from model_helpers import one_error_line

    line = one_error_line(
        cli("estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--framework", "deepspeed-pipelin")
    )
    assert "unknown --framework 'deepspeed-pipelin'" in line and "did you mean 'deepspeed-pipeline'" in line


def test_flashattention_2_reaches_a_third_of_hopper() -> None:
    # FlashAttention-3 paper: FA2 'achieves only 35% utilization on the H100'; FA3 reaches 75%.
    from fabricscope.model.hardware import GPU, lookup

    h100 = lookup("gpu", "h100-sxm", GPU)
    a100 = lookup("gpu", "a100-sxm-80gb", GPU)
    assert device_for(h100, "bf16", arch_attention=False).attention_eff == 0.35
    assert device_for(h100, "bf16").attention_eff == 0.75
    assert device_for(a100, "bf16", arch_attention=False).attention_eff == 0.0  # the matmul efficiency
    split = dict(tp=8, dp=8, micro_batch=1, global_batch=64, recompute="none")
    fa2 = _step("llama-7b", "dgx-h100-ndr", 8, hopper_attention=False, **split)
    fa3 = _step("llama-7b", "dgx-h100-ndr", 8, **split)
    assert float(fa2.compute) > float(fa3.compute)


def test_fp32_weights_under_mixed_precision_put_four_bytes_per_gradient_on_the_wire() -> None:
    # PyTorch AMP with DDP and Horovod with tf_cnn_benchmarks keep fp32 weights: their gradients are
    # reduced in 32 bits, twice the bytes of a 16-bit reduction, whatever the compute precision.
    split = dict(dp=32, micro_batch=64, global_batch=2048, recompute="none")
    sixteen = _step("resnet50", "v100-100gbe-tcp", 4, precision="fp16", **split)
    thirty_two = _step("resnet50", "v100-100gbe-tcp", 4, precision="fp16", fp32_gradients=True, **split)
    assert float(thirty_two.dp_comm_total) > 1.8 * float(sixteen.dp_comm_total)
    assert float(thirty_two.compute) == pytest.approx(float(sixteen.compute))
    # In fp32 training the gradients are 4 bytes already: the flag changes nothing there.
    fp32 = _step("resnet50", "v100-100gbe-tcp", 4, precision="fp32", **split)
    flagged = _step("resnet50", "v100-100gbe-tcp", 4, precision="fp32", fp32_gradients=True, **split)
    assert float(flagged.dp_comm_total) == pytest.approx(float(fp32.dp_comm_total))
    assert FRAMEWORKS["horovod"].fp32_gradients and FRAMEWORKS["pytorch-ddp"].fp32_gradients
    assert not FRAMEWORKS["megatron-core"].fp32_gradients and not FRAMEWORKS["deepspeed-pipeline"].fp32_gradients


def test_bf16_optimizer_accumulates_in_fp32_unsharded_and_only_in_bf16() -> None:
    # BigScience's BF16 optimizer: '4bytes x params and it's not sharded across gpus', and a pass
    # over those bytes after every micro-batch; in fp16 the gradients accumulate in place.
    model, cluster = load_model("megatron-145b"), load_cluster("dgx-a100-hdr").with_nodes(48)
    runs = {}
    for framework in ("deepspeed-pipeline", "megatron-deepspeed-bf16"):
        for precision in ("bf16", "fp16"):
            par = ParallelConfig(
                tp=4,
                pp=12,
                dp=8,
                zero=1,
                micro_batch=2,
                recompute="full",
                precision=precision,
                **stack_settings(FRAMEWORKS[framework]),
            )
            runs[framework, precision] = estimate(model, cluster, par, what_ifs=False)
    plain, accumulated = runs["deepspeed-pipeline", "bf16"], runs["megatron-deepspeed-bf16", "bf16"]
    params = model.param_count / (4 * 12)
    extra = accumulated.value("memory_bytes") - plain.value("memory_bytes")
    # 4 bytes of fp32 accumulator, and the 2-byte bf16 copy DeepSpeed reduces it through
    # (communication_data_type is bf16 under bf16: deepspeed/runtime/engine.py, allreduce_bucket).
    assert extra == pytest.approx(6.0 * params, rel=0.1)
    microbatches = model.global_batch / (8 * 2)
    pass_s = microbatches * 10.0 * params / (cluster.gpu.hbm_tbps * 1e12)
    assert accumulated.value("optimizer") - plain.value("optimizer") == pytest.approx(pass_s, rel=0.1)
    fp16_plain, fp16_stack = runs["deepspeed-pipeline", "fp16"], runs["megatron-deepspeed-bf16", "fp16"]
    assert fp16_stack.value("memory_bytes") == fp16_plain.value("memory_bytes")
    assert fp16_stack.step_s == fp16_plain.step_s


def test_tensor_parallel_overlap_exposes_one_chunk_and_what_the_gemms_do_not_cover() -> None:
    # NeMo's TP overlap: each collective in t ring-exchange chunks beside its GEMM; only with sequence
    # parallelism (NeMo turns it off without), and nothing to overlap at TP 1.
    split = dict(tp=4, pp=4, interleave=5, dp=2, micro_batch=1, global_batch=64, precision="fp8")
    plain = _step("llama-70b", "dgx-h100-ndr", 4, sequence_parallel=True, **split)
    chunked = _step("llama-70b", "dgx-h100-ndr", 4, sequence_parallel=True, tp_comm_overlap=True, **split)
    assert float(chunked.compute) == pytest.approx(float(plain.compute))
    # The layer's GEMMs (forward and twice backward) cover the collectives on NVLink: one chunk of 4 waits.
    assert float(chunked.tp_comm) == pytest.approx(float(plain.tp_comm) / 4)
    no_sp = _step("llama-70b", "dgx-h100-ndr", 4, sequence_parallel=False, tp_comm_overlap=True, **split)
    assert float(no_sp.tp_comm) == pytest.approx(float(_step("llama-70b", "dgx-h100-ndr", 4, **split).tp_comm))
    # A narrow model over PCIe: its GEMMs cover less than the collectives take, so each later chunk waits
    # for the rest, and the layer waits longer than one chunk but never longer than without the overlap.
    narrow = dataclasses.replace(load_model("llama-7b"), hidden=512, heads=8, ffn=1408, params=0)
    cluster = load_cluster("lab-8gpu-100g-nvme").with_nodes(1)
    pcie = dict(tp=4, pp=2, dp=1, micro_batch=1, global_batch=8, sequence_parallel=True)
    slow = estimate(narrow, cluster, ParallelConfig(**pcie), what_ifs=False).step  # type: ignore[arg-type]
    hidden = estimate(narrow, cluster, ParallelConfig(tp_comm_overlap=True, **pcie), what_ifs=False).step  # type: ignore[arg-type]
    assert float(slow.tp_comm) > 3 * float(slow.compute) / 2  # the GEMMs (all of compute here) cover less
    assert float(slow.tp_comm) / 4 < float(hidden.tp_comm) < float(slow.tp_comm)


def test_pipeline_overlap_hides_the_steady_state_transfers_of_an_interleaved_schedule() -> None:
    # NeMo: 'overlap of the PP communications with non-dependant computations in the 1F1B stage', 'the
    # PP communications in pipeline fill and flush are still exposed', only with virtual pipelining.
    split = dict(tp=4, pp=4, dp=2, micro_batch=1, global_batch=64, precision="fp8")
    waited = _step("llama-70b", "dgx-h100-ndr", 4, interleave=5, **split)
    hidden = _step("llama-70b", "dgx-h100-ndr", 4, interleave=5, pp_comm_overlap=True, **split)
    assert float(waited.pp_comm) > 0 and float(hidden.pp_comm) == 0.0
    assert float(hidden.bubble) == pytest.approx(float(waited.bubble))  # the fill and flush still wait
    # ... for the whole micro-batch's time, its transfers included: (pp - 1) / v of it.
    micro = 64 / (2 * 1)
    busy = sum(float(getattr(waited, part)) for part in ("compute", "recompute", "tp_comm", "ep_comm", "cp_comm"))
    assert float(hidden.bubble) == pytest.approx(3 / 5 * (busy + float(waited.pp_comm)) / micro)
    assert float(hidden.step) < float(waited.step)
    flat = _step("llama-70b", "dgx-h100-ndr", 4, interleave=1, pp_comm_overlap=True, **split)
    assert float(flat.pp_comm) == pytest.approx(
        float(_step("llama-70b", "dgx-h100-ndr", 4, interleave=1, **split).pp_comm)
    )
    assert FRAMEWORKS["nemo"].tp_comm_overlap and FRAMEWORKS["nemo"].pp_comm_overlap
    assert not FRAMEWORKS["megatron-core"].tp_comm_overlap


def test_estimate_says_which_overlaps_it_priced(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "llama-70b", "--cluster", "dgx-h100-ndr", "--nodes", "8"]
    split = ["--tp", "4", "--pp", "4", "--interleave", "5", "--precision", "fp8"]
    nemo = cli(*args, *split, "--framework", "nemo")
    assert nemo.code == 0, nemo.err
    assert "overlapped: tensor-parallel collectives in chunks beside their GEMMs; pipeline transfers" in nemo.out
    plain = cli(*args, *split, "--framework", "megatron-core")
    assert plain.code == 0 and "overlapped:" not in plain.out
    flat = cli(*args, "--tp", "4", "--pp", "4", "--interleave", "1", "--precision", "fp8", "--framework", "nemo")
    assert "pipeline transfers beside compute" not in flat.out


def test_fp8_training_runs_its_output_layer_at_the_16_bit_rate() -> None:
    # Megatron-Core's output layer is a plain ColumnParallelLinear, outside Transformer Engine's FP8
    # autocast, and DeepSeek-V3 keeps its output head in BF16: a larger vocabulary adds the same time at
    # FP8 as at BF16, where the layers' GEMMs run 1.42x as fast.
    cluster = load_cluster("dgx-h100-ndr").with_nodes(1)
    split = ParallelConfig(tp=2, pp=1, dp=4, micro_batch=1, global_batch=32)

    def compute(vocab: int, precision: str) -> float:
        model = dataclasses.replace(load_model("llama-7b"), vocab=vocab, params=0)
        par = dataclasses.replace(split, precision=precision)
        return float(estimate(model, cluster, par, what_ifs=False).step.compute)

    head_fp8 = compute(256000, "fp8") - compute(32000, "fp8")
    head_bf16 = compute(256000, "bf16") - compute(32000, "bf16")
    assert head_fp8 == pytest.approx(head_bf16, rel=1e-9)
    # ... its three GEMMs (forward, two backward) of the extra vocabulary over the 16-bit matmul rate,
    # with the FP32 logits read and written three times.
    gpu = cluster.gpu
    tokens = 1 * 4096 * (32 // 4)  # micro-batch x sequence x micro-batches of one data-parallel rank
    extra = (256000 - 32000) / 2
    gemms = 3 * 2.0 * tokens * extra * 4096 / (gpu.peak_flops("bf16") * gpu.mamf * training.GEMM_DERATE)
    assert head_bf16 == pytest.approx(gemms + 3 * tokens * extra * 4.0 / (gpu.hbm_tbps * 1e12), rel=1e-6)
    assert compute(32000, "fp8") < compute(32000, "bf16") / 1.2  # the layers do run in FP8
