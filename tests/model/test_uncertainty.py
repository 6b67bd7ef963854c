"""predict, estimate and plan say how sure they are: the closest validation group, and warnings."""

from __future__ import annotations

import json

import pytest
from model_helpers import one_error_line

from fabricscope.model.cluster import load_cluster
from fabricscope.model.uncertainty import collective_group, for_collectives, for_training


@pytest.mark.parametrize(
    ("preset", "nodes", "group"),
    [
        ("dgx-h100-ndr", 1, "nvlink-node"),
        ("dgx-h100-ndr", 4, "ib-multinode"),
        ("research-10g-roce", 4, "roce-multinode"),
        ("v100-100gbe-tcp", 4, "tcp"),
        ("hgx-a100-4x200g", 4, "shared-nic"),
        ("lab-8gpu-1gbe-hdd", 1, "pcie-node"),
        ("gb200-nvl72", 1, "nvlink-domain"),  # one rack: one NVLink domain of 72 GPUs
        ("gb200-nvl72", 2, "nvlink-domain"),  # racks joined by InfiniBand
    ],
)
def test_each_kind_of_system_gets_its_group(preset: str, nodes: int, group: str) -> None:
    cluster = load_cluster(preset).with_nodes(nodes)
    assert collective_group(cluster) == group
    sure = for_collectives(cluster)
    assert sure.group == group and sure.rows >= 2 and 0 <= sure.median_abs_error_pct <= sure.worst_abs_error_pct


def test_efa_gets_the_group_of_awss_published_runs_and_says_what_it_misses() -> None:
    import dataclasses

    from fabricscope.model.cluster import resolve

    base = load_cluster("research-10g-roce").with_nodes(2)
    network = dataclasses.replace(base.spec.network, nic="eth-100g", nics_per_node=4, transport="efa")
    efa = resolve(dataclasses.replace(base.spec, network=network), name="p4de-like", source="test")
    sure = for_collectives(efa)
    assert collective_group(efa) == "mid-size" == sure.group
    assert sure.rows == 10 and sure.median_abs_error_pct > 25  # the group's EFA rows alone, not all 46
    assert any("on EFA the model prices AWS's 20 us per network step" in w for w in sure.warnings)
    assert not any("EFA" in w for w in for_collectives(base).warnings)
    assert not any("EFA" in w for w in for_collectives(efa.with_nodes(1)).warnings)  # one node: no network


def test_roce_beyond_the_validated_node_count_is_flagged() -> None:
    roce = load_cluster("research-10g-roce")
    assert not any("beyond" in w for w in for_collectives(roce.with_nodes(6)).warnings)
    far = for_collectives(roce.with_nodes(64)).warnings
    assert any("64 nodes is beyond the largest roce-multinode measurement validated (6 nodes)" in w for w in far)


def test_the_cli_prints_and_stores_it(cli, tmp_path) -> None:
    out = tmp_path / "p.json"
    done = cli("predict", "--cluster", "research-10g-roce", "--nodes", "32", "-b", "1M", "-e", "1M", "--json", str(out))
    assert done.code == 0, done.err
    assert "# uncertainty of these times:" in done.out and "beyond the largest" in done.out
    stored = json.loads(out.read_text())["summary"]["uncertainty"]
    assert stored["group"] == "roce-multinode" and stored["warnings"]
    est = tmp_path / "e.json"
    done = cli("estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--nodes", "2", "--json", str(est))
    assert done.code == 0, done.err
    assert "uncertainty of this step time" in done.out
    assert json.loads(est.read_text())["summary"]["uncertainty"]["rows"] >= 9
    plan = tmp_path / "plan.json"
    done = cli("plan", "--model", "llama-7b", "--gpus", "64", "--json", str(plan))
    assert done.code == 0, done.err
    assert "uncertainty of the recommended network's utilization" in done.out
    assert json.loads(plan.read_text())["summary"]["uncertainty"]["basis"] == "validation"


def test_a_calibrated_cluster_reports_its_own_fit(write) -> None:
    path = write(
        "c.toml",
        'gpu = "h100-sxm"\n[calibration.all_reduce]\nintra_busbw_gbps = 300.0\npoints = 12\nresidual_pct = 4.5\n',
    )
    sure = for_collectives(load_cluster(str(path)))
    assert (sure.basis, sure.rows, sure.median_abs_error_pct) == ("calibration", 12, 4.5)
    assert for_training(load_cluster("dgx-a100-hdr")).rows >= 9


def test_roce_loss_on_nodes_with_fewer_nics_than_it_was_measured_on_is_flagged() -> None:
    roce = load_cluster("research-10g-roce")
    assert roce.spec.network.nics_per_node < 8
    said = "RoCE's loss with scale was measured on nodes with 8 NICs"
    assert any(said in w for w in for_collectives(roce.with_nodes(4)).warnings)
    assert not any(said in w for w in for_collectives(roce.with_nodes(2)).warnings)  # no loss on two nodes
    ib = load_cluster("dgx-a100-hdr").with_nodes(4)
    assert not any(said in w for w in for_collectives(ib).warnings)


