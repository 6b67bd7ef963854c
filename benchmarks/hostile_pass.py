"""A hostile pass over every command: odd files, odd numbers, odd streams; each run bounded and checked.

    python benchmarks/hostile_pass.py [--timeout 60]

Each run is one command line with one hostile input (a FIFO, a link to /dev/zero,
a directory, a 5,000-character name, JSON and TOML nested 5,000 deep, a
400-digit number, a Unicode digit, an escape sequence, a closed stdout or
stderr, a Result of the wrong types).  A run is clean when it ends within the
timeout, prints no Python traceback, exits with a status the command documents
(0, 1, 2, 3, 126, 127 or 130), and leaves no fabricscope process behind.  The
counts are printed at the end; every unclean run is listed.  Not a test: it
takes minutes and creates files in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "tests/store/data/current_all_reduce_h100x8.log"
TREE = REPO / "tests/doctor/fixtures/healthy-ib-8gpu"
DOCUMENTED = {0, 1, 2, 3, 126, 127, 130}


def _inputs(tmp: Path) -> dict[str, str]:
    """Hostile file arguments, by what they are."""
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    zero = tmp / "zero.json"
    zero.symlink_to("/dev/zero")
    folder = tmp / "folder.json"
    folder.mkdir()
    deep_json = tmp / "deep.json"
    deep_json.write_text("[" * 5000 + "]" * 5000)
    deep_toml = tmp / "deep.toml"
    deep_toml.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    digits = tmp / "digits.toml"
    digits.write_text("[nic]\ncount = " + "9" * 400 + "\n")
    wrong = tmp / "wrong.json"
    result = json.loads(
        subprocess.run(
            [sys.executable, "-m", "fabricscope", "import", "nccl-tests", str(LOG), "--json", "-"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    variants: dict[str, Path] = {}
    for name, change in {
        "null-time": lambda r: r.update(time_us=None),
        "op-number": lambda r: r.update(op=7),
        "list-dtype": lambda r: r.update(dtype=[1]),
        "tiny-times": lambda r: r.update(time_us=1e-300, p50_us=None),
    }.items():
        changed = json.loads(json.dumps(result))
        for record in changed["records"]:
            change(record)
        variants[name] = tmp / f"{name}.json"
        variants[name].write_text(json.dumps(changed))
    variants["created-list"] = tmp / "created-list.json"
    variants["created-list"].write_text(json.dumps({**result, "created": [1, 2]}))
    for record in result["records"]:
        record["op"], record["time_us"], record["busbw_gbps"] = 7, None, "fast"
    result["created"] = [1, 2]
    wrong.write_text(json.dumps(result))
    sparse = tmp / "sparse.bin"
    with open(sparse, "wb") as handle:
        handle.truncate(2 << 40)
    escape = tmp / "escape\x1b[31m.json"
    escape.write_text("{}")
    return {
        "fifo": str(fifo),
        "dev-zero": str(zero),
        "directory": str(folder),
        "long-name": str(tmp / ("n" * 5000 + ".json")),
        "deep-json": str(deep_json),
        "deep-toml": str(deep_toml),
        "400-digits": str(digits),
        "wrong-types": str(wrong),
        **{name: str(path) for name, path in variants.items()},
        "sparse-2tb": str(sparse),
        "escape-name": str(escape),
        "empty": "",
    }


def _runs(tmp: Path) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(name, argv, extra environment, stream to close) for every command and hostile input."""
    files = _inputs(tmp)
    runs: list[tuple[str, list[str], dict[str, str], str]] = []
    readers = {
        "compare": lambda f: ["compare", f, "--against", f],
        "calibrate": lambda f: ["calibrate", f, "-o", str(tmp / "cal.toml")],
        "report": lambda f: ["report", f, "-o", str(tmp / "r.html")],
        "history-show": lambda f: ["history", "show", f],
        "import": lambda f: ["import", "nccl-tests", f],
        "predict-cluster": lambda f: ["predict", "all_reduce", "--cluster", f, "-b", "1M", "-e", "1M"],
        "estimate-model": lambda f: ["estimate", "--cluster", "dgx-h100-ndr", "--model", f],
        "validate": lambda f: ["validate", f],
        "doctor-expect": lambda f: ["doctor", "--root", str(TREE), "--expect", f],
        "doctor-root": lambda f: ["doctor", "--root", f],
        "monitor-root": lambda f: ["monitor", "--root", f, "--duration", "0.3", "--interval", "0.1"],
        "dataload": lambda f: ["dataload", f, "--duration", "1"],
        "hw-show": lambda f: ["hw", "show", f],
        "plan-cluster": lambda f: ["plan", "--model", "llama-7b", "--gpus", "64", "--cluster", f],
        "baseline-set": lambda f: ["baseline", "set", "b", f],
        "monitor-textfile": lambda f: ["monitor", "--textfile", f, "--duration", "0.3", "--interval", "0.1"],
        "report-png": lambda f: ["report", str(LOG), "--png", f, "-o", str(tmp / "r.html")],
    }
    for command, make in readers.items():
        for kind, path in files.items():
            runs.append((f"{command} <{kind}>", make(path), {}, ""))
    writers = {
        "bench": ["bench", "-b", "1K", "-e", "2K", "-n", "1", "-w", "0", "--nproc", "2"],
        "predict": ["predict", "all_reduce", "--cluster", "dgx-h100-ndr", "-b", "1M", "-e", "1M"],
        "monitor": ["monitor", "--duration", "0.3", "--interval", "0.1"],
        "doctor": ["doctor", "--root", str(TREE)],
        "history": ["history"],
        "import": ["import", "nccl-tests", str(LOG)],
        "pairs": ["pairs", "--nproc", "2", "--size", "64K", "-n", "2"],
        "dataload": ["dataload", str(LOG), "--duration", "0.5"],
        "estimate": ["estimate", "--cluster", "dgx-h100-ndr", "--model", "llama-7b"],
    }
    for command, argv in writers.items():
        for kind in ("fifo", "dev-zero", "directory", "long-name", "escape-name", "empty"):
            runs.append((f"{command} --json <{kind}>", [*argv, "--json", files[kind]], {}, ""))
        runs.append((f"{command} >&-", argv, {}, "stdout"))
        runs.append((f"{command} 2>&-", argv, {}, "stderr"))
    numbers = {"400 digits": "9" * 400, "unicode digit": "1²", "negative": "-5", "escape": "\x1b[2J", "nan": "nan"}
    for kind, value in numbers.items():
        for argv in (
            ["bench", "-b", value, "-e", "2K", "--nproc", "2"],
            ["bench", "-n", value, "-e", "1K", "--nproc", "2"],
            ["bench", "--nproc", value],
            ["pairs", "--size", value, "--nproc", "2"],
            ["predict", "all_reduce", "--cluster", "dgx-h100-ndr", "--nodes", value],
            ["estimate", "--cluster", "dgx-h100-ndr", "--model", "llama-7b", "--nodes", value],
            ["plan", "--model", "llama-7b", "--gpus", value],
            ["monitor", "--interval", value, "--duration", "0.3"],
            ["monitor", "--serve", value, "--duration", "0.3"],
            ["monitor", "--link-speed", f"eth0={value}G", "--duration", "0.3"],
            ["bench", "-m", value, "-e", "1K", "--nproc", "2"],
            ["doctor", "--root", str(TREE), "-T", value, "--nproc", "2"],
            ["dataload", str(LOG), "--duration", value],
            ["history", "--since", value],
            ["history", "rm", value],
            ["compare", value],
        ):
            runs.append((f"{argv[0]} {argv[1]}=<{kind}>", argv, {}, ""))
        for variable in ("RANK", "WORLD_SIZE", "MASTER_PORT", "LOCAL_RANK"):
            env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29990", variable: value}
            runs.append((f"bench {variable}=<{kind}>", ["bench", "-b", "1K", "-e", "1K", "-T", "5"], env, ""))
    return runs


