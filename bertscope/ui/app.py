"""The explorer: the app holds what every screen shares, the model, the theme and the session file.

The app never touches torch. It is given a function that opens a model backend (and reports
its progress through the callback it is passed); a thread worker calls it, so the first
frame appears before the model (and torch) have loaded. The view itself, the sentence with
its grid and heatmap, is the main screen (ui.main_screen), under which the app starts; the
other screens open over it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import cast

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.command import CommandListItem, SimpleProvider
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.theme import ThemeProvider
from textual.widget import AwaitMount

from bertscope.base.errors import BertscopeError
from bertscope.base.theming import DEFAULT_THEME, Colormap, load_theme
from bertscope.ui.backend import Backend
from bertscope.ui.guards import Palette, guard_page_keys
from bertscope.ui.help import HelpScreen
from bertscope.ui.kept import KeptResults
from bertscope.ui.main_screen import MainScreen
from bertscope.ui.messages import ModelLoaded, ModelLoadFailed
from bertscope.ui.state import ExplorerState, NotASessionError, load_state, save_state
from bertscope.ui.theme import heatmap_for, load_all_themes, textual_theme


class ExplorerApp(App[None]):
    CSS_PATH = Path(__file__).parent / "explorer.tcss"  # absolute, so subclasses elsewhere find it
    TITLE = "bertscope"
    BINDINGS = [
        Binding("question_mark", "help", "help"),
        Binding("t", "next_theme", "theme"),
        Binding("ctrl+q", "quit", "quit", priority=True),
    ]

    def notify(
        self, message: str, *, title: str = "", severity: SeverityLevel = "information", timeout: float | None = None, markup: bool = True
    ) -> None:
        """Every notification as plain text, whatever `markup` says (a widget's `notify` passes True): the explorer's
        lines name tokens ("[CLS]", "[MASK]") and paths that markup would eat, and none of them is written as markup."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def __init__(
        self,
        open_backend: Callable[[Callable[[str], None]], Backend],
        *,
        text: str | None = None,
        pair: str | None = None,
        theme: str | None = None,
        session_file: str | Path | None = None,
        export_dir: str | Path = ".",
        figure_format: str = "svg",
        glyphs: bool | None = None,
    ) -> None:
        super().__init__()
        guard_page_keys()  # an upstream race that a storm of keys turned into a traceback (ui.guards)
        self._open_backend = open_backend
        self.session_file = Path(session_file) if session_file else None
        self.export_dir = Path(export_dir)
        self.figure_format = figure_format  # what `e` writes a view's figure as: svg, pdf or png (ui.export)
        self._startup_notes: list[str] = []
        state = ExplorerState()
        if self.session_file is not None:
            try:
                state, problem = load_state(self.session_file)
            except NotASessionError as error:  # the command line refuses it; called from Python, leave the file alone
                state, problem = ExplorerState(), f"{error}; this session is not saved"
                self.session_file = None
            if problem:
                self._startup_notes.append(problem)
        if text:
            state = state.with_(text=text, pair=pair or "")
        elif pair is not None:
            state = state.with_(pair=pair)
        if theme:
            state = state.with_(theme=theme)
        self.state = state  # the session: what the main screen shows, and the theme
        self.backend: Backend | None = None
        self.load_error: str | None = None  # why the model could not be loaded, for the command line to print
        self.kept = KeptResults()  # the corpus screens' finished results (ui.kept)
        self.theme_specs, theme_warnings = load_all_themes()
        self._startup_notes.extend(theme_warnings)
        if theme and theme not in self.theme_specs:  # a theme file given by its path
            try:
                spec = load_theme(theme)
                self.theme_specs[spec.name] = spec
                self.state = self.state.with_(theme=spec.name)
            except ValueError as error:
                self._startup_notes.append(str(error))
        self._glyphs_wanted = glyphs  # None: shade glyphs only where colours are too few or off
        self.glyphs = bool(glyphs)

    def get_default_screen(self) -> MainScreen:
        return MainScreen(id="_default")

    @property
    def main_screen(self) -> MainScreen:
        """The explorer's own screen, at the bottom of the stack."""
        return cast(MainScreen, self.screen_stack[0])

    async def on_mount(self) -> None:
        """The theme and the glyphs, in which the main screen then composes; once it is up, the model."""
        for spec in self.theme_specs.values():
            self.register_theme(textual_theme(spec))
        wanted = self.state.theme or DEFAULT_THEME
        if wanted not in self.available_themes:
            self._startup_notes.append(f"theme {wanted!r} is not available; using {DEFAULT_THEME}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        if self._glyphs_wanted is None:
            self.glyphs = self.no_color or self.console.color_system in (None, "standard")
        for note in self._startup_notes:
            self.notify(note, severity="warning", timeout=8)
        await self.main_screen.mounted.wait()  # the model's loading reports in its status line
        self.load_model()

    def colormap(self) -> Colormap:
        """The heatmap's colours in the theme shown."""
        return heatmap_for(self.theme, self.current_theme.dark, self.theme_specs)

    # loading the model

    @work(thread=True, group="load", exit_on_error=False)
    def load_model(self) -> None:
        """Open the backend in a thread, telling the main screen how it goes."""
        main = self.main_screen

        def report(stage: str) -> None:
            self.call_from_thread(main.model_loading, stage)

        try:
            backend = self._open_backend(report)
        except BertscopeError as error:
            self.post_message(ModelLoadFailed(str(error)))
            return
        except Exception as error:  # a broken install or driver: say what it was, keep the app up
            self.post_message(ModelLoadFailed(f"{type(error).__name__}: {error}"))
            return
        self.post_message(ModelLoaded(backend))

    def on_model_loaded(self, message: ModelLoaded) -> None:
        self.backend = message.backend
        self.sub_title = message.backend.info.source
        self.main_screen.model_loaded(message.backend)

    def on_model_load_failed(self, message: ModelLoadFailed) -> None:
        """Nothing works without a model: leave, and let the command line say why in one line."""
        self.load_error = message.reason
        self.exit(return_code=2)

    # what the user does anywhere

    def action_next_theme(self) -> None:
        names = sorted(self.theme_specs)
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.state = self.state.with_(theme=self.theme)
        self.notify(f"theme: {self.theme}", timeout=2)
        self.save_state()

    def action_help(self) -> None:
        """The help, laid out once (its Markdown takes most of a second) and kept for the next `?`."""
        if not self.is_screen_installed("help"):
            self.install_screen(HelpScreen(), "help")
        if not isinstance(self.screen, HelpScreen):
            self.push_screen("help")

    # the command palette: Textual's, guarded against a race (ui.guards), wherever Textual would open its own

    def action_command_palette(self) -> None:
        if self.use_command_palette and not self.screen.has_class("--textual-command-palette"):  # as Palette.is_open
            self.push_screen(Palette(id="--command-palette"))

    def search_commands(self, commands: Sequence[CommandListItem], placeholder: str = "Search for commands…") -> AwaitMount:
        provider = SimpleProvider(self.screen, list(commands))  # an instance, as Textual's own search_commands passes
        return self.push_screen(Palette(providers=[provider], placeholder=placeholder))  # type: ignore[list-item]

    def search_themes(self) -> None:
        self.push_screen(Palette(providers=[ThemeProvider], placeholder="Search for themes…"))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is self.main_screen:  # its commands act on its panes: not from a screen opened over it
            yield from self.main_screen.system_commands()
        yield SystemCommand("Keys", "Show every key", self.action_help)

    # the session file

    def save_state(self) -> None:
        if self.session_file is None:
            return
        try:
            save_state(self.session_file, self.state)
        except BertscopeError as error:
            self.notify(str(error), title="session not saved", severity="error", timeout=10)

    def on_unmount(self) -> None:
        self.save_state()
