"""Cluster and model files a user writes: one clear line naming the file and the key, exit 2."""

from __future__ import annotations

import pytest
from model_helpers import one_error_line

from helpers import run_cli

GOOD = 'gpu = "h100-sxm"\nnodes = 2\n[network]\nnic = "ib-ndr"\nnics_per_node = 8\n'


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ('gpu = "h100"\n', ["gpu: unknown GPU 'h100'", "did you mean one of 'h100-sxm', 'h100-pcie'"]),
        ('gpu = "h100-sxm"\nnodez = 3\n', ["unknown key 'nodez'", "did you mean 'nodes'", "gpus_per_node"]),
        (
            'gpu = "h100-sxm"\n[network]\ntransport = "rdma-gdrr"\n',
            ["network.transport = 'rdma-gdrr' is not allowed", "did you mean 'rdma-gdr'", "'tcp-socket'"],
        ),
        ('gpu = "h100-sxm"\nnodes = 0\n', ["nodes must be from 1 to 1048576, got 0"]),
        ('gpu = "h100-sxm"\nnodes = -4\n', ["nodes must be from 1 to 1048576, got -4"]),
        ('gpu = "h100-sxm"\nnodes = 9223372036854775807\n', ["nodes must be from 1 to 1048576"]),
        ('gpu = "h100-sxm"\nnodes = "two"\n', ["nodes = 'two': must be a whole number"]),
        # Wrong TOML types are refused, not coerced (as the doctor's expectations reader does).
        ('gpu = "h100-sxm"\nnodes = true\n', ["nodes = true: must be a whole number"]),
        ('gpu = "h100-sxm"\nnodes = "2"\n', ["nodes = '2': must be a whole number"]),
        ('gpu = "h100-sxm"\nnodes = 2.0\n', ["nodes = 2.0: must be a whole number"]),
        ('gpu = "h100-sxm"\n[network]\nnics_per_node = 1.0\n', ["network.nics_per_node = 1.0: must be a whole"]),
        ('gpu = "h100-sxm"\n[network]\nsharp = "yes"\n', ["network.sharp = 'yes': must be true or false"]),
        ('gpu = "h100-sxm"\n[network]\nsharp = 1\n', ["network.sharp = 1: must be true or false"]),
        ('gpu = "h100-sxm"\n[network]\noversubscription = "2"\n', ["oversubscription = '2': must be a number"]),
        # NaN and infinities are refused with the allowed range.
        ('gpu = "h100-sxm"\n[network]\noversubscription = nan\n', ["oversubscription must be from 1", "got nan"]),
        ('gpu = "h100-sxm"\n[network]\nextra_latency_us = inf\n', ["extra_latency_us must be from 0", "got inf"]),
        ('gpu = "h100-sxm"\n[storage]\ncached_fraction = nan\n', ["cached_fraction must be between 0 and 1"]),
        # More GPUs per node than the intra-node fabric is built for.
        ('gpu = "mi300x"\ngpus_per_node = 16\n', ["gpus_per_node = 16 is more than a full mesh of xgmi", "8"]),
        ('gpu = "h100-sxm"\ngpus_per_node = 1000\n', ["more than an NVSwitch board of nvlink4 connects (8"]),
        ('gpu = "b200"\ngpus_per_node = 72\n', ["more than an NVSwitch board of nvlink5 connects (8"]),
        ('gpu = "gb200"\ngpus_per_node = 73\n', ["more than an NVSwitch board of nvlink5-switch connects (72"]),
        ('gpu = "gb200"\n[network]\nnics_per_node = 1025\n', ["nics_per_node must be from 0 to 1024"]),
        ('gpu = "h100-sxm"\n[network]\nnics = 8\n', ["unknown key 'network.nics'", "nics_per_node"]),
        ('gpu = "h100-sxm"\nnodes = 2\n[network]\nnic = "eth-1g"\n', ["needs an RDMA-capable NIC", "eth-1g"]),
        (
            'gpu = "h100-sxm"\nnodes = 2\n[network]\nnic = "eth-400g"\nsharp = true\n',
            ["sharp = true needs an InfiniBand"],
        ),
        ('gpu = "h100-sxm"\n[storage]\ncached_fraction = 2\n', ["storage: cached_fraction must be between 0 and 1"]),
        ('gpu = "rtx-4090"\nintra = "nvswitch"\n', ["needs NVLink", "use intra = 'pcie'"]),
        ('gpu = "h100-sxm"\n[network]\noversubscription = 0.5\n', ["oversubscription must be from 1"]),
        ("nodes = 2\n", ["missing key 'gpu'"]),
        ('gpu = "h100-sxm"\nnodes = [\n', ["malformed TOML"]),
        ('gpu = "h100-sxm"\nnetwork = 3\n', ["network = 3"]),
        ('gpu = "h100-sxm"\npcie = ""\n', ["pcie: unknown PCIe generation ''", "gen5"]),
        (
            'gpu = "h100-sxm"\n[calibration.all_reduce]\nbase = 10.0\n',
            ["unknown key 'calibration.all_reduce.base'", "did you mean 'base_us'", "inter_busbw_gbps, points"],
        ),
        # Calibration terms far beyond any hardware are refused, naming the key (not a flag never given).
        (
            'gpu = "l40s"\nnodes = 4\n[calibration.all_reduce]\ninter_hop_us = 1e308\ninter_busbw_gbps = 1.0\n',
            ["calibration.all_reduce: inter_hop_us must be from 0 to"],
        ),
        ('gpu = "l40s"\n[calibration.all_reduce]\nintra_hop_us = 1e308\n', ["intra_hop_us must be from 0 to"]),
        ('gpu = "l40s"\n[calibration.all_reduce]\nbase_us = 1e308\n', ["base_us must be from 0 to"]),
        (
            'gpu = "l40s"\n[calibration.all_reduce]\ninter_busbw_gbps = 1e6\n',
            ["inter_busbw_gbps must be 0 (not measured) or from"],
        ),
        (
            'gpu = "l40s"\n[calibration.all_reduce]\nintra_busbw_gbps = 1e308\n',
            ["intra_busbw_gbps must be 0 (not measured) or from"],
        ),
    ],
)
def test_bad_cluster_file(cli, write, text: str, fragments: list[str]) -> None:
    path = write("cluster.toml", text)
    line = one_error_line(cli("predict", "--cluster", str(path)))
    assert str(path) in line
    for fragment in fragments:
        assert fragment in line


