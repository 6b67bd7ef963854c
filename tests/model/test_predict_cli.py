"""``fabricscope predict``: the bench table and Result schema, predicted."""

from __future__ import annotations

import json

import pytest
from model_helpers import one_error_line

from fabricscope import ops, table
from fabricscope.results import COLLECTIVE_FIELDS
from helpers import table_rows


def test_table_matches_bench_columns_and_byte_counts(cli) -> None:
    done = cli("predict", "all", "--cluster", "dgx-a100-hdr", "--nodes", "2", "-b", "1K", "-e", "1M", "-f", "4")
    assert done.code == 0, done.err
    for line in table.header_lines()[1:]:
        assert line in done.out
    rows = table_rows(done.out)
    assert len(rows) == 9 * 6  # nine ops, six sizes
    for op_name, op in ops.COLLECTIVES.items():
        # 'all' is every op the model has a cost model for (ps is measured only).
        assert (f"# Collective test starting: {op_name}_perf" in done.out) == op.modelled
    allreduce = [r for r in rows if r[4] == "-1" and r[3] == "sum"][:6]
    assert [int(r[0]) for r in allreduce] == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert [int(r[1]) for r in allreduce] == [256, 1024, 4096, 16384, 65536, 262144]
    assert "# algorithm " in done.out
    assert "# Avg bus bandwidth" in done.out and "# Peak bus bandwidth" in done.out


def test_json_result_has_the_measured_fields(cli, tmp_path) -> None:
    out = tmp_path / "pred.json"
    done = cli(
        "predict",
        "all_reduce",
        "all_gather",
        "--cluster",
        "v100-100gbe-tcp",
        "-b",
        "1K",
        "-e",
        "1G",
        "-f",
        "1024",
        "--json",
        str(out),
    )
    assert done.code == 0, done.err
    data = json.loads(out.read_text())
    assert data["format"] == "fabricscope-result" and data["kind"] == "predict"
    assert data["config"]["cluster"] == "v100-100gbe-tcp"
    records = data["records"]
    assert len(records) == 2 * 3 * 2  # two ops, 1K 1M 1G, out-of-place and in-place
    for record in records:
        for key in COLLECTIVE_FIELDS:
            assert key in record
        assert record["wrong"] is None
        assert record["algorithm"]
        op = ops.get(record["op"])
        nranks = 32
        assert record["busbw_gbps"] == pytest.approx(record["algbw_gbps"] * op.busbw_factor(nranks))
    big = next(r for r in records if r["op"] == "all_reduce" and r["size_bytes"] == 1 << 30)
    assert 4.0 < big["busbw_gbps"] < 6.0  # NCCL sockets on one 100 GbE port
    assert data["summary"]["all_reduce"]["peak_busbw_gbps"] == pytest.approx(big["busbw_gbps"])


def test_forced_algorithm(cli) -> None:
    ring = cli("predict", "--cluster", "dgx-a100-hdr", "--nodes", "2", "-b", "8G", "-e", "8G", "--algo", "ring")
    auto = cli("predict", "--cluster", "dgx-a100-hdr", "--nodes", "2", "-b", "8G", "-e", "8G")
    ring_bw = float(table_rows(ring.out)[0][7])
    auto_bw = float(table_rows(auto.out)[0][7])
    assert 185 < ring_bw < 200
    assert auto_bw >= ring_bw
    assert "# algorithm ring/Simple" in ring.out


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--cluster", "dgx-a100-hdr", "--algo", "tree", "--nodes", "1"], ["tree needs at least 2 nodes"]),
        (["--cluster", "dgx-a100-hdr", "--algo", "nvls"], ["nvls needs GPUs with NVLink SHARP"]),
        (["--cluster", "dgx-a100-hdr", "--nodes", "2", "--algo", "sharp"], ["sharp needs network.sharp = true"]),
        (["--cluster", "dgx-a100-hdr", "--algo", "rign"], ["unknown --algo 'rign'", "did you mean 'ring'"]),
        (["--cluster", "dgx-a100-hdr", "--nodes", "0"], ["--nodes must be a whole number from 1 to 1048576, got '0'"]),
        (
            ["--cluster", "dgx-a100-hdr", "--nodes", "-3"],
            ["--nodes must be a whole number from 1 to 1048576, got '-3'"],
        ),
        (["--cluster", "dgx-a100-hdr", "-b", "1M", "-e", "1K"], ["larger than -e"]),
        (["--cluster", "dgx-a100-hdr", "-b", "-8"], ["-b/--minbytes: invalid size"]),
        (["all_reduse", "--cluster", "dgx-a100-hdr"], ["did you mean 'all_reduce'"]),
        (["broadcast", "--cluster", "lab-8gpu-1gbe-hdd", "-r", "8"], ["-r (root) 8 is not a rank"]),
        (["--cluster", "dgx-a100-hdr", "-d", "floot"], ["unknown datatype 'floot'"]),
    ],
)
def test_bad_predict_input(cli, args: list[str], fragments: list[str]) -> None:
    line = one_error_line(cli("predict", *args))
    for fragment in fragments:
        assert fragment in line


