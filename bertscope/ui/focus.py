"""Focus rules shared by every screen, so that a command key is never typed into a box.

Each screen names its main widget (the grid, the scatter, the curves). It opens with the
focus there; Enter in an input runs it and gives the focus back; Escape leaves an input
(or a drop-down) for the main widget before it cancels or goes back. A box takes keys only
after it was focused on purpose: `/`, a click, or Tab.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input, Select

TYPING = (Input, Select)  # widgets that take the keys a command would otherwise get


def main_widget(screen: Screen) -> Widget | None:
    """The screen's main widget: the first match of its AUTO_FOCUS selector, if any."""
    selector = screen.AUTO_FOCUS
    if not selector or selector == "*":
        return None
    return next(iter(screen.query(selector)), None)


def focus_main(screen: Screen) -> None:
    """Give the focus to the screen's main widget (or to none, so the screen's keys act)."""
    widget = main_widget(screen)
    if widget is not None and widget.focusable:
        widget.focus()
    else:
        screen.set_focus(None)


def dismissed(screen: Screen) -> bool:
    """Whether the screen has left the stack: a key typed ahead (escape) can dismiss a screen before its mount
    handler has run, which then finds its panes being removed."""
    return screen not in screen.app.screen_stack


def leave_input(screen: Screen) -> bool:
    """If an input or drop-down has the focus, hand it to the main widget and say so."""
    focused = screen.focused
    for widget in (focused, *(focused.ancestors if focused is not None else ())):
        if isinstance(widget, TYPING):
            focus_main(screen)
            return True
    return False
