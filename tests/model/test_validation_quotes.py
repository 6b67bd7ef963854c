"""A validation row says what its source says: the quote holds the row's value, and the GPU
count, batch and parallel sizes wherever the quote states them."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pytest

from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import estimate
from fabricscope.model.parallel import ParallelConfig
from fabricscope.model.validation import check_training, megatron_flops
from fabricscope.model.workload import load_model

DATA = Path(__file__).resolve().parents[2] / "src" / "fabricscope" / "model" / "data" / "validation"
TRAINING = [
    row
    for path in sorted(DATA.glob("training*.csv"))
    for row in csv.DictReader(path.read_text(encoding="utf-8").splitlines())
]
QUOTED = [row for row in TRAINING if row["quote"].strip()]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _numbers(text: str) -> list[float]:
    return [_number(n) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]


def _product(row: dict[str, str], *keys: str) -> int:
    value = 1
    for key in keys:
        value *= int(row[key] or 1)
    return value


STATED = [
    # (pattern in the quote, what the row must hold for it)
    (r"model-parallel size (\d+)", lambda r: _product(r, "tp", "pp")),
    (r"(?:^|\|)\s*([\d,]+) GPUs\s*(?:\||$)", lambda r: int(r["gpus"])),
    (r"\bon ([\d,]+) DGX A100 servers", lambda r: int(r["gpus"]) // 8),
    (r"(?:^|\|)\s*batch ([\d,]+)\s*(?:\||$)", lambda r: int(r["global_batch"])),
    (r"GlobalBatchSize ([\d,]+)", lambda r: int(r["global_batch"])),
    (r"global batch size \(?([\d,]+)\)?", lambda r: int(r["global_batch"])),
    (r"(?:^|\|)\s*microbatch (\d+)", lambda r: int(r["micro_batch"])),
    (r"MicroBatchSize (\d+)", lambda r: int(r["micro_batch"])),
    (r"\bt=(\d+) p=\d+", lambda r: int(r["tp"])),
    (r"\bt=\d+ p=(\d+)", lambda r: int(r["pp"])),
    (r"\bTP (\d+)\b", lambda r: int(r["tp"])),
    (r"\bPP (\d+)\b", lambda r: int(r["pp"])),
    (r"tensor parallel size of (\d+)", lambda r: int(r["tp"])),
    (r"(\d+)-way tensor parallelism", lambda r: int(r["tp"])),
    (r"(\d+)-way pipeline parallelism", lambda r: int(r["pp"])),
]


@pytest.mark.parametrize("row", QUOTED, ids=[row["id"] for row in QUOTED])
def test_the_quote_holds_the_rows_value(row: dict[str, str]) -> None:
    value = float(row["value"])
    if re.search(r"(?:^|; )value = |= " + re.escape(row["value"]) + r"\b", row["notes"]):
        return  # a value the source gives in other terms: the notes carry the arithmetic
    found = _numbers(row["quote"])
    # A percentage quoted for a fraction (scaling efficiency 91.9% for 0.919) is the same value.
    assert any(n == pytest.approx(value, rel=1e-9) or n == pytest.approx(100 * value, rel=1e-9) for n in found), (
        row["id"],
        row["value"],
        row["quote"][:200],
    )


@pytest.mark.parametrize("row", QUOTED, ids=[row["id"] for row in QUOTED])
def test_the_quote_and_the_row_agree_on_gpus_batch_and_splits(row: dict[str, str]) -> None:
    for pattern, held in STATED:
        for match in re.finditer(pattern, row["quote"]):
            assert _number(match.group(1)) == held(row), (row["id"], match.group(0), held(row))


def test_the_patterns_can_fail() -> None:
    # A row whose quote states model-parallel size 1 but which runs tp 2 is caught.
    row = dict(QUOTED[0], quote="ZeRO-3 | model-parallel size 1 | batch 1536 | 768 GPUs", tp="2", pp="1")
    row.update(gpus="768", global_batch="1536")
    with pytest.raises(AssertionError):
        test_the_quote_and_the_row_agree_on_gpus_batch_and_splits(row)


MEGATRON_TABLE = [row for row in TRAINING if row["metric"] == "megatron_tflops_per_gpu" and row["id"].startswith("q")]


def _megatron_count(row: dict[str, str], *, causal: bool) -> float:
    """num_floating_point_operations of Megatron-LM (training.py after 8873b55) for a row of
    Megatron-MoE-ModelZoo's Qwen3-235B-A22B table, written out here from that code."""
    b, s, layers, h = int(row["global_batch"]), int(row["seq_len"]), int(row["layers"]), int(row["hidden"])
    heads, groups, head_dim = int(row["heads"]), int(row["kv_heads"]), 128  # Qwen3-235B-A22B config
    q_ratio = heads * head_dim / h
    attention = (1 + groups / heads + s / h / (2 if causal else 1)) * q_ratio
    routed = 8 * 1536 * layers  # top 8 of experts 1536 wide, every layer an MoE layer
    mlp = routed * 1.5 / (layers * h)  # SwiGLU: three projections
    logit = int(row["vocab"]) / (2 * layers * h)
    return 12.0 * b * s * layers * h * h * (attention + mlp + logit)


