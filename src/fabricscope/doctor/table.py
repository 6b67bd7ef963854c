"""The findings table of a node's report, laid out in one pass.

rich's :class:`~rich.table.Table` measures every cell several times to share
the width, which made drawing a node's report take as long as probing it.
This draws the same table (rich's heavy-headed box, a rule between
sections, long cells folded at spaces and, where one word is wider than its
column, inside the word) from each cell's width measured once.  The drawn
table hands rich its segments, one per styled stretch, so rich neither
re-measures nor re-splits it, while colours, ``NO_COLOR`` and a stopped reader
behave as everywhere else.

Widths are terminal cells (:func:`rich.cells.cell_len`), so wide characters
in a firmware string keep the borders straight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rich.cells import cell_len as _rich_cell_len
from rich.cells import chop_cells
from rich.console import Console, ConsoleOptions
from rich.segment import Segment

__all__ = ["Cell", "Column", "Drawn", "draw"]


def cell_len(text: str) -> int:
    """Terminal cells of one line of text: its length where it is printable ASCII, else rich's count."""
    return len(text) if text.isascii() and text.isprintable() else _rich_cell_len(text)


MIN_FOLDED = 8
"""Narrowest a folding column is made; on a narrower terminal the table runs past the edge."""


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    fold: bool
    """Long cells fold onto more lines; a column that does not fold keeps its widest cell's width."""
    style: str = ""


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    """One line of printable text (the report's :func:`~fabricscope.doctor.report.cell` made it so)."""
    style: str = ""


def draw(columns: Sequence[Column], sections: Sequence[Sequence[Sequence[Cell]]], width: int) -> Drawn:
    """The table, drawn: header, then each section's rows, a rule between sections."""
    headers = [cell_len(c.header) for c in columns]
    natural = list(headers)
    # Each cell measured once: (text, style, cells), the style the cell's or else its column's.
    measured = [
        [
            [(item.text, item.style or c.style, cell_len(item.text)) for item, c in zip(row, columns, strict=True)]
            for row in section
        ]
        for section in sections
    ]
    for section in measured:
        for row in section:
            for i, cell in enumerate(row):
                natural[i] = max(natural[i], cell[2])
    widths = _fit(natural, [c.fold for c in columns], width)
    out = Drawn()
    out.add(_rule("┏", "━", "┳", "┓", widths) + "\n")
    out.line([(c.header, "bold", n) for c, n in zip(columns, headers, strict=True)], widths, "┃")
    out.add(_rule("┡", "━", "╇", "┩", widths) + "\n")
    folds = [c.fold for c in columns]
    for index, section in enumerate(measured):
        if index:
            out.add(_rule("├", "─", "┼", "┤", widths) + "\n")
        for row in section:
            if not any(fold and cell[2] > w for cell, w, fold in zip(row, widths, folds, strict=True)):
                out.line(row, widths, "│")  # every cell fits on one line: the common case
                continue
            folded = [
                _fold(text, w, style) if fold and cells > w else [(text, style, cells)]
                for (text, style, cells), w, fold in zip(row, widths, folds, strict=True)
            ]
            for k in range(max(len(lines) for lines in folded)):
                out.line(
                    [lines[k] if k < len(lines) else ("", cell[1], 0) for lines, cell in zip(folded, row, strict=True)],
                    widths,
                    "│",
                )
    out.add(_rule("└", "─", "┴", "┘", widths) + "\n")
    return out


class Drawn:
    """A drawn table: its text in pieces, each with its style (or none); print it with ``crop=False``."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def add(self, text: str, style: str = "") -> None:
        if not text:
            return
        if self.parts and self.parts[-1][1] == style:
            self.parts[-1] = (self.parts[-1][0] + text, style)
        else:
            self.parts.append((text, style))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        style_of = console.get_style
        styles = {style: style_of(style) for style in {style for _, style in self.parts if style}}
        for text, style in self.parts:
            yield Segment(text, styles[style] if style else None)

    def line(self, cells: Sequence[tuple[str, str, int]], widths: list[int], bar: str) -> None:
        """One line of the table: each cell's text, style and width in cells, padded to its column."""
        plain: list[str] = []  # the unstyled run so far, added as one piece
        for (text, style, cells_used), w in zip(cells, widths, strict=True):
            pad = " " * (w - cells_used + 1)
            if style and text:
                plain.append(f"{bar} ")
                self.add("".join(plain))
                self.add(text, style)
                plain = [pad]
            else:
                plain.append(f"{bar} {text}{pad}")
        plain.append(bar + "\n")
        self.add("".join(plain))


def _fit(natural: list[int], fold: list[bool], width: int) -> list[int]:
    """Column widths: what does not fold keeps its width; folding columns share the rest, narrow ones whole."""
    frame = 3 * len(natural) + 1  # a bar and a space each side of every cell
    room = width - frame - sum(n for n, f in zip(natural, fold, strict=True) if not f)
    folding = sorted((i for i, f in enumerate(fold) if f), key=lambda i: natural[i])
    widths = list(natural)
    if sum(natural[i] for i in folding) <= room:
        return widths
    room = max(room, MIN_FOLDED * len(folding))
    while folding:
        share, extra = divmod(room, len(folding))
        if natural[folding[0]] <= share:
            room -= natural[folding.pop(0)]
            continue
        for k, i in enumerate(folding):
            widths[i] = max(1, share + (1 if k < extra else 0))
        break
    return widths


def _fold(text: str, width: int, style: str) -> list[tuple[str, str, int]]:
    """``text`` in lines of at most ``width`` cells, each with ``style`` and its width: broken at spaces,
    and inside a word wider than a line.  Printable ASCII is measured by ``len`` (a character is a cell)."""
    plain = text.isascii() and text.isprintable()
    measure: Callable[[str], int] = len if plain else cell_len
    chop: Callable[[str, int], list[str]] = _chop_plain if plain else chop_cells
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        joined = f"{line} {word}" if line else word
        if measure(joined) <= width:
            line = joined
            continue
        if line:
            lines.append(line)
        pieces = chop(word, width) if measure(word) > width else [word]
        lines.extend(pieces[:-1])
        line = pieces[-1] if pieces else ""
    lines.append(line)
    return [(piece, style, measure(piece)) for piece in lines]


def _chop_plain(word: str, width: int) -> list[str]:
    """:func:`rich.cells.chop_cells` of printable ASCII: pieces of ``width`` characters."""
    return [word[i : i + width] for i in range(0, len(word), width)]


def _rule(left: str, bar: str, cross: str, right: str, widths: list[int]) -> str:
    return left + cross.join(bar * (w + 2) for w in widths) + right
