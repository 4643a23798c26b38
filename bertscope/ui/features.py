"""The features screen (`F`): a sparse autoencoder's features on the explorer's sentence, switched off or clamped live.

A TopK SAE (`bertscope sae train`, or any TopK SAE in SAELens's layout for this model's width) is opened from its
directory. For the sentence on the main screen, each token's most active features are listed (on the model as it
is: no mask, nothing switched), each with its best-matching label from reading the SAE on the sample treebank
shipped with bertscope (`api.sae_features`: UPOS, dependency relation or first/inner word piece, with its
precision), or its top tokens there where no label matches. Enter shows the feature's top contexts in that corpus.

`o` switches the selected feature off in every pass, or back on; `c` clamps it to a value; `x` switches every one
back. As with a head switched off, every pane of the main screen runs again with them (the heatmap from the SAE's
hidden state up, the effect pane, mixing, attribution, the syntax figure, the overview, geometry, the objective
pane, the probing pane's `m`): the pass runs with the hidden state replaced by the SAE's reconstruction with those
features changed plus its error term (analyses.sae.switch), at every token, the special ones included. The status
line says what is switched, and a session file keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from threading import Event
from typing import cast

import numpy as np
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from bertscope import api
from bertscope.analyses.sae.results import LiveFeatures, SAEFeatures
from bertscope.base.errors import InputError
from bertscope.base.progress import Progress
from bertscope.data.corpus import sample_corpus
from bertscope.model.labels import token_labels
from bertscope.model.results import Encoding
from bertscope.ui.backend import Backend
from bertscope.ui.explorer import Explorer
from bertscope.ui.focus import focus_main, leave_input
from bertscope.ui.help import BACK_KEY, HELP_KEY
from bertscope.ui.job_run import JobRun
from bertscope.ui.prompt import PromptScreen
from bertscope.ui.widgets.footer import KeyFooter

PER_TOKEN = 3  # features listed per token
CONTEXTS = 8  # top contexts kept per feature from the sample treebank
NAMED = 0.5  # a label names a feature where it takes at least this share of its firings; else its top tokens do
Switch = Callable[[LiveFeatures | None], None]  # what the screen tells the explorer: these features switched (None: none)


def feature_name(reading: SAEFeatures | None, feature: int) -> str:
    """A feature's name from the sample treebank's reading: its best label and precision where the label takes most of
    its firings, else its top tokens there."""
    if reading is None:
        return "…"
    best = reading.best[feature] if reading.best is not None else None
    if best is not None and best.precision >= NAMED:
        return f"{best.scheme}:{best.label} p={best.precision:.2f}"
    tokens = list(dict.fromkeys(context.token for context in reading.top[feature]))[:3]
    return "tokens: " + " ".join(tokens) if tokens else "never fires there"


def switch_mark(features: LiveFeatures | None, feature: int) -> str:
    values = features.values if features is not None else {}
    if feature not in values:
        return ""
    value = values[feature]
    return "off" if value is None else f"={value:g}"


class FeaturesScreen(Screen[None]):
    """`F` in the explorer: an SAE's features on the sentence, switched off or clamped in every pass."""

    AUTO_FOCUS = "#sae-features"
    BINDINGS = [
        BACK_KEY,
        HELP_KEY,
        Binding("o", "switch_off", "off / on"),
        Binding("c", "clamp", "clamp"),
        Binding("x", "clear", "switch all back"),
        Binding("slash", "focus_path", "SAE directory"),
    ]
    DEFAULT_CSS = """
    FeaturesScreen #sae-path { height: auto; }
    FeaturesScreen #sae-about { height: auto; padding: 0 1; }
    FeaturesScreen #sae-body { height: 1fr; }
    FeaturesScreen #sae-features { width: 3fr; height: 1fr; border: round $accent; text-wrap: nowrap; text-overflow: ellipsis; }
    FeaturesScreen #sae-side { width: 2fr; border: round $primary; padding: 0 1; }
    FeaturesScreen #sae-switched { height: auto; padding: 0 1; }
    """

    def __init__(self, backend: Backend, encoding: Encoding, directory: str, features: LiveFeatures | None, switch: Switch) -> None:
        """`directory`: the SAE to open at once ("" asks for one); `features`: those switched now; `switch(features)`
        is called with every change."""
        super().__init__()
        self.backend, self.encoding, self.switch = backend, encoding, switch
        self.start_directory = directory
        self.sae: LiveFeatures | None = None  # the SAE open here, nothing switched
        self.features = features  # the features switched in every pass (of this SAE or, until one is switched here, another)
        self.reading: SAEFeatures | None = None
        self.rows: list[tuple[int, int, float]] = []  # (token, feature, activation) of each row
        self.contexts_of: int | None = None  # the feature whose contexts the side shows
        self.tokens = JobRun(self, self._tokens_read, name="sae-tokens", title="SAE features")
        self.labels = JobRun(self, self._labels_read, name="sae-labels", on_failed=self._labels_failed, title="SAE labels")

    def compose(self) -> ComposeResult:
        yield Input(self.start_directory, placeholder="an SAE directory (bertscope sae train -o DIR), then Enter", id="sae-path")
        yield Static("/ types an SAE directory, then Enter", id="sae-about")
        with Horizontal(id="sae-body"):
            yield OptionList(id="sae-features")
            with VerticalScroll(id="sae-side"):
                yield Static("Enter on a feature: its top contexts in the sample treebank", id="sae-contexts")
        yield Static(id="sae-switched")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one("#sae-features").border_title = "each token's most active features"
        self.query_one("#sae-side").border_title = "top contexts"
        self._draw_switched()
        if self.start_directory:
            self.open(self.start_directory)
        else:
            self.query_one("#sae-path", Input).focus()

    # the SAE

    @on(Input.Submitted, "#sae-path")
    def path_submitted(self, event: Input.Submitted) -> None:
        directory = event.value.strip()
        if not directory:
            self.notify("give the directory of an SAE (bertscope sae train -o DIR)", severity="warning")
            return
        if self.open(directory):
            focus_main(self)  # else the box keeps the keys, to mend the path

    def open(self, directory: str) -> bool:
        """Open the SAE in `directory`; one notification where it is no SAE for this model, and the screen as it was."""
        try:
            opened, notes = self.backend.open_sae(directory)
        except InputError as error:
            self.notify(str(error), title="SAE", severity="error", timeout=10)
            return False
        for note in notes:
            self.notify(note, title="SAE", severity="warning", timeout=8)
        if self.features is not None and self.features.directory != opened.directory:
            self.notify(f"{self.features.short()} is no longer switched: another SAE is open", timeout=5)
            self.features = None
            self.switch(None)
        self.sae, self.reading, self.contexts_of = opened, None, None
        explorer = cast(Explorer, self.app)
        explorer.state = explorer.state.with_(sae=opened.directory)  # the path box shows it next time
        self._about("reading the sentence…")
        encoding, backend = self.encoding, self.backend
        self.tokens.start(lambda cancel: iter([Progress("read", 1, 1, backend.sae_tokens(encoding, opened, PER_TOKEN))]))
        sample = str(sample_corpus("conllu"))

        def read(cancel: Event) -> Iterator[Progress[SAEFeatures]]:
            return backend.steps(api.sae_features, None, sae=opened.directory, data=sample, top=CONTEXTS, cancel=cancel)

        self.labels.start(read)
        self._draw_switched()
        return True

    def _about(self, reading: str) -> None:
        sae = self.sae
        if sae is None:
            return
        self.query_one("#sae-about", Static).update(
            Text.assemble((sae.directory, "bold"), f" · hidden state {sae.layer} · {sae.d_sae:,} features · ", (reading, "dim"))
        )

    # what the workers report

    def _tokens_read(self, progress: Progress[tuple[np.ndarray, np.ndarray]]) -> None:
        if progress.result is None:
            return
        features, values = progress.result
        self.rows = [
            (token, int(feature), float(value))
            for token in range(len(features))
            for feature, value in zip(features[token], values[token], strict=True)
            if value > 0
        ]
        self._draw_rows()
        if not self.labels.running:
            self._about(self._reading_line())

    def _labels_read(self, progress: Progress[SAEFeatures]) -> None:
        if not progress.finished:
            self._about(f"labels: reading the sample treebank, {progress.done:,} sentences…")
            return
        self.reading = progress.result
        self._about(self._reading_line())
        self._draw_rows()
        if self.contexts_of is not None:
            self._draw_contexts(self.contexts_of)

    def _labels_failed(self, reason: str) -> None:
        self._about(f"no labels: {reason}")

    def _reading_line(self) -> str:
        reading = self.reading
        if reading is None:
            return "labels: reading the sample treebank…"
        pure = f", {reading.pure:,} label-pure" if reading.pure is not None else ""
        return f"labels from the sample treebank: FVU {reading.fvu:.3f}, L0 {reading.l0:.1f}{pure}"

    # drawing

    def _draw_rows(self) -> None:
        table = self.query_one("#sae-features", OptionList)
        highlighted = table.highlighted
        labels = token_labels(self.encoding.tokens, self.encoding.special)
        table.clear_options()
        options = []
        switched = self.features if self._same_sae() else None
        marks = [switch_mark(switched, feature) for _, feature, _ in self.rows]
        room = max(map(len, marks), default=0)  # the marks' column only as wide as a mark shown, so labels keep the room
        for (token, feature, value), mark in zip(self.rows, marks):
            prompt = Text.assemble(
                f"{labels[token]:<10.10} ",
                (f"#{feature:<5}", "bold"),
                f" {value:6.2f}  ",
                (f"{mark:<{room + 1}}" if room else "", "bold red" if mark else ""),
                (feature_name(self.reading, feature), "dim"),
            )
            options.append(Option(prompt, id=f"{token}:{feature}"))
        table.add_options(options)
        if options:
            table.highlighted = min(highlighted or 0, len(options) - 1)

    def _draw_contexts(self, feature: int) -> None:
        self.contexts_of = feature
        side = self.query_one("#sae-contexts", Static)
        reading = self.reading
        if reading is None:
            side.update(f"feature {feature}: reading the sample treebank… (its contexts come when it is read)")
            return
        lines = Text.assemble((f"feature {feature}", "bold"), f" · fires on {reading.density[feature]:.2%} of the tokens\n")
        lines.append(feature_name(reading, feature) + "\n\n", style="dim")
        contexts = reading.top[feature]
        if not contexts:
            lines.append("it never fires on the sample treebank")
        for context in contexts:
            lines.append(f"{context.activation:6.2f}  ", style="bold")
            lines.append(context.window(5) + "\n")
        side.update(lines)

    def _draw_switched(self) -> None:
        features = self.features
        line = f"switched in every pass: {features.short()}" if features is not None else "nothing switched"
        keys = "  ·  Enter: a feature's top contexts"
        self.query_one("#sae-switched", Static).update(Text.assemble((line, "bold" if features is not None else "dim"), (keys, "dim")))

    # the keys

    def _selected(self) -> int | None:
        """The feature of the highlighted row."""
        index = self.query_one("#sae-features", OptionList).highlighted
        if index is None or not 0 <= index < len(self.rows):
            return None
        return self.rows[index][1]

    def _same_sae(self) -> bool:
        return self.features is not None and self.sae is not None and self.features.directory == self.sae.directory

    def _set(self, features: LiveFeatures | None) -> None:
        self.features = features if features is not None and features.switched else None
        self.switch(self.features)
        self._draw_rows()
        self._draw_switched()

    @on(OptionList.OptionSelected, "#sae-features")
    def feature_chosen(self, event: OptionList.OptionSelected) -> None:
        if 0 <= event.option_index < len(self.rows):
            self._draw_contexts(self.rows[event.option_index][1])

    def _switching(self) -> tuple[int, LiveFeatures] | None:
        """The selected feature and what is switched now in its SAE; None, with a word why, before there is one."""
        feature, sae = self._selected(), self.sae
        if feature is None or sae is None:
            self.notify("open an SAE and choose a feature first", severity="warning", timeout=3)
            return None
        current = self.features if self._same_sae() else sae
        assert current is not None
        return feature, current

    def action_switch_off(self) -> None:
        """`o`: the selected feature off in every pass, or back on."""
        chosen = self._switching()
        if chosen is None:
            return
        feature, current = chosen
        try:
            changed = current.without(feature) if current.values.get(feature, 0.0) is None else current.with_(feature, None)
        except InputError as error:
            self.notify(str(error), severity="error")
            return
        self._set(changed)

    def action_clamp(self) -> None:
        """`c`: clamp the selected feature to a value in every pass."""
        switching = self._switching()
        if switching is None:
            return
        feature, current = switching

        def chosen(value: float | None) -> None:
            if value is None:
                return
            try:
                self._set(current.with_(feature, value))
            except InputError as error:
                self.notify(str(error), severity="error")

        self.app.push_screen(ClampScreen(feature), chosen)

    def action_clear(self) -> None:
        """`x`: every feature as the model has it again."""
        if self.features is not None:
            self._set(None)

    def action_focus_path(self) -> None:
        self.query_one("#sae-path", Input).focus()

    def action_back(self) -> None:
        if leave_input(self):
            return
        self.tokens.cancel()
        self.labels.cancel()
        self.dismiss(None)


class ClampScreen(PromptScreen[float]):
    """Asks for the value to clamp a feature to."""

    def __init__(self, feature: int) -> None:
        question = f"Clamp feature {feature} to a value at every token (0 takes it away everywhere)"
        super().__init__(question, "an activation, e.g. 5", "clamp-value")
        self.feature = feature

    def read(self, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"{text!r} is not a number; give an activation such as 5") from None
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number; give an activation such as 5")
        return value
