"""Where Textual itself fails under a storm of keys, and how the explorer survives it.

A seeded storm of 800 keys over every screen, the help and the command palette ended the
explorer with a traceback from inside Textual, in three ways:

- An option list (the command palette's, a drop-down's) lays out its lines only once it
  has a height. Between a keystroke that rebuilds or hides its options and the next layout
  it is 0 lines high, and `pageup` or `pagedown` then looks up the highlighted option's
  line in a table not filled yet (textual/widgets/_option_list.py, `_move_page`: KeyError,
  or IndexError on an empty list). `guard_page_keys` makes a page key in that moment do
  nothing, as on a list with no lines; Textual's own `scroll_to_highlight` treats the same
  moment so.
- The command palette searches in a worker that asks for its command list; a palette
  closed (escape) while a search was starting has no list any more (NoMatches), and the
  worker's error ended the app. `Palette` lets that search stop: nothing is left to show.
- A choice (Enter, a click) reaches the palette as a message; escape, a key, is acted on at
  once. A choice that arrives after escape closed the palette made Textual dismiss it a
  second time, which pops whatever screen is on top now (ScreenStackError over the main
  view; over another screen, that screen). `Palette` drops a choice that comes after it
  closed, as the prune dialog does its Enter (ui.importance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from textual import on, work
from textual.command import CommandList, CommandPalette
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Button, Input, OptionList


def guard_page_keys() -> None:
    """Make OptionList's page moves a no-op while its lines are not laid out (once per process)."""
    move_page: Callable[[OptionList, Literal[-1, 1]], None] = OptionList._move_page
    if getattr(move_page, "guarded", False):
        return

    def guarded_move_page(self: OptionList, direction: Literal[-1, 1]) -> None:
        try:
            move_page(self, direction)
        except (KeyError, IndexError):
            if self._lines and self.highlighted in self._index_to_line:
                raise  # laid out, and failing all the same: not the race above

    guarded_move_page.guarded = True  # type: ignore[attr-defined]
    OptionList._move_page = guarded_move_page  # type: ignore[method-assign]


class Palette(CommandPalette):
    """Textual's command palette, whose search and late choices survive the palette closing."""

    @on(OptionList.OptionSelected)
    @on(Input.Submitted)
    @on(Button.Pressed)
    def _closed_already(self, event: Message) -> None:
        if not self.is_active:  # escape closed it before this choice arrived: Textual would dismiss it again
            event.prevent_default()  # Textual's handlers, in CommandPalette, do not run
            event.stop()

    @work(exclusive=True, group=CommandPalette._GATHER_COMMANDS_GROUP)
    async def _gather_commands(self, search_value: str) -> None:
        search = getattr(CommandPalette._gather_commands, "__wrapped__")  # Textual's search, not its worker  # noqa: B009
        try:
            await search(self, search_value)
        except NoMatches:
            if self.query(CommandList):
                raise  # the list is there: not the race above
