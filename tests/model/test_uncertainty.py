"""predict, estimate and plan say how sure they are: the closest validation group, and warnings."""

from __future__ import annotations

import json

import pytest

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
    ],
)
def test_each_kind_of_system_gets_its_group(preset: str, nodes: int, group: str) -> None:
    cluster = load_cluster(preset).with_nodes(nodes)
    assert collective_group(cluster) == group
    sure = for_collectives(cluster)
    assert sure.group == group and sure.rows >= 2 and 0 <= sure.median_abs_error_pct <= sure.worst_abs_error_pct


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
