"""``--save`` and ``--label`` on every command that produces a Result, into one real history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "doctor" / "fixtures"


@pytest.mark.multiprocess
def test_every_producing_command_saves_into_one_history(tmp_path):
    env = {"FABRICSCOPE_HOME": str(tmp_path / "home")}
    runs = [
        (["bench", "-b", "8", "-e", "1K", "-f", "8", "-n", "2"], "bench"),
        (["predict", "--cluster", "dgx-h100-ndr", "-e", "1K"], "predict"),
        (["estimate", "--model", "llama-7b", "--cluster", "dgx-h100-ndr"], "estimate"),
        (["doctor", "--root", str(FIXTURES / "healthy-ib-8gpu")], "doctor"),
        (["monitor", "--duration", "0.5", "--interval", "0.1", "--interfaces", "lo"], "monitor"),
    ]
    for args, kind in runs:
        done = run_cli([*args, "--label", f"nightly-{kind}"], env=env, timeout=180)
        assert done.returncode in (0, 1), (kind, done.stderr)  # doctor's verdict may be a warning
        assert f"saved the {kind} result as run" in done.stderr or "saved " in done.stderr, (kind, done.stderr)
    listed = run_cli(["history", "--json", "-"], env=env)
    assert listed.returncode == 0, listed.stderr
    for _, kind in runs:
        done = run_cli(["history", "--kind", kind], env=env)
        assert done.returncode == 0 and f"nightly-{kind}" in done.stdout, (kind, done.stdout)
        shown = run_cli(["history", "show", done.stdout.split("\n")[1].split()[0], "--json", "-"], env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout[shown.stdout.index('{\n "format"') :])["kind"] == kind
