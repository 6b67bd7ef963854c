"""Under a real Slurm: Debian's munged, slurmctld and slurmd, started here as a one-node cluster.

``srun`` starts ``fabricscope bench`` ranks for real (the launcher is detected from
Slurm's own variables), and ``docs/examples/slurm-healthcheck.sh`` runs as the
node's ``HealthCheckProgram``: it drains the node while the doctor's root holds a
planted fault, resumes it when the root is healthy again, and leaves alone a node
an administrator drained; as the node's ``Prolog`` it keeps a job off a faulty node.
Needs root (slurmd) and the Debian packages; CI sets FABRICSCOPE_REQUIRE_SLURM so
that a missing piece fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO, cli_env

FIXTURES = REPO / "tests" / "doctor" / "fixtures"
WRAPPER = REPO / "docs" / "examples" / "slurm-healthcheck.sh"
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "scontrol")
WAIT_S = 90.0
"""Bound on any wait for the cluster (a hang bound on a loaded machine, not a timing)."""


def _require_slurm() -> None:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    why = f"needs {', '.join(missing)} (Debian's slurmd, slurmctld, slurm-client, munge)" if missing else ""
    if not why and os.geteuid() != 0:
        why = "slurmd runs jobs as their user and health checks as root: needs root"
    if not why:
        return
    if os.environ.get("FABRICSCOPE_REQUIRE_SLURM"):
        pytest.fail(f"{why} (FABRICSCOPE_REQUIRE_SLURM is set: this test must run here)")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    folder: Path
    node: str
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = WAIT_S) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout, check=False)

    def node_state(self) -> dict[str, str]:
        done = self.run("scontrol", "show", "node", self.node, "--oneliner")
        fields: dict[str, str] = {}
        for item in done.stdout.split():
            key, sep, value = item.partition("=")
            if sep:
                fields[key] = value
        reason = done.stdout.partition(" Reason=")[2]
        fields["Reason"] = reason.rsplit(" [", 1)[0] if reason else ""
        return fields

    def health_checks(self) -> int:
        log = self.folder / "checks.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def set_root(self, tree: str) -> None:
        (self.folder / "root").write_text(str(FIXTURES / tree))

    def logged(self, *lines: str) -> None:
        """slurmd's log once it holds every one of ``lines``: slurmd writes a prolog's outcome after the
        prolog's own ``scontrol`` drain shows (CI read the log in between once)."""
        log = self.folder / "slurmd.log"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if all(line in text for line in lines):
                return
            time.sleep(0.2)
        tail = log.read_text(errors="replace")[-2000:]
        raise AssertionError(f"{lines!r} not all in slurmd's log within {WAIT_S:g} s:\n{tail}")

    def wait(self, what: str, done: object) -> dict[str, str]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            state = self.node_state()
            if done(state):  # type: ignore[operator]
                return state
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {WAIT_S:g} s; node is {self.node_state()}")


def _write_config(folder: Path, node: str) -> Path:
    conf = folder / "slurm.conf"
    conf.write_text(
        f"""ClusterName=fabricscope
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge.sock
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
HealthCheckProgram={folder}/healthcheck
HealthCheckInterval=2
HealthCheckNodeState=ANY
Prolog={folder}/prolog
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
""",
        encoding="utf-8",
    )
    # slurmd runs the health check with an empty environment: the documented settings file says the rest.
    (folder / "healthcheck.conf").write_text(
        f"export SLURM_CONF={conf}\n"
        f"FABRICSCOPE={Path(sys.executable).parent / 'fabricscope'}\n"
        f'FABRICSCOPE_DOCTOR_ARGS="--root $(cat {folder}/root)"\n'
        f"date >> {folder}/checks.log\n",
        encoding="utf-8",
    )
    run = f"FABRICSCOPE_HEALTHCHECK_CONF={folder}/healthcheck.conf exec {WRAPPER}\n"
    script = folder / "healthcheck"
    script.write_text(f"#!/bin/sh\n[ -e {folder}/paused ] && exit 0\n{run}")  # a test of the prolog pauses it
    script.chmod(0o755)
    prolog = folder / "prolog"
    prolog.write_text(f"#!/bin/sh\n{run}")
    prolog.chmod(0o755)
    return conf