def test_good_cluster_file_works(cli, write) -> None:
    path = write("mine.toml", GOOD)
    done = cli("predict", "--cluster", str(path), "-b", "1M", "-e", "1M")
    assert done.code == 0, done.err
    assert "cluster mine: 2 node(s) x 8 h100-sxm" in done.out


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("layers = 2\nhidden = 100\nheads = 3\nseq = 8\nvocab = 10\nglobal_batch = 8\n", ["hidden (100)", "heads (3)"]),
        ("layers = 0\nhidden = 64\nheads = 4\nseq = 8\nvocab = 10\nglobal_batch = 8\n", ["needs layers > 0"]),
        ('kind = "vision"\nparams = 1e6\nglobal_batch = 8\n', ["needs gflops_per_sample > 0"]),
        (
            "layers = 2\nhidden = 64\nheads = 4\nseq = 8\nvocab = 10\nglobal_batch = 8\nlayer = 3\n",
            ["unknown key 'layer'"],
        ),
        ('kind = "cnn"\n', ["kind = 'cnn' is not allowed", "'transformer' or 'vision'"]),
    ],
)
def test_bad_model_file(cli, write, text: str, fragments: list[str]) -> None:
    path = write("model.toml", text)
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-a100-hdr"))
    assert str(path) in line
    for fragment in fragments:
        assert fragment in line


def test_model_file_with_the_issue_keys(cli, write) -> None:
    path = write(
        "tiny.toml",
        "params = 1.3e9\nlayers = 24\nhidden = 2048\nheads = 16\nseq = 2048\nvocab = 50304\n"
        "ffn = 8192\nglobal_batch = 256\n",
    )
    done = cli("estimate", "--model", str(path), "--cluster", "dgx-a100-hdr", "--tp", "1", "--pp", "1")
    assert done.code == 0, done.err
    assert "estimate: tiny on dgx-a100-hdr" in done.out


def test_missing_files_and_unknown_presets(cli) -> None:
    line = one_error_line(cli("predict", "--cluster", "/no/such/cluster.toml"))
    assert "/no/such/cluster.toml: no such cluster file" in line
    line = one_error_line(cli("predict", "--cluster", "dgx-h100-nrd"))
    assert "unknown cluster 'dgx-h100-nrd' (did you mean 'dgx-h100-ndr'?)" in line
    line = one_error_line(cli("estimate", "--model", "lama-70b", "--cluster", "dgx-a100-hdr"))
    assert "did you mean 'llama-70b'" in line


def test_a_real_process_prints_one_line_and_exits_2(write) -> None:
    path = write("broken.toml", 'gpu = "a100-sxm-80gb"\n[network]\ntopology = "torus"\n')
    done = run_cli(["estimate", "--model", "llama-7b", "--cluster", str(path)])
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "network.topology = 'torus' is not allowed" in done.stderr


ISSUE_KEYS = "params = 1.3e9\nlayers = 24\nhidden = 2048\nheads = 16\nseq = 2048\nvocab = 50304\nffn = 8192\n"


def test_a_model_file_with_only_the_issue_keys_takes_global_batch(cli, write) -> None:
    path = write("issue.toml", ISSUE_KEYS)
    done = cli("estimate", "--model", str(path), "--cluster", "dgx-a100-hdr", "--global-batch", "256")
    assert done.code == 0, done.err
    assert "global batch 256" in done.out
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-a100-hdr"))
    assert "model 'issue' gives no batch size" in line and "--global-batch" in line
    assert cli("plan", "--model", str(path), "--gpus", "64", "--global-batch", "256").code == 0


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            'kind = "vision"\nparams = 25e6\ngflops_per_sample = 4.1\nsample_kb = 110\nbatch_per_gpu = 64\n',
            ["needs traffic_mb_per_sample > 0", "memory traffic"],
        ),
        (
            ISSUE_KEYS.replace("params = 1.3e9", "params = 13e9") + "global_batch = 64\n",
            ["params = 1.3e+10 but layers, hidden, ffn and vocab give 1.311e+09", "leave params out"],
        ),
    ],
)
def test_model_files_that_would_give_nonsense(cli, write, text: str, fragments: list[str]) -> None:
    path = write("m.toml", text)
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-h100-ndr", "--nodes", "1"))
    assert str(path) in line
    for fragment in fragments:
        assert fragment in line


def test_names_match_without_case_and_by_part(cli) -> None:
    done = cli("predict", "--cluster", "DGX-H100-NDR", "-b", "1M", "-e", "1M")
    assert done.code == 0, done.err
    assert "did you mean one of 'cloud-h100-tcp', 'dgx-h100-ndr'" in one_error_line(cli("predict", "--cluster", "h100"))
    assert "did you mean one of 'a100-sxm-40gb', 'a100-sxm-80gb'" in one_error_line(
        cli("plan", "--model", "llama-7b", "--gpus", "8", "--gpu", "a100")
    )
    assert cli("estimate", "--model", "LLAMA-7B", "--cluster", "dgx-h100-ndr", "--tp", "8", "--pp", "1").code == 0
