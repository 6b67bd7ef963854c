"""``fabricscope estimate``: breakdown, bottleneck, JSON record, and refusals of impossible jobs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from model_helpers import one_error_line

from fabricscope.model import cli as model_cli

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
        (["--tp", "3"], ["--tp 3 must divide the 8 GPUs of a node"]),
        (["--tp", "2", "--pp", "3", "--nodes", "1"], ["tp*pp = 2*3 = 6 does not divide the cluster's 8 GPUs"]),
        (["--tp", "8", "--pp", "2", "--nodes", "3"], ["tp*pp = 8*2 = 16 does not divide the cluster's 24 GPUs"]),
        (["--tp", "0"], ["--tp must be a whole number from 1 to"]),
        (["--tp", "-2"], ["--tp must be a whole number from 1 to 1048576, got '-2'"]),
        (
            ["--pp", "40", "--dp", "1", "--nodes", "5", "--tp", "1"],
            ["pp*interleave = 40 is more than the model's 32 layers"],
        ),
        (["--zero", "5", "--tp", "1"], ["--zero must be a whole number from 0 to 3, got '5'"]),
        (["--micro-batch", "0", "--tp", "1"], ["--micro-batch must be a whole number from 1 to 1048576, got '0'"]),
        (["--global-batch", "0"], ["--global-batch must be a whole number from 1 to 1048576, got '0'"]),
        (
            ["--global-batch", "100", "--tp", "1", "--pp", "1"],
            ["global batch (100) must be a multiple of dp*micro_batch = 32*1"],
        ),
        (["--recompute", "ful", "--tp", "1"], ["unknown --recompute 'ful'", "did you mean 'full'"]),
        (["--precision", "bf61"], ["unknown --precision 'bf61'"]),
        (["--nodes", "0"], ["--nodes must be a whole number from 1 to 1048576, got '0'"]),
        (["--nodes", "two"], ["--nodes must be a whole number from 1 to 1048576, got 'two'"]),
        (
            ["--interleave", "2", "--tp", "8", "--pp", "1"],
            ["--interleave needs pipeline parallelism: a pipeline of 2 or more stages"],
        ),
        (
            ["--ps-servers", "2", "--zero", "3", "--tp", "1"],
            ["--ps-servers replaces the all-reduce", "use it without ZeRO (stage 0)"],
        ),
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


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--zero", "4"], "--zero must be a whole number from 0 to 3, got '4'"),
        (["--micro-batch", "0"], "--micro-batch must be a whole number from 1 to 1048576, got '0'"),
        (["--recompute", "partial"], "unknown --recompute 'partial'"),
        (["--interleave", "0"], "--interleave must be a whole number from 1 to 1048576, got '0'"),
        (["--pp", "64"], "pp*interleave = 64 is more than the model's 32 layers"),
        (["--ps-servers", "2", "--zero", "1"], "--ps-servers replaces the all-reduce"),
    ],
)
def test_flags_are_checked_when_the_split_is_searched(cli, args: list[str], fragment: str) -> None:
    line = one_error_line(cli("estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", *args))
    assert fragment in line


def test_the_search_keeps_the_flags_given(cli, tmp_path) -> None:
    out = tmp_path / "e.json"
    args = ["--zero", "3", "--micro-batch", "2", "--recompute", "selective", "--tp", "2", "--json", str(out)]
    done = cli("estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", *args)
    assert done.code == 0, done.err
    record = json.loads(out.read_text())["records"][0]
    parallel = record["parallel"]
    assert (parallel["tp"], parallel["zero"], parallel["micro_batch"], parallel["recompute"]) == (2, 3, 2, "selective")
    assert parallel["global_batch"] == record["global_batch"] == 1024  # the real batch, not 0
    assert set(record["chosen_by_fabricscope"]) == {"pp", "dp", "interleave", "sequence_parallel"}
    assert "[pp, dp, interleave, sequence parallel chosen by fabricscope" in done.out


def test_parameter_servers_without_a_split(cli, tmp_path) -> None:
    out = tmp_path / "ps.json"
    done = cli(
        "estimate", "--model", "llama-7b", "--cluster", "v100-100gbe-tcp", "--precision", "fp16",
        "--ps-servers", "4", "--zero", "0", "--json", str(out),
    )  # fmt: skip
    assert done.code == 0, done.err
    parallel = json.loads(out.read_text())["records"][0]["parallel"]
    assert parallel["ps_servers"] == 4 and parallel["zero"] == 0


def test_the_bottleneck_is_the_largest_overhead(cli, tmp_path) -> None:
    # Data-parallel traffic over one 10 GbE NIC per node takes ~30-40% of the step: that, not
    # compute, is what holds the job back, and 2x network bandwidth says so.
    out = tmp_path / "b.json"
    done = cli(
        "estimate", "--model", "llama-7b", "--cluster", "research-10g-roce", "--nodes", "4",
        "--tp", "1", "--pp", "1", "--zero", "1", "--json", str(out),
    )  # fmt: skip
    assert done.code == 0, done.err
    record = json.loads(out.read_text())["records"][0]
    share = record["breakdown"]["dp_comm"] / record["step_time_s"]
    assert share > 0.2 and record["bottleneck"] == "dp_comm"
    assert record["sensitivities_pct"]["2x network bandwidth"] < -10
    assert "the network is not what holds" not in done.out
    assert "bottleneck             data-parallel communication (network)" in done.out


def test_twice_the_network_includes_the_link_to_storage(tmp_path, write) -> None:
    from fabricscope.model.cluster import load_cluster
    from fabricscope.model.estimate import best_split, estimate
    from fabricscope.model.workload import load_model

    # Twelve disks behind the lab's NFS share: its 1 GbE link is now the limit.
    path = write("lab.toml", LAB_12_DISKS)
    model = load_model("resnet50")
    lab = load_cluster(str(path))
    result = estimate(model, lab, best_split(model, lab))
    assert result.data.limit == "storage server link" and result.bottleneck == "data_stall"
    # Twice 1 GbE (118 -> 236 MB/s) until the twelve disks limit (147 MB/s): -20%.
    assert result.sensitivities["2x network bandwidth"] == pytest.approx(100 * (118 / 147 - 1), abs=2)
    assert "network link" in result.bottleneck_text


def test_local_disks_are_not_called_a_network_link() -> None:
    from fabricscope.model.cluster import load_cluster
    from fabricscope.model.estimate import best_split, estimate
    from fabricscope.model.workload import load_model

    model = load_model("resnet50")
    lab = load_cluster("lab-8gpu-1gbe-hdd")
    result = estimate(model, lab, best_split(model, lab))
    assert result.data.limit == "storage media"
    assert "network" not in result.bottleneck_text


def test_json_into_a_missing_folder_is_refused_before_any_work(cli) -> None:
    for command in (
        ["predict", "--cluster", "dgx-h100-ndr"],
        ["estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr"],
        ["plan", "--model", "llama-7b", "--gpus", "64"],
        ["validate"],
    ):
        done = cli(*command, "--json", "/nonexistent/dir/x.json")
        assert "the folder /nonexistent/dir does not exist" in one_error_line(done)
        assert done.out == ""


LAB_12_DISKS = """\
nodes = 1
gpus_per_node = 8
gpu = "rtx-4090"
intra = "pcie"

