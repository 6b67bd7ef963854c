"""``calibrate``: the fit itself, a real 2-rank bench calibrated and predicted, and hostile input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from model_helpers import one_error_line

from fabricscope.model.calibrate import MeasuredOp, calibrate, cluster_toml, fit_line, load_runs
from fabricscope.model.calibrated_cost import predicted_seconds
from fabricscope.model.cluster import MAX_BUSBW_GBPS, load_cluster
from fabricscope.ops import COLLECTIVES
from fabricscope.shown import quoted

SIZES = np.array([64e3 * 2**k for k in range(10)])


def line(base_us: float, gbps: float) -> np.ndarray:
    return base_us * 1e-6 + SIZES / (gbps * 1e9)


def test_the_fit_recovers_a_line_and_shrugs_off_a_stalled_point() -> None:
    seconds = line(50.0, 2.0)
    a, b = fit_line(SIZES, seconds)
    assert a == pytest.approx(50e-6, rel=1e-6) and b == pytest.approx(1 / 2e9, rel=1e-6)
    stalled = seconds.copy()
    stalled[3] *= 10  # one size stalled by the scheduler
    a, b = fit_line(SIZES, stalled)
    assert a == pytest.approx(50e-6, rel=0.05) and b == pytest.approx(1 / 2e9, rel=0.05)
    # Plain least squares would have been pulled far off by the same point.
    plain_a, plain_b = np.polyfit(SIZES, stalled, 1)[::-1]
    assert abs(plain_b * 2e9 - 1) > 0.1 or abs(plain_a / 50e-6 - 1) > 0.5


def test_runs_at_two_rank_counts_split_call_latency_from_step_latency() -> None:
    factor = COLLECTIVES["all_reduce"].busbw_factor

    def run(ranks: int) -> MeasuredOp:
        seconds = (20.0 + 2 * (ranks - 1) * 5.0) * 1e-6 + SIZES * factor(ranks) / 3e9
        return MeasuredOp("synthetic", "all_reduce", ranks, 1, SIZES, seconds)

    terms = calibrate([run(2), run(4)])["all_reduce"]
    assert terms.base_us == pytest.approx(20.0, rel=1e-3) and terms.intra_hop_us == pytest.approx(5.0, rel=1e-3)
    assert terms.intra_busbw_gbps == pytest.approx(3.0, rel=1e-3)
    assert terms.inter_busbw_gbps == 0 and terms.residual_pct < 0.1
    eight = predicted_seconds(terms, "all_reduce", SIZES, 8, 1)
    assert eight == pytest.approx((20.0 + 14 * 5.0) * 1e-6 + SIZES * factor(8) / 3e9, rel=1e-6)


def test_runs_across_nodes_give_the_network_terms() -> None:
    factor = COLLECTIVES["all_gather"].busbw_factor
    inside = MeasuredOp("a", "all_gather", 2, 1, SIZES, 1 * 4e-6 + SIZES * factor(2) / 10e9)
    # 2 nodes x 2 ranks: 3 steps, 1 of them between nodes at 30 us; the network at 1 GB/s bounds the ring.
    across = MeasuredOp("b", "all_gather", 4, 2, SIZES, (2 * 4.0 + 30.0) * 1e-6 + SIZES * factor(4) / 1e9)
    terms = calibrate([inside, across])["all_gather"]
    assert terms.inter_hop_us == pytest.approx(30.0, rel=1e-3)
    assert terms.inter_busbw_gbps == pytest.approx(1.0, rel=1e-3)
    assert terms.intra_busbw_gbps == pytest.approx(10.0, rel=1e-3)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank gloo bench of all_reduce and all_gather, 64 KiB to 4 MiB (bandwidth shows above 1 MiB)."""
    out = tmp_path_factory.mktemp("bench") / "two.json"
    done = subprocess.run(
        [sys.executable, "-m", "fabricscope", "bench", "all_reduce,all_gather", "--nproc", "2", "-b", "64K",
         "-e", "4M", "-n", "5", "-w", "1", "-c", "0", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def test_a_real_bench_calibrates_and_predict_uses_the_fit(cli, two_ranks, tmp_path) -> None:
    out = tmp_path / "mine.toml"
    done = cli("calibrate", str(two_ranks), "-o", str(out))
    assert done.code == 0, done.err
    assert "all_reduce" in done.out and "all_gather" in done.out
    cluster = load_cluster(str(out))
    assert (cluster.nodes, cluster.gpus_per_node) == (1, 2)
    terms = cluster.spec.calibration["all_reduce"]
    assert terms.points == 14 and terms.intra_busbw_gbps > 0 and terms.inter_busbw_gbps == 0
    # The file's terms are the fit of the measured points, and predict prints exactly them.
    runs = [r for r in load_runs([str(two_ranks)]) if r.op == "all_reduce"]
    a, b = fit_line(runs[0].moved, runs[0].seconds)
    assert terms.intra_hop_us * 2 == pytest.approx(a * 1e6, rel=1e-3)
    # A line that comes out flat (noisy small sizes on a busy machine) means "no bandwidth limit seen":
    # calibrate writes its cap, 10,000 GB/s, and predict then charges the latency (almost) alone.
    flat = b <= 0
    expected = MAX_BUSBW_GBPS if flat else min(COLLECTIVES["all_reduce"].busbw_factor(2) / b / 1e9, MAX_BUSBW_GBPS)
    assert terms.intra_busbw_gbps == pytest.approx(expected, rel=1e-3)
    pred = tmp_path / "p.json"
    done = cli("predict", "--cluster", str(out), "--gpus-per-node", "4", "-b", "64K", "-e", "1M", "--json", str(pred))
    assert done.code == 0, done.err
    records = json.loads(pred.read_text())["records"]
    assert {r["algorithm"] for r in records} == {"calibrated"}
    expect = predicted_seconds(terms, "all_reduce", [records[0]["size_bytes"]], 4, 1)[0] * 1e6
    assert records[0]["time_us"] == pytest.approx(expect, rel=1e-9)
    # Two nodes need network terms this calibration never measured: one error line, exit 2.
    done = cli("predict", "--cluster", str(out), "--nodes", "2", "-b", "64K", "-e", "1M")
    assert done.code == 2 and "measured no hops between nodes" in one_error_line(done)


def test_the_written_cluster_keeps_the_base_clusters_virtual_nics(two_ranks, tmp_path) -> None:
    # What the measurements do not cover comes from the base cluster, a cloud VM's NICs included.
    runs = load_runs([str(two_ranks)])
    for name, virtualized in (("cloud-h100-tcp", True), ("v100-100gbe-tcp", False)):
        path = tmp_path / f"{name}.toml"
        path.write_text(cluster_toml(load_cluster(name), {}, runs), encoding="utf-8")
        assert load_cluster(str(path)).spec.network.virtualized is virtualized


def test_calibrate_refuses_hostile_and_wrong_inputs(cli, two_ranks, tmp_path, write) -> None:
    out = str(tmp_path / "c.toml")
    folder = tmp_path / "folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    deep = write("deep.json", "[" * 5000 + "]" * 5000)
    predicted = tmp_path / "predicted.json"
    assert cli("predict", "--cluster", "dgx-a100-hdr", "-b", "64K", "-e", "1M", "--json", str(predicted)).code == 0
    data = json.loads(two_ranks.read_text())
    data["records"][0]["time_us"] = "fast"
    bad_record = write("bad.json", json.dumps(data))
    few = json.loads(two_ranks.read_text())
    few["records"] = [r for r in few["records"] if r["size_bytes"] <= 131072]
    too_few = write("few.json", json.dumps(few))
    cases = {
        str(fifo): "FIFO",
        str(zero): "character device",
        str(folder): "directory",
        str(tmp_path / ("x" * 5000)): "",
        str(deep): "",
        str(predicted): "is a 'predict' result; this needs 'bench' or 'nccl-tests'",
        str(bad_record): "record 0 ('all_reduce') has time_us = 'fast': it must be a number",
        str(too_few): "fewer than 3 message sizes",
    }
    for path, fragment in cases.items():
        done = cli("calibrate", path, "-o", out)
        assert done.code == 2, path
        assert fragment in one_error_line(done)
    # Its own input as its output is refused before anything is overwritten.
    before = two_ranks.read_text()
    done = cli("calibrate", str(two_ranks), "-o", str(two_ranks))
    assert done.code == 2 and "an input of this command" in one_error_line(done)
    assert two_ranks.read_text() == before
    assert not Path(out).exists()


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ("[calibration.all_reduse]\nbase_us = 1.0\n", "did you mean 'all_reduce'"),
        ("[calibration.all_reduce]\nintra_busbw_gbps = -1.0\n", "intra_busbw_gbps must be 0 (not measured) or from"),
        ("[calibration.all_reduce]\ninter_busbw_gbps = 1e-300\n", "must be 0 (not measured) or from 1e-09 to 10,000"),
        ("[calibration.all_reduce]\nbase_us = nan\n", "base_us must be from 0 to 1,000,000 (microseconds)"),
        (
            "[calibration.all_reduce]\nspeed = 3\n",
            "unknown key 'calibration.all_reduce.speed': allowed keys are base_us",
        ),
        ("[calibration.all_reduce]\npoints = 9223372036854775807\n", "points must be from 0 to 1e9"),
        ("[calibration.all_reduce]\nresidual_pct = 1e300\n", "residual_pct must be from 0 to 1e6 (percent)"),
    ],
)
def test_bad_calibration_tables(cli, write, table, fragment) -> None:
    path = write("c.toml", 'gpu = "h100-sxm"\n' + table)
    done = cli("predict", "--cluster", str(path))
    assert done.code == 2 and fragment in one_error_line(done)