# A cluster calibrated from runs across 8 nodes of 4 GPUs (as 'calibrate' writes one from the
# public 10 GbE log): all_reduce has measured terms, all_gather has none.
CALIBRATED = (
    'gpu = "rtx-4090"\nnodes = 8\ngpus_per_node = 4\n[network]\nnic = "eth-100g"\n'
    "[calibration.all_reduce]\ninter_hop_us = 40.0\ninter_busbw_gbps = 1.17\npoints = 1024\nresidual_pct = 0.01\n"
)


def test_ops_the_calibration_does_not_cover_carry_the_catalogs_error(cli, write) -> None:
    path = str(write("c.toml", CALIBRATED))
    catalog = for_collectives(load_cluster(str(write("base.toml", CALIBRATED.split("[calibration")[0]))))
    # An op without a table: the catalog's numbers, so the catalog's error, and a note saying so.
    sure = for_collectives(load_cluster(path), ["all_gather"])
    assert sure.basis == "validation" and sure.median_abs_error_pct == catalog.median_abs_error_pct
    assert "all_gather: not calibrated" in sure.warnings[0]
    # Warnings about an op appear only where that op is predicted.
    assert not any("hops inside a node" in w for w in sure.warnings)
    done = cli("predict", "all_gather", "--cluster", path, "-b", "64M", "-e", "64M")
    assert done.code == 0, done.err
    assert "fit to this cluster's measurements" not in done.out
    assert f"+-{catalog.median_abs_error_pct:.0f}% typical" in done.out
    # Both: the fit's error for all_reduce, and a line giving the catalog's for all_gather.
    both = for_collectives(load_cluster(path), ["all_reduce", "all_gather"])
    assert both.basis == "calibration" and both.rows == 1024
    assert any(w.startswith("all_gather: not calibrated") and "priced from the catalog" in w for w in both.warnings)


def test_a_forced_algorithm_on_a_calibrated_op_is_refused(cli, write) -> None:
    path = str(write("c.toml", CALIBRATED))
    for extra in ([], ["--nodes", "1"]):  # the single-node refusal is not bypassed either
        done = cli("predict", "--cluster", path, "--algo", "ring", "-b", "64M", "-e", "64M", *extra)
        line = one_error_line(done)
        assert "--algo ring cannot be combined with this cluster's calibrated all_reduce" in line
    # An op the calibration does not cover still takes --algo's note and the catalog.
    done = cli("predict", "all_gather", "--cluster", path, "--algo", "ring", "-b", "64M", "-e", "64M")
    assert done.code == 0, done.err


def test_another_shape_than_the_calibrated_one_is_called_an_extrapolation(cli, write) -> None:
    path = str(write("c.toml", CALIBRATED))
    assert for_collectives(load_cluster(path)).extrapolated_from == ""
    for cluster in (load_cluster(path).with_nodes(16), load_cluster(path).with_gpus_per_node(1)):
        sure = for_collectives(cluster)
        assert sure.basis == "calibration" and sure.extrapolated_from == "8 nodes x 4 GPUs"
    done = cli("predict", "--cluster", path, "--nodes", "16", "--gpus-per-node", "1", "-b", "64M", "-e", "64M")
    assert done.code == 0, done.err
    head = next(line for line in done.out.splitlines() if line.startswith("# uncertainty"))
    assert "extrapolated from the calibrated shape, 8 nodes x 4 GPUs" in head and "does not bound it" in head


def test_estimate_does_not_warn_about_a_calibration_it_does_not_use(cli, write) -> None:
    path = str(write("c.toml", CALIBRATED))
    sure = for_training(load_cluster(path))
    assert not any("hops inside a node" in w for w in sure.warnings)
    assert any("calibration of all_reduce is not used here" in w for w in sure.warnings)
    done = cli("estimate", "--model", "llama-7b", "--cluster", path)
    assert done.code == 0, done.err
    assert "hops inside a node" not in done.out + done.err
    assert "its communication carries the collectives' uncertainty" in done.out


def test_a_gpu_the_training_rows_measured_is_not_called_unmeasured() -> None:
    import dataclasses

    from fabricscope.model.cluster import resolve

    base = load_cluster("lab-8gpu-1gbe-hdd")
    p100 = resolve(dataclasses.replace(base.spec, gpu="p100-pcie-16gb", gpus_per_node=4), name="p100", source="test")
    unmeasured = "no published row measured a p100-pcie-16gb"
    assert any(unmeasured in w for w in for_collectives(p100).warnings)  # no collectives row has one
    assert not any(unmeasured in w for w in for_training(p100).warnings)  # Horovod's rows t60-t69 do


def test_a_gb200_rack_described_by_its_trays_is_not_priced_as_one_nvlink_domain() -> None:
    """Slurm sees a GB200 NVL72 rack as 18 nodes of 4 GPUs; the model's node is the NVLink domain, so that
    description prices 18 domains joined by InfiniBand: it says so, and takes the errors of such nodes."""
    trays = load_cluster("gb200-nvl72").with_nodes(18).with_gpus_per_node(4)
    sure = for_collectives(trays)
    assert collective_group(trays) == sure.group == "ib-multinode"
    assert any("a rack is one node (gpus_per_node = 72, nodes = racks)" in w for w in sure.warnings), sure.warnings
    racks = for_collectives(load_cluster("gb200-nvl72").with_nodes(2))
    assert racks.group == "nvlink-domain" and not any("nvlink5-switch is its whole" in w for w in racks.warnings)
