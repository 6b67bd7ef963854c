"""Review 3: the BF16 optimizer's stack at every ZeRO stage, step-time uncertainty without the memory
rows, device memory in binary GB, validation CSV headers and huge whole numbers, and what estimate and
predict say about the stack and the flow cap."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from model_helpers import one_error_line

from fabricscope.model import uncertainty
from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import estimate
from fabricscope.model.hardware import GPU, lookup
from fabricscope.model.parallel import FRAMEWORKS, ParallelConfig, stack_settings
from fabricscope.model.validation import default_files
from fabricscope.model.workload import load_model

TRAINING = next(p for p in default_files() if Path(str(p)).name == "training.csv")


def _run(framework: str, zero: int, precision: str = "bf16", **stack: object):  # type: ignore[no-untyped-def]
    model, cluster = load_model("megatron-145b"), load_cluster("dgx-a100-hdr").with_nodes(48)
    pp = 1 if zero >= 2 else 12  # DeepSpeed runs ZeRO 2 and 3 without a pipeline
    par = ParallelConfig(
        tp=8,
        pp=pp,
        dp=384 // (8 * pp),
        zero=zero,
        micro_batch=1,
        recompute="full",
        precision=precision,
        **{**stack_settings(FRAMEWORKS[framework]), **stack},
    )
    return estimate(model, cluster, par, what_ifs=False)


@pytest.mark.parametrize("zero", [2, 3])
def test_the_bf16_optimizer_term_is_off_where_zero_partitions_the_gradients(zero: int) -> None:
    plain, bf16 = _run("deepspeed-pipeline", zero), _run("megatron-deepspeed-bf16", zero)
    assert bf16.value("memory_bytes") == plain.value("memory_bytes")
    assert bf16.step_s == plain.step_s


def test_the_bf16_optimizer_shards_its_fp32_state_even_at_zero_0() -> None:
    zero0, zero1 = _run("megatron-deepspeed-bf16", 0), _run("megatron-deepspeed-bf16", 1)
    assert zero0.value("memory_bytes") == pytest.approx(zero1.value("memory_bytes"))
    # The plain engine at ZeRO 0 holds the whole fp32 state (16 B a parameter) on every GPU.
    assert _run("deepspeed-pipeline", 0).value("memory_bytes") > zero0.value("memory_bytes")


def test_the_bf16_optimizer_reduces_its_fp32_gradients_in_bf16() -> None:
    # DeepSpeed casts the fp32 accumulator to its communication_data_type, bf16 whenever bf16 is on
    # (deepspeed/runtime/engine.py: allreduce_bucket), so the wire carries 2 bytes per gradient, as
    # without the BF16 optimizer; a stack that reduced the fp32 buffer as it is would carry 4.
    plain, bf16 = _run("deepspeed-pipeline", 1), _run("megatron-deepspeed-bf16", 1)
    assert bf16.value("dp_comm") == pytest.approx(plain.value("dp_comm"))
    fp32 = _run("megatron-deepspeed-bf16", 1, bf16_grad_comm=False)
    assert fp32.value("dp_comm") > 1.5 * plain.value("dp_comm")
    fp16_plain, fp16 = _run("deepspeed-pipeline", 1, "fp16"), _run("megatron-deepspeed-bf16", 1, "fp16")
    assert fp16.value("dp_comm") == fp16_plain.value("dp_comm")


def test_step_time_uncertainty_leaves_out_memory_rows() -> None:
    rows = uncertainty._rows("training")
    assert rows and not any(r.group == "memory" for r in rows)


def test_device_memory_is_binary_gb() -> None:
    # An A100 80GB holds 81,920 MiB: BLOOM's 79 GiB in use (training-memory.csv, mem04) fits it.
    a100 = lookup("gpu", "a100-sxm-80gb", GPU)
    assert a100.memory_bytes == 80 * 2**30 > 79 * 2**30 > 80e9


def _training_csv(tmp_path: Path, header_change: tuple[str, str] | None = None, **changes: str) -> str:
    rows = [r for r in csv.DictReader(Path(str(TRAINING)).read_text(encoding="utf-8").splitlines()) if r["id"] == "t44"]
    out = io.StringIO()
    writer = csv.DictWriter(out, [*rows[0], *(k for k in changes if k not in rows[0])], lineterminator="\n")
    writer.writeheader()
    writer.writerow({**rows[0], **changes})
    text = out.getvalue()
    if header_change:
        head, _, body = text.partition("\n")
        text = head.replace(*header_change) + "\n" + body
    path = tmp_path / "rows.csv"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("header_change", "changes", "fragment"),
    [
        ((",flows", ",flow"), {}, "column 'flow' is not one fabricscope reads (did you mean 'flows'?"),
        ((",flows", ",flow_gbps"), {}, "column 'flow_gbps' is named twice"),
        (None, {"flows": "9" * 400}, "flows has 400 digits; whole numbers must fit in 64 bits"),
        (None, {"gpus": "9" * 400}, "gpus has 400 digits"),
        (None, {"metric": "memory_gib"}, "memory_gib applies to transformer rows"),
        (None, {"gpus": "\u0663" * 400}, "is not a whole number (ASCII digits)"),  # int() reads it, then overflows
        (None, {"value": "2_32.5"}, "is not a number (ASCII digits)"),
        (None, {"gpu": " "}, "gpu is empty: name the GPU"),  # it was an A100 80GB, silently
        (None, {"value": "1e308"}, "is outside 1e-09 to 1e+12"),  # its error overflowed to inf in --json
        (None, {"notes": "x" * 200_000}, "not CSV this reads (field larger than field limit"),
        ((",global_batch", ",my_own_note"), {}, "missing columns global_batch"),  # not the collectives' columns
    ],
)
def test_bad_validation_files_are_one_line(cli, tmp_path, header_change, changes, fragment) -> None:  # type: ignore[no-untyped-def]
    path = _training_csv(tmp_path, header_change, **changes)
    line = one_error_line(cli("validate", path))
    assert fragment in line and len(line.replace(path, "")) < 300, line


def test_an_unrelated_extra_column_is_a_note(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = cli("validate", _training_csv(tmp_path, date="2019-01-20"))
    assert done.code == 0, done.err


def test_estimate_names_the_framework_and_its_bf16_term(cli) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "gpt3-175b", "--cluster", "dgx-a100-hdr", "--nodes", "48", "--tp", "4"]
    args += ["--pp", "12", "--micro-batch", "2", "--global-batch", "2048", "--recompute", "full", "--zero", "1"]
    done = cli(*args, "--framework", "megatron-deepspeed-bf16", "--precision", "bf16")
    assert done.code == 0, done.err
    assert "priced as megatron-deepspeed-bf16 runs it" in done.out
    assert "unsharded fp32 buffer" in done.out and "GiB of 80 GiB" in done.out
    # DeepSpeed reduces the fp32 buffer through a bf16 copy: the two lines say the same width
    assert "reduced through a bf16 copy" in done.out and "gradients reduced in 2-byte words" in done.out
    fp16 = cli(*args, "--framework", "megatron-deepspeed-bf16", "--precision", "fp16")
    assert fp16.code == 0 and "unsharded fp32 buffer" not in fp16.out


def test_predict_says_a_flow_cap_set_the_nic_share(cli, write) -> None:  # type: ignore[no-untyped-def]
    text = 'nodes = 2\ngpu = "v100-sxm2-32gb"\n[network]\nnic = "eth-25g"\ntransport = "tcp-socket"\n'
    path = write("c.toml", text + "flow_gbps = 10\nflows = 1\n")
    done = cli("predict", "--cluster", str(path), "-b", "256M", "-e", "256M", "all_reduce")
    assert done.code == 0, done.err
    assert "1 flow of at most 10 Gb/s per NIC: 1.2 GB/s per NIC" in done.out


def test_a_row_id_with_a_control_character_is_refused_and_shown_escaped(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    line = one_error_line(cli("validate", _training_csv(tmp_path, id="t\x0044")))
    assert "\x00" not in line and "'t\\x0044'" in line and "1-40 printable characters" in line


def test_a_huge_choice_is_not_echoed_whole(cli) -> None:  # type: ignore[no-untyped-def]
    line = one_error_line(
        cli("estimate", "--model", "llama-7b", "--cluster", "dgx-a100-hdr", "--framework", "x" * 5000)
    )
    assert "(5000 characters)" in line and len(line) < 400


def test_review4_row_ids_and_numbers(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A quoted newline stays in the id (the reader no longer splits lines itself); an empty id is shown
    # quoted; leading zeros do not count as digits of a 64-bit number.
    assert "'t\\n44'" in one_error_line(cli("validate", _training_csv(tmp_path, id="t\n44")))
    assert "row ''" in one_error_line(cli("validate", _training_csv(tmp_path, id="")))
    padded = cli("validate", _training_csv(tmp_path, gpus="0" * 30 + "16"))
    assert padded.code == 0, padded.err


def test_the_bf16_stack_says_when_its_term_is_off(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "llama-70b", "--cluster", "dgx-a100-hdr", "--nodes", "8", "--pp", "1"]
    out = tmp_path / "e.json"
    done = cli(
        *args, "--zero", "3", "--framework", "megatron-deepspeed-bf16", "--precision", "bf16", "--json", str(out)
    )
    assert done.code == 0, done.err
    assert "no fp32 gradient buffer" in done.out and "ZeRO 3 partitions the gradients" in done.out
    record = json.loads(out.read_text())["records"][0]
    assert record["memory_gib_per_gpu"] * 2**30 == pytest.approx(record["memory_gb_per_gpu"] * 1e9)


def test_a_numbered_copy_of_a_note_column_is_the_files_own(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = cli("validate", _training_csv(tmp_path, source2="a second source", notes_2="more"))
    assert done.code == 0, done.err
