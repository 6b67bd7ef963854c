"""Local ranks are forked from their launcher, after it has imported what they need once (``warm``).

The commands' own runs (bench, pairs: killed, frozen, interrupted ranks) exercise the supervision; these
tests pin what a rank is given.  ``spawn`` runs in a fresh interpreter: it forks its caller, and a pytest
worker has threads of its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from helpers import cli_env

PROBE = """\
import json, os, sys
def main():
    with open(os.path.join(os.environ["PROBE_OUT"], os.environ["RANK"] + ".json"), "w") as out:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv,
                   "warmed": "colorsys" in sys.modules, "world": os.environ["WORLD_SIZE"],
                   "extra": os.environ.get("PROBE_EXTRA")}, out)
    sys.exit(3 if os.environ["RANK"] == "2" else 0)
if __name__ == "__main__":
    main()
"""

LAUNCHER = """\
import importlib, json, os, sys
from fabricscope.launch import spawn
warm = (lambda: importlib.import_module("colorsys")) if sys.argv[1] == "warm" else None
code = spawn(3, ["rankprobe", "a", "b"], {"PROBE_EXTRA": "x"}, grace_s=30.0, warm=warm)
print(json.dumps({"pid": os.getpid(), "code": code, "warmed": "colorsys" in sys.modules}))
"""


@pytest.mark.parametrize("how", ["warm", "cold"])
def test_each_rank_is_a_fork_of_the_launcher_with_its_world_arguments_and_what_was_warmed(tmp_path, how):
    (tmp_path / "rankprobe.py").write_text(PROBE)
    env = cli_env({"PROBE_OUT": str(tmp_path), "PYTHONPATH": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, how], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    launcher = json.loads(done.stdout)
    assert launcher["code"] == 3  # rank 2's, the one rank that did not succeed
    ranks = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(3)]
    assert [r["ppid"] for r in ranks] == [launcher["pid"]] * 3
    assert all(r["world"] == "3" and r["extra"] == "x" for r in ranks)
    assert [r["argv"][1:] for r in ranks] == [["a", "b"]] * 3
    assert launcher["warmed"] == (how == "warm")
    # A rank holds what the launcher imported before forking it, and only that.
    assert [r["warmed"] for r in ranks] == [how == "warm"] * 3


def test_a_rank_that_raises_ends_with_one_and_its_traceback_on_stderr(tmp_path):
    (tmp_path / "rankprobe.py").write_text("def main():\n    raise ValueError('rank went wrong')\n")
    env = cli_env({"PYTHONPATH": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, "warm"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["code"] == 1
    assert done.stderr.count("ValueError: rank went wrong") == 3


def test_nothing_the_launcher_buffered_is_written_twice(tmp_path):
    (tmp_path / "rankprobe.py").write_text("def main():\n    pass\n")
    env = cli_env({"PYTHONPATH": str(tmp_path)})
    del env["PYTHONUNBUFFERED"]  # the launcher's stdout buffers what it wrote before the fork
    script = "import sys\nsys.stdout.write('said once\\n')\n" + LAUNCHER
    done = subprocess.run(
        [sys.executable, "-c", script, "warm"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("said once") == 1


def test_ranks_are_reaped_by_their_launcher_even_when_it_was_started_with_sigchld_ignored(tmp_path):
    """An ignored SIGCHLD survives exec: the kernel would reap the ranks itself and their codes be lost."""
    (tmp_path / "rankprobe.py").write_text(PROBE)
    env = cli_env({"PROBE_OUT": str(tmp_path), "PYTHONPATH": str(tmp_path)})
    script = "import signal\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n" + LAUNCHER
    done = subprocess.run(
        [sys.executable, "-c", script, "cold"], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["code"] == 3  # rank 2's own code, not 1 for a code lost


SWALLOWING_WARM = """\
import sys, time
from fabricscope.launch import spawn
def warm():  # as torch's import does with a KeyboardInterrupt raised inside its import of numpy
    print("warming", flush=True)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            time.sleep(0.01)
        except KeyboardInterrupt:
            pass
