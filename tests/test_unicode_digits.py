"""Digits that are not ASCII (``²`` passes ``str.isdigit`` and then fails ``int``) are refused in one line."""

from __future__ import annotations

import pytest

from fabricscope.units import is_digits
from helpers import run_cli


def test_is_digits_is_ascii_only() -> None:
    assert (
        is_digits("0123") and not is_digits("²") and not is_digits("١٢") and not is_digits("") and not is_digits("1 ")
    )


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["bench", "-b", "1K", "-e", "1K"], {"RANK": "0", "WORLD_SIZE": "²"}, "WORLD_SIZE='²' is not a whole number"),
        (["bench", "-b", "1K", "-e", "1K"], {"RANK": "²", "WORLD_SIZE": "1"}, "RANK='²' is not a whole number"),
        (
            ["bench", "-b", "1K", "-e", "1K"],
            {"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "8²"},
            "MASTER_PORT must be a port number",
        ),
        (
            ["bench", "-b", "1K", "-e", "1K"],
            {"OMPI_COMM_WORLD_RANK": "²", "OMPI_COMM_WORLD_SIZE": "2"},
            "OMPI_COMM_WORLD_RANK='²'",
        ),
        (["bench", "--nproc", "²"], {}, "--nproc must be a whole number"),
        (["monitor", "--serve", "94²"], {}, "the port must be a whole number"),
        (["history", "show", "1²"], {}, "history id"),
        # decimal options: float() reads Arabic-Indic digits and underscores, the whole-number options do not
        (["plan", "--model", "llama-7b", "--gpus", "64", "--target-util", "٠.٨"], {}, "--target-util must be a share"),
        (["compare", "a.json", "--against", "b.json", "--tolerance", "1_0%"], {}, "--tolerance must be a share"),
        (["estimate", "--model", "mixtral-8x7b", "--cluster", "dgx-h100-ndr", "--moe-imbalance", "1_5"], {}, "from 1"),
    ],
)
def test_unicode_digits_are_one_line_errors(argv: list[str], env: dict[str, str], message: str) -> None:
    done = run_cli(argv, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
