"""A validation row says what its source says: the quote holds the row's value, and the GPU
count, batch and parallel sizes wherever the quote states them."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "src" / "fabricscope" / "model" / "data" / "validation"
TRAINING = [
    row
    for name in ("training.csv", "training-moe.csv", "training-memory.csv")
    for row in csv.DictReader((DATA / name).read_text(encoding="utf-8").splitlines())
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
