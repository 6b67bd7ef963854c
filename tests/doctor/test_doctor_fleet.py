"""Fleet mode: what differs across nodes and which node is odd; then real ranks, spawned and launched."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, REPO, cli, run_fixture

from fabricscope.doctor.expect import Expectations
from fabricscope.doctor.findings import Severity
from fabricscope.doctor.fleet import (
    NodeReport,
    compare,
    fleet_findings,
    group_reports,
    machine_findings,
    node_facts,
)
from fabricscope.launch import free_port
from fabricscope.results import load
from helpers import stopped_store_host


def report(rank: int, host: str, facts: dict[str, str]) -> NodeReport:
    return NodeReport(rank=rank, hostname=host, root="/", facts=facts, findings=[])


def test_compare_names_the_odd_node() -> None:
    facts = {
        "a": {"MTU": "4092", "firmware": "28.39"},
        "b": {"MTU": "4092", "firmware": "28.39"},
        "c": {"MTU": "2044", "firmware": "28.39"},
    }
    [diff] = compare(facts)
    assert (diff.fact, diff.common, diff.common_nodes, diff.total, diff.odd) == ("MTU", "4092", 2, 3, {"c": "2044"})


def test_no_majority_with_two_nodes_or_a_tie() -> None:
    [diff] = compare({"a": {"MTU": "9000"}, "b": {"MTU": "1500"}})
    assert diff.common is None and diff.odd == {"a": "9000", "b": "1500"}
    [diff] = compare({"a": {"k": "1"}, "b": {"k": "1"}, "c": {"k": "2"}, "d": {"k": "2"}})
    assert diff.common is None and len(diff.odd) == 4
    assert compare({"a": {"k": "1"}, "b": {"k": "1"}}) == []


def test_missing_fact_counts_as_a_difference() -> None:
    [diff] = compare({"a": {"GPU-NIC distance": "8x PIX"}, "b": {"GPU-NIC distance": "8x PIX"}, "c": {}})
    assert diff.odd == {"c": "-"}


def test_ranks_of_one_host_merge_unless_they_saw_different_trees() -> None:
    same = group_reports([report(1, "h", {"k": "1"}), report(0, "h", {"k": "1"}), report(2, "g", {"k": "1"})])
    assert [(n.label, n.ranks) for n in same] == [("h", [0, 1]), ("g", [2])]
    split = group_reports([report(0, "h", {"k": "1"}), report(1, "h", {"k": "2"})])
    assert [n.label for n in split] == ["h[rank 0]", "h[rank 1]"]


def test_facts_of_fixture_nodes_differ_where_the_faults_are() -> None:
    healthy = node_facts(run_fixture("healthy-ib-8gpu").node, Expectations())
    degraded = node_facts(run_fixture("degraded-ib-8gpu").node, Expectations())
    differing = {k for k in healthy if healthy[k] != degraded.get(k)}
    assert differing == {
        "port states",
        "port rates",
        "compute NIC MTU",
        "HCA firmware",
        "NIC PCIe links",
        "GPUDirect RDMA",
        "NCCL settings",
        "NCCL library",  # the degraded node kept libnccl.so.2.18.3 where its fleet runs 2.21.5
    }
    assert (healthy["NCCL library"], degraded["NCCL library"]) == (
        "2.21.5 (usr/lib/x86_64-linux-gnu)",
        "2.18.3 (usr/lib/x86_64-linux-gnu)",
    )
    assert healthy["transparent huge pages"] == "madvise"  # reported for skew; no source judges a value
    verbs = "1.14.50.0 (usr/lib/x86_64-linux-gnu)"
    assert healthy["libibverbs (rdma-core)"] == degraded["libibverbs (rdma-core)"] == verbs
    [skew] = [d for d in compare({"a": healthy, "b": healthy, "c": degraded}) if d.fact == "NCCL library"]
    assert skew.odd == {"c": "2.18.3 (usr/lib/x86_64-linux-gnu)"}
    assert healthy["GPU-NIC distance"] == "8x PIX"
    assert healthy["GPUs"] == "8"


def test_fleet_names_the_node_with_host_faults() -> None:
    healthy = node_facts(run_fixture("healthy-ib-8gpu").node, Expectations())
    faulty = node_facts(run_fixture("host-faults-8gpu").node, Expectations())
    differing = {k: (healthy[k], faulty.get(k)) for k in healthy if healthy[k] != faulty.get(k)}
    assert differing == {
        "port states": ("10x ACTIVE", "9x ACTIVE, 1x INIT"),
        "locked memory": ("unlimited", "64K"),
        "/dev/shm": ("1007.86G", "64M"),  # a tmpfs without size= is half of MemTotal
        "NUMA balancing": ("0", "1"),
        "CPU governor": ("224x performance", "112x performance, 112x powersave"),
        "IOMMU (GPUs, NICs)": ("16x identity", "15x identity, 1x DMA-FQ"),
    }
    [diff] = [d for d in compare({"a": healthy, "b": healthy, "c": faulty}) if d.fact == "locked memory"]
    assert diff.odd == {"c": "64K"} and diff.common == "unlimited"


def test_fleet_findings() -> None:
    diffs = compare({"a": {"k": "1"}, "b": {"k": "1"}, "c": {"k": "2"}})
    findings = fleet_findings(diffs, {3: None, 4: "gpu-node-09"}, 5.0)
    assert [(f.id, f.severity, f.subject) for f in findings] == [
        ("fleet.report", Severity.FAIL, "rank 3"),
        ("fleet.report", Severity.FAIL, "rank 4 on gpu-node-09"),
        ("fleet.consistency", Severity.WARN, "k"),
    ]
    assert "died or hung while probing" in findings[1].observed
    assert findings[2].observed == "odd: c (2)"


def test_ranks_of_one_machine_that_nccl_would_not_connect_inside_it_are_named() -> None:
    def rank(number: int, host: str, boot: str | None, shm: str | None) -> NodeReport:
        return NodeReport(rank=number, hostname=host, boot_id=boot, shm_device=shm, root="/", facts={}, findings=[])

    fine = [rank(0, "a", "b1", "0:27"), rank(1, "a", "b1", "0:27"), rank(2, "b", "b2", "0:30")]
    assert machine_findings(fine) == []  # two machines, each with one /dev/shm
    assert machine_findings([rank(0, "a", None, "0:1"), rank(1, "a", None, "0:2")]) == []  # boot id unknown
    assert machine_findings([rank(0, "a", "b1", "0:27"), rank(1, "a", "b1", None)]) == []  # one unknown: no claim
    containers = [rank(0, "a", "b1", "0:27"), rank(1, "a", "b1", "0:27"), rank(2, "a", "b1", "0:41")]
    [shm] = machine_findings(containers)
    assert (shm.id, shm.severity, shm.subject) == ("fleet.shm", Severity.WARN, "a")
    assert shm.observed == "2 /dev/shm file systems: 0:27 for ranks 0, 1; 0:41 for rank 2"
    assert "--ipc=host" in shm.advice and "src/transport/shm.cc" in shm.advice
    pods = [rank(0, "pod-a", "b1", "0:27"), rank(1, "pod-b", "b1", "0:28"), rank(2, "pod-b", "b1", "0:28")]
    [machine] = machine_findings(pods)
    assert (machine.id, machine.subject) == ("fleet.machine", "boot b1")
    assert machine.observed == "one machine, 2 host names: pod-b (2 ranks), pod-a"
    assert "NCCL_HOSTID" in machine.advice
    # One NCCL_HOSTID for every rank makes one host hash: NCCL connects them inside the machine.
    for report in pods:
        report.host_id = "machine1"
    [shm_again] = machine_findings(pods)  # and then their two /dev/shm are what keeps them apart
    assert (shm_again.id, shm_again.subject) == ("fleet.shm", "NCCL_HOSTID=machine1")
    pods[0].shm_device = "0:28"
    assert machine_findings(pods) == []
    assert NodeReport.from_json(pods[0].to_json()).host_id == "machine1"
    assert NodeReport.from_json(containers[2].to_json()).shm_device == "0:41"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.multiprocess
def test_a_rank_with_a_dev_shm_of_its_own_is_named(tmp_path: Path) -> None:
    """Two real ranks of this machine, one in a mount namespace with its own /dev/shm, as a container with
    Docker's default --shm-size gets: rank 0 names the machine, the two devices and the ranks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), COLUMNS="300")
    doctor = [sys.executable, "-m", "fabricscope", "doctor", "--timeout", "60", "--json", str(tmp_path / "f.json")]
    own = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    ranks = [
        subprocess.Popen(doctor, env={**env, "RANK": "0", "LOCAL_RANK": "0"}, stdout=subprocess.PIPE, text=True),
        subprocess.Popen(
            ["unshare", "--mount", "sh", "-c", own, "sh", *doctor[:-2]],
            env={**env, "RANK": "1", "LOCAL_RANK": "1"},
            stdout=subprocess.DEVNULL,
        ),
    ]
    try:
        out, _ = ranks[0].communicate(timeout=120)
        ranks[1].wait(timeout=60)
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
    records = [r for r in load(tmp_path / "f.json").records if r["id"] == "fleet.shm"]
    assert len(records) == 1 and records[0]["subject"] == socket.gethostname(), out
    assert re.fullmatch(r"2 /dev/shm file systems: \d+:\d+ for rank 0; \d+:\d+ for rank 1", records[0]["observed"])
    shown = " ".join(out.split())
    assert f"warn fleet.shm [{socket.gethostname()}]: 2 /dev/shm file systems: " in shown, out
    assert "-> NCCL connects ranks by NVLink, PCIe peer-to-peer or shared memory only when" in shown


