"""Fixtures of the model tests: the real CLI in-process, and user files in a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from model_helpers import Outcome

from fabricscope.cli import main
from helpers import runner_variables


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Outcome]:
    """Run ``fabricscope ARGS`` through ``cli.main`` in this process, with the environment the
    subprocess runner of tests/helpers.py gives (no launcher or NCCL variables of the test runner);
    argparse errors come back as exit 2 too."""
    for name in runner_variables(os.environ):
        monkeypatch.delenv(name)

    def run(*args: str) -> Outcome:
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Outcome(code=code, out=captured.out, err=captured.err)

    return run


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` to ``tmp_path/name`` and return the path."""

    def put(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return put
