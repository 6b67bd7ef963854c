"""The rendezvous is bounded by -T and ends at once on Ctrl-C, whatever world size the launcher claims."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fabricscope.launch import free_port
from helpers import cli_env, stopped_store_host


def _bench(world_size: int, timeout: str) -> subprocess.Popen[str]:
    env = cli_env(
        {"RANK": "0", "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    )
    return subprocess.Popen(
        [sys.executable, "-m", "fabricscope", "bench", "-b", "1K", "-e", "1K", "-T", timeout],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_world_that_never_forms_ends_after_the_timeout_with_one_line() -> None:
    proc = _bench(16_777_216, "3")  # the largest world the launcher variables may claim
    out, err = proc.communicate(timeout=120)  # a hang bound, not a timing
    assert proc.returncode == 2, err
    assert "did not form within 3 s (-T)" in err and "Traceback" not in err
    assert out == "" or "Collective test concluded" not in out


def test_ctrl_c_while_waiting_for_the_other_ranks_ends_it_at_once() -> None:
    proc = _bench(4, "600")  # three ranks never come
    time.sleep(3)  # in the rendezvous by now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted while starting up: nothing was measured" in err


RACE = """\
import os, signal, threading
from fabricscope.launch import rank
rank.guard_startup(0)
go = threading.Event()
def watcher():
    go.wait()
    rank.leave_now(130, "interrupted while starting up: nothing was measured")
threading.Thread(target=watcher).start()
go.set()
os.kill(os.getpid(), signal.SIGINT)
threading.Event().wait(30)
"""


def test_a_stop_seen_by_the_watcher_and_the_handler_at_once_is_said_once() -> None:
    """The rendezvous's watcher thread and the main thread's handler both see one Ctrl-C; rank 0 printed
    its line twice in 2 of 18 tries (a reviewer).  Each try races them as closely as a process can."""
    for _ in range(20):
        done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, env=cli_env(), timeout=60)
        assert done.returncode == 130, done.stderr
        assert done.stderr == "interrupted while starting up: nothing was measured\n"


HEARTBEAT = """\
import json, sys
from fabricscope.launch import World, lifecycle

class Output:  # rank 0's output: what it records
    write_errors: list = []
    def judged(self, ending):
        return ending
    def finish(self, status, error):
        print(json.dumps([status, error]), flush=True)

me = int(sys.argv[2])  # rank 0 holds the output
world = World(me, 2, me, 2, "127.0.0.1", int(sys.argv[1]), "env")
lifecycle.start_heartbeat(world, [], Output() if me == 0 else None, print)
print("started")
"""


def _heartbeat(port: int, me: int = 0) -> subprocess.CompletedProcess[str]:
    proc = _start_heartbeat(port, me)
    out, err = proc.communicate(timeout=120)  # a hang bound
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _start_heartbeat(port: int, me: int = 0) -> subprocess.Popen[str]:
    env = cli_env({"TORCH_CPP_LOG_LEVEL": "FATAL"})  # as a rank has it (the launcher sets it)
    args = [sys.executable, "-c", HEARTBEAT, str(port), str(me)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _ended_failed(done: subprocess.CompletedProcess[str], why: str) -> None:
    """Exit 1, ``why`` as the one line, and rank 0's output recorded as failed for it."""
    assert (done.returncode, done.stderr) == (1, f"error: {why}\n")
    assert json.loads(done.stdout) == ["failed", why]


def test_a_store_host_stopped_before_the_heartbeat_starts_ends_the_rank_in_one_line() -> None:
    """The heartbeat's first connect and beat, after the world formed: a store host stopped in between takes
    the connection and never answers, and the rank waited in torch's C++ code for its launcher's kill.  Rank 0
    (whose store torchrun's agent may host) records why in its output, as a stall's reason."""
    with stopped_store_host() as port:
        done = _heartbeat(port)
    why = (
        f"rank 0: the rendezvous store at 127.0.0.1:{port} did not answer within 7 s while starting the "
        "heartbeat (its host, rank 0 or the launcher, is stopped or hung)"
    )
    _ended_failed(done, why)


def test_a_store_that_is_gone_when_the_heartbeat_starts_ends_the_rank_in_one_line() -> None:
    """Its host died (rank 0 killed) after the world formed: the connect is refused; it raised torch's
    DistNetworkError, a traceback on every rank."""
    port = free_port()  # nobody listens
    done = _heartbeat(port)
    why = (
        f"rank 0: lost the rendezvous store at 127.0.0.1:{port} while starting the heartbeat (Connection refused): "
        "rank 0 or the launcher has ended"
    )
    _ended_failed(done, why)


def test_a_rank_other_than_0_says_a_lost_store_once_with_its_rank() -> None:
    done = _heartbeat(free_port(), me=1)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.startswith("error: rank 1: lost the rendezvous store at ")  # no "[rank 1]" before it
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_store_that_takes_no_connection_is_not_called_gone() -> None:
    """A stopped host whose accept queue is full (more ranks than its backlog) lets a connect time out: the
    line said 'lost ... rank 0 or the launcher has ended' of a store that is there."""
    with socket.socket() as host:
        host.bind(("127.0.0.1", 0))
        host.listen(0)
        port = host.getsockname()[1]
        queued = []
        for _ in range(8):  # fill the accept queue: nobody accepts
            client = socket.socket()
            client.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                client.connect(("127.0.0.1", port))
            queued.append(client)
        try:
            done = _heartbeat(port)
        finally:
            for client in queued:
                client.close()
    why = (
        f"rank 0: the rendezvous store at 127.0.0.1:{port} did not take the heartbeat's connection (its host, "
        "rank 0 or the launcher, is stopped or hung)"
    )
    _ended_failed(done, why)


def test_ctrl_c_while_the_heartbeat_waits_records_the_run_as_interrupted() -> None:
    with stopped_store_host() as port:
        proc = _start_heartbeat(port)
        try:
            fds = Path(f"/proc/{proc.pid}/fd")
            deadline = time.monotonic() + 60  # a hang bound: until its store client holds a connection
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    if any(os.readlink(fd).startswith("socket:") for fd in fds.iterdir()):
                        break
                time.sleep(0.05)
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = "interrupted while starting up: nothing was measured"
    assert (proc.returncode, err) == (130, f"{said}\n")
    assert json.loads(out) == ["interrupted", said]
