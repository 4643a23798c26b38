"""What the main view and its parts ask of the app (ui.app): the model, the session, the look, the corpus screens' results.

A protocol, so that the main screen, its heatmap pane, its conditions and its launchers can speak of the app without
importing it (the app imports them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from bertscope.base.theming import Colormap, ThemeSpec
from bertscope.ui.backend import Backend
from bertscope.ui.kept import KeptResults
from bertscope.ui.state import ExplorerState


class Explorer(Protocol):
    """The app as the main view sees it."""

    state: ExplorerState
    backend: Backend | None
    kept: KeptResults
    export_dir: Path
    figure_format: str
    theme_specs: dict[str, ThemeSpec]
    glyphs: bool

    def colormap(self) -> Colormap: ...

    def save_state(self) -> None: ...