def test_terms_that_overflow_are_not_blamed_on_an_algorithm_never_forced() -> None:
    # The file's bounds keep this out of cluster files; a library caller can still get here.
    from fabricscope.errors import InvalidValue
    from fabricscope.model.cluster import CalibratedOp
    from fabricscope.model.fabric import fabric_of
    from fabricscope.model.predict import predict_op

    terms = CalibratedOp(inter_hop_us=1.0, inter_busbw_gbps=1.0)
    terms.inter_hop_us = 1e308
    cluster = load_cluster("research-10g-roce").with_nodes(4)
    with pytest.raises(InvalidValue) as info:
        predict_op(
            COLLECTIVES["all_reduce"], fabric_of(cluster), sizes=[1 << 20], dtypes=["float"], redops=["sum"],
            root=0, gpus_per_node=cluster.gpus_per_node, nodes=4, calibrated=terms,
        )  # fmt: skip
    assert info.value.key is None and "no finite predicted time" in str(info.value)


def test_a_few_sizes_on_another_regime_do_not_take_the_fit() -> None:
    # A real 2-rank all_reduce behind a 400 Mbit/s token bucket (benchmarks/bench_calibrate.py): the two
    # smallest sizes ride the bucket's burst, the five others run at the link's 50 MB/s.
    sizes = np.array([65536.0 * 2**k for k in range(7)])
    seconds = np.array([535.9, 1383.1, 5404.0, 11099.7, 21936.5, 44069.1, 87808.9]) * 1e-6
    a, b = fit_line(sizes, seconds)
    assert 1 / b == pytest.approx(47.8e6, rel=0.02)  # the link, not twice it
    assert np.all(np.abs((a + b * sizes[2:]) / seconds[2:] - 1) < 0.02)