@pytest.mark.parametrize("row", MEGATRON_TABLE, ids=[row["id"] for row in MEGATRON_TABLE])
def test_the_table_counts_flops_as_megatron_lm_does_since_2025(row: dict[str, str]) -> None:
    # The table prints step time and TFLOP/s per GPU side by side: they agree under Megatron-LM's
    # causal count (half the attention scores) and not under the whole count the model's own
    # model_tflops_per_gpu uses, so the rows compare Megatron's count.
    cells = [cell.strip() for cell in row["quote"].split("|")]
    step = float(cells[cells.index(row["value"]) - 1])
    gpus, published = int(row["gpus"]), float(row["value"])
    assert _megatron_count(row, causal=True) / step / gpus / 1e12 == pytest.approx(published, rel=0.01)
    assert _megatron_count(row, causal=False) / step / gpus / 1e12 > published * 1.1


def test_the_validation_metric_is_megatron_lms_count() -> None:
    row = MEGATRON_TABLE[0]
    model = load_model("qwen3-235b-a22b")
    assert (model.seq, model.layers, model.heads, model.kv_heads) == (4096, 94, 64, 4)
    batch = int(row["global_batch"])
    model = dataclasses.replace(model, global_batch=batch)
    split = ParallelConfig(tp=2, pp=8, dp=16, ep=32, etp=1)
    est = estimate(model, load_cluster("dgx-h100-ndr").with_nodes(32), split, what_ifs=False)
    counted = megatron_flops(model, batch, est.value("model_flops"))
    # The preset's vocabulary and widths are the table's model's: within 1% of Megatron's count.
    assert counted == pytest.approx(_megatron_count(row, causal=True), rel=0.01)


def test_the_megatron_count_of_latent_attention() -> None:
    # Megatron-LM's num_floating_point_operations for MLA (d4f9a6f, 2025-04), written out for DeepSeek-V3:
    # per token 6 x layers x (projection weights + s x heads x (192 + 128) / 2), the MLP and the logits.
    model = load_model("deepseek-v3")
    b, s, layers, h, heads, vocab = 64, model.seq, model.layers, model.hidden, model.heads, model.vocab
    q_term = 1536 * (h + heads * (128 + 64) + 1)
    kv_term = 512 * (h + heads * (128 + 128) + 1) + h * 64
    attention = 6 * layers * (q_term + kv_term + heads * 128 * h + s * heads * 192 / 2 + s * heads * 128 / 2)
    widths = 18432 * 3 + (2048 * 8 + 2048) * 58  # dense layers, then routed and shared experts
    per_token = attention + 12 * h * widths * 1.5 + 6 * h * vocab
    model = dataclasses.replace(model, global_batch=b)
    split = ParallelConfig(tp=1, pp=8, dp=8, ep=8, recompute="full")
    est = estimate(model, load_cluster("dgx-h100-ndr").with_nodes(8), split, what_ifs=False)
    # The model's count also holds the routers' weights (7168 x 256 per MoE layer): 0.2% more.
    assert megatron_flops(model, b, est.value("model_flops")) == pytest.approx(b * s * per_token, rel=0.005)


TABLE_QUOTES = [row for row in TRAINING if "performance_summary.md" in row["source"]]
"""Rows that quote a table as its header line, ' || ', and their line (NeMo's performance summary)."""
TABLE_COLUMNS = {
    "#-GPUs": "gpus",
    "GBS": "global_batch",
    "MBS": "micro_batch",
    "Sequence Length": "seq_len",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "interleave",
    "Tokens / sec / GPU": "value",
}


