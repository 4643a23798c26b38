"""Small read-only panes: where the cursor's token looks, what the mask does, the status line."""

from __future__ import annotations

import numpy as np
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Static

from bertscope.model.labels import token_labels
from bertscope.model.results import MaskPrediction
from bertscope.ui.theme import rich_colour

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def bar(widget: Static, size: float, value: float) -> Bar:
    """A horizontal bar in the theme's colours (Rich's default grey jars on light themes)."""
    theme = widget.app.current_theme
    return Bar(size, 0.0, value, color=rich_colour(theme.primary, "magenta"), bgcolor=rich_colour(theme.panel or theme.surface, "default"))


class RowsPanel(Static):
    """A panel whose number of rows is known to `update_keeping_layout`."""

    _rows: object = None  # the rows of what it shows now


def update_keeping_layout(panel: RowsPanel, content: RenderableType, rows: object) -> None:
    """Update a panel; re-lay out the screen (milliseconds) only when its number of rows changes."""
    changed = panel._rows != rows
    panel._rows = rows
    panel.update(content, layout=changed)


class TokenPanel(RowsPanel):
    """For the query token under the cursor, the tokens it attends to most, as bars."""

    def show(
        self, tokens: tuple[str, ...], row: np.ndarray, query: int, top: int = 5, norms: bool = False, measure: str | None = None
    ) -> None:
        """`norms`: the row holds value-weighted norms ‖α f(x)‖ (no upper bound of 1), not weights; `measure`: it holds the
        shares of a context-mixing measure of that name (summing to 1)."""
        table = Table.grid(padding=(0, 1))
        top_value = max(float(row.max()), 1e-12) if norms else 1.0
        table.add_column(justify="right", max_width=12, no_wrap=True)
        table.add_column(width=16)
        table.add_column(justify="right")
        for index in np.argsort(-row, kind="stable")[:top]:
            weight = float(row[index])
            table.add_row(Text(f"{index}:{tokens[index]}"), bar(self, top_value, weight), f"{weight:.3f}")
        what = f"takes most from ({measure})" if measure else "takes most from (‖αf‖)" if norms else "attends to"
        self.border_title = Text(f"{query}:{tokens[query]} {what}")
        update_keeping_layout(self, table, rows=min(top, len(tokens)))


class EffectPanel(RowsPanel, can_focus=True):
    """What the mask does: per layer, cosine of masked vs plain hidden states; MLM guesses.

    It takes the focus (Tab), so that on a small terminal the side pane scrolls to it and
    the arrow keys scroll the side pane on to its last rows.
    """

    BINDINGS = [
        Binding("up", "scroll_side(-1)", "scroll", show=False),
        Binding("down", "scroll_side(1)", "scroll", show=False),
        Binding("pageup", "scroll_side(-10)", "scroll", show=False),
        Binding("pagedown", "scroll_side(10)", "scroll", show=False),
    ]

    def action_scroll_side(self, rows: int) -> None:
        assert isinstance(self.parent, Widget)  # the side pane it sits in
        self.parent.scroll_relative(y=rows, animate=False)

    def show(
        self,
        cosines: np.ndarray,
        masked_heads: int,
        before: list[MaskPrediction],
        after: list[MaskPrediction],
        tokens: tuple[str, ...],
        erased: str | None = None,
    ) -> None:
        """`erased`: the property erased in the pass (`upos erased @3`), whose effect shows with the mask's."""
        drops = 1.0 - cosines[1:]
        scale = max(float(drops.max()), 1e-3)
        changed = bool(masked_heads) or erased is not None
        # Two lines of at most 41 columns (the side pane at 80 columns), the first the one an 80×24 screen shows.
        if not changed:
            summary, note = Text("no heads masked: space switches one off"), "per layer: cosine to the unmasked run"
        else:
            heads = f"{masked_heads} head(s) off" if masked_heads else ""
            what = " + ".join(part for part in (heads.replace(" head(s)", "") if erased else heads, erased or "") if part)
            cosine = "cos" if masked_heads and erased else "output cosine"
            summary = Text(f"{what} · {cosine} {float(cosines[-1]):.4f}", style="bold")
            note = f"per layer; bar = drop (full = {scale:.3g})"
        chart = Table.grid(padding=(0, 1))
        chart.add_column(justify="right")
        chart.add_column(width=14)
        chart.add_column(justify="right")
        for layer, (cosine, drop) in enumerate(zip(cosines[1:], drops)):
            chart.add_row(f"layer {layer}", bar(self, scale, max(float(drop), 0.0)), f"{cosine:.4f}")
        parts: list[RenderableType] = [summary, Text(note, style="dim"), chart]  # the same rows masked or not: no relayout on a toggle
        for plain, current in zip(before, after):
            parts.append(Text(f"{tokens[plain.position]} at {plain.position}: before → after", style="bold"))
            guesses = Table.grid(padding=(0, 1))
            guesses.add_column()
            guesses.add_column()
            for rank in range(min(3, len(plain.tokens))):
                guesses.add_row(
                    Text(f"{guess_label(plain.tokens[rank])} {plain.probabilities[rank]:.2f}"),
                    Text(f"→ {guess_label(current.tokens[rank])} {current.probabilities[rank]:.2f}" if changed else ""),
                )
            parts.append(guesses)
        update_keeping_layout(self, Group(*parts), rows=(len(cosines), len(before)))


def guess_label(token: str) -> str:
    """An MLM guess as it reads: a piece on its own, its word-start mark dropped (model.labels)."""
    return token_labels((token,))[0]


class StatusLine(Static):
    """Model, device, size, masked heads, and a spinner while the model works.

    Its facts come most important first; those that do not fit the width are left out
    (the grid's legend names its figure, the heatmap's title the view), never cut midway.
    """

    def on_mount(self) -> None:
        self.facts: tuple[str, ...] = ("loading model…",)
        self.busy = True
        self._frame = 0
        self.set_interval(0.1, self._tick)
        self._draw()

    def set_facts(self, *facts: str) -> None:
        self.facts = facts
        self._draw()

    def on_resize(self) -> None:
        self._draw()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._draw()

    def _tick(self) -> None:
        if self.busy:
            self._frame = (self._frame + 1) % len(SPINNER)
            self._draw()

    def _draw(self) -> None:
        marker = f"{SPINNER[self._frame]} working" if self.busy else "● ready"
        room = (self.content_size.width or 10_000) - len(marker) - 2
        shown = list(self.facts[:1])  # the first always, cut with an ellipsis if it must be
        for fact in self.facts[1:]:
            if len(" · ".join([*shown, fact])) > room:
                break
            shown.append(fact)
        line = Text.assemble((marker, "bold" if self.busy else "dim"), "  ", " · ".join(shown), no_wrap=True, overflow="ellipsis")
        self.update(line, layout=False)  # one fixed line: a relayout of the screen would cost ms per tick
