"""The doctor as a health-check plugin: ``--oneline`` for Slurm's drain reason, ``--npd`` for
node-problem-detector's custom plugin protocol (exit 0 OK, 1 problem, 2 unknown; one line of stdout).

Each case runs the real command line as the plugin runner does and reads what it reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, REPO, cli, run_fixture

from fabricscope.doctor.findings import Finding, Severity
from fabricscope.doctor.report import ONE_LINE, one_line
from helpers import skip_or_fail

HEALTHY = str(FIXTURES / "healthy-ib-8gpu")
FAULTY = str(FIXTURES / "host-faults-8gpu")


@pytest.mark.parametrize(
    ("tree", "oneline_code", "npd_code", "start"),
    [
        ("healthy-ib-8gpu", 0, 0, "OK ("),
        ("host-faults-8gpu", 2, 1, "FAIL (12 fail, 9 warn) "),
        ("roce-4gpu", 2, 1, "FAIL (1 fail, 8 warn) nccl.socket_ifname"),
    ],
)
def test_one_line_and_the_npd_exit_codes(tree: str, oneline_code: int, npd_code: int, start: str) -> None:
    for flag, code in (("--oneline", oneline_code), ("--npd", npd_code)):
        done = cli(flag, "--root", str(FIXTURES / tree))
        assert done.returncode == code, done.stderr
        [line] = done.stdout.splitlines()
        assert line.startswith(start) and len(line) <= ONE_LINE and line.isascii() and '"' not in line
        assert done.stderr == ""


def test_npd_counts_warnings_as_ok() -> None:
    findings = run_fixture("degraded-ib-8gpu").findings
    warn_only = [f for f in findings if f.severity is not Severity.FAIL]
    assert one_line(warn_only, "n").startswith("WARN (10 warn) ")
    done = cli("--npd", "--root", str(FIXTURES / "vm-virtio"))
    assert done.returncode == 0 and done.stdout.startswith("OK (")


def test_npd_unknown_when_the_doctor_cannot_complete() -> None:
    if not Path("/dev/full").is_char_device():
        skip_or_fail("needs /dev/full")
    done = cli("--npd", "--root", HEALTHY, "--json", "/dev/full")
    assert done.returncode == 2, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith("UNKNOWN: --json /dev/full: cannot write") and len(line) <= ONE_LINE
    assert done.stderr.strip().splitlines()[-1].startswith("error: --json /dev/full")


def test_npd_called_wrongly_is_unknown_too() -> None:
    done = cli("--npd", "--root", "/no/such/tree")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "error: --root /no/such/tree: no such directory"


def test_fleet_mode_refuses_the_one_line_flags() -> None:
    done = cli("--oneline", "--nproc", "2", "--root", HEALTHY)
    assert done.returncode == 2
    assert "--oneline checks this node" in done.stderr


def test_a_hostile_finding_stays_one_short_safe_line() -> None:
    hostile = Finding(
        id="nic.mtu", severity=Severity.FAIL, subject='eth0"\n\x1b[31m', observed="é" * 500, expected="", advice=""
    )
    line = one_line([hostile], "n")
    assert len(line) == ONE_LINE and line.isascii() and "\n" not in line and '"' not in line and "\x1b" not in line


def test_the_npd_example_runs_this_command() -> None:
    config = json.loads((REPO / "docs/examples/npd-fabricscope.json").read_text())
    [rule] = config["rules"]
    assert config["plugin"] == "custom" and rule["args"][:2] == ["doctor", "--npd"]
    assert config["pluginConfig"]["max_output_length"] == ONE_LINE


def test_a_cut_line_keeps_the_counts_whatever_the_host_name() -> None:
    findings = run_fixture("healthy-ib-8gpu").findings
    longest = "gpu-node-0001.rack-17.row-b.datacenter-east.cluster.example.com"  # 64 characters: the kernel's most
    line = one_line(findings, longest)
    assert len(line) <= ONE_LINE and line.startswith("OK (") and " ok, " in line.split(")")[0], line


def test_oneline_and_npd_together_are_one_usage_line() -> None:
    done = cli("--oneline", "--npd", "--root", HEALTHY)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: --npd is --oneline with node-problem-detector's exit codes (0 ok, 1 problem, 2 unknown): "
        "give one of them"
    ]
