"""One attention matrix drawn as a Rich renderable, shared by the CLI and the UI.

Rows are query ("from") tokens, columns key ("to") tokens. Each cell is two terminal cells
wide. With 256 or more colours a cell is a background colour from the theme's colour map;
with 16 colours or none (NO_COLOR) the value is a shade glyph instead, so the picture still
reads. Lines are built from Segments, not per-cell Text, so 512 × 512 renders quickly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from itertools import groupby

import numpy as np
from rich.cells import cell_len, set_cell_size
from rich.color import Color
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.style import Style

from bertscope.theming import Colormap

GLYPHS = (" ", "░", "▒", "▓", "█")  # low to high, for terminals without enough colours
COLOUR_LEVELS = 256  # weights are quantised to this many colours, one Style each
MAX_LABEL_HEIGHT = 8  # column labels are written vertically, at most this many lines
CELL_WIDTH = 2
LEGEND_CELLS = 10
MASKED_BLEND = 0.75  # a masked head keeps a faint trace of its pattern

_NAN = -1  # cell codes next to the quantised levels 0..n-1
_CURSOR = -2


class AttentionHeatmap:
    """An attention matrix with token labels on both axes, a legend and an optional cursor.

    ``split_columns`` prints a grid wider than the console in column blocks, like numpy
    prints wide arrays; turn it off where a scrolling container shows the full width.
    ``glyphs`` forces shade glyphs (True) or colours (False); None decides from the console.
    """

    def __init__(
        self,
        weights: np.ndarray,  # [rows, cols] floats
        row_labels: Sequence[str],
        col_labels: Sequence[str],
        colormap: Colormap,
        *,
        title: str | None = None,
        vmin: float = 0.0,
        vmax: float = 1.0,
        cursor: tuple[int, int] | None = None,
        masked: bool = False,
        split_columns: bool = True,
        label_width: int = 12,
        legend: bool = True,
        glyphs: bool | None = None,
    ) -> None:
        weights = np.asarray(weights, dtype=float)
        if weights.ndim != 2:
            raise ValueError(f"attention weights must be 2-D [rows, cols], got shape {weights.shape}")
        rows, cols = weights.shape
        if len(row_labels) != rows or len(col_labels) != cols:
            raise ValueError(
                f"{len(row_labels)} row labels and {len(col_labels)} column labels "
                f"do not match weights of shape {rows}×{cols}"
            )
        if cursor is not None and not (0 <= cursor[0] < rows and 0 <= cursor[1] < cols):
            raise ValueError(f"cursor {tuple(cursor)} is outside the {rows}×{cols} grid")
        if not vmax >= vmin:
            raise ValueError(f"vmax ({vmax}) must not be below vmin ({vmin})")
        if label_width < 1:
            raise ValueError(f"label_width must be at least 1, got {label_width}")
        self.weights = weights
        self.row_labels = [_printable(label) for label in row_labels]
        self.col_labels = [_printable(label) for label in col_labels]
        self.colormap = colormap
        self.title = title
        self.vmin = vmin
        self.vmax = vmax
        self.cursor = tuple(cursor) if cursor is not None else None
        self.masked = masked
        self.split_columns = split_columns
        self.label_width = label_width
        self.legend = legend
        self.glyphs = glyphs  # None: decide from the console's colours

    # Rich protocol

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        full = max(self._grid_width(self.label_width, self.weights.shape[1]), self._text_width())
        narrowest = self._grid_width(self.label_width, 1) if self.split_columns else full
        return Measurement(min(narrowest, full), full)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        use_colour = console.color_system in ("256", "truecolor") and not console.no_color
        if self.glyphs is not None:
            use_colour = not self.glyphs
        palette = _palette(self.colormap, use_colour, self.masked)
        width = options.max_width
        label_width, per_block = self.label_width, max(1, self.weights.shape[1])
        if self.split_columns and self._grid_width(label_width, per_block) > width:
            label_width = max(1, min(label_width, width - 1 - CELL_WIDTH))
            per_block = max(1, (width - label_width - 1) // CELL_WIDTH)
        crop = width if self.split_columns else None

        if self.title or self.masked:
            yield from _line(self._title_segments(), crop)
        codes = self._cell_codes(palette.levels)
        cols = self.weights.shape[1]
        blocks = [(start, min(start + per_block, cols)) for start in range(0, cols, per_block)]
        row_labels = [_fit(label, label_width) for label in self.row_labels]
        for number, (start, stop) in enumerate(blocks):
            if len(blocks) > 1:
                if number:
                    yield Segment.line()
                shown = f"column {start}" if stop - start == 1 else f"columns {start}–{stop - 1}"
                yield from _line([Segment(f"{shown} of {cols}", Style(dim=True))], crop)
            yield from self._column_label_lines(label_width, start, stop, palette)
            for row, label in enumerate(row_labels):
                yield from self._row_line(row, label, codes[row, start:stop], palette)
        if self.legend:
            yield from _line(self._legend_segments(label_width, palette), crop)
        if self.cursor is not None:
            yield from _line(self._pointer_segments(label_width, palette), crop)

    # Parts of the picture

    def _cell_codes(self, levels: int) -> np.ndarray:
        """Each weight as a level 0..levels-1, or _NAN, or _CURSOR at the cursor."""
        span = self.vmax - self.vmin
        with np.errstate(invalid="ignore"):
            scaled = (self.weights - self.vmin) / (span if span > 0 else 1.0)
        missing = np.isnan(scaled)
        scaled = np.clip(np.where(missing, 0.0, scaled), 0.0, 1.0)
        codes = np.floor(scaled * (levels - 1) + 0.5).astype(np.int64)
        codes[missing] = _NAN
        if self.cursor is not None:
            codes[self.cursor] = _CURSOR
        return codes

    def _row_line(self, row: int, label: str, codes: np.ndarray, palette: _Palette) -> Iterable[Segment]:
        on_cursor = self.cursor is not None and self.cursor[0] == row
        yield Segment(label, palette.emphasis if on_cursor else None)
        yield Segment("▸" if on_cursor else " ")
        for code, run in groupby(codes.tolist()):
            text, style = palette.cells[code]
            yield Segment(text * sum(1 for _ in run), style)
        yield Segment.line()

    def _column_label_lines(self, label_width: int, start: int, stop: int, palette: _Palette) -> Iterable[Segment]:
        """Column labels written downwards, one character per line, ending at the grid."""
        stacks = [_vertical(label) for label in self.col_labels[start:stop]]
        height = max((len(stack) for stack in stacks), default=0)
        cursor_col = self.cursor[1] - start if self.cursor is not None else -1
        indent = Segment(" " * (label_width + 1))
        for line in range(height):
            depth = height - line  # counted up from the grid
            pieces = [stack[-depth] if depth <= len(stack) else " " * CELL_WIDTH for stack in stacks]
            yield indent
            if 0 <= cursor_col < len(stacks) and depth <= len(stacks[cursor_col]):
                yield Segment("".join(pieces[:cursor_col]))
                yield Segment(pieces[cursor_col], palette.emphasis)
                yield Segment("".join(pieces[cursor_col + 1 :]))
            else:
                yield Segment("".join(pieces))
            yield Segment.line()

    def _title_segments(self) -> list[Segment]:
        segments = [Segment(self.title, Style(bold=True))] if self.title else []
        if self.masked:
            segments.append(Segment(" (masked)" if self.title else "masked", Style(bold=True, italic=True)))
        return segments

    def _legend_segments(self, label_width: int, palette: _Palette) -> list[Segment]:
        segments = [Segment(" " * (label_width + 1) + _number(self.vmin) + " ")]
        segments += palette.bar
        segments.append(Segment(" " + _number(self.vmax)))
        return segments

    def _pointer_segments(self, label_width: int, palette: _Palette) -> list[Segment]:
        """The cursor cell in words: from-token → to-token and its weight."""
        row, col = self.cursor
        pointer = f"▸ {row}:{self.row_labels[row]} → {col}:{self.col_labels[col]}  {_number(self.weights[row, col], 3)}"
        return [Segment(" " * (label_width + 1)), Segment(pointer, palette.emphasis)]

    def _grid_width(self, label_width: int, cols: int) -> int:
        return label_width + 1 + CELL_WIDTH * cols

    def _text_width(self) -> int:
        """Width of the title and legend lines, so a measuring container does not crop them."""
        width = Segment.get_line_length(self._title_segments())
        if self.legend:
            plain = _palette(self.colormap, use_colour=False, masked=False)
            width = max(width, Segment.get_line_length(self._legend_segments(self.label_width, plain)))
        if self.cursor is not None:
            plain = _palette(self.colormap, use_colour=False, masked=False)
            width = max(width, Segment.get_line_length(self._pointer_segments(self.label_width, plain)))
        return width


class _Palette:
    """How each cell code is drawn: background colours, or glyphs without enough colours."""

    def __init__(self, colormap: Colormap, use_colour: bool, masked: bool) -> None:
        if use_colour:
            self.levels = COLOUR_LEVELS
            masked_rgb = colormap.rgb(math.nan)
            colours = [colormap.rgb(level / (self.levels - 1)) for level in range(self.levels)]
            if masked:
                colours = [_blend(rgb, masked_rgb, MASKED_BLEND) for rgb in colours]
            self.cells = {i: (" " * CELL_WIDTH, _background(rgb)) for i, rgb in enumerate(colours)}
            self.cells[_NAN] = (" " * CELL_WIDTH, _background(masked_rgb))
            self.cells[_CURSOR] = (" " * CELL_WIDTH, Style(bgcolor=colormap.cursor))
            self.emphasis = Style(color=colormap.cursor, bold=True)
            self.bar = [
                Segment(" ", self.cells[round(i * (self.levels - 1) / (LEGEND_CELLS - 1))][1])
                for i in range(LEGEND_CELLS)
            ]
        else:
            self.levels = len(GLYPHS)
            shade = Style(dim=True) if masked else None
            self.cells = {i: (glyph * CELL_WIDTH, shade) for i, glyph in enumerate(GLYPHS)}
            self.cells[_NAN] = ("·" * CELL_WIDTH, shade)
            self.cells[_CURSOR] = ("[]", Style(bold=True, reverse=True))
            self.emphasis = Style(bold=True, reverse=True)
            self.bar = [Segment("".join(glyph * CELL_WIDTH for glyph in GLYPHS))]


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


def _background(rgb: tuple[int, int, int]) -> Style:
    return Style(bgcolor=Color.from_rgb(*rgb))


def _blend(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> tuple[int, int, int]:
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))  # type: ignore[return-value]


def _printable(label: str) -> str:
    """Tokens with control characters (a stray newline) would break the grid's lines."""
    return "".join(ch if ch.isprintable() else "·" for ch in str(label))


def _fit(label: str, width: int) -> str:
    """Right-align a row label in ``width`` cells, cutting it with an ellipsis."""
    length = cell_len(label)
    if length <= width:
        return " " * (width - length) + label
    return set_cell_size(label, width - 1) + "…"


def _vertical(label: str) -> list[str]:
    """A column label as one padded character per line, cut with an ellipsis when too tall."""
    chars = list(label)
    if len(chars) > MAX_LABEL_HEIGHT:
        chars = chars[: MAX_LABEL_HEIGHT - 1] + ["…"]
    return [set_cell_size(ch, CELL_WIDTH) for ch in chars]


def _number(value: float, digits: int = 2) -> str:
    if value != 0 and abs(value) < 10**-digits:
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}f}"
