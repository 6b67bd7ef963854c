"""Sub-commands of the model: predict, estimate, plan, validate, calibrate, hw.

Parse, call the library, print.  Only the standard library is imported here;
numpy, pydantic and the model modules are imported inside the handlers so
``fabricscope --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fabricscope import options
from fabricscope.errors import UsageError
from fabricscope.model import hw_cli
from fabricscope.options import SubParsers
from fabricscope.store.save import add_save_options, check_save_options, save_request, save_result

if TYPE_CHECKING:
    from fabricscope.model.workload import ModelSpec
    from fabricscope.results import Result

__all__ = ["add_parser", "run_calibrate", "run_estimate", "run_plan", "run_predict", "run_validate"]


def add_parser(subparsers: SubParsers) -> None:
    _add_predict(subparsers)
    _add_estimate(subparsers)
    _add_plan(subparsers)
    _add_validate(subparsers)
    _add_calibrate(subparsers)
    hw_cli.add_parser(subparsers)


# --- argument helpers -----------------------------------------------------------------

MAX_NODES = 1 << 20
"""Largest ``--nodes``/``--gpus`` accepted: far beyond any cluster, small enough for exact arithmetic."""
MAX_SPLIT = 1 << 20
"""Largest parallel degree or batch a flag may name."""

_COUNT = options.whole(minimum=1, maximum=MAX_SPLIT)


def _cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", required=True, help="cluster preset or TOML file (see 'fabricscope hw clusters')")
    p.add_argument(
        "--nodes",
        type=options.whole(minimum=1, maximum=MAX_NODES),
        default=None,
        help="number of nodes (default: the cluster's)",
    )


def _load_cluster(args: argparse.Namespace) -> Any:
    from fabricscope.model.cluster import load_cluster

    cluster = load_cluster(args.cluster)
    return cluster if args.nodes is None else cluster.with_nodes(args.nodes)


def _json_option(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("--json", default=None, metavar="FILE", help=f"write a Result (kind {kind})")


def _check_output(path: str | None, *inputs: str) -> None:
    """Refuse, before any work, a --json file that cannot be written or is one of the inputs."""
    from fabricscope.outputs import check_output_path
    from fabricscope.userfiles import is_path

    if path is not None:
        check_output_path("--json", path, inputs=[name for name in inputs if is_path(name)])


def _precision_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--precision", default=None, help="bf16, fp16, fp8, tf32, fp32 (default: bf16 where the GPU has it, else fp16)"
    )


def _print(lines: Sequence[str]) -> None:
    """Print ``lines``; a reader that went away (``| head``) stops the printing, not the command, so
    ``--json`` and ``--save`` that follow still keep the result."""
    from fabricscope.outputs import silence_stdout

    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def _save(path: str | None, result: Result, args: argparse.Namespace) -> None:
    """Write ``--json`` and keep the Result in the history when ``--save``/``--label`` ask."""
    from fabricscope.outputs import say_written

    if path is not None:
        result.save(path)
        say_written(path)
    save_result(save_request(args), result, what=f"the {result.kind} result")


_PREDICT_EPILOG = """\
examples:
  fabricscope predict --cluster dgx-a100-hdr --nodes 2 -b 8 -e 8G
  fabricscope predict all_reduce all_gather --cluster v100-100gbe-tcp --algo ring --json pred.json
  fabricscope predict --cluster my-cluster.toml -b 1M -e 1G -f 4