def test_missing_cluster_flag_is_a_usage_error(cli) -> None:
    done = cli("predict")
    assert done.code == 2 and "--cluster" in done.err


CALIBRATED = """description = "calibrated from 2 run(s); base lab-8gpu-100g-nvme"
nodes = 1
gpus_per_node = 2
gpu = "h100-sxm"
intra = "nvswitch"
pcie = "gen5"

[network]
nic = "eth-100g"
nics_per_node = 1
transport = "rdma"

[calibration.all_reduce]
base_us = 30.0
intra_hop_us = 10.0
intra_busbw_gbps = 2.5
points = 12
residual_pct = 4.2
"""


def test_a_calibrated_op_says_its_times_come_from_the_measurements(cli, write) -> None:
    path = write("cal.toml", CALIBRATED)
    done = cli("predict", "all_reduce", "--cluster", str(path), "-b", "1M", "-e", "1M")
    assert done.code == 0, done.err
    header = [line for line in done.out.splitlines() if line.startswith("#")][:6]
    text = "\n".join(header)
    # The measured terms and where they came from, not the base preset's hardware.
    assert "[calibration.all_reduce]" in text and "12 measured rows" in text and "4.2%" in text
    assert "calibrated from 2 run(s); base lab-8gpu-100g-nvme" in text and "measured at 1 x 2" in text
    assert "30.00 us per call" in text and "2.5 GB/s busbw" in text
    assert "over rdma" not in text and "NCCL's cost model" not in text
    # An op the file did not calibrate is still the catalog model's, and says so.
    other = cli("predict", "all_gather", "--cluster", str(path), "-b", "1M", "-e", "1M")
    assert other.code == 0 and "NCCL's cost model" in other.out and "over rdma" in other.out


def test_all_says_which_ops_it_leaves_out(cli) -> None:
    done = cli("predict", "all", "--cluster", "dgx-h100-ndr", "-b", "1M", "-e", "1M")
    assert done.code == 0, done.err
    assert "note: all: ps, hypercube left out: predict has no cost model for them" in done.err
    assert "ps_perf" not in done.out and "hypercube_perf" not in done.out and "all_reduce_perf" in done.out


def test_a_size_beyond_the_gpus_memory_is_priced_with_a_warning(cli) -> None:  # type: ignore[no-untyped-def]
    """nccl-tests allocates send and receive buffers of the largest size: -e 1P on an 80 GB GPU cannot run."""
    done = cli("predict", "--cluster", "dgx-h100-ndr", "-b", "1G", "-e", "64G")
    assert done.code == 0
    [warning] = [line for line in done.err.splitlines() if line.startswith("warning: -e 64G")]
    assert "exceed the 80 GiB of a h100-sxm" in warning and "sizes above 40G" in warning
    assert "warning: -e" not in cli("predict", "--cluster", "dgx-h100-ndr", "-b", "1G", "-e", "32G").err


def test_one_rank_is_a_copy_calibrated_or_not(cli, write) -> None:
    """A calibration measured collectives; one rank runs none (NCCL copies the buffer), so its terms do not
    price it (they gave 0 us, labelled calibrated), and no algorithm can be forced there."""
    path = write("cal.toml", CALIBRATED)
    done = cli("predict", "all_reduce", "all_gather", "--cluster", str(path), "--gpus-per-node", "1",
               "-b", "1", "-e", "1M", "-f", "1024", "-d", "int32", "--json", str(path.parent / "one.json"))  # fmt: skip
    assert done.code == 0, done.err
    records = json.loads((path.parent / "one.json").read_text())["records"]
    assert {r["algorithm"] for r in records if r["placement"] == "out"} == {"local copy"}  # 1 B (0 int32s) too
    assert {r["algorithm"] for r in records if r["placement"] == "in" and r["op"] == "all_reduce"} == {
        "nothing (one rank, in place)"
    }
    big = [r for r in records if r["size_bytes"] == 1 << 20 and r["placement"] == "out"]
    assert len(big) == 2 and len({r["time_us"] for r in big}) == 1 and big[0]["time_us"] > 0
    text = cli("predict", "all_reduce", "--cluster", str(path), "--gpus-per-node", "1", "-b", "1M", "-e", "1M")
    assert "not known (no published row measured a one-rank system)" in text.out
    assert "# 1 rank; time = what NCCL does on one rank" in text.out and "terms, fitted by" not in text.out
    assert "one rank runs no collective" in text.out
    forced = cli("predict", "all_reduce", "--cluster", "dgx-h100-ndr", "--nodes", "1", "--gpus-per-node", "1",
                 "--algo", "tree")  # fmt: skip
    assert forced.code == 2 and "cannot run on one rank" in forced.err and "Traceback" not in forced.err