def _stop(pid_file: Path) -> None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 3  # the daemons stop cleanly in a moment; nothing of theirs is kept
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def slurm() -> Iterator[Cluster]:
    """One cluster for the module's tests (starting and stopping the daemons is most of their time);
    each test leaves the node healthy and undrained."""
    _require_slurm()
    folder = Path(f"/tmp/fabricscope-slurm-{os.getpid()}")  # short: munge's socket path must fit a sun_path
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "state").mkdir(parents=True)
    (folder / "spool").mkdir()
    node = socket.gethostname().split(".")[0]
    conf = _write_config(folder, node)
    env = {**cli_env(), "SLURM_CONF": str(conf)}
    subprocess.run(["mungekey", "-c", "-k", str(folder / "munge.key")], check=True, capture_output=True)
    (folder / "munge.key").chmod(0o400)
    try:
        subprocess.run(
            [
                "munged",
                "--force",
                f"--key-file={folder}/munge.key",
                f"--socket={folder}/munge.sock",
                f"--pid-file={folder}/munged.pid",
                f"--log-file={folder}/munged.log",
                f"--seed-file={folder}/munged.seed",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, capture_output=True, env=env, timeout=30)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, capture_output=True, env=env, timeout=30)
        cluster = Cluster(folder=folder, node=node, env=env)
        cluster.set_root("healthy-ib-8gpu")
        cluster.wait("the node registers", lambda s: "State" in s and "UNKNOWN" not in s["State"])
        yield cluster
    finally:
        for name in ("slurmd", "slurmctld", "munged"):
            _stop(folder / f"{name}.pid")
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_srun_starts_bench_ranks_for_real(slurm: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "srun.json"
    fabricscope = str(Path(sys.executable).parent / "fabricscope")
    argv = ["all_reduce", "-b", "1K", "-e", "8K", "-n", "3", "-w", "1", "--json", str(out)]
    done = slurm.run("srun", "-N1", "-n2", "--kill-on-bad-exit=1", fabricscope, "bench", *argv, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "# Collective test concluded: all_reduce_perf" in done.stdout
    result = json.loads(out.read_text())
    assert result["status"] == "complete"
    assert len({r["size_bytes"] for r in result["records"]}) == 4
    assert result["env"]["launcher"] == "slurm" and result["env"]["world_size"] == 2
    assert [r["rank"] for r in result["host"]["ranks"]] == [0, 1]


@pytest.mark.slow
def test_healthcheck_drains_a_faulty_node_and_resumes_it_when_healthy(slurm: Cluster) -> None:
    slurm.set_root("host-faults-8gpu")
    drained = slurm.wait("drained for the planted faults", lambda s: "DRAIN" in s["State"])
    assert drained["Reason"].startswith("fabricscope: FAIL (12 fail, 9 warn) "), drained["Reason"]
    slurm.set_root("healthy-ib-8gpu")
    resumed = slurm.wait("resumed once healthy", lambda s: "DRAIN" not in s["State"])
    assert resumed["Reason"] in ("", "(null)") or not resumed["Reason"].startswith("fabricscope:")


@pytest.mark.slow
def test_as_prolog_a_faulty_node_runs_no_job_and_is_drained(slurm: Cluster, tmp_path: Path) -> None:
    """The same script as the node's Prolog, with the periodic check paused: the job's prolog finds the
    planted faults, drains the node with the doctor's reason and fails, so the job never runs there."""
    slurm.set_root("healthy-ib-8gpu")
    slurm.wait("undrained before the test", lambda s: "DRAIN" not in s["State"])
    ran = tmp_path / "ran"
    (slurm.folder / "paused").touch()
    slurm.set_root("host-faults-8gpu")
    done = slurm.run("sbatch", "--parsable", "-N1", "-n1", "-o", "/dev/null", f"--wrap=touch {ran}")
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    try:
        drained = slurm.wait("drained by the prolog", lambda s: "DRAIN" in s["State"])
        # The job's prolog failed, and its reason is in the log.
        slurm.logged(
            f"[job {job}] prolog failed status=1:0", "prolog failed: rc:1 output:fabricscope: FAIL (12 fail, 9 warn) "
        )
        assert drained["Reason"].startswith("fabricscope: FAIL (12 fail, 9 warn) "), drained  # Slurm keeps it
        queued = slurm.run("squeue", "-h", "-j", job, "-o", "%T %r").stdout
        assert queued.startswith("PENDING") and "held" in queued, queued  # requeued, not run
        assert not ran.exists()
    finally:
        slurm.run("scancel", job)
        slurm.set_root("healthy-ib-8gpu")
        (slurm.folder / "paused").unlink()
        slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=resume")
        slurm.wait("resumed after the test", lambda s: "DRAIN" not in s["State"])


@pytest.mark.slow
def test_healthcheck_leaves_an_administrators_drain_alone(slurm: Cluster) -> None:
    slurm.set_root("healthy-ib-8gpu")
    slurm.wait("undrained before the test", lambda s: "DRAIN" not in s["State"])
    done = slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=drain", "reason=new PSU")
    assert done.returncode == 0, done.stderr
    before = slurm.health_checks()
    deadline = time.monotonic() + WAIT_S
    while slurm.health_checks() < before + 2 and time.monotonic() < deadline:  # two checks ran on a healthy root
        time.sleep(0.5)
    assert slurm.health_checks() >= before + 2
    state = slurm.node_state()
    assert "DRAIN" in state["State"] and state["Reason"] == "new PSU"
    assert slurm.run("scontrol", "update", f"nodename={slurm.node}", "state=resume").returncode == 0


@pytest.mark.slow
def test_healthcheck_called_wrongly_leaves_the_node_alone(slurm: Cluster) -> None:
    """A typo in the settings is the doctor's usage error (exit 2, an error line, no verdict): the same on
    every node, it must not drain them all (the script drained on any exit 2, with an empty reason)."""
    slurm.set_root("healthy-ib-8gpu")
    slurm.wait("undrained before the test", lambda s: "DRAIN" not in s["State"])
    (slurm.folder / "root").write_text(f"{FIXTURES / 'healthy-ib-8gpu'} --expect {slurm.folder}/no-such-expect.toml")
    try:
        before = slurm.health_checks()
        deadline = time.monotonic() + WAIT_S
        while slurm.health_checks() < before + 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm.health_checks() >= before + 2
        state = slurm.node_state()
        assert "DRAIN" not in state["State"], state
    finally:
        slurm.set_root("healthy-ib-8gpu")