def _sweep_file(write, name: str, rows: list[tuple[int, float]]):  # type: ignore[no-untyped-def]
    from fabricscope.results import Result

    records = [
        {
            "op": "all_reduce",
            "size_bytes": size,
            "count": max(size // 4, 1),
            "dtype": "float",
            "redop": "sum",
            "root": -1,
            "placement": "out",
            "time_us": t,
            "algbw_gbps": 1.0,
            "busbw_gbps": 1.0,
            "wrong": 0,
        }
        for size, t in rows
    ]
    path = write(name, "")
    Result(kind="nccl-tests", config={"nranks": 2, "nodes": 1}, records=records).save(path)
    return path


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        # Degenerate times: before, numpy's "SVD did not converge" traceback.
        ([(1024, 1e-300), (4096, 1e-300), (16384, 1e-300)], "time_us = 1e-300 us is not a collective's time"),
        ([(1024, 1e300), (4096, 1e-3), (16384, 1e300)], "time_us = 1e+300 us is not a collective's time"),
        # Sizes no line fits: before, the cluster file's own bound ("residual_pct must be ...").
        ([(2**62, 1e-3), (2**61, 2e-3), (2**60, 3e-3), (1, 4e-3)], "no line t = latency + bytes / bandwidth fits"),
    ],
)
def test_calibrate_on_degenerate_data_is_one_line(cli, write, tmp_path, rows, fragment) -> None:
    path = _sweep_file(write, "degenerate.json", rows)
    done = cli("calibrate", str(path), "-o", str(tmp_path / "cal.toml"))
    assert done.code == 2 and fragment in done.err and "Traceback" not in done.err, done.err
    assert len(done.err.strip().splitlines()) == 1 and not (tmp_path / "cal.toml").exists()


