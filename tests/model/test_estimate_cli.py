"""``fabricscope estimate``: breakdown, bottleneck, JSON record, and refusals of impossible jobs."""

from __future__ import annotations

import json

import pytest
from model_helpers import one_error_line

RECORD_FIELDS = (
    "step_time_s",
    "gpu_utilization",
    "samples_per_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "bottleneck",
    "breakdown",
)


def test_estimate_prints_breakdown_and_writes_the_record(cli, tmp_path) -> None:
    out = tmp_path / "est.json"
    done = cli(
        "estimate",
        "--model",
        "gpt3-175b",
        "--cluster",
        "dgx-a100-hdr",
        "--nodes",
        "64",
        "--tp",
        "8",
        "--pp",
        "8",
        "--recompute",
        "selective",
        "--sequence-parallel",
        "--json",
        str(out),
    )
    assert done.code == 0, done.err
    for words in (
        "step time",
        "compute",
        "tensor-parallel comm",
        "pipeline bubble",
        "GPU utilization",
        "tokens/s",
        "bottleneck",
        "what if",
        "100 ns less network latency",
    ):
        assert words in done.out
    data = json.loads(out.read_text())
    assert data["kind"] == "estimate"
    record = data["records"][0]
    for field in RECORD_FIELDS:
        assert field in record
    assert record["parallel"]["tp"] == 8 and record["parallel"]["dp"] == 8
    assert set(record["breakdown"]) >= {"compute", "tp_comm", "pp_comm", "dp_comm", "bubble", "data_stall"}
    assert 0.3 < record["gpu_utilization"] <= 1.0
    assert 100 < record["tflops_per_gpu"] < 312


def test_split_is_chosen_when_not_given(cli) -> None:
    done = cli("estimate", "--model", "llama-70b", "--cluster", "dgx-h100-ndr", "--nodes", "16")
    assert done.code == 0, done.err
    assert "[chosen by fabricscope: the fastest that fits]" in done.out
    assert "does not fit" not in done.out


def test_vision_has_no_tokens(cli, tmp_path) -> None:
    out = tmp_path / "r.json"
    done = cli("estimate", "--model", "resnet50", "--cluster", "lab-8gpu-100g-nvme", "--json", str(out))
    assert done.code == 0, done.err
    record = json.loads(out.read_text())["records"][0]
    assert record["tokens_per_s"] is None
    assert record["samples_per_s"] > 5000


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--tp", "8", "--pp", "8", "--dp", "8"], ["tp*pp*dp = 8*8*8 = 512 does not match the cluster's 32 GPUs"]),
        (["--tp", "16"], ["--tp 16 is larger than a node (8 GPUs)"]),
        (["--tp", "3"], ["tp*pp = 3 does not divide the cluster's 32 GPUs"]),
        (["--tp", "0"], ["--tp must be at least 1, got 0"]),
        (["--tp", "-2"], ["--tp must be at least 1, got -2"]),
        (["--pp", "5", "--dp", "1", "--nodes", "5", "--tp", "8"], ["must divide the model's 32 layers"]),
        (["--zero", "5", "--tp", "1"], ["--zero must be 0, 1, 2 or 3, got 5"]),
        (["--micro-batch", "0", "--tp", "1"], ["--micro-batch must be at least 1, got 0"]),
        (["--global-batch", "0"], ["--global-batch must be at least 1, got 0"]),
        (["--global-batch", "100", "--tp", "1"], ["global batch (100) must be a multiple of dp*micro_batch = 32*1"]),
        (["--recompute", "ful", "--tp", "1"], ["unknown --recompute 'ful'", "did you mean 'full'"]),
        (["--precision", "bf61"], ["unknown --precision 'bf61'"]),
        (["--nodes", "0"], ["--nodes must be at least 1, got 0"]),
        (["--nodes", "two"], ["--nodes must be a whole number, got 'two'"]),
        (["--interleave", "2", "--tp", "8"], ["--interleave needs pipeline parallelism"]),
        (["--ps-servers", "2", "--zero", "3", "--tp", "1"], ["--ps-servers replaces the all-reduce"]),
    ],
)
def test_impossible_jobs(cli, args: list[str], fragments: list[str]) -> None:
    line = one_error_line(cli("estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", *args))
    for fragment in fragments:
        assert fragment in line


def test_precision_the_gpu_lacks(cli) -> None:
    line = one_error_line(cli("estimate", "--model", "llama-7b", "--cluster", "v100-100gbe-tcp", "--precision", "bf16"))
    assert "v100-sxm2-32gb has no bf16 tensor cores" in line


def test_model_that_fits_nowhere(cli) -> None:
    line = one_error_line(cli("estimate", "--model", "llama-405b", "--cluster", "lab-8gpu-1gbe-hdd"))
    assert "does not fit on 8 x rtx-4090" in line and "--nodes" in line


def test_vision_model_refuses_tensor_parallelism(cli) -> None:
    line = one_error_line(cli("estimate", "--model", "resnet50", "--cluster", "dgx-a100-hdr", "--tp", "2"))
    assert "vision model: use data parallelism only" in line
