"""The explorer's footer: Textual's compact footer, showing the keys that fit beside the palette key.

Textual's Footer lays every shown key out in a row that scrolls sideways and docks the
command palette's key over its right end, one column short: at 80 columns the keys that do
not fit run under it and out past it ("^p palettee"). This one shows the keys that fit,
in the screen's order (its most used first), and leaves the rest to the help (`?`) and the
palette; it lays them out again when its width changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual import events
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

PALETTE_CLASS = "-command-palette"


class KeyFooter(Footer):
    """A compact footer that never lets a key run under, or past, the palette key."""

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._laid_out_for = 0  # the width the keys were chosen for

    def compose(self) -> ComposeResult:
        width = self.size.width or self.app.size.width
        self._laid_out_for = width
        yield from fitting(list(super().compose()), width)

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and event.size.width != self._laid_out_for:
            self.call_after_refresh(self.recompose)


def key_width(widget: Widget) -> int:
    """The columns a key takes in the compact footer: key, space, description, and a space after it
    (the palette key: a bar before it and no space after)."""
    if not isinstance(widget, FooterKey):
        return 0  # what Textual may add one day: let it through, it will only be cut
    text = widget.key_display + (f" {widget.description}" if widget.description else "")
    return len(text) + 1


def fitting(widgets: Iterable[Widget], width: int) -> list[Widget]:
    """The keys that fit in `width` columns beside the palette key, in their order; the palette key last."""
    widgets = list(widgets)
    palette = [widget for widget in widgets if widget.has_class(PALETTE_CLASS)]
    room = width - sum(key_width(widget) for widget in palette)
    kept: list[Widget] = []
    for widget in widgets:
        if widget in palette:
            continue
        room -= key_width(widget)
        if room < 0:
            break  # later keys may be shorter, but the footer keeps the screen's order
        kept.append(widget)
    return kept + palette
