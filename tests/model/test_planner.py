"""``plan``: the frontier, the recommendation, the constraints, and the sweep's one code path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_helpers import one_error_line

from fabricscope.model import planner, training
from fabricscope.model.estimate import device_for, job_of, shape_of
from fabricscope.model.fabric import take
from fabricscope.model.hardware import GPU, lookup
from fabricscope.model.layouts import layouts
from fabricscope.model.workload import load_model


@pytest.fixture(scope="module")
def medium() -> planner.Plan:
    return planner.plan(load_model("llama-7b"), gpus=64, scenario_name="research-medium", target_util=0.8)


def test_recommendation_is_the_cheapest_that_meets_the_target(medium: planner.Plan) -> None:
    assert medium.recommended is not None
    assert medium.recommended.utilization >= 0.8
    meeting = [o for o in medium.options if o.parallel is not None and o.utilization >= 0.8]
    assert medium.recommended.cost_usd == min(o.cost_usd for o in meeting)
    assert medium.evaluated == len(medium.options) * len(layouts(load_model("llama-7b"), gpus=64, gpus_per_node=8))


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
    cand = layouts(model, gpus=512, gpus_per_node=8)
    nets = planner.search_space(planner.scenario("research-large"), 8)
    fab = planner.fabric_arrays(nets, gpu, 8, 64)
    result = planner.sweep(model, cand, gpu, fab, "bf16")
    dev = device_for(gpu, "bf16")
    rng = np.random.default_rng(7)
    for row in rng.choice(len(nets), size=6, replace=False):
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
        (["--gpus", "12"], ["--gpus 12 must be a multiple of 8"]),
        (["--gpus", "0"], ["--gpus must be at least 1, got 0"]),
        (["--gpus", "64", "--scenario", "clowd"], ["unknown scenario 'clowd'", "did you mean 'cloud'"]),
        (["--gpus", "64", "--target-util", "80"], ["--target-util must be between 0 and 1"]),
        (["--gpus", "64", "--gpu", "h100"], ["unknown GPU 'h100'", "h100-sxm"]),
        (["--gpus", "64", "--max-latency-us", "-5"], ["--max-latency-us must be at least 0"]),
    ],
)
def test_bad_plan_input(cli, args: list[str], fragments: list[str]) -> None:
    line = one_error_line(cli("plan", "--model", "llama-7b", *args))
    for fragment in fragments:
        assert fragment in line
