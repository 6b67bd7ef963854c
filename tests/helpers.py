"""Shared test helpers: run the real CLI in a subprocess, watch its processes, parse its table.

Imported as ``from helpers import ...`` (pytest puts ``tests/`` on the path).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


RUNNER_PREFIXES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_",
    "MASTER_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "SLURM_",
    "TORCHELASTIC_",
    "NCCL_",
)
"""Variables of the test runner's own environment that would change what a command does: a launcher's
world, NCCL settings (the doctor reads them).  Every way the tests run the CLI drops them."""
RUNNER_NAMES = ("FABRICSCOPE_LAUNCHER",)


def runner_variables(environ: Mapping[str, str]) -> list[str]:
    """The names in ``environ`` that :data:`RUNNER_PREFIXES` and :data:`RUNNER_NAMES` cover."""
    return [k for k in environ if k.startswith(RUNNER_PREFIXES) or k in RUNNER_NAMES]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a CLI subprocess, free of launcher and NCCL variables of the test runner."""
    dropped = set(runner_variables(os.environ))
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "200"
    env.update(extra or {})
    return env


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fabricscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
        cwd=cwd,
    )


def run_ranks(
    cmd: Sequence[str],
    env: Mapping[str, str],
    per_rank: Sequence[Mapping[str, str]],
    timeout: float = 180,
    cwds: Sequence[Path] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """Start one process per rank as a launcher would (``per_rank[r]`` adds rank r's variables); wait for all."""
    procs = [
        subprocess.Popen(
            list(cmd),
            env=cli_env({**env, **extra}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwds[rank] if cwds else None,
        )
        for rank, extra in enumerate(per_rank)
    ]
    done = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return done


def start_cli(args: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fabricscope", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(env),
        **kwargs,
    )


def table_rows(stdout: str) -> list[list[str]]:
    """Data lines of the nccl-tests table, split into columns."""
    return [line.split() for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def wait_for_records(path: Path, count: int, timeout: float = 120) -> dict[str, Any]:
    """Poll a result file written as rows complete until it holds ``count`` records."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = None
        if data and len(data["records"]) >= count:
            return data
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {count} records in {timeout} s")


def wait_for_ranks(out: Path, records: int) -> dict[int, int]:
    """Wait until the Result at ``out`` holds ``records`` records; each rank's pid (from its ``host``)."""
    data = wait_for_records(out, records)
    return {r["rank"]: r["pid"] for r in data["host"]["ranks"]}


def start_measuring(
    args: Sequence[str], out: Path, records: int, **kwargs: Any
) -> tuple[subprocess.Popen[str], dict[int, int]]:
    """Start ``fabricscope ARGS --json OUT`` and wait until OUT holds ``records`` records: the process, and
    each rank's pid, for a test that kills or stops one of them."""
    proc = start_cli([*args, "--json", str(out)], **kwargs)
    return proc, wait_for_ranks(out, records)


MARK = "FABRICSCOPE_TEST_MARK"
"""A variable a test sets for the commands it starts (their children inherit it): :func:`marked` finds
what is left of them, and not the processes of a test that another xdist worker runs at the same time."""


def marked(mark: str) -> list[int]:
    """The live processes whose environment holds ``FABRICSCOPE_TEST_MARK=mark``."""
    marker = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                variables = handle.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if marker in variables and alive(int(entry)):
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def assert_gone(pids: Sequence[int], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"processes still running: {left}")


def run_with_terminal_stderr(args: Sequence[str], timeout: float = 120) -> tuple[int, str, str]:
    """``fabricscope ARGS`` with stderr on a pseudo-terminal (where progress bars show) and stdout on a
    pipe: (exit code, stdout, what the terminal got)."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricscope", *args], stdout=subprocess.PIPE, stderr=follower, env=cli_env(), text=True
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the terminal's other end closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    stdout, _ = proc.communicate(timeout=timeout)
    os.close(leader)
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")


_STORE_HOST = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", int(sys.argv[1]), world_size=2, is_master=True, timeout=timedelta(seconds=60),
                 wait_for_workers=False)
print("listening", flush=True)
time.sleep(600)
"""


@contextlib.contextmanager
def stopped_store_host() -> Iterator[int]:
    """The port of a real rendezvous store whose process is stopped (SIGSTOP) once it listens: the kernel
    takes a connection to it, and no request is ever answered (torch's timeouts do not cover that)."""
    from fabricscope.launch import free_port

    port = free_port()
    host = subprocess.Popen([sys.executable, "-c", _STORE_HOST, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline() == "listening\n"
        os.kill(host.pid, signal.SIGSTOP)
        yield port
    finally:
        host.kill()
        host.communicate()


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``12k``) mounted on ``folder`` (made here) for the test, unmounted after: a disk
    that fills.  Skips (or fails where CI requires root) when mounting is not allowed."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        skip_or_fail("cannot mount a small tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def skip_or_fail(reason: str) -> None:
    """Skip a test that needs root's powers (namespaces, mounts, /dev/full) this machine lacks; fail
    instead where FABRICSCOPE_REQUIRE_ROOT is set (CI sets it: there the test must run)."""
    import pytest

    if os.environ.get("FABRICSCOPE_REQUIRE_ROOT"):
        pytest.fail(f"{reason} (FABRICSCOPE_REQUIRE_ROOT is set: this test must run here)")
    pytest.skip(reason)


def require_mpirun() -> str:
    """The path of ``mpirun``; the test is skipped without it, and fails when CI requires it."""
    import shutil

    import pytest

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        if os.environ.get("FABRICSCOPE_REQUIRE_MPI"):
            pytest.fail("mpirun is required (FABRICSCOPE_REQUIRE_MPI is set) but not installed")
        pytest.skip("mpirun (Debian's openmpi-bin) is not installed")
    return mpirun


def imported_by_help(modules: Sequence[str]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after building ``fabricscope --help`` (every command's
    parser): a command module must import only the standard library, so that ``--help`` stays fast."""
    code = (
        "import sys, fabricscope.cli; fabricscope.cli.build_parser().format_help(); "
        f"print(' '.join(m for m in {list(modules)!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    return done.stdout.split()


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test of a module that imports this runs twice: paths under a captured root resolved by the
    kernel (openat2 RESOLVE_IN_ROOT), and walked one link at a time (where openat2 cannot be used: an old
    kernel, a seccomp filter)."""
    if request.param == "walk":
        monkeypatch.setattr("fabricscope.in_root._call", False)
    return str(request.param)