@pytest.mark.parametrize("row", TABLE_QUOTES, ids=[row["id"] for row in TABLE_QUOTES])
def test_a_quoted_table_line_holds_the_rows_configuration(row: dict[str, str]) -> None:
    assert row["quote"].count(" || ") == 1, "quote the table's header line, ' || ', and the row's line"
    head, line = row["quote"].split(" || ")
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in line.split("|")], strict=True))
    for column, key in TABLE_COLUMNS.items():
        if column in cells:
            assert _number(cells[column]) == _number(row[key] or "1"), (column, cells[column], row[key])
    assert int(row["gpus"]) == _product(row, "tp", "pp", "cp", "dp")


@pytest.mark.parametrize("row", TABLE_QUOTES, ids=[row["id"] for row in TABLE_QUOTES])
def test_a_rows_overlap_columns_are_the_ones_priced(row: dict[str, str]) -> None:
    # The row's own tp_comm_overlap and pp_comm_overlap, not its framework's defaults, price it: the
    # same row with both flipped gives another prediction wherever one of them can act.
    flipped = {
        **row,
        "tp_comm_overlap": "false" if row["tp_comm_overlap"] == "true" else "true",
        "pp_comm_overlap": "false" if row["pp_comm_overlap"] == "true" else "true",
    }
    acts = (int(row["tp"]) > 1 and "sequence-parallel" in row["recompute"]) or int(row["interleave"]) > 1
    same = check_training(flipped, "x.csv").predicted == pytest.approx(check_training(row, "x.csv").predicted)
    assert same != acts


CHRONICLES = [row for row in TRAINING if "chronicles-prequel.md" in row["source"] and row["metric"] == "iteration_s"]
"""Rows of BigScience's topology benchmarks: each quotes the page's statement of the model (its table's title,
or a log's settings such as ``TP=8, PP=10, ...``), the table's header line, ' || ', and its line."""
CHRONICLES_COLUMNS = {
    "Layers": "layers",
    "DP": "dp",
    "TP": "tp",
    "PP": "pp",
    "MBS": "micro_batch",
    "NHEADS": "heads",
    "GBS": "global_batch",
}
CHRONICLES_SETTINGS = {
    "HIDDEN": "hidden",
    "NHIDDEN": "hidden",
    "NLAYERS": "layers",
    "NHEADS": "heads",
    "TP": "tp",
    "PP": "pp",
    "GBS": "global_batch",
    "SEQ_LEN": "seq_len",
}
TITLE_GBS = "GBS=512 (the title)"
"""A row's note that its table's title overrides the GBS its lines print (the page's single-node table)."""


def _chronicles_cells(row: dict[str, str]) -> tuple[str, dict[str, str]]:
    head, line = row["quote"].split(" || ")
    header = head[max(head.rfind("| Nodes"), head.rfind("| GPUs")) :]
    columns = [c.strip() for c in header.split("|")]
    return head, dict(zip(columns, [c.strip() for c in line.split("|")], strict=True))


@pytest.mark.parametrize("row", CHRONICLES, ids=[row["id"] for row in CHRONICLES])
def test_a_quoted_benchmark_line_holds_the_rows_shape_and_split(row: dict[str, str]) -> None:
    head, cells = _chronicles_cells(row)
    for column, key in CHRONICLES_COLUMNS.items():
        if column in cells and not (column == "GBS" and TITLE_GBS in row["notes"]):
            assert _number(cells[column]) == _number(row[key]), (column, cells[column], row[key])
    # The model's statement: what the table has no column for.
    for name, value in re.findall(r"\b(N?HIDDEN|NLAYERS|NHEADS|TP|PP|GBS|SEQ_LEN)=(\d+)", head):
        if not (name == "NLAYERS" and "Layers" in cells):
            assert _number(value) == _number(row[CHRONICLES_SETTINGS[name]]), (name, value)
    assert re.search(r"\bN?HIDDEN=\d+", head), "the quote names the hidden size"
    assert re.search(r"\bNLAYERS=\d+", head) or "Layers" in cells, "the quote names the layer count"
    assert "NHEADS" in cells or "NHEADS=" in head or "NHEADS not stated" in row["notes"], "where the heads come from"
    gpus = _number(cells["Nodes"]) * 8 if "Nodes" in cells else _number(cells["GPUs"])
    assert gpus == int(row["gpus"]) == _product(row, "tp", "pp", "dp")
    if "Sec/it" in cells:
        assert cells["Sec/it"] == row["value"]
    else:  # a log's line
        assert f"elapsed time per iteration (s): {row['value']} " in head


