"""``fabricscope hw``: list kinds and presets, show one entry with its source."""

from __future__ import annotations

from model_helpers import one_error_line


def test_hw_lists_everything(cli) -> None:
    done = cli("hw")
    assert done.code == 0
    for heading in ("gpu:", "nic:", "transport:", "pcie:", "storage:", "cluster:", "model:", "scenario:"):
        assert heading in done.out
    assert "lab-8gpu-1gbe-hdd" in done.out and "ib-xdr" in done.out


def test_hw_lists_one_kind(cli) -> None:
    done = cli("hw", "nics")
    assert done.code == 0
    assert "ib-ndr" in done.out and "h100-sxm" not in done.out


def test_hw_show_gives_numbers_and_sources(cli) -> None:
    done = cli("hw", "show", "ib-hdr")
    assert done.code == 0
    assert "speed_gbps" in done.out and "200" in done.out and "QM8700" in done.out
    cluster = cli("hw", "show", "dgx-h100-ndr")
    assert "network: 8x ib-ndr over rdma-gdr" in cluster.out and 'gpu = "h100-sxm"' in cluster.out
    model = cli("hw", "show", "llama-70b")
    assert "kv_heads" in model.out


def test_hw_show_of_a_cluster_is_a_cluster_file_predict_loads(cli, tmp_path) -> None:
    shown = cli("hw", "show", "dgx-a100-hdr")
    mine = tmp_path / "mine.toml"
    mine.write_text(shown.out)
    args = ["predict", "all_reduce", "-b", "1M", "-e", "1G", "-f", "4"]
    from_file = cli(*args, "--cluster", str(mine))
    assert from_file.code == 0, from_file.err
    table = [line for line in from_file.out.splitlines() if not line.startswith("#")]
    assert table == [
        line for line in cli(*args, "--cluster", "dgx-a100-hdr").out.splitlines() if not line.startswith("#")
    ]


def test_hw_mistakes(cli) -> None:
    assert "did you mean 'h100-sxm'" in one_error_line(cli("hw", "show", "h100-smx"))
    assert "unknown kind 'gpuz'" in one_error_line(cli("hw", "gpuz"))
    assert "usage: fabricscope hw show NAME" in one_error_line(cli("hw", "show"))
    for argv in (["hw", "show", "a" * 5000], ["hw", "a" * 5000]):  # cut in the middle, as every command cuts
        line = one_error_line(cli(*argv))
        assert "(5000 characters)" in line and len(line) < 400, argv


def test_hw_show_a_model_shows_what_is_used(cli) -> None:
    done = cli("hw", "show", "llama-7b")
    assert done.code == 0
    assert "params             6.738e+09 (from the shape)" in done.out
    assert "ffn                11008" in done.out and "kv_heads           32" in done.out
    assert "gflops_per_sample" not in done.out and "traffic_mb_per_sample" not in done.out
    vision = cli("hw", "show", "resnet50")
    assert "gflops_per_sample  4.1" in vision.out and "layers" not in vision.out


def test_hw_show_suggests_names_that_contain_the_word(cli) -> None:
    line = one_error_line(cli("hw", "show", "a100"))
    assert "did you mean one of 'a100-sxm-40gb', 'a100-sxm-80gb'" in line
    assert cli("hw", "show", "H100-SXM").code == 0


def test_nvlink_entries_name_no_missing_catalog_entry(cli) -> None:
    from fabricscope.model import hardware

    every = {name for kind in hardware.KINDS for name in hardware.entries(kind)}
    for link in hardware.entries("gpulink").values():
        assert link.switch not in every and not link.switch.startswith("nvswitch")
