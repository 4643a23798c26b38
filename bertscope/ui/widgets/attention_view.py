"""The selected head's attention as a scrolling heatmap with a cell cursor."""

from __future__ import annotations

import numpy as np
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.geometry import Region
from textual.message import Message
from textual.widgets import Static

from bertscope.render.heatmap import CELL_WIDTH, MAX_LABEL_HEIGHT, AttentionHeatmap
from bertscope.theming import Colormap

LABEL_WIDTH = 10


class AttentionView(ScrollableContainer, can_focus=True):
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
        self.canvas = Static("waiting for the model…", id="heatmap-canvas")
        self.weights: np.ndarray | None = None
        self.cursor = (0, 0)
        self._label_height = 0

    def compose(self):
        yield self.canvas

    def show_message(self, text: str) -> None:
        self.weights = None
        self.canvas.update(text)

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
        self.canvas.update(
            AttentionHeatmap(
                weights, tokens, tokens, colormap, title=title, masked=masked, cursor=self.cursor,
                split_columns=False, label_width=LABEL_WIDTH, glyphs=glyphs,
            )
        )
        self.call_after_refresh(self._follow_cursor)

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
