"""Real runs: spawned gloo ranks, torchrun, mpirun, an srun environment, and the checks they print."""

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fabricscope.launch import free_port
from fabricscope.results import load
from helpers import cli_env, require_mpirun, run_cli, run_ranks, run_with_terminal_stderr, table_rows

pytestmark = pytest.mark.multiprocess

BIN = Path(sys.executable).parent


def _check_table(stdout, rows, op="all_reduce"):
    data = table_rows(stdout)
    assert len(data) == rows, stdout
    for fields in data:
        assert len(fields) == 13
        assert fields[8] == "0"  # #wrong out-of-place
    assert f"# Collective test starting: {op}_perf" in stdout
    assert "# Out of bounds values : 0 OK" in stdout
    assert f"# Collective test concluded: {op}_perf" in stdout
    return data


def test_default_spawn_writes_table_json_and_csv(tmp_path):
    out, table = tmp_path / "r.json", tmp_path / "r.csv"
    done = run_cli(["bench", "-b", "8", "-e", "64K", "-f", "4", "--json", str(out), "--csv", str(table)])
    assert done.returncode == 0, done.stderr
    rows = _check_table(done.stdout, 7)
    assert [int(r[0]) for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768]
    assert "# Avg bus bandwidth" in done.stdout and "# Peak bus bandwidth" in done.stdout
    assert "# Half of peak from" in done.stdout

    result = load(out)
    assert result.status == "complete"
    assert result.env["backend"] == "gloo" and result.env["world_size"] == 2
    assert result.env["torch"].startswith("2.")
    assert [r["rank"] for r in result.host["ranks"]] == [0, 1]
    assert len(result.records) == 14
    first = result.records[0]
    assert first["op"] == "all_reduce" and first["placement"] == "out" and first["wrong"] == 0
    assert len(first["samples_us"]) == 20
    assert first["min_us"] <= first["p50_us"] <= first["p99_us"] <= first["max_us"]
    # The table shows exactly what the file holds.
    assert float(rows[-1][5]) == pytest.approx(result.records[-2]["time_us"], rel=0.01, abs=0.01)
    assert result.summary["all_reduce"]["peak_busbw_gbps"] == max(r["busbw_gbps"] for r in result.records)

    with table.open() as handle:
        lines = list(csv.DictReader(handle))
    assert len(lines) == 14
    assert lines[0]["op"] == "all_reduce" and lines[0]["backend"] == "gloo" and lines[0]["ranks"] == "2"


@pytest.mark.parametrize(("variable", "threads"), [("", 1), ("2", 2), ("0", 1), ("9" * 400, 1)])
def test_each_rank_gives_torch_the_threads_omp_num_threads_says_else_one(tmp_path, variable, threads):
    # As torchrun does for its ranks; the forked ranks inherit the launcher's OpenMP runtime, so the
    # rank sets torch's count itself.  The result records what rank 0 ran with.
    out = tmp_path / "t.json"
    done = run_cli(["bench", "alltoall", "-b", "1K", "-e", "1K", "--json", str(out)], env={"OMP_NUM_THREADS": variable})
    assert done.returncode == 0, done.stderr
    assert load(out).env["torch_threads"] == threads


