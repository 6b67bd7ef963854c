"""Real fabricscope output read by the rules of three tools that parse nccl-tests text.

Each reader below re-implements (in our own code) the documented rules of one
tool, so that a change to our table or footer that would break it fails here:

- SuperBench ``nccl-bw`` (microsoft/superbenchmark, cuda_nccl_bw_performance.py):
  the table lies between the last line holding ``out-of-place`` and the last line
  holding ``Out of bounds values``; the header names the columns; rows start with
  a digit; busbw, algbw and time are counted from the end of the row.
- AWS ``nccl_to_csv.py`` (aws-samples/awsome-distributed-training): every line is
  matched on its own against one 13-field row pattern (types float, double, int,
  half; reductions sum, prod, max, min, none; plain decimal numbers; ``N/A`` only
  in the #wrong columns).
- NVIDIA CloudAI ``nccl_test``: a report needs ``out-of-place`` or ``in-place`` and
  the 13-word header; rows are digit-led lines of exactly 13 tokens whose six
  time/bandwidth columns are numbers; success needs ``# Out of bounds values`` and
  ``# Avg bus bandwidth``; the GPU type is read from lines holding ``Rank``,
  ``device`` and ``NVIDIA``.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from fabricscope.launch import rank
from helpers import run_cli

pytestmark = pytest.mark.multiprocess


def superbench_busbw(text: str) -> dict[int, float]:
    lines = text.splitlines()
    start = max((i for i, line in enumerate(lines) if "out-of-place" in line), default=-1)
    end = max((i for i, line in enumerate(lines) if "Out of bounds values" in line), default=-1)
    if start < 0 or end < 0:
        raise ValueError("a marker is missing")
    window = lines[start + 1 : end]
    header = next(line for line in window if "time" in line and "busbw" in line)
    names = re.sub(" +", " ", header[1:].strip(" ")).split(" ")
    size_at = names.index("size")
    busbw_at = names.index("busbw") - len(names)
    found: dict[int, float] = {}
    for line in window:
        tokens = re.sub(" +", " ", line.strip(" ")).split(" ")
        if not re.match(r"\d", tokens[0]):
            continue
        size = int(tokens[size_at])
        if size:
            found[size] = float(tokens[busbw_at])
    if not found:
        raise ValueError("no row")
    return found


_NUM = r"(\d+\.?\d*)"
_AWS_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(float|double|int|half)\s+(sum|prod|max|min|none)\s+(-?\d+)\s+"
    rf"{_NUM}\s+{_NUM}\s+{_NUM}\s+(\d+|N/A)\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+(\d+|N/A)"
)


def aws_rows(text: str) -> list[tuple[str, ...]]:
    return [match.groups() for line in text.splitlines() if (match := _AWS_ROW.match(line.strip()))]


# CloudAI looks for nccl-tests' 13 column names, in order (what it reads, not our table code).
_HEADER_WORDS = re.split(r"\s+", "size count type redop root time algbw busbw #wrong time algbw busbw #wrong")
_CLOUDAI_HEADER = re.compile(r"\b" + r"\s+".join(re.escape(w) for w in _HEADER_WORDS) + r"\b", re.IGNORECASE)


def cloudai(text: str) -> SimpleNamespace:
    handled = ("out-of-place" in text or "in-place" in text) and bool(_CLOUDAI_HEADER.search(text))
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped[:1].isdigit():
            continue
        tokens = stripped.split()
        if len(tokens) != 13:
            continue
        try:
            [float(tokens[i]) for i in (0, 5, 6, 7, 9, 10, 11)]
        except ValueError:
            continue  # coerced to NaN and dropped
        rows.append(tokens)
    gpu = "Unknown"
    for line in text.splitlines():
        if "Rank" in line and "device" in line and "NVIDIA" in line:
            match = re.search(r"NVIDIA\s+(.+?)(?=\s*$|\s+\[|\s+device)", line)
            if match:
                gpu = match.group(1).strip()
    ok = "# Out of bounds values" in text and "# Avg bus bandwidth" in text
    return SimpleNamespace(handled=handled, rows=rows, gpu=gpu, success=ok)


@pytest.fixture(scope="module")
def bench_output() -> str:
    done = run_cli(["bench", "all_reduce", "-b", "1K", "-e", "64K", "-f", "4", "-n", "3"], timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def predict_output() -> str:
    done = run_cli(["predict", "all_reduce", "--cluster", "dgx-h100-ndr", "-b", "1K", "-e", "1G", "-f", "32"])
    assert done.returncode == 0, done.stderr
    return done.stdout


SIZES = [1024, 4096, 16384, 65536]


def test_superbench_reads_bench_and_predict(bench_output, predict_output):
    assert sorted(superbench_busbw(bench_output)) == SIZES
    predicted = superbench_busbw(predict_output)
    assert sorted(predicted) == [1024, 32768, 1048576, 33554432, 1073741824]
    assert predicted[1073741824] > predicted[1024] > 0


def test_aws_reads_every_row(bench_output, predict_output):
    rows = aws_rows(bench_output)
    assert [int(r[0]) for r in rows] == SIZES
    assert all(r[2] == "float" and r[3] == "sum" for r in rows)
    assert len(aws_rows(predict_output)) == 5


def test_cloudai_handles_and_succeeds(bench_output, predict_output):
    for text, count in ((bench_output, 4), (predict_output, 5)):
        seen = cloudai(text)
        assert seen.handled and seen.success
        assert len(seen.rows) == count


def test_cloudai_reads_the_gpu_from_the_device_lines_bench_prints():
    # A GPU cannot exist here: the device label is built from the properties torch would give.
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", pci_domain_id=0, pci_bus_id=0x1B, pci_device_id=0)
    torch = SimpleNamespace(cuda=SimpleNamespace(get_device_properties=lambda device: props))
    label = rank._device_label(SimpleNamespace(type="cuda", index=3), torch, 3)
    line = "#  Rank %2d Group  0 Pid %6d on %10s device %s" % (3, 4242, "node07", label)
    assert cloudai(line).gpu == "H100 80GB HBM3"
    assert re.search(r"on\s+([\w.-]+)\s+device\s+(\d+)", line).groups() == ("node07", "3")