"""


def _add_predict(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "predict",
        help="predicted nccl-tests table for a described cluster",
        description="Predict collective time, algbw and busbw with NCCL's cost model, in the bench table and schema.",
        epilog=_PREDICT_EPILOG,
    )
    p.add_argument("ops", nargs="*", metavar="OP", help="collectives (default all_reduce; 'all' for every op)")
    _cluster_options(p)
    options.add_sweep_options(p)
    p.add_argument(
        "--algo",
        default="auto",
        help="all_reduce algorithm: auto (NCCL's choice), ring, tree, hier, nvls, sharp",
    )
    p.add_argument(
        "--gpus-per-node",
        type=options.whole(minimum=1, maximum=MAX_NODES),
        default=None,
        help="ranks per node (default: the cluster's)",
    )
    _json_option(p, "predict")
    add_save_options(p)
    p.set_defaults(func=run_predict)


def run_predict(args: argparse.Namespace) -> int:
    from fabricscope.errors import closest
    from fabricscope.model import report, uncertainty
    from fabricscope.model.predict import ALGO_CHOICES, choose_ops, predict_sweep
    from fabricscope.sweep import SweepConfig

    algo = args.algo.strip().lower()
    if algo not in ALGO_CHOICES:
        raise UsageError(f"unknown --algo {args.algo!r}{closest(algo, ALGO_CHOICES)}: use {', '.join(ALGO_CHOICES)}")
    _check_output(args.json, args.cluster)
    check_save_options(args)
    cluster = _load_cluster(args)
    if args.gpus_per_node is not None:
        cluster = cluster.with_gpus_per_node(args.gpus_per_node)
    chosen = choose_ops(args.ops)
    if chosen.left_out:
        sys.stderr.write(
            f"note: all: {', '.join(chosen.left_out)} left out: predict has no cost model for them (fabricscope "
            "bench measures them)\n"
        )
    config = SweepConfig(ops=chosen.names, optional_ops=chosen.optional, **options.sweep_fields(args))
    for note in config.fit_to_world(cluster.gpus):  # as bench: 'all' on one GPU skips sendrecv, with a note
        sys.stderr.write(note.lstrip("# ") + "\n")
    if algo != "auto" and any(name != "all_reduce" for name in config.ops):
        sys.stderr.write(f"note: --algo {algo} applies to all_reduce; other ops run as NCCL runs them\n")
    _warn_beyond_memory(config.max_bytes, cluster)
    sure = uncertainty.for_collectives(cluster, config.ops)
    prediction = predict_sweep(cluster, config, algo=algo)
    step = f"{config.step_factor}(factor)" if config.step_factor > 1 else f"{config.step_bytes}(bytes)"
    for one in prediction.ops:
        _print(
            report.predict_lines(
                one.op,
                one.records,
                cluster=cluster,
                min_bytes=config.min_bytes,
                max_bytes=config.max_bytes,
                step=step,
                faster=one.faster,
            )
        )
    _print(sure.lines("these times"))
    _save(args.json, prediction.sweep_result(config, uncertainty=sure.record()), args)
    return 0


def _warn_beyond_memory(max_bytes: int, cluster: Any) -> None:
    """A size whose send and receive buffers (nccl-tests allocates both, of the largest size) exceed the GPU's
    memory is priced, with a warning: no GPU of the cluster could run it."""
    from fabricscope.units import format_size

    memory = float(cluster.gpu.memory_bytes)
    if 2 * max_bytes > memory:
        sys.stderr.write(
            f"warning: -e {format_size(max_bytes)}: its send and receive buffers (2 x {format_size(max_bytes)}) "
            f"exceed the {memory / 2**30:g} GiB of a {cluster.gpu.name}: nccl-tests could not allocate them; "
            f"sizes above {format_size(int(memory // 2))} are priced as if the GPU held them\n"
        )


# --- estimate --------------------------------------------------------------------------------

_ESTIMATE_EPILOG = """\
examples:
  fabricscope estimate --model llama-70b --cluster dgx-h100-ndr --nodes 16
  fabricscope estimate --model gpt3-175b --cluster dgx-a100-hdr --nodes 64 --tp 8 --pp 8 --recompute selective
  fabricscope estimate --model resnet50 --cluster lab-8gpu-1gbe-hdd
  fabricscope estimate --model megatron-1.7b --cluster v100-100gbe-tcp --precision fp16 --ps-servers 4 --tp 1 --pp 1
  fabricscope estimate --model deepseek-v3 --cluster dgx-h100-ndr --nodes 32 --ep 32 --pp 8 --deepep --ep-overlap
  fabricscope estimate --model llama3-405b-128k --cluster dgx-h100-ndr --nodes 2048 --tp 8 --cp 16 --pp 16

