"""Bad input: one line naming what is wrong and what is allowed, exit 2, no traceback."""

import sys

import pytest

from fabricscope.launch import free_port
from helpers import imported_by_help, run_cli


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["bench", "-b", "12Q"], ["'12Q'", "K, M, G"]),
        (["bench", "-b", "1M", "-e", "1K"], ["-b (minbytes", "larger than -e"]),
        (["bench", "all_reduse"], ["unknown op 'all_reduse'", "did you mean 'all_reduce'", "alltoall"]),
        (["bench", "-d", "floot"], ["unknown datatype 'floot'", "bfloat16"]),
        (["bench", "-o", "mean"], ["unknown reduction op 'mean'", "avg"]),
        (["bench", "--nproc", "0"], ["--nproc must be a whole number from 1 to 1024, got '0'"]),
        (["bench", "-f", "1", "-i", "0", "-b", "1K", "-e", "1M"], ["-i 0 (a fixed increment", "positive increment"]),
        (["bench", "-i", "0", "-b", "1K", "-e", "1M"], ["-i 0 (a fixed increment", "without -f"]),
        (["bench", "-n", "0"], ["-n/--iters must be a whole number from 1 to 1000000"]),
        (["bench", "-n", "ten"], ["-n/--iters must be a whole number from 1 to 1000000, got 'ten'"]),
        (["bench", "-n", "0x2"], ["-n/--iters must be a whole number from 1 to 1000000, got '0x2'"]),
        (["bench", "-a", "7"], ["-a/--average must be one of 0 (rank0), 1 (avg), 2 (min), 3 (max)"]),
        (["bench", "--backend", "mpi"], ["--backend: invalid choice: 'mpi'", "gloo"]),
        (["bench", "--timeout", "0"], ["-T/--timeout must be a duration from 1 s to 7 days"]),
        (["bench", "--timeout", "100000000000000"], ["-T/--timeout must be a duration from 1 s to 7 days"]),
        (
            ["bench", "--timeout", "1ms"],
            ["-T/--timeout must be a duration from 1 s to 7 days (seconds, or with ms, s, m, h, d), got '1ms'"],
        ),
        (["bench", "--nproc", "100000"], ["--nproc must be a whole number from 1 to 1024, got '100000'", "torchrun"]),
        (["bench", "all", "-N", "0"], ["-N 0 repeats one sweep", "got 11 op(s)", "give -N a count"]),
        (["bench", "-d", "all", "-N", "0"], ["-N 0 repeats one sweep", "8 datatype(s)"]),
        (["bench", "-z", "1", "--streams", "2"], ["-z 1 waits for each collective", "give one of them"]),
        (["bench", "-m", "2", "--streams", "2"], ["-m launches several collectives per iteration", "give one"]),
        (["bench", "-m", "0"], ["-m/--agg_iters must be a whole number from 1 to 1024, got '0'"]),
        (["bench", "hypercube", "--nproc", "3"], ["hypercube runs on a power-of-two number of ranks", "has 3"]),
        (["bench", "--json", "/tmp/x.out", "--csv", "/tmp/x.out"], ["--csv names the same file as the JSON output"]),
        (["bench", "--json", ""], ["--json needs a file name"]),
        (["bench", "--backend", "nccl", "-b", "8", "-e", "8"], ["--backend nccl needs CUDA"]),
        (["bench", "broadcast", "-r", "5"], ["-r (root) 5 is not a rank", "0 to 1"]),
        (["bench", "sendrecv", "--nproc", "1"], ["sendrecv needs at least 2 ranks"]),
        (["bench", "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
        (["bench", "--json", "/no/such/dir/r.json"], ["--json /no/such/dir/r.json", "does not exist"]),
        (["bench", "--csv", "/tmp"], ["--csv /tmp is a folder", "/tmp/result.csv"]),
        (["bench", "-b", "1T", "-e", "1T"], ["-b 1099511627776 needs two buffers", "largest size that fits"]),
        (["bench", "--backend", "nccl", "--nproc", "1", "-b", "8", "-e", "8"], ["--backend nccl needs CUDA"]),
    ],
)
def test_usage_errors(args, fragments):
    done = run_cli(args, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("addr", "fragment"),
    [("no-such-host.invalid", "does not resolve"), ("127.0.0.1", "cannot reach MASTER_ADDR 127.0.0.1")],
)
def test_unreachable_master_addr_under_a_launcher(addr, fragment):
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": addr, "MASTER_PORT": str(free_port())}
    done = run_cli(["bench", "--timeout", "2", "-b", "8", "-e", "8"], env=env)
    assert done.returncode == 2
    assert fragment in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("port", ["70000", "-5", "abc"])