@pytest.mark.parametrize("row", CHRONICLES, ids=[row["id"] for row in CHRONICLES])
def test_a_benchmark_line_runs_the_stack_of_its_date(row: dict[str, str]) -> None:
    # fp16 until the BF16 optimizer of 02-28 ('from now on the testing is happening with BF16 optimizer'), and
    # the 02-17 section's bf16 runs before that optimizer was written.
    _, cells = _chronicles_cells(row)
    date = cells["Notes"].split()[0]
    if date >= "02-28":
        expected = ("bf16", "megatron-deepspeed-bf16")
    elif date == "02-17":
        expected = (row["source"].rsplit(", ", 1)[1], "deepspeed-pipeline")
    else:
        expected = ("fp16", "deepspeed-pipeline")
    assert (row["precision"], row["framework"]) == expected


@pytest.mark.parametrize("row", CHRONICLES, ids=[row["id"] for row in CHRONICLES])
def test_a_benchmark_lines_size_is_its_shapes(row: dict[str, str]) -> None:
    # The page's Size column is l (12 h^2 + 13 h) + v h of the model it ran: a wrong hidden size or layer
    # count in a row shows here.
    _, cells = _chronicles_cells(row)
    if not row["params_b"]:
        assert "params_b left empty" in row["notes"]
        return
    assert _number(cells["Size"].rstrip("B")) == _number(row["params_b"])
    h, layers, vocab = int(row["hidden"]), int(row["layers"]), int(row["vocab"])
    shaped = (layers * (12 * h * h + 13 * h) + vocab * h) / 1e9
    # Sizes are printed to the billion; the page's early 200B runs counted a 150k vocabulary.
    assert abs(shaped - _number(row["params_b"])) <= max(0.5, 0.02 * shaped)


COLLECTIVES = list(csv.DictReader((DATA / "collectives.csv").read_text(encoding="utf-8").splitlines()))
_RESULT_LINE = re.compile(
    r"'\s*(\d+)\s+\d+\s+(?:float|half|bfloat16|double|int8|uint8|int32)\s+\S+\s+([-+\d.eE\s]+?)\s*'"
)
"""An nccl-tests result line quoted in a collectives row's notes: size, count, type, op, then its numbers."""
_COLUMN = {"busbw_GBps": 2, "latency_us": 0}
"""Where a metric is among a placement's numbers (time, algbw, busbw, check)."""


def _result_line_agrees(row: dict[str, str]) -> bool | None:
    """Whether the first quoted result line holds the row's size, and its value in the out-of-place column the
    metric names; None without such a line, or where the notes derive the value from several lines."""
    line = _RESULT_LINE.search(row["notes"])
    if line is None or row["metric"] not in _COLUMN or "value: " in row["notes"]:
        return None
    numbers = line.group(2).split()
    # nccl-tests 2.x prints a root column first (-1 where the op has none); older logs do not.  A line cut
    # after the out-of-place busbw has four numbers with a root and three without.
    rooted = re.fullmatch(r"-?\d+", numbers[0]) is not None and (
        len(numbers) % 4 == 1 or (len(numbers) == 4 and "." in numbers[-1])
    )
    at = (1 if rooted else 0) + _COLUMN[row["metric"]]
    return int(line.group(1)) == int(row["size_bytes"]) and abs(float(numbers[at]) - float(row["value"])) < 0.005


QUOTED_LINES = [row for row in COLLECTIVES if _result_line_agrees(row) is not None]


@pytest.mark.parametrize("row", QUOTED_LINES, ids=[row["id"] for row in QUOTED_LINES])
def test_a_quoted_nccl_tests_line_holds_the_rows_size_and_value(row: dict[str, str]) -> None:
    assert _result_line_agrees(row), (row["id"], row["size_bytes"], row["value"])


def test_the_nccl_tests_line_check_can_fail() -> None:
    assert len(QUOTED_LINES) >= 70
    # Both formats: with the root column (g04, nccl-tests 2.x) and without it (d31, NCCL 2.4's tests).
    for row_id, other in (("g04", "297.16"), ("d31", "27668")):
        row = next(r for r in QUOTED_LINES if r["id"] == row_id)
        assert _result_line_agrees({**row, "value": other}) is False  # another column of the line
        assert _result_line_agrees({**row, "size_bytes": str(2 * int(row["size_bytes"]))}) is False
