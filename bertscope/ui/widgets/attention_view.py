"""The selected head's attention as a scrolling heatmap with a cell cursor.

The heatmap is the same renderable the CLI prints, laid out for the pane: one terminal cell
per token (two where the whole map fits, and wider cells, rows two or three lines tall, where
the pane has room to spare), two query rows per line in dense mode, row labels as wide as the
pane allows. Column labels are written downwards in one-cell columns and across, on alternate
lines, in wider ones; they get the lines that show short tokens whole ([CLS], five letters)
even where the grid then scrolls a few rows. The row labels (a gutter on the left), the header line naming
the cursor's cell, the column labels and the legend stay in place while the grid scrolls
under them. Lines are built only when Textual asks for them (the line API) and kept until
the next change, so a 512-token map repaints as quickly as a short one.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click, Resize
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from bertscope.base.theming import Colormap
from bertscope.render.heatmap import (
    CELL_WIDTH,
    MAX_LABEL_HEIGHT,
    MAX_LABEL_WIDTH,
    AttentionHeatmap,
    Cells,
    HeatmapLayout,
    Labels,
    Scale,
    stagger_height,
)

MIN_LABEL_WIDTH = 5  # row labels keep at least this many cells when the grid does not fit
LABEL_SHARE = 4  # ... and take at most a quarter of the pane then
RULER_FROM = 50  # columns from which one-cell columns get a ruler, not labels written downwards
MAX_ROW_HEIGHT = 3  # lines a query row may take where the pane has room
SHORT_LABEL = 5  # column labels get the lines for this many characters ([CLS]) even where the grid then scrolls
FIXED_LINES = 2  # the header line and the legend


def cell_size(rows: int, cols: int, longest: int, width: int, height: int) -> tuple[int, int]:
    """The (cell width, row height) of a map of `rows` lines and `cols` columns with labels of `longest` cells,
    drawn in `width` × `height` cells besides its gutter and fixed lines: rows as tall and columns as wide as the pane
    allows with every row and whole column labels on screen, a row of h lines at most 3h - 1 cells wide (two cells
    a line: a square). One line a row where that leaves no room; one cell a column where two do not fit."""
    for row_height in range(MAX_ROW_HEIGHT, 1, -1):
        cell_width = min(3 * row_height - 1, width // max(1, cols))
        if cell_width >= 2 and rows * row_height + min(MAX_LABEL_HEIGHT, stagger_height(longest, cell_width)) <= height:
            return cell_width, row_height
    return (CELL_WIDTH if CELL_WIDTH * cols <= width else 1), 1


def _cut_number(text: str, start: int) -> int:
    """How many digits from `start` on belong to a number that begins before it (0 if none); on the reversed
    text, how many digits before a cut belong to a number that goes on after it."""
    if start <= 0 or start >= len(text) or not (text[start - 1].isdigit() and text[start].isdigit()):
        return 0
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return end - start


class AttentionView(ScrollView, can_focus=True):
    """Arrows move the cursor cell (from-token → to-token); the grid scrolls to follow it."""

    DEFAULT_CSS = """
    AttentionView { scrollbar-size: 1 1; }
    """
    BINDINGS = [
        Binding("up", "move(-1, 0)", "up", show=False),
        Binding("down", "move(1, 0)", "down", show=False),
        Binding("left", "move(0, -1)", "left", show=False),
        Binding("right", "move(0, 1)", "right", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
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
        self.map_layout: HeatmapLayout | None = None
        self.weights: np.ndarray | None = None
        self.cursor = (0, 0)
        self.dense_shown = False  # whether the map on screen is drawn two rows a line
        self._request: dict = {}
        self._message: list[Strip] = []
        self._header: list[Strip] = []
        self._labels: list[Strip] = []
        self._legend: Strip | None = None
        self._lines: dict[int, Strip] = {}  # grid lines built so far, gutter included
        self._labels_key: tuple | None = None
        self._titles: tuple[str, str | None] = ("", None)  # the full title, and one for a narrow pane
        self._base = Style()

    def on_mount(self) -> None:
        self.show_message("waiting for the model…")

    def show_message(self, text: str) -> None:
        self.heatmap = self.map_layout = self.weights = None
        self._base = self.rich_style
        self._message = [Strip([Segment(line)]).apply_style(self._base) for line in text.splitlines()]
        self._set_virtual_size(Size(max((s.cell_length for s in self._message), default=0), len(self._message)))
        self.refresh()

    def show(
        self,
        weights: np.ndarray,
        tokens: tuple[str, ...],
        colormap: Colormap,
        *,
        title: str,
        short_title: str | None = None,
        masked: bool,
        glyphs: bool,
        cursor: tuple[int, int],
        scale: str = "max",
        dense: bool | None = None,
        quantity: str | None = None,
        vmax: float = 1.0,
    ) -> None:
        """Draw a map; ``dense`` None draws two rows a line only where the map would not fit the pane.

        ``quantity`` names what the cells hold in the legend (None: attention weights); ``vmax``
        is the top of the `fixed` scale; ``short_title`` is the title where the full one would be cut."""
        self.weights = weights
        rows, cols = weights.shape
        self.cursor = (min(cursor[0], rows - 1), min(cursor[1], cols - 1))
        self._request = dict(
            tokens=tokens,
            colormap=colormap,
            title=title,
            masked=masked,
            glyphs=glyphs,
            scale=scale,
            dense=dense,
            quantity=quantity,
            vmax=vmax,
        )
        self._titles = (f"{title}{' (masked)' if masked else ''}", short_title)
        self._rebuild()

    def on_resize(self, event: Resize) -> None:
        if self.weights is not None:
            self._rebuild()

    # layout

    def _rebuild(self) -> None:
        """Lay the map out for the pane's present size and draw its fixed parts."""
        request, weights = self._request, self.weights
        assert weights is not None  # called once a map is shown
        tokens = request["tokens"]
        rows, cols = weights.shape
        width, height = self._pane_size()
        title, short_title = self._titles
        fits = cell_len(title) + 6 <= self.size.width or not self.size.width  # "╭─ title ─╮"
        self.border_title = title if fits or short_title is None else short_title
        use_colour = not request["glyphs"]
        fixed = FIXED_LINES
        dense = request["dense"]
        if dense is None:
            dense = rows + fixed > height
        dense = dense and use_colour  # glyphs have no halves: one row a line
        rows_per_line = 2 if dense else 1
        lines = -(-rows // rows_per_line)
        longest = max((cell_len(token) for token in tokens), default=1)
        longest_column = max((len(token) for token in tokens), default=0)
        short_labels = min(SHORT_LABEL, longest_column, (height - fixed) // 3)  # lines the column labels get at least
        if lines + fixed + short_labels > height:
            width -= 1  # a vertical scrollbar
        labels_wanted = min(longest, MAX_LABEL_WIDTH)
        gutter_wanted = labels_wanted + 1  # one label a line, dense or not (the cursor's row where it is)
        if gutter_wanted + cols <= width:
            gutter = gutter_wanted
        else:  # the grid scrolls anyway: the labels take a quarter of the pane
            gutter = min(gutter_wanted, max(MIN_LABEL_WIDTH + 1, width // LABEL_SHARE))
        cell_width, row_height = cell_size(lines, cols, longest_column, width - gutter, height - fixed)
        if dense:  # two rows a line: one cell or two, as ever
            cell_width, row_height = (CELL_WIDTH if gutter + CELL_WIDTH * cols <= width else 1), 1
        if gutter + cell_width * cols > width:
            height -= 1  # a horizontal scrollbar
        ruler = cell_width == 1 and cols > RULER_FROM  # letters a cell wide, one over another, read no more
        staggered = cell_width >= 2 and not ruler
        self.heatmap = AttentionHeatmap(
            weights,
            tokens,
            tokens,
            request["colormap"],
            scale=Scale(request["scale"], vmax=request["vmax"], quantity=request["quantity"]),
            masked=request["masked"],
            cursor=self.cursor,
            cells=Cells(cell_width, row_height, dense, glyphs=request["glyphs"], split=False),
            # the column labels' height below, once the header's lines are known
            labels=Labels(max(1, gutter - 1), height=0, compact=True, ruler=ruler, staggered=staggered),
        )
        self.map_layout = layout = self.heatmap.layout(use_colour, cell_width).with_gutter(gutter)
        self.dense_shown = layout.rows_per_line == 2
        self._base = base = self.rich_style  # the theme's colours under cells that have none of their own
        # the cursor's row and column in words, on two lines where one would cut them: always readable
        self._header = [Strip(line).apply_style(base) for line in layout.header_lines(width)]
        fixed = len(self._header) + 1  # and the legend
        spare = height - fixed - layout.lines
        wanted = 2 if ruler else stagger_height(longest_column, cell_width) if staggered else longest_column
        short = min(SHORT_LABEL, wanted, (height - fixed) // 3)  # [CLS] whole, even where the grid then scrolls
        label_height = min(MAX_LABEL_HEIGHT, wanted, max(spare, short))
        self.heatmap.label_height = max(0, label_height)
        labels_key = (tokens, use_colour, cell_width, label_height, staggered, self.cursor[1], request["colormap"], base)
        if labels_key != self._labels_key:  # the same for every head of a sentence
            self._labels_key = labels_key
            self._labels = [Strip(line).apply_style(base) for line in layout.column_label_lines()]
        self._legend = Strip(layout.legend(width=width)).apply_style(base)
        self._lines = {}
        self._message = []
        self._set_virtual_size(Size(layout.gutter_width + layout.grid_width, self._top() + layout.lines + 1))
        self.refresh()
        self._follow_cursor()

    def _pane_size(self) -> tuple[int, int]:
        size = self.content_size
        if size.width <= 0 or size.height <= 0:  # not laid out yet: a guess, redone on the first resize
            return 80, 24
        return size.width, size.height

    def _set_virtual_size(self, size: Size) -> None:
        if size != self.virtual_size:  # a new size re-lays out the screen: only when it changes
            self.virtual_size = size
            # After a resize Textual has chosen the scrollbars for the old size; choose again for the new one.
            self._refresh_scrollbars()

    def _top(self) -> int:
        """Lines above the grid: the header line and the column labels."""
        return len(self._header) + len(self._labels)

    def _window(self) -> tuple[int, int]:
        """How many grid lines and grid cells the pane shows at once."""
        region = self.scrollable_content_region
        gutter = self.map_layout.gutter_width if self.map_layout else 0
        return max(1, region.height - self._top() - 1), max(1, region.width - gutter)

    # drawing

    @property
    def plain_text(self) -> str:
        """What the view shows, without colours (the title from its border first)."""
        if self.map_layout is None:
            return "\n".join(strip.text.rstrip() for strip in self._message)
        lines = [str(self.border_title)] + [strip.text.rstrip() for strip in self._header]
        lines += [" " * self.map_layout.gutter_width + strip.text.rstrip() for strip in self._labels]
        lines += [self._grid_strip(index).text.rstrip() for index in range(self.map_layout.lines)]
        assert self._legend is not None  # drawn with the layout
        lines.append(self._legend.text.rstrip())
        return "\n".join(lines)

    def render_line(self, y: int) -> Strip:
        base, region = self._base, self.scrollable_content_region
        width = region.width
        layout = self.map_layout
        if layout is None:
            return self._message[y].crop_extend(0, width, base) if y < len(self._message) else Strip.blank(width, base)
        scroll_x, scroll_y = round(self.scroll_offset.x), round(self.scroll_offset.y)
        gutter = layout.gutter_width
        if y < len(self._header):
            return self._header[y].crop_extend(0, width, base)
        y -= len(self._header)
        if y < len(self._labels):
            label = self._labels[y].crop(scroll_x, scroll_x + width - gutter)
            # a ruler's column number cut at either edge by the scroll: left out, rather than misread
            text, shown = self._labels[y].text, label.cell_length
            left, right = _cut_number(text, scroll_x), _cut_number(text[::-1], len(text) - scroll_x - shown)
            if left or right:
                label = Strip.join([Strip.blank(left, base), label.crop(left, shown - right), Strip.blank(right, base)])
            return Strip.join([Strip.blank(gutter, base), label]).crop_extend(0, width, base)
        y -= len(self._labels)
        shown = min(max(1, region.height - self._top() - 1), layout.lines - scroll_y)
        if y < shown:
            line = self._grid_strip(y + scroll_y)
            if scroll_x == 0:
                return line.crop_extend(0, width, base)
            grid = line.crop(gutter + scroll_x, gutter + scroll_x + width - gutter)
            return Strip.join([line.crop(0, gutter), grid]).crop_extend(0, width, base)
        if y == shown:
            assert self._legend is not None  # drawn with the layout
            return self._legend.crop_extend(0, width, base)
        return Strip.blank(width, base)

    def _grid_strip(self, index: int) -> Strip:
        """Line ``index``: its row labels, then the grid; built once per change."""
        strip = self._lines.get(index)
        if strip is None:
            layout, base = self.map_layout, self._base
            assert layout is not None  # grid lines exist only under a layout
            grid: Iterable[Segment] = layout.grid(index)
            if not layout.use_colour or index == layout.lines - 1:  # glyphs, or a dense line with an empty half
                grid = Segment.apply_style(grid, base)
            # one Strip (each costs its caches), its length known (Rich need not measure the "▀"s)
            strip = Strip([*Segment.apply_style(layout.gutter(index), base), *grid], layout.gutter_width + layout.grid_width)
            self._lines[index] = strip
        return strip

    # the cursor

    def action_move(self, rows: int, cols: int) -> None:
        if self.weights is None:
            return
        limit_rows, limit_cols = self.weights.shape
        row = min(max(self.cursor[0] + rows, 0), limit_rows - 1)
        col = min(max(self.cursor[1] + cols, 0), limit_cols - 1)
        self._move_to(row, col)

    def action_page(self, pages: int) -> None:
        if self.map_layout is not None:
            layout = self.map_layout
            self.action_move(pages * max(1, self._window()[0] // layout.row_height) * layout.rows_per_line, 0)

    def action_jump(self, col: int) -> None:
        if self.weights is not None:
            self._move_to(self.cursor[0], col % self.weights.shape[1])

    def on_click(self, event: Click) -> None:
        """A click on a cell moves the cursor there."""
        offset = event.get_content_offset(self)
        layout = self.map_layout
        if offset is None or layout is None:
            return
        line = offset.y - self._top() + round(self.scroll_offset.y)
        x = offset.x - layout.gutter_width + round(self.scroll_offset.x)
        if offset.y < self._top() or offset.x < layout.gutter_width or not 0 <= line < layout.lines:
            return
        row = layout.row_at(line)
        col = x // layout.cell_width
        assert self.weights is not None  # laid out from them
        if row < self.weights.shape[0] and 0 <= col < self.weights.shape[1]:
            self._move_to(row, col)

    def _move_to(self, row: int, col: int) -> None:
        """Keys that arrive together each count: the next one moves on from here, not from the last repaint."""
        if (row, col) != self.cursor:
            self.cursor = (row, col)
            self.post_message(self.CursorMoved(row, col))

    def _follow_cursor(self) -> None:
        layout = self.map_layout
        if layout is None:
            return
        window_lines, window_cells = self._window()
        line = layout.first_line(self.cursor[0])
        last = line + layout.row_height - 1
        left, right = self.cursor[1] * layout.cell_width, (self.cursor[1] + 1) * layout.cell_width
        scroll_x, scroll_y = self.scroll_offset.x, self.scroll_offset.y
        if line < scroll_y:
            scroll_y = line
        elif last >= scroll_y + window_lines:
            scroll_y = last - window_lines + 1
        if left < scroll_x:
            scroll_x = left
        elif right > scroll_x + window_cells:
            scroll_x = right - window_cells
        if (scroll_x, scroll_y) != tuple(self.scroll_offset):
            self.scroll_to(scroll_x, scroll_y, animate=False, immediate=True, force=True)
