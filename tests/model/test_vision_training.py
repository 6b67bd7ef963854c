"""Data-parallel vision training: where the gradients come from in the backward, and scaling rows
anchored on the one-GPU rate their own table publishes."""

from __future__ import annotations

import csv
import dataclasses
import io

import pytest
from model_helpers import one_error_line

from fabricscope.errors import InvalidValue
from fabricscope.model import training
from fabricscope.model.estimate import estimate
from fabricscope.model.parallel import FRAMEWORKS, ParallelConfig
from fabricscope.model.validation import _cluster, default_files, validate_file
from fabricscope.model.workload import ModelSpec, load_model

RESNET = training.Shape(transformer=False, head_params=0.666, head_backward=0.20)
EVEN = training.Shape(transformer=False)


def test_weights_at_the_end_of_the_network_hide_more_of_the_reduction() -> None:
    # 10 collectives of 3 ms beside a 48 ms backward: most bytes come in its first fifth, so the
    # head's collectives run beside the rest of it; evenly spread, each waits for its own part.
    even = float(training._gradients_beside(EVEN, 10.0, 3e-3, 48e-3))
    assert even == pytest.approx(float(training._beside(10.0, 3e-3, 48e-3)))
    head = float(training._gradients_beside(RESNET, 10.0, 3e-3, 48e-3))
    assert head < even
    # The network time is never hidden beyond the backward it runs beside.
    for comm in (1e-3, 3e-3, 6e-3, 20e-3):
        exposed = float(training._gradients_beside(RESNET, 10.0, comm, 48e-3))
        assert exposed >= max(10 * comm - 48e-3, 0.0) - 1e-12
    # A transformer's layers hold their weights evenly: its profile is not used.
    shaped = dataclasses.replace(RESNET, transformer=True)
    assert float(training._gradients_beside(shaped, 10.0, 3e-3, 48e-3)) == pytest.approx(even)


def test_the_resnet50_preset_counts_its_last_stage() -> None:
    resnet = load_model("resnet50")
    # conv5_x (14.96M) and fc (2.05M) of 25.56M weights; conv5_x's 0.81G of 4.09G multiply-adds.
    assert resnet.head_params_share == pytest.approx(17.01 / 25.56, abs=0.002)
    assert resnet.head_backward_share == pytest.approx(0.81 / 4.09, abs=0.01)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"head_params_share": 0.6}, "go together"),
        ({"head_backward_share": 0.2}, "go together"),
        ({"head_params_share": 1.0, "head_backward_share": 0.2}, "head_params_share must be at least 0 and below 1"),
        ({"head_params_share": 0.5, "head_backward_share": -0.1}, "head_backward_share must be"),
    ],
)
def test_head_shares_are_checked(fields: dict[str, float], fragment: str) -> None:
    base = {"kind": "vision", "params": 25e6, "gflops_per_sample": 4.1, "traffic_mb_per_sample": 680, "sample_kb": 110}
    with pytest.raises(InvalidValue, match=fragment):
        ModelSpec(**base, **fields)  # type: ignore[arg-type]


def _vision_rows() -> tuple[list[str], list[dict[str, str]]]:
    path = next(p for p in default_files() if p.name == "training.csv")
    reader = csv.DictReader(path.read_text(encoding="utf-8").splitlines())
    rows = [row for row in reader if row["group"] == "vision-dp"]
    assert reader.fieldnames is not None
    return list(reader.fieldnames), rows


def _text(fields: list[str], rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def test_one_gpu_of_an_anchored_row_runs_at_its_published_rate(write) -> None:
    from fabricscope.model.validation import _anchored

    fields, rows = _vision_rows()
    row = next(r for r in rows if r["id"] == "t44")
    assert row["one_gpu_images_per_s"] == "872"
    horovod = FRAMEWORKS["horovod"]
    hvd = {"bucket_mb": horovod.bucket_mb, "cycle_ms": horovod.cycle_ms}
    par = ParallelConfig(dp=16, micro_batch=64, global_batch=1024, precision="fp16", **hvd)
    model = _anchored(load_model("resnet50"), row, par, 64)
    one = dataclasses.replace(par, dp=1, global_batch=64)
    rate = estimate(dataclasses.replace(model, global_batch=64), _cluster(row, 1, 1), one, what_ifs=False).samples_per_s
    assert rate == pytest.approx(872, rel=1e-6)
    # Without the column the preset's own traffic sets the compute: a different efficiency.
    anchored = {c.id: c.predicted for c in validate_file(write("a.csv", _text(fields, rows)))}
    bare = [{**r, "one_gpu_images_per_s": ""} for r in rows]
    preset = {c.id: c.predicted for c in validate_file(write("b.csv", _text(fields, bare)))}
    assert anchored["t44"] != pytest.approx(preset["t44"], rel=1e-3)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"one_gpu_images_per_s": "1e7"}, "is faster than the model's FLOPs alone allow"),
        ({"one_gpu_images_per_s": "-5"}, "one_gpu_images_per_s = '-5' must be a positive number"),
    ],
)
def test_bad_anchors_are_one_error_line(cli, write, change: dict[str, str], fragment: str) -> None:
    fields, rows = _vision_rows()
    line = one_error_line(cli("validate", str(write("bad.csv", _text(fields, [{**rows[0], **change}])))))
    assert fragment in line and rows[0]["id"] in line


def test_a_transformer_row_has_no_one_gpu_image_rate(cli, write) -> None:
    path = next(p for p in default_files() if p.name == "training.csv")
    reader = csv.DictReader(path.read_text(encoding="utf-8").splitlines())
    assert reader.fieldnames is not None
    row = {**next(reader), "one_gpu_images_per_s": "100"}
    line = one_error_line(cli("validate", str(write("t.csv", _text(list(reader.fieldnames), [row])))))
    assert "one_gpu_images_per_s applies to vision rows" in line


@pytest.mark.parametrize("traffic_mb", [680.0, 1.0])
def test_vision_mfu_counts_true_flops_and_never_passes_the_gpus_busy_share(
    write,
    cli,
    traffic_mb: float,  # type: ignore[no-untyped-def]
) -> None:
    """gflops_per_sample counts multiply-adds: MFU counts 2 FLOPs each over 3 passes; and a step is never
    shorter than those FLOPs at peak (a model file with almost no memory traffic showed MFU 122%)."""
    import json

    path = write(
        "lean.toml",
        f'kind = "vision"\nparams = 25.6e6\ngflops_per_sample = 4.1\ntraffic_mb_per_sample = {traffic_mb}\n'
        "sample_kb = 110\nbatch_per_gpu = 256\n",
    )
    out = write("e.json", "")
    done = cli("estimate", "--model", str(path), "--cluster", "dgx-h100-ndr", "--nodes", "1", "--json", str(out))
    assert done.code == 0, done.err
    record = json.loads(out.read_text())["records"][0]
    assert record["mfu"] <= record["gpu_utilization"] + 1e-12
    per_gpu_samples = record["samples_per_s"] / 8
    assert record["tflops_per_gpu"] * 1e12 == pytest.approx(6 * 4.1e9 * per_gpu_samples, rel=1e-9)