print("code", spawn(2, ["rankprobe"], {}, grace_s=30.0, warm=warm))
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_while_the_launcher_warms_ends_it_at_once_whatever_the_import_does(tmp_path, stop):
    (tmp_path / "rankprobe.py").write_text("def main():\n    raise AssertionError('no rank may start')\n")
    env = cli_env({"PYTHONPATH": str(tmp_path)})
    proc = subprocess.Popen(
        [sys.executable, "-c", SWALLOWING_WARM], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "warming\n"
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=30)  # a hang bound: the warm-up alone runs 60 s
    assert proc.returncode == 130, err
    assert err == "interrupted while starting up: no rank had started\n"
    assert "code" not in out


ENDINGS = """\
import os, signal, sys, time
def main():
    rank, how = os.environ["RANK"], os.environ["ENDING"]
    if how == "stopped_after_rank_0" and rank == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped once the work is done, never to exit
    if how == "hung_after_rank_0" and rank == "1":
        time.sleep(3600)
    if how == "killed_while_rank_0_finishes" and rank == "1":
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "killed_while_rank_0_finishes" and rank == "0":
        time.sleep(1.5)
        sys.exit(2)  # its verdict, counting the rank that died (doctor's FAIL)
    if how == "rank_0_stopped_after_the_others" and rank == "0":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGSTOP)
    if how == "killed_after_rank_0" and rank == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "failed_and_killed_at_once" and rank == "0":
        time.sleep(0.3)
        sys.exit(1)
    if how == "failed_and_killed_at_once" and rank == "1":
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    return 0
"""

SUPERVISOR = """\
import json, sys
from fabricscope.launch import spawn
print(json.dumps({"code": spawn(2, ["rankendings"], {}, grace_s=float(sys.argv[1]))}))
"""


@pytest.mark.parametrize(
    "ending, code, said",
    [
        ("stopped_after_rank_0", 0, "warning: rank 1 (pid {pid} on {host}) was stopped (SIGSTOP or a debugger) after "
         "rank 0 finished, and was killed"),
        ("hung_after_rank_0", 0, "warning: rank 1 (pid {pid} on {host}) did not exit after rank 0 finished and was "
         "killed"),
        ("killed_after_rank_0", 0, "warning: rank 1 (pid {pid} on {host}) was killed by SIGKILL after rank 0 finished"),
        ("failed_and_killed_at_once", 1, "error: rank 1 (pid {pid} on {host}) was killed by SIGKILL"),
        ("killed_while_rank_0_finishes", 2, "error: rank 1 (pid {pid} on {host}) was killed by SIGKILL"),
        ("rank_0_stopped_after_the_others", 1, "error: rank 0 (pid {pid} on {host}) was stopped (SIGSTOP or a "
         "debugger) after the other ranks finished, and was killed"),
    ],
)  # fmt: skip
def test_every_rank_that_does_not_end_on_its_own_is_named(tmp_path, ending, code, said):
    """The launcher names each rank it had to deal with: one stopped or hung after rank 0 finished (it waited
    for it forever; the run keeps rank 0's code), one killed by a signal in the same moment another failed
    (only the first failure was named), one killed while rank 0 finishes (rank 0's verdict is the run's
    code, not 1), and a rank 0 stopped after every other rank finished (it waited forever)."""
    import socket

    (tmp_path / "rankendings.py").write_text(ENDINGS)
    env = cli_env({"PYTHONPATH": str(tmp_path), "ENDING": ending})
    launcher = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        stdout, stderr = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, stderr
    assert json.loads(stdout)["code"] == code, stderr
    pids = [int(line.split("pid ")[1].split()[0].rstrip(")")) for line in stderr.splitlines() if "pid " in line]
    assert len(pids) == 1, stderr
    assert said.format(pid=pids[0], host=socket.gethostname()) in stderr, stderr
    assert "Traceback" not in stderr