def test_every_op_checks_clean_on_three_ranks(tmp_path):
    out = tmp_path / "all.json"
    done = run_cli(["bench", "all", "-b", "1K", "-e", "4K", "-f", "4", "-n", "3", "--nproc", "3", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("# Out of bounds values : 0 OK") == 10
    assert "# hypercube skipped: it runs on a power-of-two number of ranks; this world has 3" in done.stdout
    result = load(out)
    ops = {r["op"] for r in result.records}
    assert len(ops) == 10
    unchecked = [r for r in result.records if r["op"] in ("alltoall", "sendrecv") and r["placement"] == "in"]
    assert all(r["wrong"] == 0 for r in result.records if r not in unchecked)
    # alltoall and sendrecv run in place too, as nccl-tests 2.18+ does: a time, algbw and busbw, and
    # N/A for #wrong alone (the in-place result is not defined, so nothing is checked).
    assert len(unchecked) == 2 * 2 and all(r["wrong"] is None and r["time_us"] > 0 for r in unchecked)
    for line in done.stdout.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit() and len(fields) == 13:
            assert "N/A" not in fields[5:12] and fields[12] in ("0", "N/A"), line
    bcast = [r for r in result.records if r["op"] == "broadcast"]
    assert all(r["root"] == 0 for r in bcast) and all(r["busbw_gbps"] == r["algbw_gbps"] for r in bcast)


def test_every_datatype_and_reduction_checks_clean(tmp_path):
    out = tmp_path / "types.json"
    args = [
        "bench",
        "all_reduce",
        "reduce_scatter",
        "reduce",
        "-d",
        "all",
        "-o",
        "all",
        "-b",
        "256",
        "-e",
        "256",
        "-n",
        "1",
        "-w",
        "0",
        "-r",
        "1",
        "--json",
        str(out),
    ]
    done = run_cli(args)
    assert done.returncode == 0, done.stderr
    result = load(out)
    combos = {(r["op"], r["dtype"], r["redop"]) for r in result.records}
    assert len(combos) == 3 * 8 * 5
    assert all(r["wrong"] == 0 for r in result.records)
    assert {r["root"] for r in result.records if r["op"] == "reduce"} == {1}


def _run_patched(tmp_path, patch, config):
    """Run 2 ranks of the real worker with torch.distributed patched by ``patch`` (Python source)."""
    script = tmp_path / "patched.py"
    script.write_text(
        "import os\nimport torch\nimport torch.distributed as dist\n"
        + textwrap.dedent(patch)
        + "\nfrom fabricscope.bench import worker\nworker.main()\n"
    )
    env = {
        "FABRICSCOPE_BENCH_CONFIG": json.dumps(config),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    return run_ranks([sys.executable, str(script)], env, [{"RANK": "0"}, {"RANK": "1"}])


def test_wrong_elements_are_counted_and_fail_the_run(tmp_path):
    # Rank 1 corrupts one element of every float all_reduce result: the check must see it on rank 1.
    patch = """
        real = dist.all_reduce

        def corrupting(tensor, *args, **kwargs):
            work = real(tensor, *args, **kwargs)
            if os.environ["RANK"] == "1" and tensor.dtype == torch.float32 and tensor.numel() >= 64:
                tensor[3] += 1
            return work

        dist.all_reduce = corrupting
    """
    out = tmp_path / "bad.json"
    config = {"ops": ["all_reduce"], "min_bytes": 1024, "max_bytes": 4096, "iters": 2, "json_path": str(out)}
    ranks = _run_patched(tmp_path, patch, config)
    assert [r.returncode for r in ranks] == [1, 1]
    stdout, stderr = ranks[0].stdout, ranks[0].stderr
    assert "# Out of bounds values : 6 FAILED" in stdout, stdout  # 3 rows, wrong in both placements
    assert all(r[8] == "1" and r[12] == "1" for r in table_rows(stdout))
    assert "wrong element(s)" in stderr
    assert all(r["wrong"] == 1 for r in load(out).records)


EVERY_OP = [
    "all_reduce",
    "reduce",
    "reduce_scatter",
    "broadcast",
    "all_gather",
    "alltoall",
    "gather",
    "scatter",
    "sendrecv",
]

# Every float32 collective of the benchmark does nothing; the runner's own
# bookkeeping (float64 times, int64 counts, barriers) still works.
_NOOP = """
    import functools

    def noop(real):
        @functools.wraps(real)
        def call(*args, **kwargs):
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if any(t.dtype == torch.float32 for t in tensors):
                return None
            return real(*args, **kwargs)
        return call

    for name in ("all_reduce", "reduce", "broadcast", "all_gather_single", "reduce_scatter_single",
                 "all_to_all_single", "gather", "scatter"):
        setattr(dist, name, noop(getattr(dist, name)))
    dist.batch_isend_irecv = lambda ops: []
"""


@pytest.mark.parametrize(
    ("ops", "redop", "patch"),
    [
        (
            EVERY_OP,
            "min",
            _NOOP,
        ),
        (
            EVERY_OP,
            "max",
            _NOOP,
        ),
        # prod swapped for max: the pattern has elements where they differ (4 against 2).
        (
            ["all_reduce", "reduce", "reduce_scatter"],
            "prod",
            """
        real_all_reduce, real_reduce, real_rs = dist.all_reduce, dist.reduce, dist.reduce_scatter_single

        def swap(kwargs):
            if kwargs.get("op") == dist.ReduceOp.PRODUCT:
                kwargs["op"] = dist.ReduceOp.MAX
            return kwargs

        dist.all_reduce = lambda t, **kw: real_all_reduce(t, **swap(kw))
        dist.reduce = lambda t, dst, **kw: real_reduce(t, dst, **swap(kw))
        dist.reduce_scatter_single = lambda o, i, **kw: real_rs(o, i, **swap(kw))
    """,
        ),
    ],
)
def test_the_check_catches_a_collective_that_does_nothing_or_the_wrong_thing(tmp_path, ops, redop, patch):
    out = tmp_path / "broken.json"
    # From 8 B (2 floats) up, root 1: no size is too small to catch, and no root holds the answer.
    config = {
        "ops": ops,
        "min_bytes": 8,
        "max_bytes": 512,
        "step_factor": 8,
        "iters": 1,
        "warmup_iters": 0,
        "redops": [redop],
        "root": 1,
        "json_path": str(out),
    }
    ranks = _run_patched(tmp_path, patch, config)
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].stderr
    records = load(out).records
    assert {r["op"] for r in records} == set(ops)
    # Every checked row whose output holds data is caught (all_gather & co have no elements at 8 B);
    # in-place alltoall and sendrecv are not checked (nccl-tests: their in-place result is undefined).
    unchecked = {("alltoall", "in"), ("sendrecv", "in")}
    checked = [r for r in records if (r["op"], r["placement"]) not in unchecked]
    assert all(r["wrong"] is None for r in records if (r["op"], r["placement"]) in unchecked)
    missed = [(r["op"], r["size_bytes"], r["placement"]) for r in checked if r["count"] and not r["wrong"]]
    assert missed == []


@pytest.mark.parametrize("nproc", [2, 4])
def test_torchrun(tmp_path, nproc):
    out = tmp_path / "tr.json"
    args = f"--nproc-per-node {nproc} --master-port {free_port()} -m fabricscope bench all_gather -b 1K -e 16K -f 4"
    cmd = [str(BIN / "torchrun"), *args.split(), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=cli_env())
    assert done.returncode == 0, done.stderr
    _check_table(done.stdout, 3, op="all_gather")
    result = load(out)
    assert result.env["launcher"] == "torchrun" and result.env["world_size"] == nproc
    assert len({r["pid"] for r in result.host["ranks"]}) == nproc
    # all_gather's size column is the whole output: count * ranks * 4 bytes.
    assert all(r["size_bytes"] == r["count"] * nproc * 4 for r in result.records)


def test_mpirun_open_mpi(tmp_path):
    mpirun = require_mpirun()
    out = tmp_path / "mpi.json"
    args = f"--allow-run-as-root --oversubscribe -np 2 {BIN / 'fabricscope'} bench reduce_scatter -b 1K -e 16K -f 4"
    cmd = [mpirun, *args.split(), "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=cli_env())
    assert done.returncode == 0, done.stderr
    _check_table(done.stdout, 3, op="reduce_scatter")
    result = load(out)
    assert result.env["launcher"] == "mpirun" and result.env["world_size"] == 2


def test_srun_environment_replayed(tmp_path):
    # What srun sets for a 2-task step on one node (captured variable names and formats).
    out = tmp_path / "slurm.json"
    env = {
        "SLURM_NTASKS": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": str(free_port()),
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),  # the port derived from the job id may be taken on a busy test host
    }
    cmd = [str(BIN / "fabricscope"), "bench", "-b", "1K", "-e", "1K", "--json", str(out)]
    ranks = run_ranks(cmd, env, [{"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)} for r in range(2)])
    assert [r.returncode for r in ranks] == [0, 0], [r.stderr for r in ranks]
    _check_table(ranks[0].stdout, 1)
    assert ranks[1].stdout == ""  # only rank 0 prints
    assert load(out).env["launcher"] == "slurm"


def test_run_cycles_and_rank0_timing(tmp_path):
    out = tmp_path / "cycles.json"
    done = run_cli(["bench", "broadcast", "-b", "4K", "-e", "8K", "-N", "2", "-a", "0", "-c", "0", "--json", str(out)])
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert [int(r[0]) for r in rows] == [4096, 8192, 4096, 8192]
    assert all(r[8] == "N/A" for r in rows)
    assert "combined across ranks by rank0 (-a 0)" in done.stdout
    assert all(r["wrong"] is None for r in load(out).records)


@pytest.mark.parametrize("mode", ["2", "3"])
def test_min_and_max_timing_keep_the_samples_of_the_rank_they_pick(tmp_path, mode):
    # -a 2/3 picks one rank's mean: its samples come along, so p50/p99 read against the time column.
    out = tmp_path / f"a{mode}.json"
    done = run_cli(
        ["bench", "all_gather", "-b", "1K", "-e", "4K", "-n", "6", "-a", mode, "--nproc", "3", "--json", str(out)]
    )
    assert done.returncode == 0, done.stderr
    for record in load(out).records:
        samples = record["samples_us"]
        assert len(samples) == 6
        assert sum(samples) / len(samples) == pytest.approx(record["time_us"], rel=1e-6)


def test_progress_bar_on_a_terminal_stderr_only():
    code, stdout, terminal = run_with_terminal_stderr(["bench", "-b", "1K", "-e", "4K", "-n", "2"])
    assert code == 0
    assert "bench" in terminal and "/3" in terminal  # the bar counts the 3 rows
    assert "━" not in stdout and len(table_rows(stdout)) == 3


def test_hypercube_gathers_by_recursive_doubling_on_a_power_of_two(tmp_path):
    # nccl-tests' hypercube (src/hypercube.cu): every rank ends with every rank's block, checked in
    # place and out of place; algbw counts the (n-1) blocks a rank receives, busbw = algbw.
    out = tmp_path / "hc.json"
    done = run_cli(
        ["bench", "hypercube", "--nproc", "4", "-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "--json", str(out)]
    )
    assert done.returncode == 0, done.stderr
    records = load(out).records
    assert {r["placement"] for r in records} == {"out", "in"} and all(r["wrong"] == 0 for r in records)
    for r in records:
        assert r["size_bytes"] == 4 * r["count"] * 4  # the receive buffer: 4 ranks' blocks of floats
        assert r["algbw_gbps"] == pytest.approx(r["count"] * 4 * 3 / (r["time_us"] * 1e3), rel=1e-6)
        assert r["busbw_gbps"] == r["algbw_gbps"]
    # Three ranks cannot pair as r XOR 2^k: named alone it is refused, within 'all' it is skipped.
    refused = run_cli(["bench", "hypercube", "--nproc", "3", "-b", "1K", "-e", "1K"])
    assert refused.returncode == 2 and "hypercube runs on a power-of-two number of ranks; this world has 3" in (
        refused.stderr
    )