def test_bad_master_port_in_the_environment_for_local_ranks(port):
    done = run_cli(["bench", "-b", "8", "-e", "8"], env={"MASTER_PORT": port})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: MASTER_PORT must be"), done.stderr


def test_master_addr_of_another_host_for_local_ranks():
    done = run_cli(["bench", "-b", "8", "-e", "8"], env={"MASTER_ADDR": "192.0.2.1"})
    assert done.returncode == 2
    assert "not on this host" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_is_fast_because_it_imports_no_torch_or_numpy():
    assert imported_by_help(("torch", "numpy", "rich", "pydantic")) == []


def test_help_lists_bench_and_its_nccl_tests_flags():
    done = run_cli(["bench", "--help"])
    assert done.returncode == 0
    for flag in (
        "-b",
        "--minbytes",
        "-e",
        "-i",
        "-f",
        "-n",
        "-w",
        "-c",
        "-d",
        "-o",
        "-r",
        "-a",
        "-N",
        "--nproc",
        "--json",
        "--csv",
        "--timeout",
    ):
        assert flag in done.stdout


def test_bad_master_port_under_a_launcher():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "abc"}
    done = run_cli(["bench"], env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: MASTER_PORT must be a port number, got 'abc'"


def test_min_busbw_like_nccl_tests_fails_a_slow_run():
    done = run_cli(["bench", "-b", "1K", "-e", "1K", "-n", "2"], env={"NCCL_TESTS_MIN_BW": "1000"})
    assert done.returncode == 1
    assert "# Avg bus bandwidth" in done.stdout and done.stdout.count("FAILED") == 1
    assert "below 0.9 x NCCL_TESTS_MIN_BW (1000 GB/s)" in done.stderr


def test_all_on_one_rank_skips_sendrecv_with_a_note():
    done = run_cli(["bench", "all", "--nproc", "1", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("# sendrecv skipped: it needs at least 2 ranks and this world has 1") == 1
    assert done.stdout.count("# ps skipped: it needs at least 2 ranks and this world has 1") == 1
    assert done.stdout.count("# Collective test concluded") == 8


def test_output_folder_is_checked_by_rank_zero_only(tmp_path):
    (tmp_path / "zero" / "res").mkdir(parents=True)
    (tmp_path / "one").mkdir()
    from helpers import run_ranks

    env = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    cmd = [sys.executable, "-m", "fabricscope", "bench", "-b", "1K", "-e", "1K", "--json", "res/x.json"]
    ranks = run_ranks(cmd, env, [{"RANK": "0"}, {"RANK": "1"}], cwds=[tmp_path / "zero", tmp_path / "one"])
    assert [r.returncode for r in ranks] == [0, 0], [r.stderr for r in ranks]
    assert (tmp_path / "zero" / "res" / "x.json").exists()


def test_the_default_run_on_cpu_says_what_its_numbers_are_and_what_to_run_on_gpus():
    """Issue 24: the default benchmark on a machine without GPUs is two CPU processes on loopback; it says
    so (on stderr: the table stays nccl-tests') and names the command for a GPU node and for several nodes."""
    done = run_cli(["bench", "-b", "1K", "-e", "1K", "-n", "1"], timeout=120)
    assert done.returncode == 0, done.stderr
    [note] = [line for line in done.stderr.splitlines() if "CPU processes" in line]
    assert note.startswith("note: 2 CPU processes on this host (gloo over loopback)")
    assert "'fabricscope bench' (one NCCL rank per GPU)" in note and "torchrun --nnodes N" in note
    assert "CPU processes" not in done.stdout
