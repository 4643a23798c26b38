"""One attention matrix drawn as a Rich renderable, shared by the CLI and the UI.

Rows are query ("from") tokens, columns key ("to") tokens. A cell is one or two terminal
cells wide (the explorer makes it wider, and a row more than a line tall, where its pane has
room); in dense mode one line holds two query rows (the half-block ``▀``: its foreground is
the upper row, its background the lower one), so a long input fits a pane. Column labels are
written downwards, one character a line; where columns are two or more cells wide they can be
written across instead, on alternate lines (``staggered``), which takes fewer lines.
With 256 or more colours a cell is a colour from the theme's colour map; with 16 colours or
none (NO_COLOR) the value is a shade glyph instead, so the picture still reads (glyphs have
no halves: there dense mode draws one row per line).

The colour scale is chosen by name (``SCALES``): ``max`` maps 0 → the map's largest weight
(attention maps rarely reach 1, so a fixed 0–1 scale leaves most of them black), ``row``
each query row to its own largest weight, ``fixed`` the range vmin–vmax (0–1: to compare
heads), ``log`` the ``LOG_DECADES`` decades below the map's largest weight. The legend
names the scale and its numbers.

The picture is built by a ``HeatmapLayout`` line by line: the CLI prints all of it, the
UI's scrolling view asks only for the lines it shows and keeps the row labels and the
header fixed while the grid scrolls.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

import numpy as np
from rich.cells import cell_len, set_cell_size
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

from bertscope.base.theming import Colormap
from bertscope.model.labels import token_labels

GLYPHS = (" ", "░", "▒", "▓", "█")  # low to high, for terminals without enough colours
COLOUR_LEVELS = 256  # weights are quantised to this many colours, one Style each
MAX_LABEL_HEIGHT = 8  # column labels are written vertically, at most this many lines
MAX_LABEL_WIDTH = 20  # row labels are cut beyond this unless told otherwise
CELL_WIDTH = 2  # the default cell width (the CLI's, and the geometry screens')
LEGEND_CELLS = 10
MASKED_BLEND = 0.75  # a masked head keeps a faint trace of its pattern
SCALES = ("max", "row", "fixed", "log")
LOG_DECADES = 3  # the log scale spans this many decades below the largest weight
UPPER_HALF = "▀"
WINDOW_TOKENS = 40  # a terminal shows at least this many tokens of a map too large for it

_NAN = -1  # cell codes next to the quantised levels 0..n-1
_CURSOR = -2
_NONE = -3  # below the last row of a dense map with an odd number of rows


def beyond_reach(weights: np.ndarray, window: int | None) -> np.ndarray:
    """`weights` `[T, T]` with the cells a local head cannot see (|i - j| > window) as NaN, drawn apart from low
    attention; the same array where the head sees every key."""
    length = weights.shape[-1]
    if window is None or length <= window + 1:
        return weights
    positions = np.arange(length)
    return np.where(np.abs(positions[:, None] - positions[None, :]) > window, np.nan, weights)


def terminal_window(labels: Sequence[str], width: int, dense: bool = False, label_width: int | None = None) -> int:
    """How many of a map's tokens a terminal `width` columns wide shows whole: one cell each beside the row labels
    (`label_width` as the heatmap is given it; at least `WINDOW_TOKENS`). A longer map is shown as its first
    tokens × as many: in column blocks, a map of 2,000 tokens took 62,094 lines."""
    longest = max((cell_len(label) for label in token_labels(labels)), default=1)
    label = label_width or max(1, min(longest, MAX_LABEL_WIDTH))
    gutter = 2 * label + 2 if dense else label + 1
    return max(WINDOW_TOKENS, width - gutter)


def window_note(shown: int, length: int) -> str:
    """The line under a map shown in part (`terminal_window`): which part, and how to get the whole."""
    return (
        f"tokens 0–{shown - 1} of {length:,} shown, as many as the terminal's width holds; "
        "the whole map: --figure FILE (.svg, .pdf or .png), --csv or --json"
    )


def reach_note(window: int | None, length: int) -> str:
    """What a heatmap's title says of a local layer (empty where the head sees every key)."""
    return f" · local: sees ±{window}" if window is not None and length > window + 1 else ""