Every split flag you leave out (--tp --pp --dp --cp --ep --zero --micro-batch --recompute
--interleave --sequence-parallel) is chosen by fabricscope: the fastest split that fits in
memory among those that keep the flags you gave and that a training stack runs (Megatron-Core,
DeepSpeed, PyTorch DDP/FSDP/torchtitan: catalog/frameworks.toml); the estimate names that stack.
"""


def _add_estimate(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "estimate",
        help="one training step on a described cluster: breakdown and bottleneck",
        description="Estimate one training step: compute, communication per kind, bubble, data stall, bottleneck.",
        epilog=_ESTIMATE_EPILOG,
    )
    p.add_argument("--model", required=True, help="model preset or TOML file (see 'fabricscope hw models')")
    _cluster_options(p)
    p.add_argument("--tp", type=_COUNT, default=None, help="tensor-parallel size (inside a node)")
    p.add_argument("--pp", type=_COUNT, default=None, help="pipeline stages")
    p.add_argument("--dp", type=_COUNT, default=None, help="data-parallel size")
    p.add_argument(
        "--cp", type=_COUNT, default=None, help="context-parallel size (ring attention; divides the sequence)"
    )
    p.add_argument(
        "--ep", type=_COUNT, default=None, help="expert-parallel size (mixture of experts; divides experts and GPUs)"
    )
    p.add_argument(
        "--etp",
        type=_COUNT,
        default=None,
        help="tensor-parallel size of each expert (default: --tp); another value folds expert groups over tp x cp x dp",
    )
    p.add_argument(
        "--moe-imbalance",
        type=options.number(minimum=1.0, maximum=1e6),
        default=None,
        help="tokens of the most loaded expert over the mean (default 1: balanced routing)",
    )
    p.add_argument(
        "--deepep",
        action="store_true",
        help="token dispatch sends a token once per node and NVLink forwards it (DeepEP) instead of NCCL all-to-all",
    )
    p.add_argument(
        "--ep-overlap",
        action="store_true",
        help="run the expert all-to-alls beside another micro-batch's compute (DualPipe-like schedules)",
    )
    p.add_argument("--zero", type=options.whole(minimum=0, maximum=3), default=None, help="ZeRO stage 0-3 (3 = FSDP)")
    p.add_argument("--micro-batch", type=_COUNT, default=None, help="micro-batch size")
    p.add_argument(
        "--global-batch", type=_COUNT, default=None, help="sequences or samples per step (default: the model's)"
    )
    p.add_argument("--recompute", default=None, help="activation recomputation: none, selective, full")
    p.add_argument("--interleave", type=_COUNT, default=None, help="virtual pipeline stages per GPU")
    p.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Megatron sequence parallelism (default: on with tensor parallelism)",
    )
    _precision_option(p)
    p.add_argument("--no-overlap", action="store_true", help="reduce gradients after the backward pass, not during")
    p.add_argument(
        "--framework",
        default=None,
        help="price the split as this framework runs it: megatron-lm-2021, megatron-core, nemo, deepspeed-pipeline, "
        "deepspeed-zero3-2021, megatron-deepspeed-bf16, pytorch-fsdp, pytorch-ddp or horovod (named parameters with "
        "sources, docs/model.md)",
    )
    p.add_argument(
        "--ps-servers",
        type=options.whole(minimum=0, maximum=MAX_NODES),
        default="0",
        help="use K parameter servers instead of all-reduce",
    )
    _json_option(p, "estimate")
    add_save_options(p)
    p.set_defaults(func=run_estimate)


def run_estimate(args: argparse.Namespace) -> int:
    import dataclasses

    from fabricscope.model import report, uncertainty
    from fabricscope.model.estimate import best_split, estimate, searched
    from fabricscope.model.parallel import (
        FRAMEWORKS,
        MOE_IMBALANCE,
        PRECISIONS,
        RECOMPUTE,
        SplitRequest,
        as_choice,
        stack_settings,
    )
    from fabricscope.model.workload import load_model

    _check_output(args.json, args.model, args.cluster)
    check_save_options(args)
    model = load_model(args.model)
    _check_moe_options(args, model)
    stack = None if args.framework is None else FRAMEWORKS[as_choice(args.framework, tuple(FRAMEWORKS), "--framework")]
    if stack is not None:
        model = dataclasses.replace(model, flash_attention=stack.flash_attention)
    cluster = _load_cluster(args)
    precision = (
        cluster.gpu.default_precision
        if args.precision is None
        else as_choice(args.precision, PRECISIONS, "--precision")
    )
    cluster.gpu.peak_flops(precision)
    request = SplitRequest(
        tp=args.tp,
        pp=args.pp,
        dp=args.dp,
        cp=args.cp,
        ep=args.ep,
        zero=args.zero,
        micro_batch=args.micro_batch,
        recompute=None if args.recompute is None else as_choice(args.recompute, RECOMPUTE, "--recompute"),
        interleave=args.interleave,
        sequence_parallel=args.sequence_parallel,
        global_batch=args.global_batch or 0,
        precision=precision,
        dp_overlap=not args.no_overlap and (stack is None or stack.dp_overlap),
        ps_servers=args.ps_servers,
        framework=None if stack is None else args.framework.strip().lower(),
    )
    if stack is not None:
        request = dataclasses.replace(request, **stack_settings(stack))
    request = dataclasses.replace(
        request,
        ep_overlap=args.ep_overlap,
        node_dedup=args.deepep,
        etp=args.etp or 0,
        moe_imbalance=MOE_IMBALANCE if args.moe_imbalance is None else args.moe_imbalance,
    )
    par = best_split(model, cluster, request)
    result = estimate(model, cluster, par, chosen=searched(model, request))
    _print(report.estimate_lines(result, request.framework))
    sure = uncertainty.for_training(cluster, model)
    _print(sure.lines("this step time", prefix=""))
    _save(args.json, result.result(uncertainty=sure.record()), args)
    return 0


def _check_moe_options(args: argparse.Namespace, model: ModelSpec) -> None:
    """The options that only shape a mixture-of-experts model are refused for another (they changed nothing)."""
    if model.is_moe:
        return
    given = [
        flag
        for flag, value in (
            ("--etp", args.etp),
            ("--moe-imbalance", args.moe_imbalance),
            ("--deepep", args.deepep or None),
            ("--ep-overlap", args.ep_overlap or None),
        )
        if value is not None
    ]
    if given:
        raise UsageError(
            f"{given[0]} shapes the experts of a mixture-of-experts model and {model.name} has none (experts = 0): "
            "leave it out, or give a MoE model (see 'fabricscope hw models')"
        )


# --- plan ---------------------------------------------------------------------------------------

_PLAN_EPILOG = """\
scenarios: research-small research-medium research-large cloud private-large realtime

