"""The selected head's attention as a scrolling heatmap with a cell cursor.

The heatmap is the same Rich renderable the CLI prints. It is rendered to lines once per
change, and the widget hands Textual only the visible part of each line (the line API),
so long inputs scroll smoothly and a repaint does not re-convert every cell's style.
"""

from __future__ import annotations

import numpy as np
from rich.measure import Measurement
from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from bertscope.render.heatmap import CELL_WIDTH, MAX_LABEL_HEIGHT, AttentionHeatmap
from bertscope.theming import Colormap

LABEL_WIDTH = 10


class AttentionView(ScrollView, can_focus=True):
    """Arrows move the cursor cell (from-token → to-token); the view scrolls to follow it."""

    BINDINGS = [
        Binding("up", "move(-1, 0)", "up", show=False),
        Binding("down", "move(1, 0)", "down", show=False),
        Binding("left", "move(0, -1)", "left", show=False),
        Binding("right", "move(0, 1)", "right", show=False),
        Binding("home", "jump(0)", "first", show=False),
        Binding("end", "jump(-1)", "last", show=False),
    ]

    class CursorMoved(Message):
        def __init__(self, row: int, col: int) -> None:
            super().__init__()
            self.row, self.col = row, col

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.heatmap: AttentionHeatmap | None = None
        self.weights: np.ndarray | None = None
        self.cursor = (0, 0)
        self._lines: list[Strip] = []
        self._label_height = 0

    def on_mount(self) -> None:
        self.show_message("waiting for the model…")

    def show_message(self, text: str) -> None:
        self.heatmap = None
        self.weights = None
        self._set_lines([[Segment(line)] for line in text.splitlines()])

    def show(
        self,
        weights: np.ndarray,
        tokens: tuple[str, ...],
        colormap: Colormap,
        *,
        title: str,
        masked: bool,
        glyphs: bool,
        cursor: tuple[int, int],
    ) -> None:
        self.weights = weights
        rows, cols = weights.shape
        self.cursor = (min(cursor[0], rows - 1), min(cursor[1], cols - 1))
        self._label_height = min(max((len(t) for t in tokens), default=0), MAX_LABEL_HEIGHT)
        self.heatmap = AttentionHeatmap(
            weights, tokens, tokens, colormap, title=title, masked=masked, cursor=self.cursor,
            split_columns=False, label_width=LABEL_WIDTH, glyphs=glyphs,
        )
        console = self.app.console
        width = Measurement.get(console, console.options, self.heatmap).maximum
        self._set_lines(list(Segment.split_lines(console.render(self.heatmap, console.options.update_width(width)))))
        self.call_after_refresh(self._follow_cursor)

    def _set_lines(self, lines: list[list[Segment]]) -> None:
        base = self.rich_style  # the theme's background under cells that have none of their own
        self._lines = [Strip(line).apply_style(base) for line in lines]
        size = Size(max((strip.cell_length for strip in self._lines), default=0), len(self._lines))
        if size != self.virtual_size:  # a new size re-lays out the screen: only when it changes
            self.virtual_size = size
        self.refresh()

    @property
    def plain_text(self) -> str:
        """What the view shows, without colours."""
        return "\n".join(strip.text.rstrip() for strip in self._lines)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = y + scroll_y
        width = self.scrollable_content_region.width
        if index >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        return self._lines[index].crop_extend(scroll_x, scroll_x + width, self.rich_style)

    def action_move(self, rows: int, cols: int) -> None:
        if self.weights is None:
            return
        limit_rows, limit_cols = self.weights.shape
        row = min(max(self.cursor[0] + rows, 0), limit_rows - 1)
        col = min(max(self.cursor[1] + cols, 0), limit_cols - 1)
        self.post_message(self.CursorMoved(row, col))

    def action_jump(self, col: int) -> None:
        if self.weights is not None:
            self.post_message(self.CursorMoved(self.cursor[0], col % self.weights.shape[1]))

    def _follow_cursor(self) -> None:
        row, col = self.cursor
        top = 1 + self._label_height + row  # title line, then the column labels
        left = LABEL_WIDTH + 1 + CELL_WIDTH * col
        self.scroll_to_region(Region(left, top, CELL_WIDTH, 1), animate=False, spacing=None)