[network]
nic = "eth-1g"
nics_per_node = 1
transport = "tcp-socket"
topology = "fat-tree"

[storage]
kind = "nfs-1g"
devices = 12
"""


@pytest.mark.parametrize("command", ["estimate", "plan", "predict", "validate"])
def test_a_reader_that_goes_away_does_not_lose_the_json(tmp_path, command: str) -> None:  # type: ignore[no-untyped-def]
    # `fabricscope estimate ... --json e.json | head -1`: the table stops, the result file does not.
    out = tmp_path / "result.json"
    args = {
        "estimate": ["--model", "llama-70b", "--cluster", "dgx-h100-ndr", "--nodes", "8"],
        "plan": ["--model", "llama-7b", "--gpus", "64"],
        "predict": ["--cluster", "dgx-h100-ndr"],
        "validate": [],
    }[command]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", command, *args, "--json", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the command prints
    _, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 1), err
    assert b"Traceback" not in err
    assert json.loads(out.read_text())["records"]


@pytest.mark.parametrize(
    "line",
    [
        line.strip()
        for epilog in (model_cli._PREDICT_EPILOG, model_cli._ESTIMATE_EPILOG, model_cli._PLAN_EPILOG)
        for line in epilog.splitlines()
        if line.strip().startswith("fabricscope ") and "my-cluster.toml" not in line
    ],
)
def test_every_example_of_the_help_runs(cli, line: str, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An example a user copies from --help works (one priced a model that fits no split of its cluster)."""
    monkeypatch.chdir(tmp_path)  # examples may write pred.json or plan.json
    done = cli(*shlex.split(line)[1:])
    assert done.code == 0, (line, done.err)
