"""Review 2 (defects 1, 7, 9): absurd model values, non-finite steps and forced splits, each
refused in one line that names what is wrong."""

from __future__ import annotations

import pytest
from model_helpers import one_error_line

from fabricscope.errors import UsageError
from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import best_split
from fabricscope.model.workload import load_model
from helpers import run_cli

TRANSFORMER = "global_batch = 512\nlayers = 32\nhidden = 4096\nheads = 32\nseq = 4096\nvocab = 32000\n"
VISION = (
    'kind = "vision"\nparams = 25e6\ngflops_per_sample = 4.1\ntraffic_mb_per_sample = 680.0\n'
    "sample_kb = 110.0\nbatch_per_gpu = 256\n"
)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (TRANSFORMER.replace("hidden = 4096", "hidden = 4611686018427387904"), "hidden must be from 0 to 1048576"),
        (TRANSFORMER + "head_dim = 128\n", None),
        (
            TRANSFORMER.replace("heads = 32", "heads = 9223372036854775807") + "head_dim = 128\n",
            "heads must be from 0 to 65536",
        ),
        (TRANSFORMER.replace("layers = 32", "layers = 10000000"), "layers must be from 0 to 65536"),
        (TRANSFORMER.replace("vocab = 32000", "vocab = 1099511627776"), "vocab must be from 0 to"),
        (TRANSFORMER.replace("seq = 4096", "seq = 1099511627776"), "seq must be from 0 to"),
        (TRANSFORMER + "ffn = 1099511627776\n", "ffn must be from 0 to"),
        (TRANSFORMER + "experts = 1099511627776\ntop_k = 2\n", "experts must be from 0 to 65536"),
        (TRANSFORMER + "experts = 8\ntop_k = 2\ncapacity_factor = 1e300\n", "capacity_factor must be 0"),
        (TRANSFORMER.replace("global_batch = 512", "global_batch = 1099511627776"), "global_batch must be from 0"),
        (VISION.replace("gflops_per_sample = 4.1", "gflops_per_sample = 1e308"), "gflops_per_sample must be from 0"),
        (VISION.replace("sample_kb = 110.0", "sample_kb = 1e308"), "sample_kb must be from 0 to 1e+09"),
        (VISION.replace("680.0", "1e308"), "traffic_mb_per_sample must be from 0"),
        (VISION.replace("params = 25e6", "params = 1e300"), "params must be from 0 to 1e+15"),
        (VISION.replace("batch_per_gpu = 256", "batch_per_gpu = 1099511627776"), "batch_per_gpu must be from 0"),
    ],
)
def test_absurd_model_values_are_refused_in_one_line(write, text: str, fragment: str | None) -> None:
    path = write("m.toml", text)
    for args in (["estimate", "--cluster", "dgx-h100-ndr"], ["plan", "--gpus", "64"]):
        done = run_cli([*args, "--model", str(path)])
        assert "Traceback" not in done.stderr and "Warning" not in done.stderr, done.stderr
        if fragment is None:
            assert done.returncode == 0, done.stderr
            continue
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1, done.stderr
        assert str(path) in done.stderr and fragment in done.stderr


def test_the_largest_allowed_values_give_no_overflow(write) -> None:
    """Every size at its bound: a clean verdict (here: does not fit), never a traceback or warning."""
    path = write(
        "huge.toml",
        "global_batch = 16777216\nlayers = 65536\nhidden = 1048576\nheads = 65536\nhead_dim = 65536\n"
        "seq = 134217728\nvocab = 16777216\nffn = 4194304\nexperts = 65536\ntop_k = 65536\n"
        "expert_ffn = 4194304\nshared_experts = 65536\nshared_ffn = 4194304\ndense_layers = 65535\n"
        "route_nodes = 1048576\ncapacity_factor = 1000\n",
    )
    done = run_cli(["estimate", "--model", str(path), "--cluster", "dgx-h100-ndr"])
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "does not fit" in done.stderr
    vision = write(
        "vision.toml",
        'kind = "vision"\nparams = 25e6\ngflops_per_sample = 1e7\ntraffic_mb_per_sample = 1e7\n'
        "sample_kb = 1e9\nbatch_per_gpu = 1048576\n",
    )
    done = run_cli(["estimate", "--model", str(vision), "--cluster", "dgx-h100-ndr"])
    assert "Traceback" not in done.stderr and "RuntimeWarning" not in done.stderr, done.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf x 0 inside the step: the check is what is tested
def test_a_non_finite_step_is_not_reported_as_a_memory_misfit(write) -> None:
    model = load_model(str(write("v.toml", VISION)))
    model.gflops_per_sample = 1e308  # past the file check: what a future key could still let through
    with pytest.raises(UsageError) as caught:
        best_split(model, load_cluster("dgx-h100-ndr"))
    assert "step time of v is not a finite number" in str(caught.value)
    assert "does not fit" not in str(caught.value)


def test_a_forced_split_that_leaves_one_stage_says_so_with_interleave(cli) -> None:
    done = cli(
        "estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--interleave", "2", "--tp", "8", "--dp", "4"
    )
    line = one_error_line(done)
    assert "--interleave 2 needs pipeline parallelism" in line and "--tp 8, --dp 4 leave pp = 1" in line
    assert "global batch" not in line
    done = cli(
        "estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr", "--interleave", "2", "--tp", "8", "--dp", "2"
    )
    assert done.code == 0, done.err
    assert "pp 2 (interleave 2)" in done.out
