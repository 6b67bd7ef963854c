"""``plan``: the frontier, the recommendation, the constraints, and the sweep's one code path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_helpers import one_error_line

from fabricscope.model import planner, training
from fabricscope.model.estimate import device_for, job_of, shape_of
from fabricscope.model.fabric import Fabric, fabric_of, take
from fabricscope.model.hardware import GPU, lookup
from fabricscope.model.splits import splits
from fabricscope.model.workload import load_model


@pytest.fixture(scope="module")
def medium() -> planner.Plan:
    return planner.plan(load_model("llama-7b"), gpus=64, scenario_name="research-medium", target_util=0.8)


def test_recommendation_is_the_cheapest_that_meets_the_target(medium: planner.Plan) -> None:
    assert medium.recommended is not None
    assert medium.recommended.utilization >= 0.8
    meeting = [o for o in medium.options if o.parallel is not None and o.utilization >= 0.8]
    assert medium.recommended.cost_usd == min(o.cost_usd for o in meeting)
    assert medium.evaluated == len(medium.options) * len(splits(load_model("llama-7b"), gpus=64, gpus_per_node=8))


def test_frontier_buys_utilization_with_money(medium: planner.Plan) -> None:
    costs = [o.cost_usd for o in medium.frontier]
    utils = [o.utilization for o in medium.frontier]
    assert costs == sorted(costs) and utils == sorted(utils) and len(set(utils)) == len(utils)
    cheapest = min(o.cost_usd for o in medium.options if o.parallel is not None)
    assert medium.frontier[0].cost_usd == cheapest


def test_search_space_respects_physics() -> None:
    sc = planner.scenario("research-large")
    for net in planner.search_space(sc, 8):
        if net.sharp:
            assert net.nic.link == "infiniband" and net.transport.name != "tcp-socket"
        if net.transport.name != "tcp-socket":
            assert net.nic.rdma
        assert net.count <= 8


def test_latency_budget_excludes_tcp() -> None:
    result = planner.plan(load_model("llama-7b"), gpus=64, scenario_name="realtime", max_latency_us=50)
    assert result.recommended is not None
    assert result.recommended.latency_us <= 50
    assert result.recommended.network.transport.name != "tcp-socket"
    tcp = [o for o in result.options if o.network.transport.name == "tcp-socket"]
    assert tcp and min(o.latency_us for o in tcp) > 50


def test_unreachable_target_says_so() -> None:
    result = planner.plan(load_model("llama-7b"), gpus=64, scenario_name="research-small", target_util=1.0)
    assert result.recommended is None
    assert result.notes and "no network reaches 100%" in result.notes[0]


def test_network_cost_counts_ports_and_tiers() -> None:
    sc = planner.scenario("private-large")
    nets = [n for n in planner.search_space(sc, 8) if n.nic.name == "ib-ndr" and n.count == 8 and not n.sharp]
    rail = next(n for n in nets if n.topology == "rail-optimized" and n.oversubscription == 1.0)
    small, large = planner.network_cost([rail], 16)[0], planner.network_cost([rail], 512)[0]
    per_port = rail.nic.price_usd + rail.nic.switch_port_usd + rail.nic.link_usd
    assert small == pytest.approx(16 * 8 * per_port)  # one switch per rail
    assert large > 512 / 16 * small  # a second tier of spines
    blocking = next(n for n in nets if n.topology == "rail-optimized" and n.oversubscription == 2.0)
    assert planner.network_cost([blocking], 512)[0] < large


def test_sweep_equals_a_loop_over_configurations() -> None:
    model = load_model("llama-70b")
    gpu = lookup("gpu", "h100-sxm", GPU)
    cand = splits(model, gpus=512, gpus_per_node=8)
    nets = planner.search_space(planner.scenario("research-large"), 8)
    fab = planner.fabric_arrays(nets, gpu, 8, 64)
    result = planner.sweep(model, cand, gpu, fab, "bf16")
    dev = device_for(gpu, "bf16")
    rng = np.random.default_rng(7)
    for row in rng.choice(len(nets), size=1):  # one network, every split: a scalar step per split is slow
        one = take(fab, int(row))
        steps = []
        for config in cand.configs:
            alone = training.step(shape_of(model), job_of(config, cand.batch), dev, one)
            steps.append(float(alone.step) if float(alone.memory_bytes) <= dev.memory_bytes else np.inf)
        assert result.step_s[row] == pytest.approx(min(steps), rel=1e-12)
        assert result.best[row] == int(np.argmin(steps))


def test_plan_cli_and_json(cli, tmp_path) -> None:
    out = tmp_path / "plan.json"
    done = cli("plan", "--model", "llama-7b", "--gpus", "64", "--scenario", "cloud", "--json", str(out))
    assert done.code == 0, done.err
    assert "cost/utilization frontier" in done.out and "recommended:" in done.out
    data = json.loads(out.read_text())
    assert data["kind"] == "plan" and data["config"]["scenario"] == "cloud"
    roles = [r["role"] for r in data["records"]]
    assert roles.count("recommended") == 1 and "frontier" in roles
    assert data["summary"]["evaluated"] > 10000


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--gpus", "12"], ["--gpus must be a multiple of 8 (servers of 8 GPUs) or 8 or fewer, got 12"]),
        (["--gpus", "0"], ["--gpus must be a whole number from 1 to 1048576, got '0'"]),
        (["--gpus", "64", "--scenario", "clowd"], ["unknown scenario 'clowd'", "did you mean 'cloud'"]),
        (["--gpus", "64", "--target-util", "80"], ["--target-util must be a share from 0.1% to 100%"]),
        (["--gpus", "64", "--gpu", "h100"], ["unknown GPU 'h100'", "h100-sxm"]),
        (
            ["--gpus", "64", "--max-latency-us", "-5"],
            ["--max-latency-us must be a number from 0.001 to 1e+09 us, got '-5'"],
        ),
    ],
)
def test_bad_plan_input(cli, args: list[str], fragments: list[str]) -> None:
    line = one_error_line(cli("plan", "--model", "llama-7b", *args))
    for fragment in fragments:
        assert fragment in line


def test_pipeline_depths_follow_the_layer_count() -> None:
    # megatron-530b has 105 layers: Narayanan et al. ran it with pp 35 on 2,240 A100s.  Depths
    # divide the GPUs left by tp and need not divide the layers (stages may be unequal).
    model = load_model("megatron-530b")
    cand = splits(model, gpus=2240, gpus_per_node=8)
    assert {c.pp for c in cand.configs if c.tp == 8} == {p for p in range(1, 108) if 280 % p == 0}
    assert {c.tp for c in cand.configs} <= {1, 2, 4, 8}
    result = planner.plan(model, gpus=2240, gpu_name="a100-sxm-80gb", scenario_name="private-large")
    assert result.recommended is not None and result.recommended.parallel.pp > 1
    # And a depth is never one that leaves GPUs over: pp divides the GPUs left by tp.  Llama 3's
    # own split of its 126 layers (tp 8, pp 16) is a candidate.
    configs = splits(load_model("llama-405b"), gpus=16384, gpus_per_node=8).configs
    for config in configs:
        assert config.pp * config.interleave <= 126 + 2 and 16384 % (config.tp * config.pp) == 0
    assert any(c.tp == 8 and c.pp == 16 for c in configs)


def test_cluster_fabric_and_sweep_fabric_are_one_function() -> None:
    # The planner's rows are the Fabrics of the clusters its networks make.
    gpu = lookup("gpu", "a100-sxm-80gb", GPU)
    nets = planner.search_space(planner.scenario("research-medium"), 8)
    fab = planner.fabric_arrays(nets, gpu, 8, 16)
    for row in (0, len(nets) // 2, len(nets) - 1):
        alone = fabric_of(planner.cluster_of(nets[row], gpu, 8, 16))
        one = take(fab, row)
        for name in Fabric.__slots__:
            if name == "a2a":  # the calibrated all-to-all: a cluster file's, never a catalog network's
                assert getattr(one, name) is None and getattr(alone, name) is None
                continue
            assert float(getattr(one, name)) == pytest.approx(float(getattr(alone, name))), name


def test_ties_prefer_less_latency_and_the_better_transport() -> None:
    # research-small's 10G and 25G NICs run as fast over RDMA with or without GPUDirect and
    # cost the same; sockets cost the same too.  RDMA's lower latency decides a tie; sockets win
    # only by a shorter step (bare-metal sockets keep their bandwidth on 8 nodes where RoCE's
    # hashed flows lose some: docs/model.md, "TCP sockets" and "Ethernet RDMA at scale").
    result = planner.plan(load_model("llama-7b"), gpus=64, scenario_name="research-small")
    for option in result.frontier:
        twins = [
            o
            for o in result.options
            if o.cost_usd == option.cost_usd and o.parallel is not None and o.utilization == option.utilization
        ]
        assert option.latency_us == min(o.latency_us for o in twins)
    rdma = {o.network.label(): o for o in result.options if o.network.transport.name == "rdma"}
    sockets = [o for o in result.options if o.network.transport.name == "tcp-socket"]
    assert sockets
    for option in sockets:
        twin = rdma[option.network.label().replace(" tcp-socket ", " rdma ")]
        assert option.latency_us > twin.latency_us
        assert (option.rank() < twin.rank()) == (option.step_s < twin.step_s)
    assert result.recommended is not None
    wide = planner.plan(load_model("llama-7b"), gpus=64, scenario_name="research-medium")
    gdr = {o.network.label(): o for o in wide.options if o.network.transport.name == "rdma-gdr"}
    for option in wide.options:
        if option.network.transport.name == "rdma":
            twin = gdr[option.network.label().replace(" rdma ", " rdma-gdr ")]
            assert option.rank() > twin.rank()  # never preferred to GPUDirect at the same price


def test_rows_print_cheapest_first(cli) -> None:
    done = cli("plan", "--model", "llama-7b", "--gpus", "64", "--scenario", "realtime", "--max-latency-us", "50")
    assert done.code == 0, done.err
    lines = done.out.split("split\n", 1)[1].split("\n\n", 1)[0].splitlines()
    costs = [float(line.split()[0 if not line.startswith("*") else 1].strip("$").replace(",", "")) for line in lines]
    assert costs == sorted(costs) and any(line.startswith("*") for line in lines)


def test_plan_takes_a_global_batch(cli, tmp_path) -> None:
    out = tmp_path / "p.json"
    done = cli("plan", "--model", "llama-7b", "--gpus", "64", "--global-batch", "256", "--json", str(out))
    assert done.code == 0, done.err
    data = json.loads(out.read_text())
    assert data["config"]["global_batch"] == 256
    assert all(r["parallel"]["global_batch"] == 256 for r in data["records"])
    assert "--global-batch must be a whole number from 1 to" in one_error_line(
        cli("plan", "--model", "llama-7b", "--gpus", "64", "--global-batch", "0")
    )


def test_the_cloud_scenario_prices_sockets_on_virtual_nics() -> None:
    from fabricscope.model.fabric import fabric_inputs
    from fabricscope.model.hardware import Transport
    from fabricscope.model.planner import cluster_of, scenario, search_space

    gpu = lookup("gpu", "h100-sxm", GPU)
    cloud = [n for n in search_space(scenario("cloud"), 8) if n.transport.name == "tcp-socket"]
    lab = [n for n in search_space(scenario("research-small"), 8) if n.transport.name == "tcp-socket"]
    assert cloud and lab
    virtual = {fabric_inputs(cluster_of(n, gpu, 8, 4))["transport_eff"] for n in cloud}
    bare = {fabric_inputs(cluster_of(n, gpu, 8, 4))["transport_eff"] for n in lab}
    sockets = lookup("transport", "tcp-socket", Transport)
    assert virtual == {sockets.virtualized_efficiency} and bare == {sockets.efficiency}
    assert sockets.virtualized_efficiency < sockets.efficiency


@pytest.mark.parametrize(
    ("model", "gpus", "scenario"), [("llama-7b", 64, "cloud"), ("llama3-8b", 1024, "research-large")]
)
def test_each_frontier_row_is_faster_than_the_one_before(model: str, gpus: int, scenario: str) -> None:
    # Review 4: ranked by each split's own compute share, a slower network could follow a faster one
    # at the same cost; utilization against one yardstick (the least compute any split needs) cannot.
    result = planner.plan(load_model(model), gpus=gpus, scenario_name=scenario)
    steps = [o.step_s for o in result.frontier]
    costs = [o.cost_usd for o in result.frontier]
    assert steps == sorted(steps, reverse=True) and len(set(steps)) == len(steps)
    assert costs == sorted(costs) and len(set(costs)) == len(costs)
    for option in result.options:
        if option.parallel is not None:
            assert (option.utilization > 0) and option.utilization * option.step_s == pytest.approx(
                result.frontier[0].utilization * result.frontier[0].step_s
            )
