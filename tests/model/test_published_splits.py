"""Published runs fit in memory, and the split searches of ``estimate`` and ``plan`` find them."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from fabricscope.model import training, validation
from fabricscope.model.cluster import load_cluster
from fabricscope.model.estimate import _device, best_split, estimate, shape_of
from fabricscope.model.fabric import fabric_of
from fabricscope.model.parallel import ParallelConfig, SplitRequest, stack_settings
from fabricscope.model.splits import splits
from fabricscope.model.workload import load_model

DOES_NOT_FIT = {
    "t21": "Llama 3 405B: recomputation not stated; without it 8 layers x 16 micro-batches (x 1 + 15/128 "
    "for V = 8) of 8K tokens need 98 GB",
    "t22": "as t21",
}
"""Rows the memory model still rejects, and why (a change that makes them fit shows here)."""


def _training_rows() -> list[dict[str, str]]:
    path = next(p for p in validation.default_files() if p.name == "training.csv")
    return list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))


def _estimate_of(row: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> validation.Comparison:
    seen = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(estimate(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(validation, "estimate", spy)
    validation.check_training(row, "training.csv")
    return seen[0]


@pytest.mark.parametrize("row", _training_rows(), ids=lambda r: r["id"])
def test_published_configurations_fit_in_memory(row: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    result = _estimate_of(row, monkeypatch)
    assert result.fits == (row["id"] not in DOES_NOT_FIT), result.value("memory_bytes") / 1e9


def _candidate(cand, **knobs: object) -> int:  # type: ignore[no-untyped-def]
    found = [i for i, c in enumerate(cand.configs) if all(getattr(c, k) == v for k, v in knobs.items())]
    assert found, f"no candidate with {knobs}"
    return found[0]


def test_t8_p64_on_80_gb_fits_and_is_a_candidate() -> None:
    # Narayanan et al. Table 1: the 1T model on 3,072 A100 80 GB, tensor 8 x pipeline 64, full
    # recomputation.  Only one layer's working activations are live at a time; 64 micro-batches
    # in flight keep only their layer inputs (2 layers x 64 x 105 MB).
    model = load_model("megatron-1t")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(384)
    cand = splits(model, gpus=3072, gpus_per_node=8)
    index = _candidate(cand, tp=8, pp=64, dp=6, micro_batch=1, recompute="full", zero=0, interleave=1)
    device, _ = _device(cluster, model, "bf16")
    swept = training.step(shape_of(model), cand.job, device, fabric_of(cluster))
    memory = float(np.asarray(swept.memory_bytes)[index])
    assert memory <= 80e9
    single = estimate(model, cluster, cand.configs[index], what_ifs=False)
    assert single.fits and single.value("memory_bytes") == pytest.approx(memory)
    # One micro-batch fewer in flight frees its layer inputs, not a whole set of working activations.
    kept_per_microbatch = 2 * 2048 * 25600 * 2 / (8 if cand.configs[index].sequence_parallel else 1)
    deeper = estimate(model, cluster, ParallelConfig(**{**_knobs(cand.configs[index]), "global_batch": 6 * 63}))
    assert single.value("memory_bytes") - deeper.value("memory_bytes") == pytest.approx(kept_per_microbatch, rel=1e-6)


def _knobs(config: ParallelConfig) -> dict[str, object]:
    keys = ("tp", "pp", "dp", "zero", "micro_batch", "recompute", "interleave", "sequence_parallel")
    return {k: getattr(config, k) for k in keys}


def test_uneven_stages_llama_405b_on_16_stages() -> None:
    # 126 layers on 16 stages (Llama 3): the busiest stage holds 8 layers, and the split is searched.
    model = load_model("llama-405b")
    cluster = load_cluster("dgx-h100-ndr").with_nodes(2048)
    even = ParallelConfig(tp=8, pp=16, dp=128, zero=1, recompute="full", sequence_parallel=True)
    result = estimate(model, cluster, even, what_ifs=False)
    assert result.fits
    assert 126 / 16 < training.stage_layers(shape_of(model), result_job(result)) == 8
    chosen = best_split(model, cluster, SplitRequest(tp=8, pp=16, zero=1))
    assert (chosen.tp, chosen.pp, chosen.dp) == (8, 16, 128)


def result_job(result):  # type: ignore[no-untyped-def]
    from fabricscope.model.estimate import job_of

    return job_of(result.parallel, result.batch)


def test_plan_finds_the_published_deep_pipeline() -> None:
    # With memory right, the 1T model's published split is a fitting candidate of the sweep,
    # and the best split found is at least as fast as it.
    model = load_model("megatron-1t")
    cluster = load_cluster("dgx-a100-hdr").with_nodes(384)
    best = estimate(model, cluster, best_split(model, cluster), what_ifs=False)
    published = estimate(model, cluster, ParallelConfig(tp=8, pp=64, dp=6, recompute="full"), what_ifs=False)
    assert published.fits and best.fits
    assert best.step_s <= published.step_s


def test_the_shipped_csv_names_its_sources() -> None:
    for row in _training_rows():
        assert row["source"].strip() and row["group"].strip()
        if int(row["id"][1:]) >= 10:
            assert row["quote"].strip(), row["id"]


def test_grouped_query_attention_and_gated_widths_count_in_a_row() -> None:
    # Llama 3 405B: 8 KV heads and a SwiGLU MLP of 53248 give 405B parameters; without the KV
    # heads the attention would hold 63B more, without the gate 2/3 of the MLP.
    (row,) = [r for r in _training_rows() if r["id"] == "t21"]
    model = validation._row_model(row, 2048, True)
    assert model.shape_params == pytest.approx(405e9, rel=0.02)
    assert validation._row_model({**row, "kv_heads": ""}, 2048, True).shape_params == pytest.approx(468e9, rel=0.02)
    assert validation._row_model({**row, "gated_mlp": "false"}, 2048, True).shape_params < 300e9


def test_a_framework_is_named_parameters_with_sources() -> None:
    from fabricscope.model.parallel import FRAMEWORKS

    for name, stack in FRAMEWORKS.items():
        assert stack.source.strip(), name
    # DeepSpeed's pipeline engine reduces after the flush; FSDP overlaps.
    assert not FRAMEWORKS["deepspeed-pipeline"].dp_overlap and FRAMEWORKS["pytorch-fsdp"].dp_overlap


@pytest.mark.parametrize(
    ("row_id", "column", "value", "fragment"),
    [
        ("t40", "framework", "deepspeed-pipelin", "did you mean 'deepspeed-pipeline'"),
        ("t44", "model", "resnet5", "model = 'resnet5' is not a preset"),
        ("t21", "kv_heads", "eight", "kv_heads = 'eight' is not a whole number"),
        ("t21", "interleave", "9", "pp*interleave = 144 is more than the model's 126 layers + 2"),
        ("t23", "metric", "mfu", "metric 'mfu' is not one of"),
        ("t23", "micro_batch", "0", "micro_batch = '0' must be a positive number"),
        ("t23", "interleave", "-1", "interleave = '-1' must be a positive number"),
    ],
)
def test_bad_new_columns_are_one_error_line(cli, write, row_id, column, value, fragment) -> None:  # type: ignore[no-untyped-def]
    from model_helpers import one_error_line

    rows = [r for r in _training_rows() if r["id"] == row_id]
    rows[0][column] = value
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    line = one_error_line(cli("validate", str(write("bad.csv", buffer.getvalue()))))
    assert fragment in line and row_id in line


@pytest.mark.parametrize("row", [r for r in _training_rows() if not r["model"]], ids=lambda r: r["id"])
def test_the_split_search_finds_every_published_split(row: dict[str, str]) -> None:
    # With the row's micro-batch, interleaving and recomputation fixed (as a user would give them)
    # and tensor, pipeline and data parallelism left to the search, the published (tp, pp, dp) is a
    # candidate, and it fits in the sweep's memory unless listed in DOES_NOT_FIT.
    from fabricscope.model.parallel import SplitRequest

    stack = validation._framework(row)
    model = validation._row_model(row, int(row["global_batch"]), stack.flash_attention)
    recompute, sp = validation._recompute(row["recompute"])
    gpus, per_node = int(row["gpus"]), min(int(row["gpus_per_node"]), int(row["gpus"]))
    request = SplitRequest(
        micro_batch=int(row["micro_batch"]),
        interleave=int(row["interleave"]),
        recompute=recompute,
        zero=int(row["zero_stage"]),
        sequence_parallel=sp if int(row["tp"]) > 1 else None,
        dp_overlap=stack.dp_overlap,
        **stack_settings(stack),
    )
    cand = splits(model, gpus=gpus, gpus_per_node=per_node, batch=int(row["global_batch"]), request=request)
    index = _candidate(cand, tp=int(row["tp"]), pp=int(row["pp"]), dp=int(row["dp"]))
    cluster = validation._cluster(row, gpus // per_node, per_node)
    device, _ = _device(cluster, model, validation._precision(row, cluster), arch_attention=stack.hopper_attention)
    swept = training.step(shape_of(model), cand.job, device, fabric_of(cluster))
    fits = float(np.asarray(swept.memory_bytes)[index]) <= device.memory_bytes
    assert fits == (row["id"] not in DOES_NOT_FIT)
