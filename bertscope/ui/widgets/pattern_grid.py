"""The head grid of the corpus screens: heads are chosen here, not masked, and cells can be coloured by pattern class."""

from __future__ import annotations

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.binding import Binding

from bertscope.analyses.attention.patterns_results import CLASSES, OFF
from bertscope.base.theming import Colormap
from bertscope.model.masks import HeadMask
from bertscope.render.patterns import PATTERN_LETTERS
from bertscope.ui.widgets.head_grid import CELL, HeadGrid


class PatternGrid(HeadGrid, inherit_bindings=False):
    """The head grid, with cells coloured by pattern class when asked (heads are chosen, not masked, here)."""

    BINDINGS = [binding for binding in HeadGrid.BINDINGS if isinstance(binding, Binding) and binding.action.startswith("move")]

    def __init__(self, colormap: Colormap, *, id: str | None = None) -> None:
        super().__init__(colormap, id=id)
        self.classes_of: np.ndarray | None = None  # [L, H] index into CLASSES, or None to shade values
        self.class_colours: dict[str, str] = {}

    def set_up(self, title: str, num_layers: int, num_heads: int, colormap: Colormap, glyphs: bool) -> None:
        """A screen's grid as it opens: its title, the model's shape, the app's colours and glyphs."""
        self.border_title = title
        self.set_shape(num_layers, num_heads)
        self.restyle(colormap, glyphs)

    def show_classes(self, classes: np.ndarray, colours: dict[str, str], selected: tuple[int, int], label: str) -> None:
        self.classes_of, self.class_colours = classes, colours
        self.values, self.figure_label, self.selected = None, label, selected
        self.refresh()

    def show(
        self,
        values: np.ndarray | None,
        value_range: tuple[float, float],
        figure_label: str,
        mask: HeadMask,
        selected: tuple[int, int],
    ) -> None:
        self.classes_of = None
        super().show(values, value_range, figure_label, mask, selected)

    def _append_cell(self, text: Text, layer: int, head: int) -> None:
        if self.classes_of is None:
            return super()._append_cell(text, layer, head)
        name = CLASSES[self.classes_of[layer, head]]
        letter = PATTERN_LETTERS[name]
        chosen = (layer, head) == self.selected
        body = (f"[{letter}]" if chosen else f" {letter} ") if len(letter) == 1 else (f"[{letter}" if chosen else f" {letter}")
        colour = self.colormap.masked if name == OFF else self.class_colours[name]  # off: as the main grid colours a masked head
        style = Style(bold=chosen, reverse=chosen or self.glyphs, bgcolor=None if self.glyphs else colour)
        text.append(body[:CELL].ljust(CELL), style=style)

    def _legend(self) -> str:
        if self.classes_of is None:
            return super()._legend()
        layer, head = self.selected
        return f"{self.figure_label}  {layer}:{head} {CLASSES[self.classes_of[layer, head]]}"
