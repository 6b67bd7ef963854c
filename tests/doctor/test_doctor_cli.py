"""The real command line: exit codes, one-line errors, --json, --capture, --list, import cost."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doctor_helpers import FIXTURES, REPO, cli

from fabricscope.results import load
from helpers import cli_env, imported_by_help, skip_or_fail

HEALTHY = str(FIXTURES / "healthy-ib-8gpu")
DEGRADED = str(FIXTURES / "degraded-ib-8gpu")
EXPECT = str(FIXTURES / "expect-h100-ib.toml")


def assert_one_line_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_exit_codes_follow_the_worst_finding() -> None:
    healthy = cli("--root", HEALTHY, "--expect", EXPECT)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "verdict: OK (exit 0) on gpu-node-01" in healthy.stdout
    assert cli("--root", str(FIXTURES / "vm-virtio")).returncode == 0  # 4M TCP buffers suffice for its NIC
    degraded = cli("--root", DEGRADED)
    assert degraded.returncode == 2
    assert "verdict: FAIL (exit 2) on gpu-node-07: 4 fail" in degraded.stdout
    assert "advice:" in degraded.stdout and "rdma.port_state [mlx5_5/1]" in degraded.stdout


def test_report_groups_by_area_and_collapses_ok_rows() -> None:
    out = cli("--root", HEALTHY).stdout
    for area in ("probe", "nic", "rdma", "pcie", "gpu", "topology", "gpudirect", "nccl", "tcp"):
        assert f"│ {area} " in out
    assert "10: mlx5_0/1 … mlx5_9/1" in out
    verbose = cli("--root", HEALTHY, "--verbose").stdout
    assert "mlx5_7/1" in verbose and verbose.count("port_state") == 10


@pytest.mark.skipif(not Path("/sys/class/net").is_dir(), reason="needs a Linux /sys")
def test_process_environment_reaches_the_checks_on_the_live_root() -> None:
    result = cli("--verbose", env={"NCCL_DEBUG": "INFO"})
    assert "NCCL_DEBUG=INFO (environment)" in result.stdout
    assert "nccl.debug [NCCL_DEBUG]" in result.stdout  # its advice


def test_a_captured_tree_uses_the_environment_it_recorded_and_says_so() -> None:
    result = cli("--root", str(FIXTURES / "vm-virtio"), "--verbose", env={"NCCL_DEBUG": "INFO"})
    out = " ".join(result.stdout.split())
    assert "no NCCL variables set" in out
    assert "NCCL variables from the environment the capture recorded" in out
    assert "not used from this shell: NCCL_DEBUG" in out and "--live-env" in out
    assert not only_lines(result.stdout, "nccl.debug")
    live = cli("--root", str(FIXTURES / "vm-virtio"), "--verbose", "--live-env", env={"NCCL_DEBUG": "INFO"})
    assert "NCCL_DEBUG=INFO (environment)" in live.stdout
    assert "nccl.debug [NCCL_DEBUG]" in live.stdout and live.returncode == 1


def only_lines(text: str, check: str) -> list[str]:
    return [line for line in text.splitlines() if check in line]


def test_json_is_a_doctor_result(tmp_path: Path) -> None:
    out = tmp_path / "node.json"
    result = cli("--root", DEGRADED, "--expect", EXPECT, "--json", str(out))
    assert result.returncode == 2
    loaded = load(out)
    assert loaded.kind == "doctor"
    assert loaded.summary["exit_code"] == 2 and loaded.summary["verdict"] == "fail"
    assert loaded.config["expect"]["nic_count"] == 8
    record = next(r for r in loaded.records if r["id"] == "rdma.port_state" and r["severity"] == "fail")
    assert set(record) >= {"id", "severity", "subject", "observed", "expected", "advice", "area"}
    assert record["subject"] == "mlx5_5/1" and record["advice"]
    assert loaded.summary["facts"]["GPUDirect RDMA"] == "none"
    assert json.loads(out.read_text())["format"] == "fabricscope-result"


@pytest.mark.parametrize(
    ("tree", "args", "env"),
    [
        ("healthy-ib-8gpu", [], {}),  # ok and info findings: OK
        ("vm-virtio", [], {}),
        ("vm-virtio", ["--live-env"], {"NCCL_DEBUG": "INFO"}),  # WARN
        ("degraded-ib-8gpu", [], {}),
        ("roce-4gpu", [], {}),
        ("broken", [], {}),
    ],
)
def test_json_verdict_is_the_printed_verdict(tree: str, args: list[str], env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "node.json"
    result = cli("--root", str(FIXTURES / tree), "--json", str(out), *args, env=env)
    printed = re.search(r"verdict: (\w+) \(exit (\d)\)", result.stdout)
    assert printed is not None, result.stdout + result.stderr
    summary = load(out).summary
    assert summary["verdict"] == printed.group(1).lower()
    assert summary["verdict"] in ("ok", "warn", "fail")
    assert summary["exit_code"] == int(printed.group(2)) == result.returncode


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--root", "/no/such/dir"], ["--root /no/such/dir: no such directory"]),
        (["--root", str(FIXTURES / "expect-h100-ib.toml")], ["expect-h100-ib.toml: a file, not a directory"]),
        (["--root", str(REPO / "src")], ["no sys/ or proc/ inside"]),
        (["--root", HEALTHY, "--expect", "/no/such.toml"], ["--expect /no/such.toml: no such file"]),
        (["--root", HEALTHY, "--nproc", "zero"], ["--nproc must be a whole number from 1 to 1024, got 'zero'"]),
        (["--root", HEALTHY, "--nproc", "0"], ["--nproc must be a whole number from 1 to 1024, got '0'"]),
        (["--root", HEALTHY, "--nproc", "1025"], ["--nproc must be a whole number from 1 to 1024, got '1025'"]),
        (["--root", HEALTHY, "--nproc", "100000"], ["got '100000': for more ranks, start them on several nodes"]),
        (["--root", HEALTHY, "--nproc", "9" * 400], ["--nproc must be a whole number from 1 to 1024, got '999"]),
        (["--root", HEALTHY, "--timeout", "soon"], ["--timeout", "'soon'"]),
        (["--root", HEALTHY, "--timeout", "0"], ["--timeout must be a duration from 1 s to 7 days", "got '0'"]),
        (["--root", HEALTHY, "--timeout", "0.5"], ["--timeout must be a duration from 1 s to 7 days", "got '0.5'"]),
        (["--root", HEALTHY, "--timeout", "9" * 400], ["--timeout must be a duration from 1 s to 7 days", "got '999"]),
        (["--root", HEALTHY, "--json", ""], ["--json needs a file name, got an empty one"]),
        (["--root", "/", "--json", "/proc/x.json"], ["--json /proc/x.json is inside /proc, an input"]),
        (["--root", HEALTHY, "--capture", ""], ["--capture needs a folder name, got an empty one"]),
        (["--root", HEALTHY, "--expect", ""], ["--expect needs a file name, got an empty one"]),
        (["--root", HEALTHY, "--bogus"], ["unrecognized arguments: --bogus"]),
    ],
)
def test_usage_errors_are_one_line(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(cli(*args), *fragments)


def test_malformed_and_unknown_expect_keys(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[nic]\ncount = 8\nrate = \n")
    assert_one_line_error(cli("--root", HEALTHY, "--expect", str(bad)), f"--expect {bad}: malformed TOML")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[nic]\ncount = 8\nlinklayer = "InfiniBand"\n')
    assert_one_line_error(
        cli("--root", HEALTHY, "--expect", str(unknown)),
        f"{unknown}: unknown key 'nic.linklayer' (did you mean 'link_layer'?)",
        "allowed keys are count, rate, mtu, link_layer, devices",
    )
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('[gpu]\nnic_distance = "near"\n')
    assert_one_line_error(
        cli("--root", HEALTHY, "--expect", str(wrong)), "gpu.nic_distance must be one of PIX, PXB, PHB, NODE, SYS"
    )


def test_capture_then_root(tmp_path: Path) -> None:
    target = tmp_path / "cap"
    first = cli("--root", DEGRADED, "--capture", str(target), "--json", str(tmp_path / "first.json"))
    assert first.returncode == 2
    assert "captured" in first.stderr and str(target) in first.stderr
    second = cli("--root", str(target), "--json", str(tmp_path / "second.json"))
    assert second.returncode == 2
    assert first.stdout.splitlines()[-1] == second.stdout.splitlines()[-1]  # the verdict line

    def records(name: str) -> list[dict[str, object]]:
        return [r for r in load(tmp_path / name).records if r["id"] != "probe.read"]

    assert records("first.json") == records("second.json")
    assert_one_line_error(cli("--root", DEGRADED, "--capture", str(target)), "exists and is not an empty directory")


def test_list_names_every_check() -> None:
    result = cli("--list")
    assert result.returncode == 0
    for check_id in ("rdma.port_state", "pcie.link", "topology.gpu_nic", "nccl.ib_hca", "tcp.buffers"):
        assert check_id in result.stdout


def test_command_module_imports_only_the_standard_library() -> None:
    assert imported_by_help(("rich", "torch", "numpy", "pydantic", "fabricscope.doctor.checks")) == []


def test_a_run_without_expectations_does_not_import_the_config_validator() -> None:
    """pydantic's validator of an --expect file costs a plain run a third of its time (HealthCheckProgram and
    prologs run it on every node): built only when something is expected."""
    code = (
        "import sys; from fabricscope.cli import main; code = main(sys.argv[1:]); "
        "print('pydantic' in sys.modules, file=sys.stderr); raise SystemExit(code)"
    )
    for extra, loaded in (([], False), (["--expect", EXPECT], True)):
        done = subprocess.run(
            [sys.executable, "-c", code, "doctor", "--root", HEALTHY, *extra],
            capture_output=True,
            text=True,
            env=cli_env(),
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[-1] == str(loaded)


@pytest.mark.skipif(not Path("/sys/class/net").is_dir(), reason="needs a Linux /sys")
def test_real_machine_runs() -> None:
    result = cli()
    assert result.returncode in (0, 1, 2)
    assert "verdict:" in result.stdout and "Traceback" not in result.stderr


def test_a_json_in_a_missing_folder_is_refused_before_any_work(tmp_path: Path) -> None:
    result = cli("--root", HEALTHY, "--json", str(tmp_path / "no/such/dir/node.json"))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line == f"error: --json {tmp_path}/no/such/dir/node.json: the folder {tmp_path}/no/such/dir does not exist"


def test_a_json_in_a_missing_folder_is_refused_before_local_ranks_start(tmp_path: Path) -> None:
    result = cli("--nproc", "2", "--root", HEALTHY, "--json", str(tmp_path / "no/node.json"))
    assert_one_line_error(result, f"--json {tmp_path}/no/node.json: the folder {tmp_path}/no does not exist")


def test_a_json_that_fails_while_written_is_exit_3_after_the_report() -> None:
    if not Path("/dev/full").is_char_device():
        skip_or_fail("needs /dev/full")
    result = cli("--root", HEALTHY, "--json", "/dev/full")
    assert result.returncode == 3, result.stderr
    assert "verdict: OK (exit 0)" in result.stdout  # the findings are still shown
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: --json /dev/full: cannot write /dev/full: No space left") and "no verdict" in line
    assert Path("/dev/full").is_char_device()  # written through, never replaced


def test_a_crash_is_exit_3_not_a_verdict(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fabricscope import cli as command_line
    from fabricscope.doctor import diagnosis

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(diagnosis, "diagnose", boom)
    assert command_line.main(["doctor", "--root", HEALTHY]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err  # a bug: where it happened
    assert err.strip().splitlines()[-1].startswith("error: fabricscope doctor could not complete (RuntimeError: boom)")


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``doctor ... | head -1`` once head has gone: stdout is a real pipe whose reader is closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "fabricscope", "doctor", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(("tree", "verdict"), [("degraded-ib-8gpu", 2), ("healthy-ib-8gpu", 0)])
def test_a_closed_stdout_keeps_the_verdict(tree: str, verdict: int) -> None:
    done = run_into_closed_pipe("--root", str(FIXTURES / tree))
    assert done.returncode == verdict, done.stderr  # a health check's exit code is its verdict
    assert done.stderr == ""


def test_a_closed_stdout_keeps_the_verdict_and_the_json(tmp_path: Path) -> None:
    out = tmp_path / "node.json"
    done = run_into_closed_pipe("--root", DEGRADED, "--json", str(out))
    assert done.returncode == 2, done.stderr
    assert load(out).summary["verdict"] == "fail"


@pytest.mark.multiprocess
def test_a_closed_stdout_keeps_the_fleet_verdict(tmp_path: Path) -> None:
    done = run_into_closed_pipe("--nproc", "2", "--root", DEGRADED, "--timeout", "60")
    assert done.returncode == 2, done.stderr
    assert done.stderr == ""


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path: Path) -> None:
    expect = tmp_path / "e.toml"
    expect.write_text(Path(EXPECT).read_text())
    before = expect.read_bytes()
    assert_one_line_error(
        cli("--root", HEALTHY, "--expect", str(expect), "--json", str(expect)),
        f"--json {expect} is also an input of this command: writing it would destroy it",
    )
    link = tmp_path / "link.json"
    link.symlink_to(expect)
    assert_one_line_error(cli("--root", HEALTHY, "--expect", str(expect), "--json", str(link)), "is also an input")
    assert expect.read_bytes() == before
    tree = tmp_path / "node"
    shutil.copytree(HEALTHY, tree, symlinks=True)
    conf = tree / "etc/nccl.conf"
    conf_before = conf.read_bytes()
    assert_one_line_error(cli("--root", str(tree), "--json", str(conf)), f"--json {conf} is inside {tree}, an input")
    assert conf.read_bytes() == conf_before
    assert_one_line_error(cli("--root", str(tree), "--json", str(tree / "node.json")), f"is inside {tree}, an input")
    assert not (tree / "node.json").exists()
    assert_one_line_error(
        cli("--root", str(tree), "--capture", str(tree / "cap")), f"--capture {tree}/cap is inside {tree}, which the"
    )
    assert not (tree / "cap").exists()


def test_an_output_inside_a_rank_s_root_is_refused_before_any_rank(tmp_path: Path) -> None:
    for rank in (0, 1):
        shutil.copytree(HEALTHY, tmp_path / f"node{rank}", symlinks=True)
    target = tmp_path / "node1/fleet.json"
    result = cli("--nproc", "2", "--root", str(tmp_path / "node{rank}"), "--json", str(target))
    assert_one_line_error(result, f"--json {target} is inside {tmp_path}/node1, an input of this command")


def test_on_the_live_root_an_nccl_conf_file_is_not_an_output(tmp_path: Path) -> None:
    conf = tmp_path / "my-nccl.conf"
    conf.write_text("NCCL_DEBUG=WARN\n")
    result = cli("--root", "/", "--json", str(conf), env={"NCCL_CONF_FILE": str(conf)})
    assert_one_line_error(result, f"--json {conf} is also an input of this command")
    assert conf.read_text() == "NCCL_DEBUG=WARN\n"


def test_json_dash_is_stdout_and_the_report_moves_to_stderr() -> None:
    result = cli("--root", DEGRADED, "--json", "-")
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["summary"]["verdict"] == "fail"  # stdout holds the JSON alone
    assert result.stderr.strip().splitlines()[-1].startswith("verdict: FAIL (exit 2) on gpu-node-07")
    assert not (REPO / "-").exists()


def test_a_root_name_too_long_is_one_line(tmp_path: Path) -> None:
    result = cli("--root", str(tmp_path / ("n" * 5000)))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --root {tmp_path}") and "File name too long" in line and len(line) < 400
