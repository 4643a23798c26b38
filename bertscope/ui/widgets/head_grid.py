"""The layer × head grid: one cell per head, shaded by a per-head figure, masked heads marked.

Under the grid a legend names the figure and shows the selected head's value and the range
that the shades span (low end, colour bar or shade glyphs, high end).
"""

from __future__ import annotations

import functools

import numpy as np
from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget

from bertscope.base.theming import Colormap
from bertscope.model.masks import HeadMask
from bertscope.render.heatmap import GLYPHS

ROW_LABEL = 4  # "  0 "
CELL = 3
MIN_WIDTH = 26  # room for the legend's value and range under a grid of few heads
LEGEND_CELLS = 10


SHADES = 255  # grid cells are shaded in this many steps, one cached Style each


@functools.lru_cache(maxsize=1024)
def _shade(colormap: Colormap, step: int) -> Style:
    """The background of a cell ``step`` of SHADES up the colour map (-1: no value, the masked colour)."""
    return Style(bgcolor=colormap.color(step / SHADES if step >= 0 else float("nan")))


def _short(value: float) -> str:
    """A range end in few characters: 0, 0.25, 2.48, 40."""
    return f"{value:.3g}"


# Short names of the per-head figures: the grid's legend is 40 columns wide at 12 heads, and its number must show.
FIGURE_LABELS = {
    "entropy": "entropy (nats)",
    "cls": "attn to [CLS]",
    "sep": "attn to [SEP]",
    "punct": "attn to punctuation",
    "self": "attn to itself",
    "prev": "attn to previous",
    "next": "attn to next",
}