examples:
  fabricscope plan --model llama-70b --gpus 1024 --scenario private-large
  fabricscope plan --model llama-7b --gpus 64 --gpu a100-sxm-80gb --target-util 0.8
  fabricscope plan --model llama-7b --gpus 64 --scenario realtime --max-latency-us 50 --json plan.json
"""


def _add_plan(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="search NIC speed and count, transport, SHARP, topology: the cheapest network that meets a target",
        description="Search network choices for a model and GPU count; print the cost/utilization frontier.",
        epilog=_PLAN_EPILOG,
    )
    p.add_argument("--model", required=True, help="model preset or TOML file")
    p.add_argument(
        "--gpus", required=True, type=options.whole(minimum=1, maximum=MAX_NODES), help="number of GPUs (servers of 8)"
    )
    p.add_argument("--gpu", default=None, help="GPU type (default: the scenario's; see 'fabricscope hw gpus')")
    p.add_argument("--scenario", default="research-medium", help="buyer scenario (default research-medium)")
    p.add_argument(
        "--target-util",
        type=options.fraction(minimum=0.001),
        default=None,
        help="GPU utilization to reach, 0.8 or 80%% (default: the scenario's)",
    )
    p.add_argument(
        "--max-latency-us",
        type=options.number(minimum=0.001, maximum=1e9, unit="us"),
        default=None,
        help="latency budget of a small all-reduce across the job, in microseconds",
    )
    p.add_argument(
        "--global-batch", type=_COUNT, default=None, help="sequences or samples per step (default: the model's)"
    )
    _precision_option(p)
    p.add_argument(
        "--top", type=options.whole(minimum=1, maximum=10_000), default="12", help="frontier rows to print (default 12)"
    )
    _json_option(p, "plan")
    add_save_options(p)
    p.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:

    from fabricscope.model import report, uncertainty
    from fabricscope.model.parallel import PRECISIONS, as_choice
    from fabricscope.model.planner import cluster_of, plan
    from fabricscope.model.workload import load_model

    _check_output(args.json, args.model)
    check_save_options(args)
    model = load_model(args.model)
    target = args.target_util
    budget = args.max_latency_us
    start = time.perf_counter()
    result = plan(
        model,
        gpus=args.gpus,
        gpu_name=args.gpu,
        scenario_name=args.scenario.strip().lower(),
        target_util=target,
        max_latency_us=budget,
        precision=None if args.precision is None else as_choice(args.precision, PRECISIONS, "--precision"),
        global_batch=args.global_batch or 0,
    )
    seconds = time.perf_counter() - start
    _print(report.plan_lines(result, top=args.top, seconds=seconds))
    sure = None
    if result.recommended is not None and result.recommended.parallel is not None:
        per_node = min(8, result.gpus)
        chosen = cluster_of(result.recommended.network, result.gpu, per_node, max(result.gpus // per_node, 1))
        sure = uncertainty.for_training(chosen, model)
        _print(sure.lines("the recommended network's utilization", prefix=""))

    _save(args.json, result.result(seconds=seconds, uncertainty=sure.record() if sure is not None else None), args)
    return 0


# --- validate -------------------------------------------------------------------------------------


def _add_validate(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "validate",
        help="compare the model with published measurements (per-row error, median, worst)",
        description="Predict every row of validation CSV files from the hardware description alone.",
        epilog="Without files, validates the published measurements shipped with fabricscope.",
    )
    p.add_argument("files", nargs="*", metavar="CSV", help="files with the columns of the shipped validation data")
    _json_option(p, "validate")
    p.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    from fabricscope.model import report
    from fabricscope.model.validation import default_files, validate_files, validation_result

    _check_output(args.json, *(str(f) for f in args.files))
    files = list(args.files) or default_files()
    checks = validate_files(files)
    _print(report.validate_lines(checks))
    _save(args.json, validation_result(files, checks), args)
    return 0


# --- calibrate ------------------------------------------------------------------------------------

_CALIBRATE_EPILOG = """\
examples:
  fabricscope bench --nproc 2 -b 64K -e 64M --json two.json
  fabricscope calibrate two.json -o mine.toml
  fabricscope predict --cluster mine.toml --nodes 1 --gpus-per-node 4 -b 64K -e 64M
