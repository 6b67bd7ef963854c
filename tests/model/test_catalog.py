"""The hardware catalog and presets: every entry loads, every number has a source, names resolve."""

from __future__ import annotations

import pytest

from fabricscope.errors import UsageError
from fabricscope.model import hardware
from fabricscope.model.cluster import load_cluster, presets
from fabricscope.model.hardware import GPU, NIC, PCIe
from fabricscope.model.planner import scenarios
from fabricscope.model.workload import load_model, model_presets
from helpers import imported_by_help

REQUIRED_GPUS = (
    "v100",
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm",
    "h200-sxm",
    "h20",
    "b200",
    "l40s",
    "mi300x",
    "rtx-4090",
)
REQUIRED_PRESETS = (
    "dgx-a100-hdr",
    "hgx-a100-4x200g",
    "dgx-h100-ndr",
    "v100-100gbe-tcp",
    "cloud-h100-tcp",
    "research-10g-roce",
    "lab-8gpu-1gbe-hdd",
)


@pytest.mark.parametrize("kind", sorted(hardware.KINDS))
def test_every_entry_has_a_source(kind: str) -> None:
    table = hardware.entries(kind)
    assert table
    for name, entry in table.items():
        assert len(entry.source) > 20, f"{kind} {name} has no real source"


def test_required_hardware_is_there() -> None:
    gpus = hardware.entries("gpu")
    for wanted in REQUIRED_GPUS:
        assert any(wanted in name for name in gpus), wanted
    speeds = {(n.link, n.speed_gbps) for n in hardware.entries("nic").values()}
    for speed in (1, 10, 25, 100, 200, 400, 800):
        assert ("ethernet", speed) in speeds
    for speed in (100, 200, 400, 800):  # EDR HDR NDR XDR
        assert ("infiniband", speed) in speeds
    assert set(hardware.entries("pcie")) == {"gen3", "gen4", "gen5", "gen6"}
    kinds = set(hardware.entries("storage"))
    assert {"hdd", "sata-ssd", "nvme", "nfs-1g", "nfs-10g", "parallel-fs"} <= kinds


def test_pcie_gen4_is_about_32_gb_each_way() -> None:
    gen4 = hardware.lookup("pcie", "gen4", PCIe)
    assert 31 <= gen4.gbps <= 32.1
    assert hardware.lookup("pcie", "gen5", PCIe).gbps == pytest.approx(2 * gen4.gbps)


def test_nic_rates_follow_their_names() -> None:
    assert hardware.lookup("nic", "ib-hdr", NIC).speed_gbps == 200
    assert hardware.lookup("nic", "ib-ndr", NIC).speed_gbps == 400
    assert hardware.lookup("nic", "eth-1g", NIC).speed_gbps == 1


def test_peak_flops_and_precision_errors() -> None:
    h100 = hardware.lookup("gpu", "h100-sxm", GPU)
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops("fp8") == pytest.approx(2 * h100.peak_flops("bf16"), rel=0.01)
    v100 = hardware.lookup("gpu", "v100-sxm2-32gb", GPU)
    with pytest.raises(UsageError, match="precision bf16: v100-sxm2-32gb has no bf16 tensor cores: use fp32 or fp16"):
        v100.peak_flops("bf16")


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(UsageError, match=r"unknown GPU 'h100-sx' \(did you mean 'h100-sxm'\?\)"):
        hardware.lookup("gpu", "h100-sx", GPU)
    assert hardware.lookup("gpu", " H100-SXM ", GPU).name == "h100-sxm"


def test_presets_load() -> None:
    for name in REQUIRED_PRESETS:
        assert name in presets()
    for name in presets():
        cluster = load_cluster(name)
        assert cluster.gpus == cluster.nodes * cluster.gpus_per_node
    lab = load_cluster("lab-8gpu-1gbe-hdd")
    assert (lab.nodes, lab.gpus_per_node, lab.nic.speed_gbps) == (1, 8, 1)
    assert lab.storage.access_ms > 5  # hard disks behind the share


def test_model_presets_match_published_sizes() -> None:
    sizes = {name: spec.param_count / 1e9 for name, spec in model_presets().items()}
    assert sizes["gpt3-175b"] == pytest.approx(175, rel=0.01)
    assert sizes["llama-7b"] == pytest.approx(6.74, rel=0.01)
    assert sizes["llama-70b"] == pytest.approx(69.0, rel=0.01)
    assert sizes["llama-405b"] == pytest.approx(405.8, rel=0.01)
    assert sizes["megatron-530b"] == pytest.approx(529.6, rel=0.01)
    resnet = load_model("resnet50")
    assert resnet.kind == "vision" and resnet.sample_bytes == pytest.approx(110e3)
    assert set(scenarios()) == {
        "research-small",
        "research-medium",
        "research-large",
        "cloud",
        "private-large",
        "realtime",
    }


def test_command_module_imports_only_the_standard_library() -> None:
    assert imported_by_help(("numpy", "pydantic", "fabricscope.model.training")) == []
