"""A one-line question in a dialog (prune to X%, clamp a feature, an objective's file): the text read on Enter,
a refusal as one notification with the dialog left open, escape as None. The screens that ask differ only in their
words and in how they read the answer (`read`)."""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import Input, Label

T = TypeVar("T")


class PromptScreen(ModalScreen[T | None], Generic[T]):
    """Asks `question`; Enter gives `read(text)` to the caller, or shows the ValueError it raises and asks again."""

    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    DEFAULT_CSS = """
    PromptScreen { align: center middle; }
    PromptScreen > Vertical { width: 66; max-width: 100%; height: auto; border: round $primary; background: $surface; padding: 0 1; }
    PromptScreen Label { width: 100%; }
    """
    REFUSED: ClassVar[SeverityLevel] = "error"  # how a refused answer is notified

    def __init__(self, question: str, placeholder: str, input_id: str) -> None:
        super().__init__()
        self.question, self.placeholder, self.input_id = question, placeholder, input_id

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question)
            yield Input(placeholder=self.placeholder, id=self.input_id)

    def read(self, text: str) -> T:
        """The answer in `text` (the typed value, as typed), or a ValueError saying what is wrong with it."""
        raise NotImplementedError

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        if not self.is_active:
            return  # escape closed the dialog before this Enter arrived: dismissing again would close the screen under it
        try:
            value = self.read(event.value)
        except ValueError as refusal:
            self.notify(str(refusal), severity=self.REFUSED)
            return
        self.dismiss(value)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