class HeadGrid(Widget, can_focus=True):
    """Arrows or the mouse select a head; space switches it off or on, `l` its whole layer."""

    DEFAULT_CSS = """
    HeadGrid { width: auto; height: auto; }
    """
    BINDINGS = [
        Binding("up", "move(-1, 0)", "up", show=False),
        Binding("down", "move(1, 0)", "down", show=False),
        Binding("left", "move(0, -1)", "left", show=False),
        Binding("right", "move(0, 1)", "right", show=False),
        Binding("space", "toggle_head", "toggle head"),
        Binding("l", "toggle_layer", "toggle layer"),
    ]

    class Selected(Message):
        def __init__(self, layer: int, head: int) -> None:
            super().__init__()
            self.layer, self.head = layer, head

    class Toggled(Message):
        def __init__(self, layer: int, head: int) -> None:
            super().__init__()
            self.layer, self.head = layer, head

    class LayerToggled(Message):
        def __init__(self, layer: int) -> None:
            super().__init__()
            self.layer = layer

    def __init__(self, colormap: Colormap, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.colormap = colormap
        self.glyphs = False
        self.num_layers = 0
        self.num_heads = 0
        self.values: np.ndarray | None = None
        self.value_range = (0.0, 1.0)
        self.figure_label = ""
        self.mask: HeadMask | None = None
        self.selected = (0, 0)
        # A glyph and the heads it marks (the importance overlay's heads whose removal raises the metric), set before `show`.
        self.marks: tuple[str, frozenset[tuple[int, int]]] | None = None

    def set_shape(self, num_layers: int, num_heads: int) -> None:
        self.num_layers, self.num_heads = num_layers, num_heads
        self.mask = self.mask or HeadMask.none(num_layers, num_heads)
        self.refresh(layout=True)

    def show(
        self,
        values: np.ndarray | None,
        value_range: tuple[float, float],
        figure_label: str,
        mask: HeadMask,
        selected: tuple[int, int],
    ) -> None:
        self.values, self.value_range, self.figure_label = values, value_range, figure_label
        self.mask, self.selected = mask, selected
        self.refresh()  # the grid's size changes only with the model (set_shape)

    def show_mask(self, mask: HeadMask) -> None:
        """Mark a new mask at once, before the model has run with it."""
        self.mask = mask
        self.refresh()

    def restyle(self, colormap: Colormap, glyphs: bool) -> None:
        self.colormap, self.glyphs = colormap, glyphs
        self.refresh()

    # drawing

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return self._width()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self.num_layers + 3 if self.num_layers else 1

    def render(self) -> Text:
        if not self.num_layers:
            return Text("waiting for the model…", style="dim")
        text = Text(no_wrap=True, overflow="crop")
        text.append(" " * ROW_LABEL + "".join(f"{head:>2} " for head in range(self.num_heads)) + "\n", style="dim")
        for layer in range(self.num_layers):
            selected_row = layer == self.selected[0]
            text.append(f"{layer:>3} ", style="bold" if selected_row else "dim")
            for head in range(self.num_heads):
                self._append_cell(text, layer, head)
            text.append("\n")
        text.append(self._legend(), style="dim")
        if self.values is not None:
            text.append("\n")
            self._append_range(text)
        return text

    def _append_cell(self, text: Text, layer: int, head: int) -> None:
        masked = self.mask is not None and self.mask.is_masked(layer, head)
        chosen = (layer, head) == self.selected
        value = self._scaled(layer, head)
        marked = self.marks is not None and (layer, head) in self.marks[1] and not masked
        if self.glyphs:
            glyph = (
                "×"
                if masked
                else self.marks[0]
                if marked and self.marks
                else GLYPHS[round(value * (len(GLYPHS) - 1))]
                if value == value
                else "·"
            )
            body = f"[{glyph}]" if chosen else f" {glyph} "
            text.append(body, style=Style(bold=chosen, reverse=chosen))
            return
        if not (chosen or masked or marked):
            text.append("   ", style=_shade(self.colormap, round(value * SHADES) if value == value else -1))
            return
        background = self.colormap.masked if masked else self.colormap.color(value)
        mark = "×" if masked else self.marks[0] if marked and self.marks else " "
        style = Style(bgcolor=background, color=self.colormap.cursor, bold=True)
        text.append(f"▸{mark}◂" if chosen else f" {mark} ", style=style)

    def _scaled(self, layer: int, head: int) -> float:
        if self.values is None:
            return float("nan")
        low, high = self.value_range
        return min(max((float(self.values[layer, head]) - low) / ((high - low) or 1.0), 0.0), 1.0)

    def _legend(self) -> str:
        """What shades the grid, cut to the grid's width (the value and range follow on the next line)."""
        if self.values is None:
            return "computing…"
        label, width = self.figure_label, self._width()
        if self.marks is not None:
            label += f" · {self.marks[0]} off: metric rises"
        return label if cell_len(label) <= width else set_cell_size(label, width - 1) + "…"

    def _append_range(self, text: Text) -> None:
        """The selected head's value, and the range the shades span: low end, colour bar (or glyphs), high end."""
        layer, head = self.selected
        assert self.values is not None  # drawn only under values
        if self.mask is not None and self.mask.is_masked(layer, head):
            value = f"{layer}:{head} off"
        elif self.marks is not None and (layer, head) in self.marks[1]:
            value = f"{layer}:{head} = {self.values[layer, head] + 0.0:.3f} {self.marks[0]}"
        else:
            value = f"{layer}:{head} = {self.values[layer, head] + 0.0:.3f}"
        low, high = (_short(end) for end in self.value_range)
        text.append(f"{value}  {low} ", style="dim")
        if self.glyphs:
            text.append("".join(GLYPHS), style="dim")
        else:
            cells = max(3, min(LEGEND_CELLS, self._width() - cell_len(value) - len(low) - len(high) - 4))
            for index in range(cells):
                text.append(" ", style=Style(bgcolor=self.colormap.color(index / (cells - 1))))
        text.append(f" {high}", style="dim")

    def _width(self) -> int:
        return max(ROW_LABEL + CELL * self.num_heads, MIN_WIDTH)

    # input

    def action_move(self, rows: int, cols: int) -> None:
        if not self.num_layers:
            return
        layer = (self.selected[0] + rows) % self.num_layers
        head = (self.selected[1] + cols) % self.num_heads
        self._select(layer, head)

    def action_toggle_head(self) -> None:
        if self.num_layers:
            self.post_message(self.Toggled(*self.selected))

    def action_toggle_layer(self) -> None:
        if self.num_layers:
            self.post_message(self.LayerToggled(self.selected[0]))

    def on_click(self, event: Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        layer, head = offset.y - 1, (offset.x - ROW_LABEL) // CELL
        if 0 <= layer < self.num_layers and 0 <= head < self.num_heads and offset.x >= ROW_LABEL:
            self._select(layer, head)
            if event.chain == 2:  # double click switches the head off or on
                self.post_message(self.Toggled(layer, head))

    def _select(self, layer: int, head: int) -> None:
        self.selected = (layer, head)
        self.refresh()
        self.post_message(self.Selected(layer, head))
