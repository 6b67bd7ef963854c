"""Mistakes a reviewer found the model commands accepting or mis-reporting, each through the real CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_helpers import one_error_line

from fabricscope.model import collective_cost as collectives
from fabricscope.model.validation import default_files

SHAPE = "layers = 32\nhidden = 4096\nheads = 32\nseq = 2048\nvocab = 32000\nglobal_batch = 256\n"
VISION = 'kind = "vision"\ngflops_per_sample = 4.1\ntraffic_mb_per_sample = 680\nsample_kb = 110\nglobal_batch = 256\n'


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("params = nan\n" + SHAPE, "params must be from 0 to 1e+15 (parameters), got nan"),
        ("params = nan\n" + VISION, "params must be from 0 to 1e+15 (parameters), got nan"),
        (
            "params = 25e6\n" + VISION.replace("4.1", "inf"),
            "gflops_per_sample must be from 0 to 10000000 (forward multiply-adds of one sample, in billions: the "
            "GFLOPs vision papers publish), got inf",
        ),
        (
            "params = 25e6\n" + VISION.replace("110", "nan"),
            "sample_kb must be from 0 to 1e+09 (KB read per sample), got nan",
        ),
        (SHAPE.replace("layers = 32", 'layers = "32"'), "layers = '32': must be a whole number"),
        (SHAPE.replace("layers = 32", "layers = 32.0"), "layers = 32.0: must be a whole number"),
        (SHAPE + "gated_mlp = 1\n", "gated_mlp = 1: must be true or false"),
    ],
)
def test_model_file_numbers_are_finite_and_typed(cli, write, text: str, fragment: str) -> None:
    path = write("m.toml", text)
    line = one_error_line(cli("estimate", "--model", str(path), "--cluster", "dgx-h100-ndr"))
    assert str(path) in line and fragment in line


L40S_2NIC = (
    'nodes = 2\ngpus_per_node = 8\ngpu = "l40s"\n[network]\nnic = "eth-400g"\nnics_per_node = 2\ntransport = "rdma"\n'
)


def test_predict_names_a_faster_choice_than_nccls(cli, write, tmp_path) -> None:
    path = write("l40s.toml", L40S_2NIC)
    out = tmp_path / "p.json"
    done = cli("predict", "--cluster", str(path), "-b", "2M", "-e", "2M", "--json", str(out))
    assert done.code == 0, done.err
    assert "# algorithm ring/LL" in done.out  # what NCCL's tuner picks, and a run would measure
    line = next(x for x in done.out.splitlines() if x.startswith("#   2097152 B:"))
    assert "tree/Simple 286.04 us instead of ring/LL 371.70 us" in line
    assert "set NCCL_ALGO=Tree NCCL_PROTO=Simple" in line
    result = json.loads(out.read_text())
    record = result["records"][0]
    assert record["algorithm"] == "ring/LL"
    assert record["fastest_algorithm"] == "tree/Simple"
    assert record["fastest_env"] == "NCCL_ALGO=Tree NCCL_PROTO=Simple"
    assert record["fastest_time_us"] < 0.9 * record["time_us"]
    assert result["summary"]["all_reduce"]["sizes_faster_than_nccl_choice"] == 1
    forced = cli("predict", "--cluster", str(path), "-b", "2M", "-e", "2M", "--algo", "tree")
    assert forced.code == 0, forced.err
    assert "# algorithm tree/Simple" in forced.out and "faster than NCCL's choice" not in forced.out


def test_no_tree_correction_below_64_bytes() -> None:
    # NCCL indexes treeCorrectionFactor by log2i(nBytes >> 6): -1 below 64 bytes, no correction.
    assert float(collectives._tree_correction(np.array(8.0), collectives.SIMPLE)) == 1.0
    assert float(collectives._tree_correction(np.array(64.0), collectives.SIMPLE)) == 0.9


def _training_row(tmp_path, change: tuple[str, str]) -> str:
    source = next(p for p in default_files() if p.name == "training.csv")
    header, first = source.read_text(encoding="utf-8").splitlines()[:2]
    path = tmp_path / "rows.csv"
    path.write_text(header + "\n" + first.replace(*change) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ((",full,", ",partial,"), ["row t01", "recompute = 'partial' is not one of none, selective, full"]),
        ((",1.7,", ",999,"), ["row t01", "params_b = 999 but layers, hidden and vocab give 1.65 billion"]),
        ((",1,1,32,0,16,1,32,", ",1,1,16,0,16,1,32,"), ["row t01", "set dp = 32 or gpus = 16 in the row"]),
    ],
)
def test_validate_rows_are_checked_and_named(cli, tmp_path, change, fragments) -> None:
    line = one_error_line(cli("validate", _training_row(tmp_path, change)))
    for fragment in fragments:
        assert fragment in line
    assert "--dp" not in line and "--nodes" not in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "resnet50", "--recompute", "full"], "--recompute full applies to transformer layers"),
        (["--model", "resnet50", "--sequence-parallel"], "--sequence-parallel applies to transformer layers"),
        (["--model", "llama-7b", "--tp", "1", "--sequence-parallel"], "has no effect with --tp 1"),
        (["--model", "llama-7b", "--ps-servers", "100000"], "--ps-servers 100000 is more than the job's"),
    ],
)
def test_estimate_refuses_flags_that_would_be_dropped(cli, args, fragment) -> None:
    line = one_error_line(cli("estimate", "--cluster", "lab-8gpu-1gbe-hdd", *args))
    assert fragment in line


def test_estimate_sequence_parallel_means_tensor_parallel(cli) -> None:
    done = cli("estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--sequence-parallel")
    assert done.code == 0, done.err
    split = done.out.splitlines()[1]
    assert "sequence parallel" in split and "tp 1," not in split


def test_plan_notes_are_consistent_with_the_frontier(cli) -> None:
    done = cli("plan", "--model", "llama-7b", "--gpus", "64", "--target-util", "1")
    assert done.code == 0, done.err
    note = next(x for x in done.out.splitlines() if x.startswith("note: no network reaches"))
    best = note.split("; the best is ")[1]
    share, label = best.split(" (", 1)
    assert share != "100.0%"
    rows = [x for x in done.out.splitlines() if label.rstrip(")") in x and share in x]
    assert rows, done.out


def test_plan_for_one_server_buys_no_network(cli) -> None:
    done = cli("plan", "--model", "llama-7b", "--gpus", "8")
    assert done.code == 0, done.err
    assert "(one server of 8)" in done.out and "servers)" not in done.out
    assert "recommended: no scale-out network" in done.out
    assert "$300" not in done.out


def test_plan_that_fits_nowhere_exits_2_like_estimate(cli) -> None:
    line = one_error_line(cli("plan", "--model", "llama-405b", "--gpus", "8"))
    assert "llama-405b does not fit in 8 x" in line and "--gpus" in line


def test_default_precision_follows_the_gpu(cli) -> None:
    done = cli("estimate", "--model", "llama-7b", "--cluster", "v100-100gbe-tcp")
    assert done.code == 0, done.err
    assert done.out.splitlines()[0].endswith(", fp16")
    line = one_error_line(cli("estimate", "--model", "llama-7b", "--cluster", "v100-100gbe-tcp", "--precision", "bf16"))
    assert "--precision bf16: v100-sxm2-32gb has no bf16 tensor cores: use fp32 or fp16" in line
    assert cli("plan", "--model", "llama-7b", "--gpus", "16", "--gpu", "v100-sxm2-32gb").code == 0


def test_sloppy_invocations(cli) -> None:
    line = one_error_line(cli("predict", "--cluster", "dgx-h100-ndr.toml"))
    assert "dgx-h100-ndr.toml: no such file (did you mean the cluster preset 'dgx-h100-ndr'?)" in line
    line = one_error_line(cli("estimate", "--model", "llama-7b.toml", "--cluster", "dgx-h100-ndr"))
    assert "did you mean the model preset 'llama-7b'?" in line
    done = cli("predict", "--cluster", "dgx-h100-ndr", "--nodes", "08", "-b", "8", "-e", "8")
    assert done.code == 0, done.err
    assert "8 node(s)" in done.out


def test_predict_header_words_latency_by_transport(cli) -> None:
    tcp = cli("predict", "--cluster", "cloud-h100-tcp", "-b", "8", "-e", "8").out
    assert "over RDMA" not in tcp and "us per message (tcp-socket above GPUDirect RDMA" in tcp
    rdma = cli("predict", "--cluster", "dgx-h100-ndr", "-b", "8", "-e", "8").out
    assert "us per message (switches and cables)" in rdma
