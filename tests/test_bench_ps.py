"""The ``ps`` op (parameter-server pattern): correct results, beside an all_reduce, servers, the model's refusal."""

import pytest

from fabricscope import ops
from fabricscope.results import load
from helpers import run_cli, table_rows

pytestmark = pytest.mark.multiprocess


def test_ps_is_one_registry_entry_defined_as_sendrecv_like():
    ps = ops.get("ps")
    assert ops.get("parameter-server") is ps
    assert ps.reduces and not ps.rooted and ps.min_ranks == 2 and not ps.modelled
    layout = ps.layout(1024, 4, 8)
    # busbw = algbw = S/t, as sendrecv: each worker pushes S and pulls S over its own link.
    assert ps.bandwidths(layout, 4, 8, 1e-3) == ops.get("sendrecv").bandwidths(layout, 4, 8, 1e-3)
    assert ps.algbw_elements(layout, 8) == ops.get("all_reduce").algbw_elements(layout, 8)


@pytest.mark.parametrize(("nproc", "servers"), [(3, 1), (4, 2), (3, 3)])
def test_ps_runs_beside_all_reduce_with_checked_results(tmp_path, nproc, servers):
    out = tmp_path / "ps.json"
    args = ["bench", "ps", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "--nproc", str(nproc)]
    done = run_cli([*args, "--servers", str(servers), "--json", str(out)])
    assert done.returncode == 0, done.stderr
    result = load(out)
    by_op = {op: [r for r in result.records if r["op"] == op] for op in ("ps", "all_reduce")}
    # The same sizes, the same columns, one after the other; every element checked.
    assert [r["size_bytes"] for r in by_op["ps"]] == [r["size_bytes"] for r in by_op["all_reduce"]]
    assert all(r["wrong"] == 0 for r in result.records)
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"]) for r in by_op["ps"])
    assert done.stdout.index("ps_perf") < done.stdout.index("all_reduce_perf")
    assert len(table_rows(done.stdout)) == 6
    assert result.config["servers"] == servers
    ratio = [line for line in done.stdout.splitlines() if line.startswith("# ps / all_reduce time for the same bytes")]
    assert len(ratio) == 1 and "1024 B: " in ratio[0] and "65536 B: " in ratio[0]


def test_ps_reductions_are_checked():
    redops = ["sum", "prod", "min", "max", "avg"]  # one run of 3 ranks for all of them (-o all)
    args = ["bench", "ps", "-b", "256", "-e", "4K", "-f", "16", "-n", "2", "--nproc", "3", "-o", "all"]
    done = run_cli([*args, "-d", "all"])
    assert done.returncode == 0, done.stderr
    for redop in redops:
        rows = [r for r in table_rows(done.stdout) if r[3] == redop]
        assert rows and all(r[8] == "0" and r[12] == "0" for r in rows), (redop, done.stdout)


def test_more_servers_than_ranks_is_a_usage_error():
    done = run_cli(["bench", "ps", "--servers", "3", "--nproc", "2", "-b", "1K", "-e", "1K"], timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --servers 3 asks for more parameter servers than this 2-rank world has (allowed 1 to 2)"
    ]


def test_predict_refuses_ps_in_one_line_and_all_skips_it():
    done = run_cli(["predict", "ps", "--cluster", "dgx-h100-ndr"], timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: predict has no cost model for ps: measure it with 'fabricscope bench ps'"
    ]
    every = run_cli(["predict", "all", "--cluster", "dgx-h100-ndr", "-b", "1M", "-e", "1M"], timeout=60)
    assert every.returncode == 0, every.stderr
    assert "ps_perf" not in every.stdout and "all_reduce_perf" in every.stdout


def test_the_ps_ratio_line_names_each_datatype_and_reduction_when_there_are_several():
    """-o all: five groups of the same sizes printed as one line could not be told apart."""
    from fabricscope.bench.output import _ps_against_all_reduce

    def record(op: str, dtype: str, redop: str, size: int, time_us: float) -> dict[str, object]:
        return {"op": op, "dtype": dtype, "redop": redop, "size_bytes": size, "placement": "out", "time_us": time_us}

    records = [
        record(op, dtype, redop, size, time)
        for dtype, redop, base in (("float", "sum", 1.0), ("float", "prod", 3.0), ("int8", "sum", 5.0))
        for op, time in (("ps", 2 * base), ("all_reduce", base))
        for size in (8, 32)
    ]
    lines = _ps_against_all_reduce(records)
    assert lines == [
        f"# ps / all_reduce time for the same bytes (out-of-place {group}): 8 B: 2.00  32 B: 2.00"
        for group in ("float sum", "float prod", "int8 sum")
    ]
    alone = _ps_against_all_reduce([r for r in records if r["dtype"] == "float" and r["redop"] == "sum"])
    assert alone == ["# ps / all_reduce time for the same bytes (out-of-place): 8 B: 2.00  32 B: 2.00"]