def _fabricscope_processes() -> set[int]:
    done = subprocess.run(["pgrep", "-f", "-m", "fabricscope"], capture_output=True, text=True, check=False)
    me = {os.getpid()}
    return {int(p) for p in done.stdout.split()} - me


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fabricscope-hostile-") as folder:
        tmp = Path(folder)
        home = tmp / "home"
        runs = _runs(tmp)
        before = _fabricscope_processes()
        unclean: list[str] = []
        counts = {"clean": 0, "traceback": 0, "timeout": 0, "status": 0, "leftover": 0}
        start = time.monotonic()
        for name, argv, extra, closed in runs:
            env = {**os.environ, "FABRICSCOPE_HOME": str(home), **extra}
            line = " ".join("'" + a.replace("'", "'\\''") + "'" for a in [sys.executable, "-m", "fabricscope", *argv])
            redirect = {"stdout": " >&-", "stderr": " 2>&-", "": ""}[closed]
            try:
                done = subprocess.run(
                    ["sh", "-c", f"exec {line}{redirect} </dev/null"],
                    capture_output=True,
                    text=True,
                    errors="replace",
                    env=env,
                    timeout=args.timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                counts["timeout"] += 1
                unclean.append(f"timeout   {name}")
                subprocess.run(["pkill", "-9", "-f", "fabricscope-hostile-"], check=False)
                continue
            problem = ""
            if "Traceback" in done.stderr or "Traceback" in done.stdout:
                problem = "traceback"
            elif done.returncode not in DOCUMENTED:
                problem = "status"
            else:
                time.sleep(0.2)
                left = _fabricscope_processes() - before
                if left:
                    problem = "leftover"
                    subprocess.run(["kill", "-9", *map(str, left)], check=False)
            if problem:
                counts[problem] += 1
                tail = (done.stderr.strip().splitlines() or [""])[-1][:160]
                unclean.append(f"{problem:<9} {name} (exit {done.returncode}): {tail!r}")
            else:
                counts["clean"] += 1
        print(
            f"# {len(runs)} runs in {time.monotonic() - start:.0f} s: "
            + ", ".join(f"{v} {k}" for k, v in counts.items())
        )
        for item in unclean:
            print(item)


if __name__ == "__main__":
    main()