@dataclass(frozen=True)
class Scale:
    """How a weight maps to a colour, and what the weights are: the legend's words.

    ``name`` is one of ``SCALES`` (None: the range vmin–vmax, unnamed in the legend);
    ``quantity`` names what the cells hold (e.g. value-weighted norms; None: weights).
    """

    name: str | None = None
    vmin: float = 0.0
    vmax: float = 1.0
    quantity: str | None = None


@dataclass(frozen=True)
class Cells:
    """How the cells are drawn.

    ``width`` is the terminal cells of a column (1 or more), or None for 2 where the whole grid
    fits the console and 1 where it does not; ``height`` the lines of a query row (a map drawn one
    row a line). ``dense`` draws two query rows per line (colours only). ``glyphs`` forces shade
    glyphs (True) or colours (False); None decides from the console. ``split`` prints a grid wider
    than the console in column blocks, like numpy prints wide arrays; turn it off where a scrolling
    container shows the full width.
    """

    width: int | None = CELL_WIDTH
    height: int = 1
    dense: bool = False
    glyphs: bool | None = None
    split: bool = True


@dataclass(frozen=True)
class Labels:
    """How the rows and columns are labelled.

    ``width`` is the row-label gutter (None: the longest label, up to MAX_LABEL_WIDTH); ``height``
    the most lines the vertical column labels may take (0: none). ``compact`` gives a dense map one
    row label a line, not two: the cursor's row where it is on the line, else the upper row (the
    explorer's narrow pane). ``ruler`` replaces the column labels written downwards, which one-cell
    columns leave unreadable past a few dozen tokens, by a ruler: the column numbers every ten and a
    mark over the cursor's column (whose label the line above the map names). ``staggered`` writes the
    column labels across, on ``height`` alternate lines, where a column is two or more cells wide
    (``stagger_height`` says how many lines show them whole).
    """

    width: int | None = 12
    height: int = MAX_LABEL_HEIGHT
    compact: bool = False
    ruler: bool = False
    staggered: bool = False


