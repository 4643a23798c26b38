"""Erasing a property inside the explorer's passes (`E`): amnesic probing live (Elazar et al. 2021, with LEACE).

The dialog asks which property (a classification task) and at which hidden state (0 the
embeddings, l + 1 the output of layer l); the backend fits LEACE on the task's training
sentences on the model as it is (analyses.erasure.fit_eraser) and keeps the eraser. From
then every pass that a head mask changes runs with it too: the heatmap of every layer from the
erased state up, the effect pane against the model as it is, the context-mixing cells,
attribution, the grid's syntax figure, the overview (`o`: patterns and syntactic heads over a
corpus), geometry (`g`), the objective pane (against the model as it is) and the probing
pane's `m`. `E` again takes it away. A session file keeps it as "task@layer", fitted again
when the explorer reopens the session.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Select

from bertscope.data.corpus import Sentence
from bertscope.data.probing_tasks import STRUCTURAL_TASKS, TASKS, TREEBANK_TASKS
from bertscope.ui.probing import built_in_sentences

DEFAULT_TASK = "upos"


def erasable_tasks() -> list[str]:
    """The classification tasks (a structural probe regresses distances: LEACE takes classes)."""
    return [name for name in TREEBANK_TASKS if name not in STRUCTURAL_TASKS] + list(TASKS)


def training_sentences(task: str) -> list[Sentence]:
    """The sentences an eraser is fitted on: the built-in task's training split (the generated treebank's whole
    for a word task, as the probing pane probes it)."""
    sentences = built_in_sentences(task)
    training = [sentence for sentence in sentences if sentence.split in (None, "tr", "train")]
    return training or sentences


class EraseScreen(ModalScreen[tuple[str, int] | None]):
    """Asks for the property to erase and the hidden state to erase it from."""

    BINDINGS = [Binding("escape", "dismiss_none", "cancel")]
    DEFAULT_CSS = """
    EraseScreen { align: center middle; }
    EraseScreen > Vertical { width: 72; max-width: 100%; height: auto; border: round $primary; background: $surface; padding: 0 1; }
    EraseScreen Label { width: 100%; }
    """

    def __init__(self, layer: int, num_layers: int) -> None:
        super().__init__()
        self.start_layer, self.num_layers = layer, num_layers

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Erase a property (LEACE) from a hidden state of every pass, as a mask switches heads off")
            yield Select([(name, name) for name in erasable_tasks()], value=DEFAULT_TASK, allow_blank=False, id="erase-task")
            yield Label(f"hidden state: 0 = embeddings … {self.num_layers} = the last layer's output; Enter fits it")
            yield Input(str(self.start_layer), placeholder=f"0 to {self.num_layers}", id="erase-layer")

    def on_mount(self) -> None:
        self.query_one("#erase-layer", Input).focus()

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        if not self.is_active:
            return  # escape closed the dialog before this Enter arrived
        text = event.value.strip()
        if not text.isdigit() or not 0 <= int(text) <= self.num_layers:
            self.notify(f"{event.value!r} is not a hidden state here; give 0 (embeddings) to {self.num_layers}", severity="error")
            return
        self.dismiss((str(self.query_one("#erase-task", Select).value), int(text)))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
