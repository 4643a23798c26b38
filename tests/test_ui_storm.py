"""A seeded storm of keys over every screen, the help and the command palette (fake backend).

A person who holds a key down, or types into the wrong window, sends the explorer keys
faster than it draws. One such storm once ended it with a traceback from inside Textual
(ui.guards); this one fails on any exception the app meets, and checks that the explorer
still answers afterwards.
"""

from __future__ import annotations

import random

from textual import events

from bertscope.ui.help import HelpScreen
from tests.helpers.ui import make_app, run, settle

# Every screen's key, the help and the palette, escape to leave them, the keys each screen acts on, and typing.
OPENERS = ["o", "p", "g", "c", "X", "i", "C", "P", "question_mark", "ctrl+p"]
MOVES = ["up", "down", "left", "right", "pageup", "pagedown", "home", "end", "tab", "shift+tab", "enter", "space"]
ACTIONS = ["a", "f", "v", "n", "t", "z", "s", "d", "b", "B", "y", "Y", "x", "l", "m", "r", "e", "slash", "backspace"]
TYPED = ["k", "w", "1", "0"]
KEYS = OPENERS + ["escape"] * 3 + MOVES + ["pageup", "pagedown"] + ACTIONS + TYPED
CHARACTERS = {"space": " ", "slash": "/", "question_mark": "?", "backspace": "\b", "enter": "\r", "tab": "\t", "escape": "\x1b"}


def test_a_seeded_storm_of_keys_leaves_the_explorer_running(tmp_path):
    """300 keys in bursts (seven seconds): without ui.guards, this seed ends the app at its 40th key or so."""
    rng = random.Random(35)
    app = make_app(text="the keys to the cabinet are on the table", export_dir=tmp_path)

    async def steps(pilot):
        sent = 0
        while sent < 300:
            for _ in range(rng.randint(4, 24)):  # a burst, sent faster than the app draws
                key = rng.choice(KEYS)
                character = key if len(key) == 1 else CHARACTERS.get(key)
                app._driver.send_message(events.Key(key, character))
                sent += 1
            await pilot.pause()
        await settle(pilot)
        assert app.is_running and app._exception is None
        while len(app.screen_stack) > 1:  # back to the main view, as a person would, and it still answers
            await pilot.press("escape")
            await settle(pilot)
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)

    run(app, steps, size=(80, 24))  # run_test raises whatever the app met on the way


def test_textual_s_ansi_theme_draws_every_pane():
    """The palette's "Change theme" offers Textual's themes too; ansi-dark names its colours `ansi_blue`, which Rich
    does not read: the effect bars, the overview's classes and the attribution shades once ended the app on it."""
    app = make_app(text="the keys to the cabinet are on the table")

    async def steps(pilot):
        await pilot.press("space", "b")  # a head off (the effect pane's bars), attribution on (shaded tokens)
        await settle(pilot)
        app.theme = "ansi-dark"
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        assert app.is_running and app._exception is None

    run(app, steps)
