"""The findings table is laid out in one pass: borders stay straight, long cells fold, nothing is lost."""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console

from fabricscope.doctor.table import Cell, Column, draw

COLUMNS = (Column("area", fold=False), Column("subject", fold=True), Column("observed", fold=True))


def lines_of(width: int, rows: list[tuple[Cell, ...]]) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(draw(COLUMNS, [rows], width), no_wrap=True, overflow="ignore", crop=False)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_wide_characters_and_long_words_keep_every_border_in_its_column() -> None:
    rows = [
        (Cell("nic"), Cell("网卡固件版本号" * 3), Cell("x" * 70)),
        (Cell(""), Cell("short"), Cell("words that fold at spaces when the column is narrow enough")),
    ]
    lines = lines_of(50, rows)
    assert len({cell_len(line) for line in lines}) == 1  # every line as wide as the frame
    assert max(cell_len(line) for line in lines) <= 50
    body = [line for line in lines if line.startswith("│")]
    joined = "".join(part.strip() for line in body for part in line.split("│")[3:4])
    assert "x" * 70 in joined  # folded inside the word, none of it lost
    assert lines[0].startswith("┏") and lines[-1].startswith("└")


def test_a_table_that_fits_is_not_folded() -> None:
    lines = lines_of(120, [(Cell("gpu"), Cell("GPU 0000:19:00.0"), Cell("persistence mode on"))])
    assert "│ gpu  │ GPU 0000:19:00.0 │ persistence mode on │" in lines


def test_a_terminal_too_narrow_runs_past_the_edge_rather_than_losing_text() -> None:
    lines = lines_of(10, [(Cell("probe"), Cell("abcdefghijklmnop"), Cell("q"))])
    assert len({cell_len(line) for line in lines}) == 1
    assert "abcdefgh" in "".join(lines) and "ijklmnop" in "".join(lines)


def test_cell_widths_are_richs_for_every_kind_of_text() -> None:
    from rich.cells import cell_len as rich_cell_len

    from fabricscope.doctor.table import cell_len

    for text in ("", "mlx5_0/1", "GPU 0000:19:00.0", "网卡固件", "é", "bell\x07", "tab\there", "🙂 ok"):
        assert cell_len(text) == rich_cell_len(text), text