def test_report_json_round_trip() -> None:
    diagnosis = run_fixture("roce-4gpu")
    mine = NodeReport(rank=5, hostname="h", root="/r", facts={"k": "v"}, findings=diagnosis.findings)
    back = NodeReport.from_json(mine.to_json())
    assert back.findings == diagnosis.findings and back.rank == 5


def three_nodes(tmp_path: Path) -> str:
    """node0 and node1 healthy (two hostnames), node2 degraded: the odd one out."""
    for index, source in enumerate(("healthy-ib-8gpu", "healthy-ib-8gpu", "degraded-ib-8gpu")):
        shutil.copytree(FIXTURES / source, tmp_path / f"node{index}", symlinks=True)
    (tmp_path / "node1/proc/sys/kernel/hostname").write_text("gpu-node-02\n")
    return str(tmp_path / "node{rank}")


@pytest.mark.multiprocess
def test_spawned_ranks_name_the_odd_node(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    result = cli("--nproc", "3", "--root", three_nodes(tmp_path), "--json", str(out), "--timeout", "60")
    assert result.returncode == 2, result.stderr
    text = result.stdout
    assert "fabricscope doctor: 3 nodes" in text
    assert "values that differ across nodes" in text
    assert "gpu-node-07: 9x ACTIVE, 1x DOWN" in text
    assert "odd one(s) out: gpu-node-07" in text
    loaded = load(out)
    assert "torch_threads" not in loaded.env  # its ranks run no torch kernels: no count to record
    assert [n["node"] for n in loaded.summary["nodes"]] == ["gpu-node-01", "gpu-node-02", "gpu-node-07"]
    odd = {d["fact"]: d["odd"] for d in loaded.summary["differences"]}
    assert odd["GPUDirect RDMA"] == {"gpu-node-07": "none"}
    assert all(set(d["odd"]) == {"gpu-node-07"} for d in loaded.summary["differences"])
    fails = {(r["node"], r["id"]) for r in loaded.records if r["severity"] == "fail"}
    assert ("gpu-node-07", "rdma.port_state") in fails
    assert not any(node != "gpu-node-07" for node, _ in fails)


@pytest.mark.multiprocess
def test_two_local_ranks_on_this_machine_are_one_node() -> None:
    result = cli("--nproc", "2", "--timeout", "60")
    # This machine's own health decides the verdict; the exit code must be the one the verdict line names.
    assert "Traceback" not in result.stderr, result.stderr
    verdict = re.search(r"verdict: \w+ \(exit (\d)\)", result.stdout)
    assert verdict is not None and result.returncode == int(verdict.group(1)), (result.returncode, result.stdout)
    assert "fabricscope doctor: 1 node" in result.stdout
    assert "one node: nothing to compare across nodes" in result.stdout
    assert "│ 0,1 " in result.stdout


@pytest.mark.multiprocess
def test_rank_that_never_reports_is_a_failure() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    result = cli("--root", str(FIXTURES / "healthy-ib-8gpu"), "--timeout", "2", env=env)
    assert result.returncode == 2, result.stderr
    assert "fail rank 1: no report within 2 s" in result.stdout


@pytest.mark.multiprocess
def test_a_world_far_larger_than_what_runs_is_bounded_by_the_timeout() -> None:
    """A launcher that claims 100,000 ranks where one runs: rank 0 waits on one counter, reads reports for at
    most the timeout again, names 64 silent ranks and counts the rest in one finding (no query per rank)."""
    env = {"RANK": "0", "WORLD_SIZE": "100000", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    result = cli("--root", str(FIXTURES / "healthy-ib-8gpu"), "--timeout", "2", env=env, timeout=90)
    assert result.returncode == 2, result.stderr
    named = [line for line in result.stdout.splitlines() if line.strip().startswith("fail rank ")]
    assert len(named) == 64
    [rest] = [line for line in result.stdout.splitlines() if "more ranks (" in line and "no report within 2 s" in line]
    assert rest.split("fail ")[1].split(" more")[0].isdigit()


@pytest.mark.multiprocess
def test_fleet_mode_usage_errors_come_before_any_rank(tmp_path: Path) -> None:
    result = cli("--nproc", "2", "--root", str(tmp_path / "node{rank}"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --root {tmp_path}/node0: no such directory"
    result = cli("--nproc", "2", "--capture", str(tmp_path / "cap"))
    assert result.returncode == 2 and "put {rank} in the path" in result.stderr


@pytest.mark.multiprocess
def test_under_torchrun_ranks_use_the_agents_store_and_a_rank_without_a_tree_reports(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE"))}
    env["COLUMNS"] = "1000"  # no cell wraps, however long the temporary path
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "4",
            "--master-port",
            str(free_port()),
            "-m",
            "fabricscope",
            "doctor",
            "--root",
            three_nodes(tmp_path),
            "--timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
        check=False,
    )
    # Rank 3's tree (node3) does not exist: it reports that to rank 0 instead of exiting, which under
    # torchrun would have stopped every other rank and lost the fleet report.
    assert "odd one(s) out: gpu-node-07" in result.stdout, result.stdout + result.stderr
    assert result.stdout.count("fabricscope doctor: 4 nodes") == 1  # only rank 0 prints
    out = " ".join(result.stdout.split())
    assert "could not probe its node: --root" in out and "node3: no such directory" in out
    # torchrun exits 1 when any rank does; only rank 0 did, with the fleet's verdict.
    assert "<NO_OTHER_FAILURES>" in result.stderr and "exitcode  : 2" in result.stderr


def test_ranks_of_one_machine_merge_although_their_findings_differ_in_passing() -> None:
    from fabricscope.doctor.findings import Finding

    def seen(rank: int, observed: str) -> NodeReport:
        found = [Finding(id="rdma.errors", severity=Severity.WARN, subject="mlx5_1/1", observed=observed)]
        return NodeReport(rank=rank, hostname="h", root=f"/r{rank}", facts={"k": "1"}, findings=found)

    [node] = group_reports([seen(0, "symbol_error=12"), seen(1, "symbol_error=13")])
    assert (node.label, node.ranks, node.findings[0].observed) == ("h", [0, 1], "symbol_error=12")


def test_two_machines_with_one_hostname_are_two_nodes() -> None:
    twins = group_reports(
        [
            NodeReport(rank=0, hostname="localhost", boot_id="aaaaaaaa-1", root="/", facts={}, findings=[]),
            NodeReport(rank=1, hostname="localhost", boot_id="bbbbbbbb-2", root="/", facts={}, findings=[]),
        ]
    )
    assert [n.label for n in twins] == ["localhost (boot aaaaaaaa)", "localhost (boot bbbbbbbb)"]


class DictStore:
    """An in-memory stand-in for torch.distributed.TCPStore."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value


def fleet_args(root: str, **more: object) -> argparse.Namespace:
    values: dict[str, object] = {"root": root, "capture": None, "json": None, "live_env": False, "bench": False}
    values.update(more)
    return argparse.Namespace(**values)


def test_a_rank_that_cannot_probe_still_reports_and_a_silent_rank_is_named_with_its_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabricscope.doctor.fleet import Rendezvous
    from fabricscope.doctor.fleet_run import run_rank
    from fabricscope.launch import World

    for index in (0, 2):
        shutil.copytree(FIXTURES / "healthy-ib-8gpu", tmp_path / f"node{index}", symlinks=True)
    monkeypatch.setenv("COLUMNS", "400")
    store = DictStore()
    args = fleet_args(str(tmp_path / "node{rank}"), json=str(tmp_path / "fleet.json"))

    def world(rank: int) -> World:  # the launcher hosts the store: the others leave before rank 0
        return World(rank, 4, rank, 4, "127.0.0.1", 1, "torchrun", agent_store=True)

    Rendezvous(world(3), store).announce("gpu-node-99")  # rank 3 announces itself and never reports
    others: dict[int, object] = {}

    def other(rank: int) -> None:  # rank 1's tree is missing
        try:
            others[rank] = run_rank(args, world(rank), None, 5.0, Rendezvous(world(rank), store))
        except Exception as exc:  # shown by the assertion below
            others[rank] = exc

    threads = [threading.Thread(target=other, args=(rank,)) for rank in (1, 2)]
    for thread in threads:
        thread.start()
    while not all(f"{Rendezvous(world(0), store).prefix}report/{rank}" in store.data for rank in (1, 2)):
        time.sleep(0.01)
    code = run_rank(args, world(0), None, 0.5, Rendezvous(world(0), store))
    for thread in threads:
        thread.join()
    assert others == {1: 0, 2: 0}  # the others leave once rank 0 has gathered
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2
    assert f"could not probe its node: --root {tmp_path}/node1: no such directory" in out
    assert "fail rank 3 on gpu-node-99: no report within 0.5 s (it started, then died or hung while probing)" in out
    summary = load(tmp_path / "fleet.json").summary
    assert summary["missing_ranks"] == [{"rank": 3, "host": "gpu-node-99"}]
    assert [n["probed"] for n in summary["nodes"]] == [True, False]  # ranks 0 and 2 are one node


class FailingStore(DictStore):
    """A store whose server went away: torch raises a RuntimeError with C++ frames after the message."""

    def set(self, key: str, value: str) -> None:
        raise RuntimeError("Broken pipe\nException raised from sendBytes at socket.cpp:123\nframe #0: c10::Error")


def test_a_rank_whose_rank_0_never_reports_fails_in_one_line() -> None:
    from fabricscope.doctor.findings import DoctorIncomplete
    from fabricscope.doctor.fleet import Rendezvous
    from fabricscope.launch import World

    link = Rendezvous(World(1, 2, 1, 2, "127.0.0.1", 1, "env"), DictStore())
    link.send("{}")
    with pytest.raises(DoctorIncomplete) as info:
        link.await_rank0(1.0)
    assert str(info.value) == "rank 1: rank 0 sent no report within 1 s (it is stopped, hung or dead): no fleet report"
    assert info.value.exit_code == 3
    lost = Rendezvous(World(2, 3, 2, 3, "10.0.0.1", 29500, "env"), FailingStore())
    with pytest.raises(DoctorIncomplete) as info:
        lost.announce("h")
    assert str(info.value) == (
        "rank 2: lost the rendezvous store at 10.0.0.1:29500 while announcing its host (Broken pipe)"
    )
    frozen = Rendezvous(World(1, 2, 1, 2, "10.0.0.1", 29500, "env"), FrozenStore(), timeout_s=0.2)
    with pytest.raises(DoctorIncomplete) as info:
        frozen.send("{}")
    assert str(info.value) == (
        "rank 1: the rendezvous store at 10.0.0.1:29500 did not answer within 0.2 s while sending its report "
        "(its host, rank 0 or the launcher, is stopped or hung)"
    )


class FrozenStore(DictStore):
    """A store whose host is stopped: a request is taken and never answered (torch's timeout does not fire)."""

    def set(self, key: str, value: str) -> None:
        threading.Event().wait()


def stop_rank_0(
    launcher: subprocess.Popen[str], mark: str, *, when_it_prints: bool = False, sig: int = signal.SIGSTOP
) -> int:
    """SIGSTOP (or ``sig``) the process of rank 0 as soon as it exists, or once it starts printing the fleet
    report; its pid.

    Under torchrun rank 0 is the process whose environment holds ``mark`` and ``RANK=0``; spawned ranks are
    forks of the launcher (their environment in /proc is the launcher's), rank 0 its first child.
    """
    wanted = {f"FABRICSCOPE_TEST_MARK={mark}".encode(), b"RANK=0"}
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    spawned = "--nproc" in launcher.args
    if when_it_prints:
        assert launcher.stdout is not None
        assert launcher.stdout.read(1)  # rank 0 has the reports and is printing: the others have sent theirs
    deadline = time.monotonic() + 120  # a hang bound
    while (launcher.poll() is None or when_it_prints) and time.monotonic() < deadline:
        found = _first_child(children) if spawned else _process_with(wanted)
        if found is not None:
            os.kill(found, sig)
            return found
        time.sleep(0.005)
    raise AssertionError("the launcher ended before rank 0 started")


def _first_child(children: Path) -> int | None:
    with contextlib.suppress(OSError):
        for pid in children.read_text().split()[:1]:
            return int(pid)
    return None


def _process_with(environ: set[bytes]) -> int | None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if environ <= set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                return int(pid)
    return None


def resume_once_told_to_end(pid: int, launcher: subprocess.Popen[str]) -> None:
    """SIGCONT the stopped ``pid`` once a SIGTERM waits for it (its launcher is ending the job), so it ends
    by that SIGTERM as a hung rank would, not by the SIGKILL a launcher sends a stopped one 30 s later."""
    while launcher.poll() is None:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        pending = 0
        for line in status.splitlines():
            if line.startswith(("SigPnd:", "ShdPnd:")):
                pending |= int(line.split()[1], 16)
        if pending & (1 << (signal.SIGTERM - 1)):
            os.kill(pid, signal.SIGCONT)
            return
        time.sleep(0.05)


def run_with_frozen_rank_0(
    argv: list[str], *, when_it_prints: bool = False, resume_on_sigterm: bool = False, sig: int = signal.SIGSTOP
) -> tuple[subprocess.CompletedProcess[str], int]:
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(FABRICSCOPE_TEST_MARK=mark, COLUMNS="200")
    env.pop("FABRICSCOPE_LAUNCHER", None)
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        pid = stop_rank_0(launcher, mark, when_it_prints=when_it_prints, sig=sig)
        if resume_on_sigterm:
            threading.Thread(target=resume_once_told_to_end, args=(pid, launcher), daemon=True).start()
        out, err = launcher.communicate(timeout=180)  # without the fix: forever
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    return subprocess.CompletedProcess(argv, launcher.returncode, out, err), pid


def assert_one_line_per_rank(stderr: str, ranks: set[int], what: str, *, some: bool = False) -> None:
    """One ``error: rank N: ...`` line for each of ``ranks`` (``some``: for at least one of them); the
    launcher's own lines (``error: rank 0 (pid ...) was stopped ...``) aside."""
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    mine = [line for line in lines if not re.match(r"error: rank \d+ \(pid \d+ on ", line)]
    assert len(lines) - len(mine) <= 1, stderr
    named = [int(line.split()[2].rstrip(":")) for line in mine]
    assert len(named) == len(set(named)), stderr
    assert (set(named) <= ranks and named) if some else set(named) == ranks, stderr
    assert all(what in line for line in mine), stderr
    assert "frame #" not in stderr and "Exception raised from" not in stderr and "TCPStore.cpp" not in stderr
    assert "src/fabricscope" not in stderr, stderr  # no traceback of ours (torchrun prints its own)


@pytest.mark.multiprocess
def test_spawned_ranks_end_when_rank_0_is_frozen() -> None:
    root = str(FIXTURES / "healthy-ib-8gpu")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--nproc", "3", "--root", root, "--timeout", "3"]
    result, pid = run_with_frozen_rank_0(argv)
    assert result.returncode == 3, result.stderr  # no verdict: the fleet report is lost with rank 0
    assert result.stdout == ""
    # Rank 0 was stopped before it could host the store: the others cannot reach it and say so, one line each.
    assert_one_line_per_rank(result.stderr, {1, 2}, "cannot reach the rendezvous store at 127.0.0.1:")
    assert not Path(f"/proc/{pid}").exists()  # the launcher ended the frozen rank 0: no stray process
    assert f"error: rank 0 (pid {pid} on {socket.gethostname()}) was stopped (SIGSTOP or a debugger)" in result.stderr


@pytest.mark.multiprocess
def test_spawned_ranks_end_when_rank_0_is_killed_and_the_doctor_could_not_complete() -> None:
    """Exit 3, as when rank 0 is stopped: a health check reads exit 1 as a WARN verdict (Slurm's script
    resumes a node drained for a fabricscope reason), and no verdict was reached."""
    root = str(FIXTURES / "healthy-ib-8gpu")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--nproc", "2", "--root", root, "--timeout", "3"]
    result, pid = run_with_frozen_rank_0(argv, sig=signal.SIGKILL)
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert f"error: rank 0 (pid {pid} on {socket.gethostname()}) was killed by SIGKILL" in result.stderr


@pytest.mark.multiprocess
def test_under_torchrun_ranks_end_when_rank_0_is_frozen() -> None:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--master-port", str(free_port())]
    argv += ["-m", "fabricscope", "doctor", "--root", str(FIXTURES / "healthy-ib-8gpu"), "--timeout", "3"]
    result, pid = run_with_frozen_rank_0(argv, resume_on_sigterm=True)
    # The agent hosts the store: ranks 1 and 2 reach it, wait for rank 0's report, give up and exit 3;
    # torchrun then ends the job with a SIGTERM to each rank (a stopped rank 0 would take it only when
    # continued, and torchrun kills it 30 s later: the test continues it once the SIGTERM waits).
    assert result.returncode == 1, result.stderr
    # The first rank to give up ends the job: torchrun stops the other one (SIGTERM) before it may say so.
    what = "rank 0 sent no report within 3 s (it is stopped, hung or dead)"
    assert_one_line_per_rank(result.stderr, {1, 2}, what, some=True)
    assert "exitcode  : 3" in result.stderr
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.multiprocess
def test_spawned_ranks_end_when_rank_0_freezes_while_it_prints() -> None:
    root = str(FIXTURES / "healthy-ib-8gpu")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--nproc", "3", "--root", root, "--timeout", "3"]
    result, pid = run_with_frozen_rank_0(argv, when_it_prints=True)
    assert result.returncode == 3, result.stderr
    # The others sent their reports; rank 0 hosts the store and stopped answering: they say so and give up.
    assert_one_line_per_rank(result.stderr, {1, 2}, "did not answer within 3 s")
    assert not Path(f"/proc/{pid}").exists()
    assert f"error: rank 0 (pid {pid} on {socket.gethostname()}) was stopped (SIGSTOP or a debugger)" in result.stderr


@pytest.mark.multiprocess
def test_a_rank_waiting_for_the_store_ends_at_once_on_ctrl_c() -> None:
    """Forked ranks start together, so a rank often connects before rank 0 has opened the store: torch retries
    in C++, where no Python handler runs, and a Ctrl-C waited for the launcher's kill (or the whole timeout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.pop("FABRICSCOPE_LAUNCHER", None)
    env.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))  # nobody listens: rank 0 never came
    root = str(FIXTURES / "healthy-ib-8gpu")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--root", root, "--timeout", "600"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        status = Path(f"/proc/{proc.pid}/status")
        deadline = time.monotonic() + 120  # a hang bound: torch imported, the connect's watcher started
        while proc.poll() is None and time.monotonic() < deadline:
            threads = next(line for line in status.read_text().splitlines() if line.startswith("Threads:"))
            if int(threads.split()[1]) >= 3:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # without the watcher: the whole --timeout of 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err


@pytest.mark.multiprocess
def test_a_rank_whose_store_host_stops_once_it_listens_ends_in_one_line() -> None:
    """A store host stopped once it listens takes the connection (the kernel does) and never answers, and
    torch's timeout does not cover that: the rank hung in the connect until its launcher's kill (CI saw a
    spawned doctor wait past 180 s when the test above stopped rank 0 at that moment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.pop("FABRICSCOPE_LAUNCHER", None)
    env.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--root", str(FIXTURES / "healthy-ib-8gpu")]
    argv += ["--timeout", "2"]
    with stopped_store_host() as port:
        env.update(MASTER_PORT=str(port))
        result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)  # a hang bound
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"error: rank 1: cannot reach the rendezvous store at 127.0.0.1:{port} within 7 s (it took the connection "
        "and did not answer: its host, rank 0 or the launcher, is stopped or hung)\n"
    )


@pytest.mark.multiprocess
def test_a_rank_stopped_after_the_report_leaves_the_verdict_as_it_is() -> None:
    """Rank 0 printed the fleet's verdict and waits a few seconds for every rank's goodbye; a rank stopped
    then never says it.  The others wait for rank 0's exit at least that long (they gave up first with
    --timeout 3, exit 3, blaming rank 0), and the launcher names the stopped rank in a warning: exit 0."""
    root = str(FIXTURES / "healthy-ib-8gpu")
    argv = [sys.executable, "-m", "fabricscope", "doctor", "--nproc", "3", "--root", root, "--timeout", "3"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(COLUMNS="200", PYTHONUNBUFFERED="1")
    env.pop("FABRICSCOPE_LAUNCHER", None)
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    stopped = None
    try:
        assert launcher.stdout is not None
        for line in launcher.stdout:
            if line.startswith("verdict:"):
                with open(f"/proc/{launcher.pid}/task/{launcher.pid}/children") as handle:
                    stopped = int(handle.read().split()[1])  # rank 1: the launcher's second fork
                os.kill(stopped, signal.SIGSTOP)
                break
        _, err = launcher.communicate(timeout=180)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert stopped is not None
    assert launcher.returncode == 0, err
    assert f"warning: rank 1 (pid {stopped} on {socket.gethostname()}) was stopped" in err, err
    assert "error" not in err, err
    assert not Path(f"/proc/{stopped}").exists()  # killed and reaped by the launcher
