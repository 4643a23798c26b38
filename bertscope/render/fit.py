"""Tables that are whole at the width they are printed at (80 columns: a pipe, a file, a small terminal).

Rich fits a table that is too wide by narrowing its columns, and once the words of the
headers have wrapped it narrows every column alike, so that numbers read `0.…` and headers
`accura…`. Here a table too wide for the width is printed instead in blocks of its columns,
one under the other, each with the first column (the layer, the relation, the token) again:
every cell whole. `Narrowing` gives a renderable a narrow form of its own (short headers and
a legend) for where its wide form does not fit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from typing import cast

from rich.console import Console, ConsoleOptions, ConsoleRenderable, Group, RenderableType, RenderHook, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

UNBOUNDED = 10_000  # a width no table reaches: measured there, a table's columns are as wide as their cells


def natural_width(table: Table, console: Console, options: ConsoleOptions) -> int:
    """The width `table` takes with no column narrowed."""
    return Measurement.get(console, options.update_width(UNBOUNDED), table).maximum


def fitted(renderable: RenderableType) -> RenderableType:
    """`renderable` with each table in it (within groups too) printed whole at the width it is given."""
    if isinstance(renderable, Table):
        return ColumnBlocks(renderable)
    if isinstance(renderable, Group):
        return Group(*(fitted(part) for part in renderable.renderables), fit=renderable.fit)
    return renderable


class FitTables(RenderHook):
    """A console's hook that prints every table it is given whole (`fitted`)."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [cast(ConsoleRenderable, fitted(renderable)) for renderable in renderables]


class ColumnBlocks:
    """A table as it is where it fits, else in blocks of its columns, each under the last with its first column again."""

    def __init__(self, table: Table, keep: int = 1):
        self.table = table
        self.keep = keep

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        blocks = list(self.blocks(console, options))
        for number, block in enumerate(blocks):
            if number:
                yield Text()
            yield block

    def blocks(self, console: Console, options: ConsoleOptions) -> Iterator[Table]:
        table, width = self.table, options.max_width
        columns = range(self.keep, len(table.columns))
        if len(columns) < 2 or natural_width(table, console, options) <= width:
            yield table  # fits, or has nothing to split: a long text cell wraps
            return
        chosen: list[int] = []
        pieces: list[list[int]] = []
        for column in columns:
            if chosen and natural_width(self.part(chosen + [column]), console, options) > width:
                pieces.append(chosen)
                chosen = []
            chosen.append(column)
        pieces.append(chosen)
        for number, piece in enumerate(pieces):
            yield self.part(piece, title=number == 0, caption=number == len(pieces) - 1)

    def part(self, columns: Iterable[int], title: bool = True, caption: bool = True) -> Table:
        """The table with its first `keep` columns and `columns` only."""
        part = copy.copy(self.table)
        part.columns = []
        for index, column in enumerate([*range(self.keep), *columns]):
            kept = copy.copy(self.table.columns[column])
            kept._index = index  # where Rich pads it: the first and last columns are padded as edges
            part.columns.append(kept)
        part.title = self.table.title if title else None
        part.caption = self.table.caption if caption else None
        return part


class Narrowing:
    """`wide` where its tables fit the width they are given, else `narrow` (short headers and a legend, say)."""

    def __init__(self, wide: Table, narrow: RenderableType):
        self.wide = wide
        self.narrow = narrow

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fits = natural_width(self.wide, console, options) <= options.max_width
        yield fitted(self.wide if fits else self.narrow)