def test_an_all_to_all_overlaps_its_peers_latencies_as_the_catalog_model_does() -> None:
    """Every rank posts its sends and receives to all peers before it waits (gloo's alltoall.cc; NCCL
    groups them): a calibrated all-to-all's latency is one step at any rank count, as the catalog model
    prices it, and only its bytes grow, with busbw's (n - 1) / n; a ring collective's latency grows."""
    from fabricscope.model.cluster import CalibratedOp

    terms = CalibratedOp(base_us=5.0, inter_hop_us=20.0, inter_busbw_gbps=10.0, points=8)
    tiny = [float(predicted_seconds(terms, "alltoall", 0, 1, nodes)) * 1e6 for nodes in (2, 4, 64)]
    assert tiny == pytest.approx([25.0, 25.0, 25.0])
    big = [float(predicted_seconds(terms, "alltoall", 1e9, 1, nodes)) for nodes in (2, 4)]
    assert big[1] - big[0] == pytest.approx(1e9 * (3 / 4 - 1 / 2) / 10e9)
    ring = [float(predicted_seconds(terms, "all_gather", 0, 1, nodes)) * 1e6 for nodes in (2, 4)]
    assert ring == pytest.approx([25.0, 65.0])


def test_a_fitted_term_is_written_with_its_significant_digits():
    """Six decimals wrote a 1e-07 GB/s fit (a 100 B/s line) as 0.0, which a cluster file reads as not measured."""
    import tomllib

    from fabricscope.model.calibrate import _toml_value

    for value in (1e-7, 12.3456789, 0.0, 987654.321):
        assert tomllib.loads(f"a = {_toml_value(value)}")["a"] == pytest.approx(value, rel=1e-8)


def test_a_run_given_twice_is_refused(cli, two_ranks, tmp_path) -> None:
    """Its points would weigh twice in every fit (validate refuses a CSV named twice the same way)."""
    other = f"{two_ranks.parent}/./{two_ranks.name}"  # another spelling of the same file
    line = one_error_line(cli("calibrate", str(two_ranks), str(other), "-o", str(tmp_path / "c.toml")))
    assert "is given twice" in line and "give each run once" in line
    assert not (tmp_path / "c.toml").exists()


def test_a_one_rank_run_is_left_out_and_alone_refused(cli, write, tmp_path) -> None:
    """One rank moves nothing between ranks and predict prices it as a local copy: its fit was written with
    a 100% fit error that predict never read, and beside another run it pulled that run's fit (an 8-GPU
    log's busbw halved)."""
    rows = [(1024, 20.0), (4096, 21.0), (16384, 25.0)]
    one = _sweep_file(write, "one.json", rows)
    data = json.loads(one.read_text())
    data["config"]["nranks"] = 1
    one.write_text(json.dumps(data))
    done = cli("calibrate", str(one), "-o", str(tmp_path / "cal.toml"))
    assert done.code == 2 and not (tmp_path / "cal.toml").exists()
    assert one_error_line(done) == (
        f"error: calibrate fits the links between ranks; {quoted(str(one))} ran on 1 rank, where a collective "
        "moves nothing between them: calibrate a run of 2 or more ranks"
    )
    two = _sweep_file(write, "two.json", [(1024, 30.0), (65536, 60.0), (1048576, 500.0), (4194304, 1900.0)])
    alone = cli("calibrate", str(two), "-o", str(tmp_path / "alone.toml"))
    mixed = cli("calibrate", str(one), str(two), "-o", str(tmp_path / "mixed.toml"))
    assert alone.code == mixed.code == 0, mixed.err
    assert f"note: {quoted(str(one))} left out: it ran on 1 rank, where a collective moves nothing between ranks" in (
        mixed.err
    )
    assert mixed.out == alone.out  # the same fit, the same fit error
    assert (tmp_path / "mixed.toml").read_text() == (tmp_path / "alone.toml").read_text()