"""


def _add_calibrate(subparsers: SubParsers) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit latency and bandwidth per op and hop to bench results; write a cluster file predict uses",
        description=(
            "Fit time = latency + bytes / bandwidth per collective (robust least squares) to bench or imported "
            "nccl-tests results, per hop inside and between nodes, and write a cluster TOML whose [calibration] "
            "terms predict other rank and node counts."
        ),
        epilog=_CALIBRATE_EPILOG,
    )
    p.add_argument(
        "runs", nargs="+", metavar="RUN", help="bench results or imported nccl-tests logs: result files or history ids"
    )
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="cluster TOML to write")
    p.add_argument(
        "--cluster",
        default="lab-8gpu-100g-nvme",
        help="what the runs do not measure (GPU, NICs, storage): a preset or file (default lab-8gpu-100g-nvme)",
    )
    p.set_defaults(func=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from fabricscope.model import report
    from fabricscope.model.calibrate import calibrate, cluster_toml, load_runs, priced_runs
    from fabricscope.model.cluster import load_cluster
    from fabricscope.outputs import atomic_write_text, check_output_path, say_written
    from fabricscope.shown import cut
    from fabricscope.userfiles import is_path

    check_output_path("-o", args.output, inputs=[*args.runs, *([args.cluster] if is_path(args.cluster) else [])])
    base = load_cluster(args.cluster)
    runs, left = priced_runs(load_runs(args.runs))
    for note in left:
        sys.stderr.write(f"note: {note}\n")
    fitted = calibrate(runs)
    measured = max(runs, key=lambda r: (r.nodes, r.ranks))
    if (measured.nodes, measured.ranks_per_node) != (base.nodes, base.gpus_per_node):
        # The file takes the measured shape (its terms were fitted there); say so, the base's shape is gone.
        sys.stderr.write(
            f"note: the cluster written is {measured.nodes} node(s) x {measured.ranks_per_node} GPU(s), the shape "
            f"measured, not {cut(args.cluster)}'s {base.nodes} x {base.gpus_per_node}: give predict and estimate "
            "--nodes and --gpus-per-node for another\n"
        )
    _print(report.calibrate_lines(fitted))
    atomic_write_text(args.output, cluster_toml(base, fitted, runs))
    say_written(args.output)
    return 0
