"""The explorer's code stays in rooms a person can hold, and every key the main screen shows reaches an action.

The main screen binds every key (so a key acts wherever the focus is) and hands each action to its room (the heatmap
pane, the conditions controller, the launchers); a key whose action is missing would do nothing, silently.
"""

from __future__ import annotations

import ast
from pathlib import Path

from bertscope.ui.launchers import PALETTE
from bertscope.ui.main_screen import MainScreen
from bertscope.ui.widgets.head_grid import HeadGrid

UI = Path(__file__).resolve().parent.parent / "bertscope" / "ui"
MOST_LINES = 500  # issue 57: no class under bertscope/ui longer


def test_no_class_of_the_explorer_is_longer_than_500_lines():
    long = {}
    for path in sorted(UI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MOST_LINES:
                long[f"{path.relative_to(UI)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert long == {}


def test_every_key_and_palette_entry_of_the_main_screen_names_an_action_it_has():
    for binding in MainScreen.BINDINGS:
        namespace, _, action = binding.action.rpartition(".")
        if not namespace:
            assert callable(getattr(MainScreen, f"action_{action}", None)), binding.key
    for title, _help, action in PALETTE:
        owner, name = (HeadGrid, action.removeprefix("grid.")) if action.startswith("grid.") else (MainScreen, action)
        assert callable(getattr(owner, f"action_{name}", None)), title