class AttentionHeatmap:
    """An attention matrix with token labels on both axes, a legend and an optional cursor.

    How its weights map to colours is its ``scale`` (a `Scale`), how its cells are drawn its
    ``cells`` (`Cells`), how it is labelled its ``labels`` (`Labels`); ``legend`` leaves the
    legend out when False.
    """

    def __init__(
        self,
        weights: np.ndarray,  # [rows, cols] floats
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        colormap: Colormap,
        *,
        title: str | None = None,
        scale: Scale = Scale(),
        cursor: tuple[int, int] | None = None,
        masked: bool = False,
        cells: Cells = Cells(),
        labels: Labels = Labels(),
        legend: bool = True,
    ) -> None:
        weights = np.asarray(weights, dtype=float)
        if weights.ndim != 2:
            raise ValueError(f"attention weights must be 2-D [rows, cols], got shape {weights.shape}")
        rows, cols = weights.shape
        if len(row_labels) != rows or len(col_labels) != cols:
            raise ValueError(
                f"{len(row_labels)} row labels and {len(col_labels)} column labels do not match weights of shape {rows}×{cols}"
            )
        if cursor is not None and not (0 <= cursor[0] < rows and 0 <= cursor[1] < cols):
            raise ValueError(f"cursor {tuple(cursor)} is outside the {rows}×{cols} grid")
        if not scale.vmax >= scale.vmin:
            raise ValueError(f"vmax ({scale.vmax}) must not be below vmin ({scale.vmin})")
        if scale.name is not None and scale.name not in SCALES:
            raise ValueError(f"unknown colour scale {scale.name!r}; choose one of {', '.join(SCALES)}")
        if cells.width is not None and cells.width < 1:
            raise ValueError(f"cell_width must be at least 1, or None (automatic), got {cells.width}")
        if cells.height < 1:
            raise ValueError(f"row_height must be at least 1, got {cells.height}")
        if labels.width is not None and labels.width < 1:
            raise ValueError(f"label_width must be at least 1, got {labels.width}")
        self.weights = weights
        # tokens as they read (RoBERTa's `Ġte` as `te`, a word's later pieces `##`); other labels as they are
        self.row_labels = [_printable(label) for label in token_labels(row_labels)]
        self.col_labels = [_printable(label) for label in token_labels(col_labels)]
        self.colormap = colormap
        self.title = title
        self.scale = scale.name
        self.vmin = scale.vmin
        self.vmax = scale.vmax
        self.quantity = scale.quantity
        self.cursor = tuple(cursor) if cursor is not None else None
        self.masked = masked
        self.split_columns = cells.split
        self.cell_width = cells.width
        self.row_height = cells.height
        self.dense = cells.dense
        self.glyphs = cells.glyphs  # None: decide from the console's colours
        label_width = labels.width
        if label_width is None:
            longest = max((cell_len(label) for label in self.row_labels), default=1)
            label_width = max(1, min(longest, MAX_LABEL_WIDTH))
        self.label_width = label_width
        self.label_height = max(0, labels.height)
        self.compact_gutter = labels.compact
        self.ruler = labels.ruler
        self.staggered = labels.staggered
        self.legend = legend

    def layout(self, use_colour: bool, cell_width: int | None = None) -> HeatmapLayout:
        """The picture's lines for a console with (or without) enough colours."""
        return HeatmapLayout(self, use_colour, cell_width or self.cell_width or CELL_WIDTH)

    def uses_colour(self, console: Console) -> bool:
        if self.glyphs is not None:
            return not self.glyphs
        return console.color_system in ("256", "truecolor") and not console.no_color

    # Rich protocol

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        cell = self._cell_width_for(options.max_width)
        cols = self.weights.shape[1]
        layout = self.layout(self.uses_colour(console), cell)
        full = max(layout.gutter_width + cell * cols, layout.text_width())
        narrowest = layout.gutter_width + cell if self.split_columns else full
        return Measurement(min(narrowest, full), full)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        layout = self.layout(self.uses_colour(console), self._cell_width_for(width))
        cell, cols = layout.cell_width, self.weights.shape[1]
        gutter_width, per_block = layout.gutter_width, cols
        if self.split_columns and gutter_width + cell * cols > width:
            gutter_width = max(2, min(gutter_width, width - cell))
            per_block = max(1, (width - gutter_width) // cell)
            layout = layout.with_gutter(gutter_width)
        crop = width if self.split_columns else None

        if self.title or self.masked:
            yield from _line(self._title_segments(), crop)
        for line in layout.header_lines():
            yield from _line(line, crop)
        blocks = [(start, min(start + per_block, cols)) for start in range(0, cols, max(1, per_block))]
        indent = Segment(" " * gutter_width)
        for number, (start, stop) in enumerate(blocks):
            if len(blocks) > 1:
                if number:
                    yield Segment.line()
                shown = f"column {start}" if stop - start == 1 else f"columns {start}–{stop - 1}"
                yield from _line([Segment(f"{shown} of {cols}", Style(dim=True))], crop)
            for label_line in layout.column_label_lines(start, stop):
                yield from _line([indent, *label_line], None)
            for index in range(layout.lines):
                yield from _line([*layout.gutter(index), *layout.grid(index, start, stop)], None)
        if self.legend:
            yield from _line(layout.legend(gutter_width), crop)

    def _cell_width_for(self, width: int) -> int:
        if self.cell_width is not None:
            return self.cell_width
        gutter = 2 * self.label_width + 2 if self.dense else self.label_width + 1
        return CELL_WIDTH if gutter + CELL_WIDTH * self.weights.shape[1] <= width else 1

    def _title_segments(self) -> list[Segment]:
        segments = [Segment(self.title, Style(bold=True))] if self.title else []
        if self.masked:
            segments.append(Segment(" (masked)" if self.title else "masked", Style(bold=True, italic=True)))
        return segments

    # the colour scale

    def scaled(self) -> tuple[np.ndarray, float, float]:
        """The weights mapped to [0, 1] by the colour scale (NaN stays NaN), and the legend's two ends."""
        weights = self.weights
        scale = self.scale
        with np.errstate(invalid="ignore", divide="ignore"):
            if scale in (None, "fixed"):
                low, high = self.vmin, self.vmax
                scaled = (weights - low) / ((high - low) or 1.0)
            elif scale == "row":
                row_max = np.nanmax(np.where(np.isnan(weights), -np.inf, weights), axis=1, keepdims=True)
                row_max = np.where(np.isfinite(row_max) & (row_max > 0), row_max, 1.0)
                scaled = weights / row_max
                low, high = 0.0, self.row_max(self.cursor[0]) if self.cursor is not None else 1.0
            else:
                high = self.largest()
                if scale == "max":
                    low = 0.0
                    scaled = weights / high
                else:  # log
                    low = high / 10**LOG_DECADES
                    scaled = (np.log10(np.maximum(weights, low)) - math.log10(low)) / LOG_DECADES
        return np.where(np.isnan(weights), np.nan, np.clip(scaled, 0.0, 1.0)), float(low), float(high)

    def largest(self) -> float:
        """The map's largest weight (1 for an empty or all-zero map), the top of `max` and `log`."""
        finite = self.weights[np.isfinite(self.weights)]
        top = float(finite.max()) if finite.size else 0.0
        return top if top > 0 else 1.0

    def row_max(self, row: int) -> float:
        finite = self.weights[row][np.isfinite(self.weights[row])]
        top = float(finite.max()) if finite.size else 0.0
        return top if top > 0 else 1.0

    def legend_text(self) -> tuple[str, str, str]:
        """The legend's words: the quantity and the scale's name, the low end, the high end."""
        name, low, high = self._scale_text()
        if self.quantity:
            name = f"{self.quantity} {name}".strip()
        return name, low, high

    def _scale_text(self) -> tuple[str, str, str]:
        _, low, high = self.scaled()
        if self.scale == "row":
            high_text = "row max" + (f" {_number(high)}" if self.cursor is not None else "")
            return "row", "0", high_text
        if self.scale == "log":
            return "log", f"{low:.2g}", _number(high)
        return self.scale or "", _number(low), _number(high)


class HeatmapLayout:
    """The heatmap's lines, each built on request: a scrolling view builds only what it shows.

    Grid line i holds query row i, or rows 2i and 2i+1 in dense mode; a row ``row_height``
    lines tall takes lines ``row_height`` × i onwards. The gutter holds the row labels (both
    rows' labels in dense mode, the upper one first), right-aligned, on a tall row's first line
    (its middle one from three lines).
    """

    def __init__(self, heatmap: AttentionHeatmap, use_colour: bool, cell_width: int) -> None:
        self.heatmap = heatmap
        self.palette = _palette(heatmap.colormap, use_colour, heatmap.masked)
        self.use_colour = use_colour
        self.cell_width = cell_width
        self.rows_per_line = 2 if heatmap.dense and use_colour else 1
        self.row_height = heatmap.row_height if self.rows_per_line == 1 else 1
        rows, cols = heatmap.weights.shape
        self.lines = -(-rows // self.rows_per_line) * self.row_height
        self.grid_width = cell_width * cols
        self.codes = _codes(heatmap, self.palette.levels)
        self._cells = {code: self.palette.cell(code, cell_width) for code in self.palette.cells}
        self.compact = heatmap.compact_gutter and self.rows_per_line == 2  # one label a line in a dense map
        label = heatmap.label_width
        self.with_gutter(2 * label + 2 if self.rows_per_line == 2 and not self.compact else label + 1)  # dense: both rows' labels

    def with_gutter(self, width: int) -> HeatmapLayout:
        """Set the width of the row-label gutter (labels are cut to fit, with an ellipsis)."""
        self.gutter_width = max(2, width)
        label_width = self.gutter_width - 1
        if self.rows_per_line == 2 and not self.compact:
            label_width = max(1, (self.gutter_width - 2) // 2)
        self._labels = [_fit(label, label_width) for label in self.heatmap.row_labels]
        self._label_width = label_width
        return self

    def first_line(self, row: int) -> int:
        """The first grid line of query row ``row``."""
        return row // self.rows_per_line * self.row_height

    def row_at(self, line: int) -> int:
        """The query row drawn on grid line ``line`` (the upper one in dense mode)."""
        return line // self.row_height * self.rows_per_line

    def gutter(self, line: int) -> list[Segment]:
        """Line ``line``'s row labels and the marker of the cursor's row."""
        if self.row_height > 1:
            if line % self.row_height != (self.row_height - 1) // 2:
                return [Segment(" " * self.gutter_width)]  # a tall row is labelled once
            line //= self.row_height
        heatmap, emphasis = self.heatmap, self.palette.emphasis
        cursor_row = heatmap.cursor[0] if heatmap.cursor is not None else -1
        rows = range(line * self.rows_per_line, min((line + 1) * self.rows_per_line, len(self._labels)))
        segments = []
        if self.compact:  # one label: the cursor's row where it is on this line, else the upper row
            row = cursor_row if cursor_row in rows else rows[0]
            label = self._labels[row]
            word = label.lstrip(" ")
            segments += [Segment(label[: len(label) - len(word)]), Segment(word, emphasis if row == cursor_row else None)]
            segments.append(Segment("▸" if cursor_row in rows else " ", emphasis if cursor_row in rows else None))
            return segments
        if self.rows_per_line == 2:
            pad = self.gutter_width - 2 - 2 * self._label_width
            if pad:
                segments.append(Segment(" " * pad))
        for row in rows:
            if self.rows_per_line == 2 and row % 2:
                segments.append(Segment(" "))
            label = self._labels[row]
            if row == cursor_row:  # emphasise the word, not its padding (reverse video in glyph mode)
                word = label.lstrip(" ")
                segments += [Segment(label[: len(label) - len(word)]), Segment(word, emphasis)]
            else:
                segments.append(Segment(label))
        if self.rows_per_line == 2 and len(rows) == 1:
            segments.append(Segment(" " * (self._label_width + 1)))
        segments.append(Segment("▸" if cursor_row in rows else " ", emphasis if cursor_row in rows else None))
        return segments

    def grid(self, line: int, start: int = 0, stop: int | None = None) -> list[Segment]:
        """Line ``line`` of the grid, columns ``start`` to ``stop``."""
        line //= self.row_height
        if self.rows_per_line == 1:
            cells = self._cells
            segments = []
            for code, run in groupby(self.codes[line, start:stop].tolist()):
                text, style = cells[code]
                segments.append(Segment(text * sum(1 for _ in run), style))
            return segments
        upper = self.codes[2 * line, start:stop].tolist()
        lower = self.codes[2 * line + 1, start:stop].tolist() if 2 * line + 1 < len(self.codes) else [_NONE] * len(upper)
        halves, width = self.palette.halves, self.cell_width
        return [Segment(UPPER_HALF * (width * sum(1 for _ in run)), halves(pair)) for pair, run in groupby(zip(upper, lower))]

    def column_label_lines(self, start: int = 0, stop: int | None = None) -> list[list[Segment]]:
        """Column labels written downwards, one character per line, ending at the grid.

        Neighbouring labels alternate plain and dim, so one-cell-wide columns still read apart.
        """
        heatmap = self.heatmap
        if heatmap.ruler:
            return self.ruler_lines(start, stop)
        if heatmap.staggered and self.cell_width >= 2:
            return self.staggered_lines(start, stop)
        labels = heatmap.col_labels[start:stop]
        height = min(heatmap.label_height, max((len(label) for label in labels), default=0))
        if height <= 0:
            return []
        stacks = [_vertical(label, height, self.cell_width) for label in labels]
        cursor_col = heatmap.cursor[1] - start if heatmap.cursor is not None else -1
        dim = Style(dim=True)
        lines = []
        for line in range(height):
            depth = height - line  # counted up from the grid
            segments = []
            for column, stack in enumerate(stacks):
                text = stack[-depth] if depth <= len(stack) else " " * self.cell_width
                style = self.palette.emphasis if column == cursor_col else dim if column % 2 else None
                segments.append(Segment(text, style))
            lines.append(list(Segment.simplify(segments)))
        return lines

    def staggered_lines(self, start: int = 0, stop: int | None = None) -> list[list[Segment]]:
        """Column labels written across, each from its column's first cell, on ``label_height`` alternate lines (column
        c on line c mod lines), so each has that many columns' cells less one; cut with an ellipsis beyond."""
        heatmap, width = self.heatmap, self.cell_width
        labels = heatmap.col_labels[start:stop]
        height = min(heatmap.label_height, len(labels))
        if height <= 0:
            return []
        room = height * width - 1
        cursor_col = heatmap.cursor[1] - start if heatmap.cursor is not None else -1
        dim = Style(dim=True)
        lines = []
        for line in range(height):
            segments: list[Segment] = []
            for column in range(line, len(labels), height):
                text = _fit(labels[column], room).lstrip(" ") if cell_len(labels[column]) > room else labels[column]
                style = self.palette.emphasis if column == cursor_col else dim if column % 2 else None
                segments += [Segment(" " * (column * width - sum(s.cell_length for s in segments))), Segment(text, style)]
            lines.append(list(Segment.simplify(segments)))
        return lines

    def ruler_lines(self, start: int = 0, stop: int | None = None) -> list[list[Segment]]:
        """In place of the column labels (`ruler`): the column numbers every ten, over a line of ticks every five
        with a mark over the cursor's column; as many of the two lines as the label height allows, ticks first."""
        heatmap, width = self.heatmap, self.cell_width
        stop = heatmap.weights.shape[1] if stop is None else stop
        height = min(heatmap.label_height, 2)
        if height <= 0 or stop <= start:
            return []
        cursor_col = heatmap.cursor[1] if heatmap.cursor is not None else -1
        numbers = [" "] * ((stop - start) * width)
        for col in range(start - start % 10, stop, 10):
            text = str(col)
            at = (col - start) * width
            if at >= 0 and all(char == " " for char in numbers[max(0, at - 1) : at + len(text)]):
                numbers[at : at + len(text)] = list(text[: len(numbers) - at])
        ticks: list[Segment] = []
        for col in range(start, stop):
            mark = "▼" if col == cursor_col else "╵" if col % 5 == 0 else " "
            ticks.append(Segment(mark.ljust(width), self.palette.emphasis if col == cursor_col else Style(dim=True)))
        lines = [list(Segment.simplify(ticks))]
        if height == 2:
            lines.insert(0, [Segment("".join(numbers), Style(dim=True))])
        return lines

    def header_lines(self, width: int | None = None) -> list[list[Segment]]:
        """The cursor cell in words: from-token → to-token and its weight (nothing without a cursor); on two lines,
        the from-token on the first, where one line of `width` would cut them."""
        texts = self.header_texts(width)
        return [[Segment(text, self.palette.emphasis)] for text in texts]

    def header_texts(self, width: int | None = None) -> list[str]:
        heatmap = self.heatmap
        if heatmap.cursor is None:
            return []
        row, col = heatmap.cursor
        value = heatmap.weights[row, col]
        shown = "out of reach" if np.isnan(value) else _number(value, 3)
        first, second = f"▸ {row}:{heatmap.row_labels[row]}", f"→ {col}:{heatmap.col_labels[col]}  {shown}"
        if width is None or cell_len(first) + 1 + cell_len(second) <= width:
            return [f"{first} {second}"]
        return [first, "  " + second]

    def legend(self, indent: int = 0, width: int | None = None) -> list[Segment]:
        """The scale's name, its low end, a colour bar (or the glyphs) and its high end."""
        name, low, high = self.heatmap.legend_text()
        bar = self.palette.bar
        if self.use_colour and width is not None:
            room = width - indent - cell_len(name + low + high) - 3
            cells = max(4, min(LEGEND_CELLS, room))
            bar = self.palette.colour_bar(cells)
        return [
            Segment(" " * indent),
            Segment(name, Style(bold=True)),
            Segment(" " if name else ""),
            Segment(low + " "),
            *bar,
            Segment(" " + high),
        ]

    def text_width(self) -> int:
        """Width of the title, header and legend lines, so a measuring container does not crop them."""
        width = Segment.get_line_length(self.heatmap._title_segments())
        for line in self.header_lines():
            width = max(width, Segment.get_line_length(line))
        if self.heatmap.legend:
            width = max(width, Segment.get_line_length(self.legend(self.gutter_width)))
        return width


def _codes(heatmap: AttentionHeatmap, levels: int) -> np.ndarray:
    """Each weight as a level 0..levels-1, or _NAN, or _CURSOR at the cursor."""
    scaled, _, _ = heatmap.scaled()
    missing = np.isnan(scaled)
    codes = np.floor(np.where(missing, 0.0, scaled) * (levels - 1) + 0.5).astype(np.int64)
    codes[missing] = _NAN
    if heatmap.cursor is not None:
        codes[heatmap.cursor] = _CURSOR
    return codes


class _Palette:
    """How each cell code is drawn: background colours, or glyphs without enough colours."""

    def __init__(self, colormap: Colormap, use_colour: bool, masked: bool) -> None:
        self._halves: dict[tuple[int, int], Style] = {}
        if use_colour:
            self.levels = COLOUR_LEVELS
            masked_rgb = colormap.rgb(math.nan)
            colours = [colormap.rgb(level / (self.levels - 1)) for level in range(self.levels)]
            if masked:
                colours = [_blend(rgb, masked_rgb, MASKED_BLEND) for rgb in colours]
            self.colours = {i: Color.from_rgb(*rgb) for i, rgb in enumerate(colours)}
            self.colours[_NAN] = Color.from_rgb(*masked_rgb)
            self.colours[_CURSOR] = Color.parse(colormap.cursor)
            self.cells: dict[int, tuple[str, Style | None]] = {
                code: (" " * CELL_WIDTH, Style(bgcolor=colour)) for code, colour in self.colours.items()
            }
            self.cursor_glyph = " "
            self.emphasis = Style(color=colormap.cursor, bold=True)
            self.bar = self.colour_bar(LEGEND_CELLS)
        else:
            self.levels = len(GLYPHS)
            shade = Style(dim=True) if masked else None
            self.cells = {i: (glyph * CELL_WIDTH, shade) for i, glyph in enumerate(GLYPHS)}
            self.cells[_NAN] = ("·" * CELL_WIDTH, shade)
            self.cells[_CURSOR] = ("[]", Style(bold=True, reverse=True))
            self.cursor_glyph = "◆"
            self.emphasis = Style(bold=True, reverse=True)
            self.bar = [Segment("".join(GLYPHS))]

    def cell(self, code: int, width: int) -> tuple[str, Style | None]:
        """The text and style of one cell ``width`` terminal cells wide."""
        text, style = self.cells[code]
        if width == 1:
            text = self.cursor_glyph if code == _CURSOR else text[0]
        elif width > CELL_WIDTH:
            text = text[0] + " " * (width - 2) + text[-1] if code == _CURSOR else text[0] * width  # the cursor `[  ]`
        return text, style

    def colour_bar(self, cells: int) -> list[Segment]:
        return [Segment(" ", self.cells[round(i * (self.levels - 1) / max(1, cells - 1))][1]) for i in range(cells)]

    def halves(self, pair: tuple[int, int]) -> Style:
        """The style of a half-block cell: the upper row's colour in front, the lower row's behind."""
        style = self._halves.get(pair)
        if style is None:
            upper, lower = pair
            style = Style(color=self.colours[upper], bgcolor=self.colours.get(lower))
            self._halves[pair] = style
        return style


@functools.lru_cache(maxsize=32)
def _palette(colormap: Colormap, use_colour: bool, masked: bool) -> _Palette:
    """Palettes are rebuilt only when the theme changes (256 styles take a few ms)."""
    return _Palette(colormap, use_colour, masked)


def _line(segments: list[Segment], crop: int | None) -> Iterable[Segment]:
    """One line of segments, cut to ``crop`` cells when the output must fit the console."""
    if crop is not None:
        segments = Segment.adjust_line_length(segments, crop, pad=False)
    yield from segments
    yield Segment.line()


def _blend(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    red, green, blue = (round(x + (y - x) * t) for x, y in zip(a, b))
    return red, green, blue


def _printable(label: str) -> str:
    """Tokens with control characters (a stray newline) would break the grid's lines."""
    return "".join(ch if ch.isprintable() else "·" for ch in str(label))


def _fit(label: str, width: int) -> str:
    """Right-align a row label in ``width`` cells, cutting it with an ellipsis."""
    length = cell_len(label)
    if length <= width:
        return " " * (width - length) + label
    if width == 1:
        return set_cell_size(label, 1)
    return set_cell_size(label, width - 1) + "…"


def stagger_height(longest: int, cell_width: int) -> int:
    """How many alternate lines show column labels of ``longest`` cells whole when written across
    columns ``cell_width`` wide (a cell between neighbours on a line)."""
    return -(-(longest + 1) // cell_width)


def _vertical(label: str, height: int, width: int) -> list[str]:
    """A column label as one padded character per line, cut to ``height`` lines.

    Cut labels end in an ellipsis where there are lines enough for it to leave a word.
    """
    chars = list(label)
    if len(chars) > height:
        chars = chars[: height - 1] + ["…"] if height >= 4 else chars[:height]
    return [set_cell_size(ch, width) for ch in chars]


def _number(value: float, digits: int = 2) -> str:
    if value != 0 and abs(value) < 10**-digits:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}f}"
