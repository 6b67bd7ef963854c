"""One way to show a user's value: ``fabricscope.shown`` and no second copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

from fabricscope.shown import cut, printable, quoted

SRC = Path(__file__).resolve().parents[1] / "src" / "fabricscope"
COPIES = ("printable", "quoted", "shorten", "_shown", "_quote", "_as_written", "as_written")
"""The helpers that each showed a value their own way before ``shown.py``."""


def test_printable_escapes_what_could_move_the_terminal() -> None:
    assert printable("a\x1b[31mb\nc\td") == "a\\x1b[31mb\\nc d"
    assert printable("x\u202ey") == "x\\u202ey"  # a right-to-left override
    assert printable("\udcff") == "\\udcff"  # a byte that was not UTF-8
    assert printable("é ok") == "é ok"
    assert printable("x" * 50, 10, more="; see --json") == "x" * 10 + "… (40 more characters; see --json)"


def test_quoted_cuts_in_the_middle_and_counts() -> None:
    assert quoted("abc") == "'abc'"
    long = "a" * 200 + "Z"
    shown = quoted(long)
    assert shown.startswith("'aaaa") and shown.endswith("aZ' (201 characters)") and "..." in shown
    assert len(quoted("9" * 4000)) < 90


def test_cut_keeps_both_ends_of_a_path() -> None:
    path = "/very/" + "deep/" * 100 + "file.json"
    shown = cut(path, 80)
    assert shown.startswith("/very/deep") and shown.endswith("file.json") and len(shown) <= 80
    assert cut("/short\n") == "/short\\n"


def test_no_module_keeps_its_own_copy() -> None:
    copies = []
    for path in SRC.rglob("*.py"):
        if path.name == "shown.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name in (
                "printable",
                "quoted",
                "shorten",
                "_shown",
                "_quote",
            ):
                copies.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert copies == []
